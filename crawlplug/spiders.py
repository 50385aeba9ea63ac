"""Spiders whose start URLs come from Redis.

``crawlplug push URL`` (or anything that appends a line to the crawl's
``start_urls`` list, or to scrapy-redis's ``<spider>:start_urls`` key) feeds a
running crawl. :class:`RedisSpider` reads those entries through Scrapy's
async ``start()``, in batches: each entry is *leased* to the node that took
it and acknowledged in the same Redis call that stores the requests made
from it, so a start URL taken by a node that dies before scheduling it
returns to the head of the list when its lease expires.

RedisSpider nodes are workers by default: when no entry is waiting they poll
every CRAWLPLUG_POLL_INTERVAL (0.1 s) and never close. Set
CRAWLPLUG_IDLE_CLOSE (seconds) to let them close once the whole crawl is
done. Entries are plain URLs or JSON lines (see :mod:`crawlplug.starts`);
override :meth:`make_request_from_data` to read your own format (as with
scrapy-redis).

Spiders that are not RedisSpiders get pushed entries too: the scheduler
takes them when the node is idle and on every heartbeat.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

from scrapy import Request, Spider
from scrapy.settings import BaseSettings
from scrapy.spiders import CrawlSpider
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.task import deferLater

from . import enginehooks, starts
from .config import setting
from .errors import ConfigError


class RedisMixin:
    """Start URLs from the crawl's Redis; mix into any Spider class."""

    #: The scheduler reads nothing for this spider: start() does.
    crawlplug_reads_start_entries = True
    #: scrapy-redis's key to read after the crawl's own start_urls
    #: (default: REDIS_START_URLS_KEY, "<spider name>:start_urls").
    redis_key: str | None = None
    #: Entries leased per call (default: REDIS_START_URLS_BATCH_SIZE, else CRAWLPLUG_START_BATCH).
    redis_batch_size: int | None = None

    @classmethod
    def update_settings(cls, settings: BaseSettings) -> None:
        super().update_settings(settings)  # type: ignore[misc]
        if settings.get("CRAWLPLUG_IDLE_CLOSE") is None:
            settings.set("CRAWLPLUG_IDLE_CLOSE", 0, priority="spider")  # a worker, as scrapy-redis's

    async def start(self) -> AsyncIterator[Any]:
        crawler = self.crawler  # type: ignore[attr-defined]
        scheduler = enginehooks.scheduler(crawler)
        if not hasattr(scheduler, "take_start_requests"):
            raise ConfigError(
                f"{type(self).__name__} needs crawlplug's scheduler (ADDONS = {{'crawlplug.Addon': 0}}), "
                f"not {type(scheduler).__name__}"
            )
        settings = crawler.settings
        name = self.name  # type: ignore[attr-defined]
        legacy = self.redis_key or setting(settings, "REDIS_START_URLS_KEY") % {"name": name}
        batch = int(
            self.redis_batch_size
            or settings.getint("REDIS_START_URLS_BATCH_SIZE")
            or setting(settings, "CRAWLPLUG_START_BATCH", "getint")
        )
        poll = setting(settings, "CRAWLPLUG_POLL_INTERVAL", "getfloat")
        from twisted.internet import reactor  # noqa: PLC0415 - the installed one

        while True:
            taken = scheduler.take_start_requests(batch, legacy)
            if not taken:
                if scheduler.start_idle():
                    return  # the whole crawl is done (not in worker mode)
                await maybe_deferred_to_future(deferLater(reactor, poll, lambda: None))
                continue
            for lease_id, requests in taken:
                for request in requests:
                    yield request
                # resumed: the engine has enqueued every request of this entry
                scheduler.start_done(lease_id)

    def make_request_from_data(self, data: bytes) -> Request | Iterable[Request]:
        """The request(s) for one start entry; raise crawlplug.errors.DecodeError to refuse it."""
        return starts.build(starts.parse(data), self)  # type: ignore[arg-type]


class RedisSpider(RedisMixin, Spider):
    """A Spider fed from Redis (scrapy-redis's RedisSpider, with leases)."""


class RedisCrawlSpider(RedisMixin, CrawlSpider):
    """A CrawlSpider (rules) fed from Redis."""
