"""Duplicate filters whose state lives in the crawl's Redis.

Under crawlplug's Scheduler the check runs inside the admission script
(``lua/admit.lua``): the fingerprint is recorded in the same atomic step that
stores the request, so there is never a fingerprint whose request is nowhere.
A dupefilter here supplies the fingerprint, chooses the dedup strategy the
script applies (:mod:`crawlplug.frontier.dedup`), and logs and counts what was
filtered.

Each one is also a plain Scrapy dupefilter, for any scheduler (Scrapy's own,
or another plugin's): ``open()`` reaches the crawl's Redis (the same
settings a crawlplug node reads) and ``request_seen`` checks and records the
fingerprint in one script call (``lua/seen.lua``), in the same keys and format
the admission script uses. So nodes with and without crawlplug's Scheduler,
on any number of machines, agree on one crawl's fingerprints.

* :class:`RedisSetDupeFilter`: exact, full 20-byte fingerprints in compact Redis hashes
  (:mod:`crawlplug.frontier.fphash`, about 27 bytes of Redis memory per URL), or, with
  ``CRAWLPLUG_DEDUP_STORE = "set"`` and in crawls begun before it, a set of them (about 72).
* :class:`RedisBloomDupeFilter`: a scalable Bloom filter, about 2 bytes per
  URL at a 0.1% false-positive rate; a false positive means a URL never
  crawled, never a URL crawled twice.
* :class:`ExpiringDupeFilter`: exact, but each fingerprint is forgotten after
  ``CRAWLPLUG_DEDUP_TTL`` seconds (``meta["crawlplug_dedup_ttl"]`` per
  request), for re-crawls.

Its size: three dupefilters over one base class, which holds what they share (opening the
crawl's Redis, the fingerprint cache, logging and counting what was filtered).
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.dupefilters import BaseDupeFilter
from scrapy.utils import request as scrapy_request

from .config import setting
from .crawl import registry
from .errors import REDIS_ERRORS, ConfigError
from .frontier import open_frontier
from .frontier.bloom import BloomSpec
from .frontier.dedup import (
    BloomDedup,
    Dedup,
    SetDedup,
    TtlDedup,
    bloom_info,
    prepare_bloom,
)
from .frontier.fpadmin import hash_info
from .frontier.fphash import HashDedup, SplitSpec, choose_store
from .frontier.keys import crawl_keys
from .frontier.layout import claim_shards
from .queues import BaseQueue, load_queue_class, route
from .server import clients

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.utils.request import RequestFingerprinterProtocol

    from .frontier.interface import CrawlFrontier

logger = logging.getLogger(__name__)

#: Request.meta key overriding CRAWLPLUG_DEDUP_TTL (seconds) for one request.
TTL_META = "crawlplug_dedup_ttl"

#: Request.meta key of a start request fetched once in a run, by whichever node's start()
#: yields it first (crawlplug.scheduler.startonce sets it on the requests of Scrapy's
#: default start(); a custom start() opts a request in by setting it to True).
START_ONCE_META = "crawlplug_start_once"

#: Most (method, URL) pairs whose fingerprint a dupefilter remembers (about 1 MB).
URL_FP_CACHE = 4096


def _default_fingerprinter(fingerprinter: object) -> bool:
    """Whether ``fingerprinter`` is Scrapy's default one, whose fingerprint of a request is a
    function of its method, its URL, its body and its ``verbatim_url`` meta key only."""
    return (
        type(fingerprinter) is scrapy_request.RequestFingerprinter
        and getattr(fingerprinter, "_fingerprint", None) is scrapy_request.fingerprint
    )


class RedisSetDupeFilter(BaseDupeFilter):
    """Exact dedup of raw 20-byte request fingerprints: in the compact store (compact Redis
    hashes, :mod:`crawlplug.frontier.fphash`) or a Redis set, ``store``
    (``CRAWLPLUG_DEDUP_STORE``) for a new crawl; a crawl keeps the store it began with.

    Fingerprints come from ``crawler.request_fingerprinter``, so
    ``REQUEST_FINGERPRINTER_CLASS`` is honoured. Closing never deletes the
    state: other nodes, and the next run, still need it.
    """

    def __init__(
        self,
        fingerprinter: RequestFingerprinterProtocol,
        *,
        debug: bool = False,
        crawler: Crawler | None = None,
        store: str = "hash",
        capacity: int | None = None,
    ) -> None:
        self.store = store
        self.hash_spec = SplitSpec.for_capacity(capacity)
        self.fingerprinter = fingerprinter
        self.debug = debug
        self.crawler = crawler
        self.frontier: CrawlFrontier | None = None
        self.strategy: Dedup = self.make_strategy()
        self._logged_once = False
        #: the Redis this dupefilter opened itself (used on its own), closed with it
        self._conn: clients.Connection | None = None
        #: what a sharded crawl routes a request by (the crawl's queue class), used on its own
        self._router: BaseQueue | None = None
        self._failing = False  # Redis failed the last check: said once, counted after
        #: the crawl keeps fingerprints across runs (set by crawlplug's Scheduler when it joins):
        #: a start request of START_ONCE_META is then recorded under a fingerprint of its run
        self.per_run_starts = False
        #: (method, URL, verbatim_url) of requests without a body -> their fingerprint, the
        #: latest used kept (Scrapy's default fingerprinter only): most links of a page were met
        #: before (a nav bar, a pager), and canonicalize_url is most of a fingerprint's cost
        self._by_url: OrderedDict[tuple[str, str, bool], bytes] | None = (
            OrderedDict() if _default_fingerprinter(fingerprinter) else None
        )

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RedisSetDupeFilter:
        assert crawler.request_fingerprinter is not None
        s = crawler.settings
        try:
            raw = setting(s, "CRAWLPLUG_DEDUP_CAPACITY")
            capacity = None if raw in (None, "") else int(raw)
        except (TypeError, ValueError):
            raise ConfigError(
                f"CRAWLPLUG_DEDUP_CAPACITY must be a number of URLs, got {s.get('CRAWLPLUG_DEDUP_CAPACITY')!r}"
            ) from None
        return cls(
            crawler.request_fingerprinter,
            debug=s.getbool("DUPEFILTER_DEBUG"),
            crawler=crawler,
            store=str(setting(s, "CRAWLPLUG_DEDUP_STORE")),
            capacity=capacity,
        )

    def make_strategy(self) -> Dedup:
        return SetDedup() if self.store == "set" else HashDedup(self.hash_spec)

    @property
    def mode(self) -> str:
        return self.strategy.mode

    def bind(self, frontier: CrawlFrontier) -> None:
        """Attach to the crawl's frontier (done by the Scheduler in ``open``): its dedup
        strategy is the one this dupefilter's arguments are made for."""
        self.frontier = frontier
        if frontier.dedup.mode in ("set", "hash"):  # the exact stores: the one the crawl uses (fphash)
            choose_store(frontier, self.store, self.hash_spec)
        self.strategy = frontier.dedup

    def info(self) -> dict[str, Any]:
        """The compact store's bucket distribution (:func:`crawlplug.frontier.fpadmin.hash_info`),
        or the set's size."""
        if self.frontier is None:
            raise RuntimeError(f"{type(self).__name__} is not open: open() it, or let crawlplug's Scheduler bind it")
        if self.strategy.mode == "hash":
            return hash_info(self.frontier)
        parts = self.frontier.dedup_parts()
        return {"store": self.strategy.mode, "fingerprints": sum(int(p.client.scard(p.keys.seen)) for p in parts)}

    # -- used on its own (Scrapy's scheduler, or any other) ----------------------------
    def open(self) -> None:
        """Reach the crawl's Redis and dedup state, as a node of the crawl would: the Redis
        of REDIS_URL (else the embedded one), the crawl of CRAWLPLUG_CRAWL_ID (else the
        spider's name), its shards. Nothing to do when crawlplug's Scheduler bound it.

        Joins no run (:mod:`crawlplug.crawl.runs`): a dupefilter on its own records
        fingerprints, nothing else; they stay until the crawl's dedup state is cleared
        (``crawlplug purge``, ``crawlplug forget``, or a crawlplug node beginning the
        crawl's next run)."""
        if self.frontier is not None:
            return
        crawler = self.crawler
        spider = getattr(crawler, "spider", None)
        if crawler is None or spider is None:
            raise ConfigError(
                f"{type(self).__name__} used on its own needs the crawler of a running spider "
                "(build it with from_crawler, as Scrapy does)"
            )
        settings = crawler.settings
        keys = crawl_keys(settings, spider.name)
        conn = clients.from_settings(settings)
        try:
            clients.check(conn)
            shards = setting(settings, "CRAWLPLUG_SHARDS", "getint")
            claim_shards(conn.client, keys, shards)
            frontier = open_frontier(conn.client, keys, shards=shards, dedup_factory=self.make_strategy)
            self.bind(frontier)
            registry.register(conn.client, keys)  # `crawlplug crawls`, forget and purge find it
        except BaseException:
            conn.client.close()
            raise
        self._conn = conn
        if frontier.sharded:
            self._router = load_queue_class(setting(settings, "CRAWLPLUG_QUEUE_CLASS")).from_settings(settings)
        logger.info(
            "crawlplug %s: fingerprints of crawl %r on Redis %s (a dupefilter on its own, under %s)",
            type(self).__name__,
            keys.crawl,
            conn.safe_url,
            settings.get("SCHEDULER"),
        )

    def fingerprint(self, request: Request) -> bytes:
        """The request's fingerprint (``crawler.request_fingerprinter``'s). A start request
        fetched once a run (START_ONCE_META) in a crawl that keeps fingerprints across runs
        gets one derived from it and the run, so that each run fetches it once, whatever
        the last runs recorded; in a crawl that starts each run without fingerprints its
        own fingerprint does that, and links back to it are duplicates."""
        cache = self._by_url
        if cache is None or request.body:
            fp = self.fingerprinter.fingerprint(request)
        else:
            key = (request.method, request.url, bool(request.meta.get("verbatim_url")))
            found = cache.get(key)
            if found is None:
                fp = cache[key] = self.fingerprinter.fingerprint(request)
                if len(cache) > URL_FP_CACHE:
                    cache.popitem(last=False)
            else:
                cache.move_to_end(key)
                fp = found
        if self.per_run_starts and request.meta.get(START_ONCE_META):
            run = getattr(self.frontier, "run_id", None)
            fp = hashlib.sha1(b"crawlplug start of run %d\x00%s" % (run or 0, fp)).digest()
        return fp

    def argument(self, request: Request) -> bytes:
        """The admission script's dedup argument for ``request``."""
        return self.strategy.argument(self.fingerprint(request))

    def request_seen(self, request: Request) -> bool:
        """Check and record the fingerprint in one script call (``lua/seen.lua``): True if it
        was recorded before, by any node of the crawl, with crawlplug's Scheduler or not.

        Redis failing (after the client's retries) lets the request through, said once
        and counted (``dupefilter/redis_errors``): a page fetched twice, never one lost."""
        frontier = self.frontier
        if frontier is None:
            raise RuntimeError(
                f"{type(self).__name__} is not open: the scheduler opens it (open()), or crawlplug's Scheduler binds it"
            )
        arg = self.argument(request)
        # routed as admission routes it (the queue of open(), else the bound frontier's), so a
        # sharded crawl checks the shard its admission uses
        router = self._router if self._router is not None else frontier.queue
        where = route(request, router.domain(request))
        try:
            flags = frontier.record_seen([(arg, where)])
        except REDIS_ERRORS as exc:
            self._redis_failed(request, exc)
            return False
        if self._failing:
            self._failing = False
            logger.info("crawlplug: Redis answers again: %s checks fingerprints again", type(self).__name__)
        return flags == "0"

    def _redis_failed(self, request: Request, exc: BaseException) -> None:
        if not self._failing:
            self._failing = True
            logger.error(
                "crawlplug: %s could not check %s in Redis (%s): letting requests through unchecked until it answers",
                type(self).__name__,
                request,
                exc,
            )
        if self.crawler is not None and self.crawler.stats is not None:
            self.crawler.stats.inc_value("dupefilter/redis_errors")

    def log(self, request: Request, spider: object = None) -> None:
        if self.debug:
            logger.debug("Filtered duplicate request: %(request)s", {"request": request})
        elif not self._logged_once:
            logger.debug(
                "Filtered duplicate request: %(request)s - no more duplicates will be shown"
                " (see DUPEFILTER_DEBUG to show all duplicates)",
                {"request": request},
            )
            self._logged_once = True
        if self.crawler is not None and self.crawler.stats is not None:
            self.crawler.stats.inc_value("dupefilter/filtered")

    def close(self, reason: str) -> None:
        """Nothing is deleted: the fingerprints stay in Redis for the other nodes. A
        dupefilter used on its own closes the connection it opened."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.client.close()
            self.frontier = None


class RedisBloomDupeFilter(RedisSetDupeFilter):
    """Scalable Bloom-filter dedup in Redis strings, checked and set atomically at admission.

    Sized by ``CRAWLPLUG_BLOOM_CAPACITY`` and ``CRAWLPLUG_BLOOM_ERROR_RATE``;
    when the filter holds its capacity a larger, stricter layer is chained, so
    the compound false-positive rate stays at or below the configured one
    however big the crawl grows. No false negatives: a URL admitted once is
    never admitted again.
    """

    def __init__(
        self,
        fingerprinter: RequestFingerprinterProtocol,
        *,
        spec: BloomSpec,
        native: bool | str = False,
        ttl: float | None = None,
        generations: int = 0,
        debug: bool = False,
        crawler: Crawler | None = None,
    ) -> None:
        if native not in (True, False, "auto"):
            raise ConfigError(f"CRAWLPLUG_BLOOM_NATIVE must be True, False or 'auto', got {native!r}")
        if generations < 0:
            raise ConfigError(f"CRAWLPLUG_BLOOM_GENERATIONS must be 0 or more, got {generations}")
        if generations and native is True:
            raise ConfigError("CRAWLPLUG_BLOOM_GENERATIONS needs the Lua Bloom filter, not CRAWLPLUG_BLOOM_NATIVE")
        if generations and not (ttl and ttl > 0):
            raise ConfigError("CRAWLPLUG_BLOOM_GENERATIONS needs a positive CRAWLPLUG_DEDUP_TTL")
        self.spec = spec
        self.native = native
        self.ttl = ttl
        self.generations = generations
        super().__init__(fingerprinter, debug=debug, crawler=crawler)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RedisBloomDupeFilter:
        assert crawler.request_fingerprinter is not None
        s = crawler.settings
        try:
            capacity = int(setting(s, "CRAWLPLUG_BLOOM_CAPACITY"))
            error_rate = float(setting(s, "CRAWLPLUG_BLOOM_ERROR_RATE"))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"CRAWLPLUG_BLOOM_CAPACITY/ERROR_RATE must be numbers: {exc}") from None
        spec = BloomSpec(capacity, error_rate)
        native = setting(s, "CRAWLPLUG_BLOOM_NATIVE")
        generations = int(setting(s, "CRAWLPLUG_BLOOM_GENERATIONS", "getint"))
        if isinstance(native, str) and native.lower() in ("true", "false", "1", "0"):
            native = native.lower() in ("true", "1")
        return cls(
            crawler.request_fingerprinter,
            spec=spec,
            native=native,
            ttl=_ttl_setting(s) if generations else None,
            generations=generations,
            debug=s.getbool("DUPEFILTER_DEBUG"),
            crawler=crawler,
        )

    def make_strategy(self) -> Dedup:
        if self.generations:
            return BloomDedup(self.spec, ttl=self.ttl, generations=self.generations)
        return BloomDedup(self.spec)

    def bind(self, frontier: CrawlFrontier) -> None:
        """Attach to the crawl's frontier: the frontier checks (and records) the filter's
        format and size in every part, and picks the strategy each part uses."""
        self.frontier = frontier
        prepare_bloom(frontier, self.spec, native=self.native, generations=self.generations)
        self.strategy = frontier.dedup

    def info(self) -> dict[str, Any]:
        """Fill ratio, estimated count, estimated false-positive rate and memory of the filter."""
        if self.frontier is None:
            raise RuntimeError(f"{type(self).__name__} is not open: open() it, or let crawlplug's Scheduler bind it")
        return bloom_info(self.frontier, self.spec, self.strategy)


def _ttl_setting(s: Any) -> float:
    raw = setting(s, "CRAWLPLUG_DEDUP_TTL")
    try:
        ttl = float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"CRAWLPLUG_DEDUP_TTL must be a number of seconds, got {raw!r}") from None
    if not 0 < ttl < math.inf:
        raise ConfigError(f"CRAWLPLUG_DEDUP_TTL must be a positive number of seconds, got {raw!r}")
    return ttl


class ExpiringDupeFilter(RedisSetDupeFilter):
    """Exact dedup that forgets: a URL may be crawled again ``CRAWLPLUG_DEDUP_TTL`` seconds later.

    Each fingerprint carries its expiry (Redis clock) in a sorted set; the
    admission script treats an expired fingerprint as new and removes expired
    ones as it goes. ``meta["crawlplug_dedup_ttl"]`` sets another TTL (seconds)
    for one request, e.g. a short one for a news front page.
    """

    def __init__(
        self,
        fingerprinter: RequestFingerprinterProtocol,
        *,
        ttl: float,
        debug: bool = False,
        crawler: Crawler | None = None,
    ) -> None:
        if not (isinstance(ttl, (int, float)) and 0 < ttl < math.inf):
            raise ConfigError(f"CRAWLPLUG_DEDUP_TTL must be a positive number of seconds, got {ttl!r}")
        self.ttl = ttl
        super().__init__(fingerprinter, debug=debug, crawler=crawler)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ExpiringDupeFilter:
        assert crawler.request_fingerprinter is not None
        s = crawler.settings
        return cls(
            crawler.request_fingerprinter,
            ttl=_ttl_setting(s),
            debug=s.getbool("DUPEFILTER_DEBUG"),
            crawler=crawler,
        )

    def make_strategy(self) -> Dedup:
        return TtlDedup(self.ttl)

    def argument(self, request: Request) -> bytes:
        ttl = request.meta.get(TTL_META)
        ttl_ms = None
        if ttl is not None:
            try:
                ttl_ms = int(float(ttl) * 1000)
            except (TypeError, ValueError, OverflowError):
                ttl_ms = -1
            if ttl_ms <= 0:
                raise ConfigError(f"meta[{TTL_META!r}] must be a positive number of seconds, got {ttl!r}")
        return self.strategy.argument(self.fingerprint(request), ttl_ms)
