"""A node's voice: each log line a part says once, and its counters in Scrapy's stats.
Every part of the Scheduler is handed the same :class:`Reporter`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

__all__ = ["Reporter"]

logger = logging.getLogger(__name__)


class Reporter:
    """A node's log lines said once, and its counters in Scrapy's stats."""

    def __init__(self, stats: StatsCollector | None) -> None:
        self.stats = stats
        self._said: set[str] = set()

    def once(self, key: str, level: int, msg: str, *args: object) -> None:
        if key in self._said or len(self._said) > 1000:
            return
        self._said.add(key)
        logger.log(level, msg, *args)

    def count(self, key: str, n: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(key, n)

    def wrong_start_urls(self, key: str, kind: str) -> None:
        """The start_urls key holds a ``kind``, not a list (SADD from scrapy-redis's habit):
        said once, with what to do; its entries are left alone, the rest of the crawl goes on."""
        self.once(
            f"corrupt:{key}",
            logging.ERROR,
            "crawlplug: crawl key %s holds a %s, not a list: its entries are not read. Push start "
            "URLs with `crawlplug push` (a list), or move them there and delete the key "
            "(docs/faults.md); the rest of the crawl goes on",
            key,
            kind,
        )
