"""``crawlplug.domainstats.DomainStatsMiddleware``: a dotted path a project may name in
``DOWNLOADER_MIDDLEWARES`` (to move it, or to turn it off with None). The code lives in
:mod:`crawlplug.probes.domainstats`."""

from __future__ import annotations

from .probes.domainstats import DomainStatsMiddleware

__all__ = ["DomainStatsMiddleware"]
