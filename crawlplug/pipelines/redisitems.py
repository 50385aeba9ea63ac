"""Scraped items into Redis, as JSON: ``RedisItemPipeline``.

Turn it on with ``ITEM_PIPELINES = {"crawlplug.pipelines.RedisItemPipeline": 300}``.
With ``CRAWLPLUG_ITEMS_FORMAT = "hash"`` it keeps one item per key instead (a Redis hash:
field = the values of ``CRAWLPLUG_ITEM_KEY`` as JSON, value = the item's JSON; a run
again updates them); ``SQLItemPipeline`` does the same in a database, with what changed.
Every item (a dict, a scrapy ``Item``, a dataclass, an attrs class: whatever
itemadapter knows) becomes one compact JSON object, appended to a Redis list
(``RPUSH``) or a stream (``XADD``, the JSON in field ``item``), by default the
crawl's ``crawlplug:{<crawl>}:items`` (settings ``CRAWLPLUG_ITEMS_KEY``,
``CRAWLPLUG_ITEMS_FORMAT``, ``CRAWLPLUG_ITEMS_MAXLEN``). ``crawlplug items
export`` writes them out as JSON lines.

Items become JSON as :mod:`.itemjson` says.

The item is in Redis when ``process_item`` returns. While Redis cannot be
reached, the item waits (retried with backoff, the reactor free, its request
not acknowledged: crawlplug acknowledges a request only after its items went
through the pipelines) for up to ``CRAWLPLUG_ITEMS_RETRY`` seconds, or until
the node is asked to stop; then the Redis error is raised and Scrapy logs it.
An error Redis answers (a key of another type, out of memory) is raised at once.

A write whose reply was lost (the connection dropped after Redis ran it: a
restart, a failover, a reset) is never simply sent again, which would store the
item twice: the pipeline's client does not resend by itself, and each retry is
one script that first looks for the item's JSON among the entries appended since
this node's last confirmed write (at most :data:`SEARCH_CAP` of the newest) and
appends it only if it is not there (a consumer popping the list meanwhile
narrows that search). An item identical to one appended in that
window by another request counts as already stored; that is the one case where
an item is kept once where it was scraped twice.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..config import setting, warn_misspelt_settings
from ..errors import ConfigError, CrawlplugError, ItemError
from ..frontier.keys import CrawlKeys, crawl_keys
from ..frontier.store import text
from ..server import clients
from .itemjson import item_json

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler

__all__ = ["RedisItemPipeline", "count_items", "iter_items"]

logger = logging.getLogger(__name__)

FORMATS = ("list", "stream", "hash")
#: The stream field holding an item's JSON.
STREAM_FIELD = "item"
#: Redis errors worth waiting out: the server is unreachable, loading, or failing over.
TRANSIENT = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
)
_MAX_BACKOFF = 5.0
#: A retry looks for its item among at most this many of the newest entries.
SEARCH_CAP = {"list": 100_000, "stream": 10_000}

#: A retried write: append ARGV[1] to the list KEYS[1] unless it is among the entries
#: appended since the length ARGV[2] this node last saw (-1: unknown, then the newest
#: ARGV[4]); ARGV[3] the list's cap (0: none). Returns {appended 0/1, the list's length}.
_RETRY_LIST = """
local n = redis.call('LLEN', KEYS[1])
local known, cap, window = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if known >= 0 and cap == 0 and n >= known then window = math.min(window, n - known) end
if window > 0 and redis.call('LPOS', KEYS[1], ARGV[1], 'RANK', -1, 'MAXLEN', window) then
  return {0, n}
end
n = redis.call('RPUSH', KEYS[1], ARGV[1])
if cap > 0 then redis.call('LTRIM', KEYS[1], -cap, -1) end
return {1, n}
"""
#: The same for a stream: ARGV[2] the id of this node's last confirmed entry ('' unknown);
#: entries newer than it (at most ARGV[4]) are searched for an ``item`` field equal to
#: ARGV[1]; ARGV[3] the approximate cap. Returns {appended 0/1, the entry's id}.
_RETRY_STREAM = """
local low = ARGV[2] ~= '' and ARGV[2] or '-'
local rows = redis.call('XREVRANGE', KEYS[1], '+', low, 'COUNT', tonumber(ARGV[4]))
for _, row in ipairs(rows) do
  if row[1] ~= ARGV[2] then
    local fields = row[2]
    for i = 1, #fields, 2 do
      if fields[i] == 'item' and fields[i + 1] == ARGV[1] then return {0, row[1]} end
    end
  end
end
local id
if tonumber(ARGV[3]) > 0 then
  id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'item', ARGV[1])
else
  id = redis.call('XADD', KEYS[1], '*', 'item', ARGV[1])
end
return {1, id}
"""


# -- the pipeline -------------------------------------------------------------------------------


async def _reactor_sleep(seconds: float) -> None:
    # the reactor is imported only once Scrapy has installed the one it is configured for
    from scrapy.utils.defer import maybe_deferred_to_future  # noqa: PLC0415
    from twisted.internet import reactor  # noqa: PLC0415
    from twisted.internet.task import deferLater  # noqa: PLC0415

    await maybe_deferred_to_future(deferLater(reactor, seconds, lambda: None))


class RedisItemPipeline:
    """Append every item, as JSON, to a Redis list or stream."""

    def __init__(
        self,
        crawler: Crawler | None = None,
        *,
        key: str | None = None,
        fmt: str = "list",
        maxlen: int = 0,
        retry: float = 300.0,
        item_key: list[str] | None = None,
    ) -> None:
        if fmt not in FORMATS:
            raise ConfigError(f"CRAWLPLUG_ITEMS_FORMAT must be 'list', 'stream' or 'hash', got {fmt!r}")
        if fmt == "hash" and maxlen:
            raise ConfigError("CRAWLPLUG_ITEMS_MAXLEN is for a list or a stream: a hash keeps one item per key")
        if fmt == "hash" and not item_key:
            raise ConfigError("CRAWLPLUG_ITEMS_FORMAT 'hash' stores one item per key: name it in CRAWLPLUG_ITEM_KEY")
        if maxlen < 0:
            raise ConfigError(f"CRAWLPLUG_ITEMS_MAXLEN must be 0 (no limit) or more, got {maxlen}")
        self.crawler = crawler
        self.key_template = key
        self.format = fmt
        self.maxlen = maxlen
        self.retry = retry
        #: with the "hash" format: the fields that say which item an item is (CRAWLPLUG_ITEM_KEY)
        self.item_key = list(item_key or [])
        self.client: redis.Redis | None = None
        self.key = ""
        self._conn: clients.Connection | None = None
        self._stop_aware = False
        self._down_since: float | None = None
        #: the list's length (a stream: the entry id) after this node's last confirmed write
        self._last: int | str | None = None
        self._retry_script: Any = None
        #: how the pipeline waits between retries (a test may give a fake clock)
        self.sleep: Callable[[float], Awaitable[None]] = _reactor_sleep

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RedisItemPipeline:
        s = crawler.settings
        warn_misspelt_settings(s)  # also without crawlplug's scheduler
        return cls(
            crawler,
            key=s.get("CRAWLPLUG_ITEMS_KEY") or s.get("REDIS_ITEMS_KEY") or None,
            fmt=str(setting(s, "CRAWLPLUG_ITEMS_FORMAT")).strip().lower(),
            maxlen=setting(s, "CRAWLPLUG_ITEMS_MAXLEN", "getint"),
            retry=setting(s, "CRAWLPLUG_ITEMS_RETRY", "getfloat"),
            item_key=setting(s, "CRAWLPLUG_ITEM_KEY", "getlist"),
        )

    def key_for(self, keys: CrawlKeys, spider_name: str) -> str:
        """The items key: CRAWLPLUG_ITEMS_KEY with %(crawl)s, %(spider)s (or %(name)s) filled in."""
        if not self.key_template:
            return keys.items
        try:
            return self.key_template % {"crawl": keys.crawl, "spider": spider_name, "name": spider_name}
        except (KeyError, ValueError, TypeError) as exc:
            raise ConfigError(
                f"CRAWLPLUG_ITEMS_KEY {self.key_template!r}: only %(crawl)s and %(spider)s may be filled in ({exc})"
            ) from None

    def open_spider(self, spider: Spider | None = None) -> None:
        assert self.crawler is not None, "build the pipeline with from_crawler, or call bind()"
        spider = spider or self.crawler.spider
        name = spider.name if spider is not None else self.crawler.spidercls.name
        settings = self.crawler.settings
        key = self.key_for(crawl_keys(settings, name), name)
        self._conn = clients.from_settings(settings)
        # the pipeline retries itself, never resending blindly (see the module docstring)
        self._conn.client.set_retry(Retry(NoBackoff(), 0))
        self.bind(self._conn.client, key)
        self._stop_aware = bool(getattr(self.crawler, "crawling", False))
        logger.info("crawlplug: items go to the Redis %s %s", self.format, key)

    def bind(self, client: redis.Redis, key: str) -> None:
        """Store into ``key`` on ``client`` (``open_spider`` does this, with a client of
        its own). Give a client that does not resend a command by itself: a write sent
        again after a lost reply would store the item twice (see the module docstring)."""
        self.client, self.key = client, key
        self._last = None
        self._retry_script = client.register_script(_RETRY_STREAM if self.format == "stream" else _RETRY_LIST)

    def close_spider(self, spider: Spider | None = None) -> None:
        if self._conn is not None:
            self._conn.client.close()

    def field_of(self, data: str) -> str:
        """With the "hash" format: the hash field of an item (its key's values, as JSON)."""
        values = json.loads(data)
        missing = [f for f in self.item_key if values.get(f) in (None, "")]
        if missing:
            raise ItemError(f"cannot store the item by its key {self.item_key}: it has no {', '.join(missing)}")
        return json.dumps([values[f] for f in self.item_key], ensure_ascii=False, separators=(",", ":"))

    def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        data = item_json(item)  # ItemError: Scrapy logs the item as failed
        if self.format == "hash":
            data = json.dumps([self.field_of(data), data])  # stored as HSET field value: idempotent
        last = self._last
        try:
            self.store(data)
        except TRANSIENT as exc:
            if self.retry <= 0:
                self._inc("crawlplug/items_failed")
                raise
            return self._wait_and_store(item, data, exc, last)  # Scrapy awaits it
        self._inc("crawlplug/items_stored")
        return item

    def store(self, data: str) -> None:
        """Append one item's JSON to the key (one round trip)."""
        assert self.client is not None, "the pipeline is not open"
        if self.format == "hash":
            field, value = json.loads(data)
            self.client.hset(self.key, field, value)  # the same item stored again is the same write
        elif self.format == "stream":
            self._last = text(
                self.client.xadd(self.key, {STREAM_FIELD: data}, maxlen=self.maxlen or None, approximate=True)
            )
        elif self.maxlen:
            pipe = self.client.pipeline(transaction=False)
            pipe.rpush(self.key, data)
            pipe.ltrim(self.key, -self.maxlen, -1)
            self._last = int(pipe.execute()[0])
        else:
            self._last = int(self.client.rpush(self.key, data))

    def store_again(self, data: str, last: int | str | None) -> bool:
        """Append one item's JSON unless an earlier attempt of it landed after ``last``
        (this node's last confirmed write before the first attempt); True if appended."""
        assert self._retry_script is not None, "the pipeline is not open"
        if self.format == "hash":  # HSET of the same field and value: sending it again is harmless
            self.store(data)
            return True
        if self.format == "stream":
            known: int | str = last if isinstance(last, str) else ""
        else:
            known = last if isinstance(last, int) else -1
        appended, where = self._retry_script(keys=[self.key], args=[data, known, self.maxlen, SEARCH_CAP[self.format]])
        self._last = text(where) if self.format == "stream" else int(where)
        return bool(appended)

    async def _wait_and_store(self, item: Any, data: str, exc: Exception, last: int | str | None) -> Any:
        started = time.monotonic()
        if self._down_since is None:
            self._down_since = started
            logger.warning(
                "crawlplug: cannot store items in Redis (%s); they wait up to %ss, their requests stay unacknowledged",
                exc,
                self.retry,
            )
        delay = 0.1
        while True:
            if time.monotonic() - started + delay > self.retry or self._stopping():
                self._inc("crawlplug/items_failed")
                logger.error(
                    "crawlplug: gave up storing an item after %.1fs: Redis still fails (%s)",
                    time.monotonic() - started,
                    exc,
                )
                raise exc
            await self.sleep(delay)
            delay = min(delay * 2, _MAX_BACKOFF)
            self._inc("crawlplug/items_retried")
            try:
                appended = self.store_again(data, last)
            except TRANSIENT as again:
                exc = again
                continue
            if not appended:
                self._inc("crawlplug/items_found_stored")
                logger.info("crawlplug: an item sent before the connection dropped was in Redis already: kept once")
            if self._down_since is not None:
                logger.info("crawlplug: items reach Redis again after %.1fs", time.monotonic() - self._down_since)
                self._down_since = None
            self._inc("crawlplug/items_stored")
            return item

    def _stopping(self) -> bool:
        """The node was asked to stop: give up rather than hold its shutdown."""
        return self._stop_aware and self.crawler is not None and not self.crawler.crawling

    def _inc(self, key: str) -> None:
        stats = getattr(self.crawler, "stats", None)
        if stats is not None:
            stats.inc_value(key)


# -- reading them back (crawlplug items) -----------------------------------------------------------


def _kind(client: redis.Redis, key: str) -> str:
    kind = client.type(key)
    kind = kind.decode() if isinstance(kind, bytes) else str(kind)
    if kind not in ("list", "stream", "hash", "none"):
        raise CrawlplugError(f"{key} is a Redis {kind}, not a list, stream or hash of items")
    return kind


def count_items(client: redis.Redis, key: str) -> tuple[str, int]:
    """(``"list"``, ``"stream"`` or ``"none"``, number of items) of ``key``."""
    kind = _kind(client, key)
    if kind == "list":
        return kind, int(client.llen(key))
    if kind == "stream":
        return kind, int(client.xlen(key))
    if kind == "hash":
        return kind, int(client.hlen(key))
    return kind, 0


def iter_items(client: redis.Redis, key: str, *, limit: int = 0, chunk: int = 1000) -> Iterator[bytes]:
    """The items of ``key``, oldest first, as JSON bytes; at most ``limit`` (0: all).

    Lists are read with LRANGE and streams with XRANGE, ``chunk`` entries per
    round trip. A stream entry without an ``item`` field is given as the JSON
    object of its fields. Items appended meanwhile are read too; a list that is
    trimmed (CRAWLPLUG_ITEMS_MAXLEN) or consumed (LPOP) meanwhile shifts under
    the reader, which may then skip or repeat a few items (a stream does not).
    """
    if chunk < 1:
        raise ValueError("chunk must be at least 1")
    kind = _kind(client, key)
    left = limit if limit > 0 else None
    if kind == "list":
        start = 0
        while left is None or left > 0:
            n = chunk if left is None else min(chunk, left)
            rows = client.lrange(key, start, start + n - 1)
            yield from rows
            start += len(rows)
            if left is not None:
                left -= len(rows)
            if len(rows) < n:
                return
    elif kind == "stream":
        start = "-"
        field = STREAM_FIELD.encode()
        while left is None or left > 0:
            n = chunk if left is None else min(chunk, left)
            rows = client.xrange(key, start, "+", count=n)
            for _, fields in rows:
                yield (
                    fields[field]
                    if field in fields
                    else json.dumps({text(k): text(v) for k, v in fields.items()}, ensure_ascii=False).encode()
                )
            if left is not None:
                left -= len(rows)
            if len(rows) < n:
                return
            last = text(rows[-1][0])
            ms, _, seq = last.partition("-")
            start = f"{ms}-{int(seq) + 1}"
    elif kind == "hash":  # one item per key (CRAWLPLUG_ITEMS_FORMAT = "hash"), in no order
        for n, (_, value) in enumerate(client.hscan_iter(key, count=chunk)):
            if left is not None and n >= left:
                return
            yield value
