"""crawlplug's Scheduler on its own, in this process, over a real Redis: a Scrapy crawler with a
stand-in engine, as Scrapy's and scrapy-redis's own scheduler tests drive theirs.

The engine is only what the Scheduler touches of it (crawlplug.scheduler.enginehooks): a slot
whose ``remove_request`` tells the Scheduler the engine is done with a request, a downloader
with free slots, no start() running. :func:`open_scheduler` builds and opens the Scheduler;
:meth:`Engine.done` is the engine finishing a request (its callback ran, its outputs were
scheduled). Nothing runs the reactor: the Scheduler's heartbeat and tick are called by hand
(``scheduler.liveness.heartbeat()``, ``.tick()``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

from crawlplug.scheduler import Scheduler


class _Slot:
    nextcall = None

    def remove_request(self, request: Request) -> None:
        """Replaced by the Scheduler's hook (enginehooks.on_request_done)."""


class _Downloader:
    def __init__(self, slots: int) -> None:
        self.total_concurrency = slots
        self.active: set[Request] = set()


class Engine:
    """What crawlplug's Scheduler reads of Scrapy's engine."""

    def __init__(self, slots: int = 16) -> None:
        self._slot = _Slot()
        self._start = None  # the spider's start() has run out
        self.downloader = _Downloader(slots)

    def done(self, request: Request) -> None:
        """The engine is done with ``request``: downloaded, its callback run, what it yielded scheduled."""
        self._slot.remove_request(request)


class ContractSpider(Spider):
    name = "contract"


@contextmanager
def open_scheduler(
    redis_url: str, spider_cls: type[Spider] = ContractSpider, **settings: Any
) -> Iterator[tuple[Scheduler, Engine]]:
    """A crawlplug Scheduler opened on crawl ``spider_cls.name`` of ``redis_url``, closed after."""
    crawler = get_crawler(
        spider_cls,
        {
            "REDIS_URL": redis_url,
            "SCHEDULER": "crawlplug.scheduler.Scheduler",
            "DUPEFILTER_CLASS": "crawlplug.dupefilters.RedisSetDupeFilter",
            "TELNETCONSOLE_ENABLED": False,
            **settings,
        },
    )
    engine = Engine()
    crawler.engine = engine  # type: ignore[misc]
    spider = spider_cls.from_crawler(crawler)
    crawler.spider = spider
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(spider)
    try:
        yield scheduler, engine
    finally:
        scheduler.close("finished")
