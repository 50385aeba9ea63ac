"""Drop what a page of a crawl state reset under a node would add to the new one.

When a crawl is reset while a node runs (``crawlplug purge``,
``CRAWLPLUG_FLUSH_ON_START`` on another node, ``crawlplug import``), the node
joins the new state at once (the Scheduler's ``_rejoin``) but its downloads
already under way finish later. Their pages belong to the old state: this
spider middleware, installed by the add-on, drops the requests and items
their callbacks produce, and counts them (``crawlplug/stale_output``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING

from . import enginehooks

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

__all__ = ["StaleOutputMiddleware"]

logger = logging.getLogger(__name__)


class StaleOutputMiddleware:
    """Spider middleware: nothing from a page leased before a reset reaches the new state."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._logged = False
        #: the engine's scheduler's ``is_stale``, once found (a crawl keeps its scheduler)
        self._is_stale: Callable[[Request], bool] | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> StaleOutputMiddleware:
        return cls(crawler)

    def _stale(self, response: Response) -> bool:
        is_stale = self._is_stale
        if is_stale is None:  # looked up once: this runs for every page
            is_stale = self._is_stale = getattr(enginehooks.scheduler(self.crawler), "is_stale", None)
        request = getattr(response, "request", None)
        return bool(is_stale is not None and request is not None and is_stale(request))

    def _drop(self, count: int) -> None:
        if not count:
            return
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value("crawlplug/stale_output", count)
        if not self._logged:
            self._logged = True
            logger.info(
                "crawlplug: dropped what pages leased before the crawl's reset produced "
                "(counted in crawlplug/stale_output)"
            )

    def process_spider_output(
        self, response: Response, result: Iterable[object], spider: Spider | None = None
    ) -> Iterable[object]:
        if not self._stale(response):
            yield from result
            return
        self._drop(sum(1 for _ in result))

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[object], spider: Spider | None = None
    ) -> AsyncIterator[object]:
        if not self._stale(response):
            async for item in result:
                yield item
            return
        dropped = 0
        async for _ in result:
            dropped += 1
        self._drop(dropped)
