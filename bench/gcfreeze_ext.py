"""A Scrapy extension for stock Scrapy in bench/throughput.py's ``--stock-freeze`` crawls:
``gc.freeze()`` when the spider opens, what crawlplug's Scheduler does at open
(crawlplug.scheduler.gcfreeze), so a run shows how much of a node's gain any Scrapy
project would get from that one call, and how much is crawlplug's own."""

from __future__ import annotations

import gc
from typing import Any

from scrapy import signals


def _freeze(**_: Any) -> None:
    gc.freeze()


class FreezeAtOpen:
    @classmethod
    def from_crawler(cls, crawler: Any) -> FreezeAtOpen:
        crawler.signals.connect(_freeze, signal=signals.spider_opened)
        return cls()
