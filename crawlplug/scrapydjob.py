"""``crawlplug.scrapydjob.ScrapydJob``: a dotted path a project may name in ``EXTENSIONS``
(to turn it off with None). The code lives in :mod:`crawlplug.probes.scrapydjob`."""

from __future__ import annotations

from .probes.scrapydjob import ScrapydJob

__all__ = ["ScrapydJob"]
