"""``crawlplug.scrapydjob.ScrapydJob``: a dotted path a project may name in ``EXTENSIONS``
(to turn it off with None). The code lives in :mod:`crawlplug.scrapyd.node`."""

from __future__ import annotations

from .scrapyd.node import ScrapydJob

__all__ = ["ScrapydJob"]
