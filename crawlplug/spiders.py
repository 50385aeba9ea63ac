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
CRAWLPLUG_IDLE_CLOSE (seconds; scrapy-redis's ``max_idle_time`` attribute and
MAX_IDLE_TIME_BEFORE_CLOSE setting are read when it is unset) to let them close
once the whole crawl is done. Entries are plain URLs or JSON lines (see :mod:`crawlplug.starts.entry`);
override :meth:`make_request_from_data` to read your own format (as with
scrapy-redis).

Spiders that are not RedisSpiders get pushed entries too: the scheduler
takes them when the node is idle and on every heartbeat.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator, Iterable
from typing import Any

from scrapy import Request, Spider
from scrapy.settings import BaseSettings
from scrapy.spiders import CrawlSpider
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.task import deferLater

from . import starts
from .config import setting
from .errors import ConfigError, DecodeError, checked_number
from .scheduler import enginehooks


class RedisMixin:
    """Start URLs from the crawl's Redis; mix into any Spider class."""

    #: The scheduler reads nothing for this spider: start() does.
    crawlplug_reads_start_entries = True
    #: scrapy-redis's key to read after the crawl's own start-entry lists (default:
    #: REDIS_START_URLS_KEY, "<spider name>:start_urls"), or a list of them in priority
    #: order, as scrapy-redis 0.10 reads them: every entry of a key before any of the next.
    #: "%(name)s" in a key is the spider's name.
    redis_key: str | list[str] | None = None
    #: Entries leased per call (default: REDIS_START_URLS_BATCH_SIZE, else CRAWLPLUG_START_BATCH).
    redis_batch_size: int | None = None
    #: scrapy-redis's: seconds the crawl stays empty before the node closes, when
    #: CRAWLPLUG_IDLE_CLOSE is unset (default: MAX_IDLE_TIME_BEFORE_CLOSE; 0: never close).
    max_idle_time: float | None = None
    #: Encoding of the start entries (default: REDIS_ENCODING, else utf-8).
    redis_encoding: str | None = None

    @classmethod
    def update_settings(cls, settings: BaseSettings) -> None:
        super().update_settings(settings)  # type: ignore[misc]
        if settings.get("CRAWLPLUG_IDLE_CLOSE") is None:
            # a worker unless told otherwise, as scrapy-redis's (its max_idle_time, then
            # MAX_IDLE_TIME_BEFORE_CLOSE, whose 0 means "never close" as crawlplug's does)
            idle = cls.max_idle_time
            if idle is None:
                idle = settings.get("MAX_IDLE_TIME_BEFORE_CLOSE")
            settings.set("CRAWLPLUG_IDLE_CLOSE", _idle_seconds(idle), priority="spider")

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
        legacy = legacy_keys(self.redis_key or setting(settings, "REDIS_START_URLS_KEY"), name)
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
        encoding = self._entry_encoding()
        if encoding != "utf-8":
            try:
                data = data.decode(encoding).encode("utf-8")
            except UnicodeDecodeError as exc:
                raise DecodeError(f"start entry is not {encoding} text: {exc}") from None
        return starts.build(starts.parse(data), self)  # type: ignore[arg-type]

    def _entry_encoding(self) -> str:
        """REDIS_ENCODING (scrapy-redis's), normalised: "utf-8" unless another is set."""
        cached = self.__dict__.get("_crawlplug_encoding")
        if cached is None:
            name = self.redis_encoding
            if name is None:
                crawler = getattr(self, "crawler", None)
                name = crawler.settings.get("REDIS_ENCODING") if crawler is not None else None
            try:
                cached = codecs.lookup(name or "utf-8").name
            except LookupError:
                raise ConfigError(f"REDIS_ENCODING / redis_encoding {name!r} is not an encoding Python knows") from None
            self.__dict__["_crawlplug_encoding"] = cached
        return cached


def legacy_keys(value: Any, name: str) -> list[str]:
    """scrapy-redis's start URL key(s) of spider ``name``: ``redis_key`` (or
    REDIS_START_URLS_KEY) as one key or a list in priority order, each with "%(name)s"
    filled in, duplicates dropped; ConfigError for anything else."""
    templates = [value] if isinstance(value, str) else value
    if not isinstance(templates, (list, tuple)) or not templates:
        raise ConfigError(f"redis_key must be a key name or a non-empty list of them, got {value!r}")
    keys = []
    for template in templates:
        if not isinstance(template, str) or not template:
            raise ConfigError(f"redis_key {value!r}: each key must be a non-empty string, got {template!r}")
        try:
            keys.append(template % {"name": name})
        except (KeyError, ValueError, TypeError) as exc:
            raise ConfigError(f"redis_key {template!r}: only %(name)s may be filled in ({exc})") from None
    return list(dict.fromkeys(keys))


def _idle_seconds(value: Any) -> float:
    """max_idle_time / MAX_IDLE_TIME_BEFORE_CLOSE as seconds (None: 0, a worker)."""
    if value is None:
        return 0
    return checked_number(value, "MAX_IDLE_TIME_BEFORE_CLOSE / max_idle_time", kind="seconds")


class RedisSpider(RedisMixin, Spider):
    """A Spider fed from Redis (scrapy-redis's RedisSpider, with leases)."""


class RedisCrawlSpider(RedisMixin, CrawlSpider):
    """A CrawlSpider (rules) fed from Redis."""
