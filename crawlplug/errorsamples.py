"""``crawlplug.errorsamples.ErrorSamplesMiddleware``: a dotted path a project may name in
``DOWNLOADER_MIDDLEWARES`` (docs/dashboard.md). The code lives in
:mod:`crawlplug.probes.errorsamples`."""

from __future__ import annotations

from .probes.errorsamples import ErrorSamplesMiddleware

__all__ = ["ErrorSamplesMiddleware"]
