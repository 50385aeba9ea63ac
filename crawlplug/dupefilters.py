"""Duplicate filters whose state lives in the crawl's Redis.

The check itself runs inside the admission script (``lua/admit.lua``): the
fingerprint is recorded in the same atomic step that stores the request, so
there is never a fingerprint whose request is nowhere. A dupefilter here
supplies the fingerprint, chooses the dedup strategy the script applies
(:mod:`crawlplug.frontier.dedup`), and logs and counts what was filtered. Used on its
own (``request_seen``) it records fingerprints with the same script.

* :class:`RedisSetDupeFilter`: exact, a set of raw 20-byte fingerprints
  (about 80 bytes of Redis memory per URL).
* :class:`RedisBloomDupeFilter`: a scalable Bloom filter, about 2 bytes per
  URL at a 0.1% false-positive rate; a false positive means a URL never
  crawled, never a URL crawled twice.
* :class:`ExpiringDupeFilter`: exact, but each fingerprint is forgotten after
  ``CRAWLPLUG_DEDUP_TTL`` seconds (``meta["crawlplug_dedup_ttl"]`` per
  request), for re-crawls.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.dupefilters import BaseDupeFilter

from .frontier.bloom import BloomSpec
from .config import setting
from .frontier.dedup import BloomDedup, Dedup, NativeBloomDedup, SetDedup, TtlDedup
from .errors import ConfigError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.utils.request import RequestFingerprinterProtocol

    from .frontier.single import Frontier

logger = logging.getLogger(__name__)

#: Request.meta key overriding CRAWLPLUG_DEDUP_TTL (seconds) for one request.
TTL_META = "crawlplug_dedup_ttl"


class RedisSetDupeFilter(BaseDupeFilter):
    """Exact dedup: a Redis set of raw 20-byte request fingerprints.

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
    ) -> None:
        self.fingerprinter = fingerprinter
        self.debug = debug
        self.crawler = crawler
        self.frontier: Frontier | None = None
        self.strategy: Dedup = self.make_strategy()
        self._logged_once = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RedisSetDupeFilter:
        assert crawler.request_fingerprinter is not None
        return cls(
            crawler.request_fingerprinter,
            debug=crawler.settings.getbool("DUPEFILTER_DEBUG"),
            crawler=crawler,
        )

    def make_strategy(self) -> Dedup:
        return SetDedup()

    @property
    def mode(self) -> str:
        return self.strategy.mode

    def bind(self, frontier: Frontier) -> None:
        """Attach to the crawl's frontier (done by the Scheduler in ``open``)."""
        self.frontier = frontier

    def fingerprint(self, request: Request) -> bytes:
        return self.fingerprinter.fingerprint(request)

    def argument(self, request: Request) -> bytes:
        """The admission script's dedup argument for ``request``."""
        return self.strategy.argument(self.fingerprint(request))

    def request_seen(self, request: Request) -> bool:
        """Record the fingerprint; True if it was already there (one script call)."""
        if self.frontier is None:
            raise RuntimeError(f"{type(self).__name__} is not bound to a crawl; the Scheduler binds it")
        result = self.frontier.admit([(self.argument(request), 0.0, b"")])
        return result.flags == "0"

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
        """Nothing is deleted: the fingerprints stay in Redis for the other nodes."""


class RedisBloomDupeFilter(RedisSetDupeFilter):
    """Scalable Bloom-filter dedup in Redis strings, checked and set atomically at admission.

    Sized by ``CRAWLPLUG_BLOOM_CAPACITY`` and ``CRAWLPLUG_BLOOM_ERROR_RATE``;
    when the filter holds its capacity a larger, stricter layer is chained, so
    the compound false-positive rate stays at or below the configured one
    however big the crawl grows. No false negatives: a URL admitted once is
    never admitted again.
    """

    def __init__(self, fingerprinter: RequestFingerprinterProtocol, *, spec: BloomSpec,
                 native: bool | str = False, ttl: float | None = None, generations: int = 0,
                 debug: bool = False, crawler: Crawler | None = None) -> None:  # fmt: skip
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

    def _choose_format(self, frontier: Frontier) -> str:
        """"lua" or "native": what the crawl already uses, else what is asked and possible."""
        client, key = frontier.client, BloomDedup(self.spec).seen_key(frontier.keys)
        stored = client.hget(key, "format")
        available = _has_native_bloom(client)
        if stored is not None:
            fmt = stored.decode()
            if fmt == "native" and not available:
                raise ConfigError(
                    f"crawl {frontier.keys.crawl!r} uses the server's native Bloom filter (BF.*), "
                    "which this Redis does not have"
                )
            if fmt == "lua" and self.native is True:
                logger.warning("crawlplug: crawl %r already uses the Lua Bloom filter; keeping it", frontier.keys.crawl)
            return fmt
        if self.native is True and not available:
            raise ConfigError("CRAWLPLUG_BLOOM_NATIVE=True but this Redis has no BF.* commands (RedisBloom / Redis 8)")
        fmt = "native" if self.native and available and not self.generations else "lua"
        client.hsetnx(key, "format", fmt)
        return (client.hget(key, "format") or fmt.encode()).decode()

    def bind(self, frontier: Frontier) -> None:
        super().bind(frontier)
        shards = getattr(frontier, "shards", None)
        if shards is None:
            self.strategy = frontier.dedup = self._bind_part(frontier, self.strategy)
            return
        # a sharded crawl (crawlplug.frontier.sharded): one filter per shard, each its own strategy
        for part in shards:
            part.dedup = self._bind_part(part, part.dedup)
        self.strategy = shards[0].dedup

    def _bind_part(self, frontier: Frontier, strategy: Dedup) -> Dedup:
        """Check (and record) the filter's format and size in one key set; the strategy to use."""
        if self._choose_format(frontier) == "native":
            strategy = NativeBloomDedup(self.spec)
        client, key = frontier.client, BloomDedup(self.spec).seen_key(frontier.keys)
        client.hsetnx(key, "spec", self.spec.identity())
        stored = client.hget(key, "spec")
        if stored is not None and stored.decode() != self.spec.identity():
            raise ConfigError(
                f"crawl {frontier.keys.crawl!r} already has a Bloom filter sized {stored.decode()} "
                f"(capacity:error_rate:...); this node is configured {self.spec.identity()}. "
                "Use the same CRAWLPLUG_BLOOM_* settings on every node, or a new CRAWLPLUG_CRAWL_ID."
            )
        if isinstance(strategy, BloomDedup) and not strategy.generations:
            strategy.observe(str(int(client.hget(strategy.meta_key(frontier.keys), "layers") or 0)))
        return strategy

    def info(self) -> dict[str, Any]:
        """Fill ratio, estimated count, estimated false-positive rate and memory of the filter."""
        if self.frontier is None:
            raise RuntimeError("not bound to a crawl")
        if isinstance(self.strategy, NativeBloomDedup):
            raw = self.frontier.client.execute_command("BF.INFO", self.strategy.seen_key(self.frontier.keys))
            if isinstance(raw, dict):  # redis-py parses it into a dict where it knows the module
                info = {_text(k): v for k, v in raw.items()}
            else:
                info = {_text(raw[i]): raw[i + 1] for i in range(0, len(raw), 2)}
            return {"native": True, "capacity": info.get("Capacity"), "memory_bytes": info.get("Size"),
                    "filters": info.get("Number of filters"), "added": info.get("Number of items inserted"),
                    "error_rate": self.spec.error_rate}  # fmt: skip
        if self.generations:
            return {"generations": self.generations, "ttl": self.ttl, "window_ms": self.strategy.window_ms}
        return bloom_info(self.frontier, self.spec)


def _ttl_setting(s: Any) -> float:
    raw = setting(s, "CRAWLPLUG_DEDUP_TTL")
    try:
        ttl = float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"CRAWLPLUG_DEDUP_TTL must be a number of seconds, got {raw!r}") from None
    if not 0 < ttl < math.inf:
        raise ConfigError(f"CRAWLPLUG_DEDUP_TTL must be a positive number of seconds, got {raw!r}")
    return ttl


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _has_native_bloom(client: Any) -> bool:
    try:
        info = client.execute_command("COMMAND", "INFO", "BF.ADD")
    except Exception:  # noqa: BLE001 - an old server without COMMAND INFO: no native Bloom
        return False
    if isinstance(info, dict):  # redis-py parses the reply into {name: details}
        return bool(info)
    return bool(info and info[0])


def bloom_info(frontier: Frontier, spec: BloomSpec) -> dict[str, Any]:
    """Introspect the Bloom filter of ``frontier``'s crawl (BITCOUNT: O(size), not for the hot path)."""
    strategy = BloomDedup(spec)
    client, keys = frontier.client, frontier.keys
    meta = {k.decode(): v.decode() for k, v in client.hgetall(strategy.meta_key(keys)).items()}
    count = int(meta.get("layers", 0))
    layers = []
    miss_all = 1.0
    memory = 0
    for layer in spec.layers(count):
        set_bits = 0
        for chunk in range(layer.chunks):
            key = f"{keys.key('bloom')}:{layer.index + 1}:{chunk}"
            set_bits += int(client.bitcount(key))
            memory += int(client.memory_usage(key) or 0)
        fill = set_bits / layer.bits
        fp_rate = layer.fill_to_fp(fill)
        miss_all *= 1 - fp_rate
        per_slice = fill  # bits are spread evenly over the slices
        estimate = (
            -layer.bits_per_slice * math.log(1 - per_slice) if per_slice < 1 else float("inf")
        )
        layers.append({
            "layer": layer.index + 1, "capacity": layer.capacity, "error_rate": layer.error_rate,
            "added": int(meta.get(f"count:{layer.index + 1}", 0)), "estimated_count": round(estimate),
            "fill_ratio": fill, "false_positive_rate": fp_rate, "bits": layer.bits,
        })  # fmt: skip
    return {
        "capacity": spec.capacity,
        "error_rate": spec.error_rate,
        "layers": layers,
        "added": sum(x["added"] for x in layers),
        "estimated_count": sum(x["estimated_count"] for x in layers),
        "false_positive_rate": 1 - miss_all,
        "memory_bytes": memory,
    }


class ExpiringDupeFilter(RedisSetDupeFilter):
    """Exact dedup that forgets: a URL may be crawled again ``CRAWLPLUG_DEDUP_TTL`` seconds later.

    Each fingerprint carries its expiry (Redis clock) in a sorted set; the
    admission script treats an expired fingerprint as new and removes expired
    ones as it goes. ``meta["crawlplug_dedup_ttl"]`` sets another TTL (seconds)
    for one request, e.g. a short one for a news front page.
    """

    def __init__(self, fingerprinter: RequestFingerprinterProtocol, *, ttl: float,
                 debug: bool = False, crawler: Crawler | None = None) -> None:  # fmt: skip
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
