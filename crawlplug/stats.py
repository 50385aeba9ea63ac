"""Scrapy stats of every node in Redis, and of the whole crawl.

The add-on turns it on (``STATS_CLASS = "crawlplug.stats.RedisStatsCollector"``, at
"addon" priority: a project's own STATS_CLASS wins). Each
node keeps its stats in memory, as Scrapy's own collector does (``inc_value``
runs many times per page), and every ``CRAWLPLUG_STATS_INTERVAL`` seconds, and
once more at close, sends what changed in one script call (``lua/stats.lua``):

* ``crawlplug:{<crawl>}:node:<node id>:stats`` (hash): this node's stats;
* ``crawlplug:{<crawl>}:crawlstats`` (hash): the crawl-wide stats, over every
  node that ever ran in the crawl;
* ``crawlplug:{<crawl>}:statnodes`` (sorted set): node id -> its last flush (ms);
* ``crawlplug:{<crawl>}:sitem:<minute>`` (hash, kept a day): the site spiders' outcomes
  (pages, items, field outcomes: :data:`MINUTE_STAT`) counted in that minute, crawl-wide,
  which :mod:`crawlplug.sites.minutes` reads as each site's history per minute. A flush
  whose changes hold none sends no such key.

Crawl-wide, a number is the sum over the nodes (counters such as
``response_received_count``; a number set with ``set_value`` too), except
what ``max_value``/``min_value`` keep (the largest/smallest node value, e.g.
``memusage/max``) and the names in :attr:`RedisStatsCollector.AGGREGATE`:
``start_time`` is the earliest node's, ``finish_time`` the latest node's,
``elapsed_time_seconds`` the longest node run (the crawl's own duration is
``finish_time - start_time``). Any other value (``finish_reason``) is the one
written last. Values are stored as text: integers and floats as numbers,
datetimes as ISO-8601 UTC strings (``2025-06-01T12:00:00.000000+00:00``, so
text order is time order), other values as JSON; :func:`crawl_stats` and
:func:`node_stats` read them back.

A Redis that cannot be reached at a flush costs nothing: the changed stats
are kept and sent at the next flush, and since a node's hash holds absolute
values that the crawl-wide sums move by the difference from, a flush that
is retried never counts twice. ``get_value``/``get_stats`` answer for this
node, from memory, like Scrapy's collector. Closing never raises.

``STATS_KEY`` (scrapy-redis's setting, e.g. ``"%(spider)s:stats"``) also keeps a
copy of the crawl-wide stats in that hash, replaced after every flush, in
scrapy-redis's format (datetimes as POSIX timestamps), for tools that read it.
Unlike scrapy-redis's collector, nothing is deleted at close, whatever
SCHEDULER_PERSIST says.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
import warnings
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, ClassVar

import redis
from scrapy.exceptions import ScrapyDeprecationWarning
from scrapy.statscollectors import StatsCollector, StatsT
from twisted.internet.task import LoopingCall

from .config import setting
from .crawl import runs
from .errors import REDIS_ERRORS
from .frontier.keys import CrawlKeys, crawl_keys
from .frontier.results import process_node_id
from .frontier.scripts import Scripts
from .frontier.store import text
from .server import clients

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler

__all__ = ["RedisStatsCollector", "crawl_stats", "decode", "node_stats", "stats_nodes"]

logger = logging.getLogger(__name__)

#: The stats also counted per minute (lua/stats.lua's "hsum"): a site's pages and failures per
#: step, its items, its fields' outcomes (crawlplug.sites.outcomes names them)
MINUTE_STAT = re.compile(
    r"site/[^/]+/(?:step/[^/]+/(?:pages|failed)|items/(?:ok|incomplete)|field/[^/]+/(?:filled|missing|invalid|default))"
)

# how a stat was last changed, hence how it adds up crawl-wide (lua/stats.lua)
_SUM, _MAX, _MIN, _SET = "sum", "max", "min", "set"
_BY_METHOD = {"inc": _SUM, "set": _SUM, "max": _MAX, "min": _MIN}


class RedisStatsCollector(StatsCollector):
    """Scrapy's stats collector, plus this node's and the crawl-wide stats in Redis."""

    #: Stats whose crawl-wide value is not the sum over the nodes: "min", "max" or "set"
    #: (for datetimes "min" is the earliest, "max" the latest). Extend it in a subclass.
    AGGREGATE: ClassVar[dict[str, str]] = {
        "start_time": _MIN,
        "finish_time": _MAX,
        "elapsed_time_seconds": _MAX,
        runs.RUN_STAT: _MAX,  # the run a node works for: crawl-wide, the latest, never a sum
    }

    # Scrapy's StatsCollector.__getattribute__ runs for every attribute read, the collector's
    # own ``self._stats`` included: it tries a ``_cached_<name>`` attribute first (an
    # AttributeError raised and caught for every private name) and hands out its public methods
    # wrapped in a shim that warns about a ``spider`` argument. With the dozens of stats calls a
    # page makes (``inc_value`` alone ~21: the downloader stats, depth, the scheduler's and the
    # per-domain counters), that was ~100 hook calls a page. Plain attribute reads here; the
    # methods warn about ``spider`` themselves (:func:`_spider_arg`).
    __getattribute__ = object.__getattribute__

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self.interval = float(setting(crawler.settings, "CRAWLPLUG_STATS_INTERVAL", "getfloat"))
        self.client: redis.Redis | None = None
        self.keys: CrawlKeys | None = None
        self.node_id = ""
        self._conn: clients.Connection | None = None
        self._script: Any = None
        self._how: dict[str, str] = {}  # stat -> "inc" | "set" | "max" | "min": its last change
        self._dirty: set[str] = set()  # stats changed since the last flush Redis took
        self._flushed = False  # Redis took a flush of this node (its hash should exist)
        self._down_since: float | None = None
        self._clock_ms = 0.0  # Redis's clock less this machine's (ms), from the last flush's reply
        self._loop: LoopingCall | None = None
        #: scrapy-redis's STATS_KEY template; the hash it names once open (see mirror())
        self.mirror_template: str | None = crawler.settings.get("STATS_KEY") or None
        self.mirror_key: str | None = None

    # -- Scrapy's interface: in memory, and remember what changed ---------------------
    def get_value(self, key: str, default: Any = None, spider: Spider | None = None) -> Any:
        if spider is not None:
            _spider_arg("get_value")
        return self._stats.get(key, default)

    def get_stats(self, spider: Spider | None = None) -> StatsT:
        if spider is not None:
            _spider_arg("get_stats")
        return self._stats

    def set_value(self, key: str, value: Any, spider: Spider | None = None) -> None:
        if spider is not None:
            _spider_arg("set_value")
        self._stats[key] = value
        self._how[key] = "set"
        self._dirty.add(key)

    def set_stats(self, stats: StatsT, spider: Spider | None = None) -> None:
        if spider is not None:
            _spider_arg("set_stats")
        self._dirty.update(self._stats)
        self._stats = stats
        for key in stats:
            self._how[key] = "set"
        self._dirty.update(stats)

    def inc_value(self, key: str, count: int = 1, start: int = 0, spider: Spider | None = None) -> None:
        if spider is not None:
            _spider_arg("inc_value")
        d = self._stats
        d[key] = d.setdefault(key, start) + count
        self._how[key] = "inc"
        self._dirty.add(key)

    def max_value(self, key: str, value: Any, spider: Spider | None = None) -> None:
        if spider is not None:
            _spider_arg("max_value")
        self._stats[key] = max(self._stats.setdefault(key, value), value)
        self._how[key] = "max"
        self._dirty.add(key)

    def min_value(self, key: str, value: Any, spider: Spider | None = None) -> None:
        if spider is not None:
            _spider_arg("min_value")
        self._stats[key] = min(self._stats.setdefault(key, value), value)
        self._how[key] = "min"
        self._dirty.add(key)

    def clear_stats(self, spider: Spider | None = None) -> None:
        if spider is not None:
            _spider_arg("clear_stats")
        self._dirty.update(self._stats)
        self._stats.clear()

    def open_spider(self, spider: Spider | None = None) -> None:
        if spider is not None:
            _spider_arg("open_spider")
        if self._not_joined():
            return  # a node that exits at once (its run ended, no Redis) counts in no run's stats
        spider = spider or self._crawler.spider
        name = spider.name if spider is not None else self._crawler.spidercls.name
        try:
            keys = crawl_keys(self._crawler.settings, name)
            self._conn = clients.from_settings(self._crawler.settings)
        except Exception as exc:  # noqa: BLE001 - a bad setting, no embedded Redis: the scheduler says so too
            logger.error("crawlplug: stats stay in memory only, no Redis for them: %s", exc)
            return
        self.bind(self._conn.client, keys, process_node_id())
        if self.mirror_template:
            try:
                self.mirror_key = str(self.mirror_template) % {"spider": name, "name": name}
            except (KeyError, ValueError, TypeError) as exc:
                logger.error(
                    "crawlplug: STATS_KEY %r: only %%(spider)s may be filled in (%s); "
                    "no copy of the stats is kept there",
                    self.mirror_template,
                    exc,
                )
        if self.interval > 0:
            self._loop = LoopingCall(self._periodic_flush)
            self._loop.start(self.interval, now=False)

    def close_spider(self, spider: Spider | None = None, reason: str | None = None) -> None:
        """Send the final stats (finish_time, finish_reason) and dump them; never raises."""
        if spider is not None:
            _spider_arg("close_spider")
        try:
            if self._loop is not None and self._loop.running:
                self._loop.stop()
            if not self.flush() and self.client is not None:
                logger.error(
                    "crawlplug: this node's final stats could not be written to Redis; "
                    "the crawl-wide stats miss %d of its changes (they are in the stats dump)",
                    len(self._dirty),
                )
        except Exception:  # closing must never fail the crawl
            logger.exception("crawlplug: writing the final stats failed")
        try:
            super().close_spider(spider, reason)
        except Exception:
            logger.exception("crawlplug: dumping the stats failed")
        finally:
            if self._conn is not None:
                self._conn.client.close()

    def _not_joined(self) -> bool:
        """Whether crawlplug's Scheduler is this node's and joined no crawl (it failed at start,
        and the node closes). The engine opens its scheduler before the stats collector."""
        engine = getattr(self._crawler, "engine", None)
        # engine.scheduler is public since Scrapy 2.19; its slot's before (as enginehooks.scheduler)
        scheduler = getattr(engine, "scheduler", None)
        if scheduler is None:  # not `or`: a scheduler's truth is its len(), a Redis call
            scheduler = getattr(getattr(engine, "_slot", None), "scheduler", None)
        ours = type(scheduler).__module__.startswith("crawlplug.scheduler")
        return ours and getattr(scheduler, "frontier", None) is None

    # -- Redis ---------------------------------------------------------------------
    def bind(self, client: redis.Redis, keys: CrawlKeys, node_id: str) -> None:
        """Write to crawl ``keys`` on ``client`` as node ``node_id`` (``open_spider`` does this)."""
        self.client, self.keys, self.node_id = client, keys, node_id
        self._script = Scripts(client).stats  # on Redis 7 the library's function, as every node call

    def flush(self) -> bool:
        """Send the stats changed since the last flush; False (changes kept) if Redis failed."""
        if self.client is None or self.keys is None:
            return False
        if not self._dirty and self._flushed:
            return True
        keys = self.keys
        sent = list(self._dirty)
        args: list[Any] = [self.node_id, "1" if self._flushed else "0"]
        per_minute = False
        for key in sent:
            field = self._field(key)
            if field[0] == _SUM and key.startswith("site/") and MINUTE_STAT.fullmatch(key):
                field[0], per_minute = "hsum", True
            args += field
        names = [keys.crawlstats, keys.node_stats(self.node_id), keys.statnodes]
        if per_minute:  # named by this node's estimate of Redis's clock: the minute the counts go in
            names.append(keys.site_minute(int((time.time() * 1000 + self._clock_ms) // 60_000)))
        try:
            now = self._script(keys=names, args=args)
        except REDIS_ERRORS as exc:
            self._redis_error(exc)
            return False
        if self._down_since is not None:
            logger.info("crawlplug: stats reach Redis again after %.1fs", time.monotonic() - self._down_since)
            self._down_since = None
        if int(now) > 0:
            self._clock_ms = int(now) - time.time() * 1000
        if int(now) == -1:
            # Redis lost this node's hash (restarted without its data): send everything
            logger.warning("crawlplug: Redis lost this node's stats; sending all of them again")
            self._dirty.update(self._stats)
            self._flushed = False
            return self.flush()
        self._dirty.difference_update(sent)
        for key in sent:
            if key not in self._stats:
                self._how.pop(key, None)
        self._flushed = True
        if self.mirror_key is not None:
            self.mirror()
        return True

    def mirror(self) -> None:
        """Replace the STATS_KEY hash by the crawl-wide stats (two round trips; never raises)."""
        if self.client is None or self.keys is None or self.mirror_key is None:
            return
        try:
            stats = crawl_stats(self.client, self.keys)
            pipe = self.client.pipeline(transaction=True)
            pipe.delete(self.mirror_key)
            if stats:
                pipe.hset(self.mirror_key, mapping={k: _scrapy_redis_value(v) for k, v in stats.items()})
            pipe.execute()
        except REDIS_ERRORS as exc:
            logger.debug("crawlplug: could not copy the stats to %s: %s", self.mirror_key, exc)

    def _periodic_flush(self) -> None:
        try:
            self.flush()
        except Exception:  # a failing flush must not stop the loop silently
            logger.exception("crawlplug: stats flush failed")

    def _field(self, key: str) -> list[str]:
        """(kind, name, value) of one stat for stats.lua."""
        agg = self.AGGREGATE.get(key) or _BY_METHOD.get(self._how.get(key, "set"), _SUM)
        if key not in self._stats:
            return ["dsum" if agg == _SUM else "del", key, ""]
        value = self._stats[key]
        if isinstance(value, datetime):
            return ["tmin" if agg == _MIN else "tmax", key, encode(value)]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return [_SET, key, encode(value)]
        return [agg, key, encode(value)]

    def _redis_error(self, exc: Exception) -> None:
        if self._down_since is None:
            self._down_since = time.monotonic()
            logger.warning(
                "crawlplug: could not write stats to Redis (%s); the %d changed stats are kept "
                "and sent at the next flush",
                exc,
                len(self._dirty),
            )


def _spider_arg(method: str) -> None:
    """Scrapy's warning for a ``spider`` passed to a stats method (its StatsCollector's shim,
    which RedisStatsCollector does without), pointing at the caller of ``method``."""
    warnings.warn(
        f"Passing a 'spider' argument to RedisStatsCollector.{method}() is deprecated and "
        "the argument will be removed in a future Scrapy version.",
        category=ScrapyDeprecationWarning,
        stacklevel=3,
    )


# -- values as text, and back ------------------------------------------------------------

_INT = re.compile(r"-?\d+")
_FLOAT = re.compile(r"-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def encode(value: Any) -> str:
    """A stat value as stored: numbers as numbers, datetimes as ISO-8601 UTC, else JSON (str as is)."""
    if isinstance(value, datetime):
        # aware datetimes in UTC; a naive one is taken as local time (as astimezone does)
        return value.astimezone(timezone.utc).isoformat(timespec="microseconds")
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str, sort_keys=True)


def decode(raw: bytes | str) -> Any:
    """A stored stat value: int, float, JSON value (list, dict, bool, null) or text.

    Datetimes stay ISO-8601 strings (``datetime.fromisoformat`` reads them).
    """
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    if text[:1] in ("[", "{") or text in ("true", "false", "null"):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def _scrapy_redis_value(value: Any) -> str | int | float:
    """A decoded stat as scrapy-redis's collector stores it: datetimes as timestamps."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp() if _ISO.fullmatch(value) else value
        except ValueError:
            return value
    return json.dumps(value)


_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:\d\d|Z)?")


def crawl_stats(client: redis.Redis, keys: CrawlKeys) -> dict[str, Any]:
    """The crawl-wide stats, by name."""
    raw = client.hgetall(keys.crawlstats)
    return {text(k): decode(v) for k, v in sorted(raw.items())}


def stats_nodes(client: redis.Redis, keys: CrawlKeys) -> dict[str, int]:
    """Every node that wrote stats to the crawl -> its last flush (ms, Redis clock), oldest first."""
    return {text(n): int(s) for n, s in client.zrange(keys.statnodes, 0, -1, withscores=True)}


def node_stats(client: redis.Redis, keys: CrawlKeys) -> dict[str, dict[str, Any]]:
    """Each node's own stats, by node id (closed nodes included), oldest flush first."""
    nodes = list(stats_nodes(client, keys))
    pipe = client.pipeline(transaction=False)
    for node in nodes:
        pipe.hgetall(keys.node_stats(node))
    return {node: {text(k): decode(v) for k, v in sorted(raw.items())} for node, raw in zip(nodes, pipe.execute())}
