"""How the admission script deduplicates: one strategy per dedup mode.

A strategy names the mode ``admit.lua`` applies, the key holding its state,
the extra keys and parameter the script needs, and how a fingerprint is
turned into the script's dedup argument. The Scrapy-facing dupefilters
(:mod:`crawlplug.dupefilters`) choose one; the :class:`~crawlplug.frontier.Frontier`
passes it to every admission call.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, cast

from ..errors import ConfigError
from .bloom import BloomSpec, hash_args
from .store import text

if TYPE_CHECKING:
    import redis

    from .keys import CrawlKeys

__all__ = [
    "BloomDedup",
    "Dedup",
    "NativeBloomDedup",
    "SetDedup",
    "TtlDedup",
    "bloom_info",
    "has_native_bloom",
    "prepare_bloom",
]

logger = logging.getLogger(__name__)


class DedupPart(Protocol):
    """A part of a crawl's frontier as the dedup helpers (here, crawlplug.frontier.fphash and
    fpadmin) see it: a :class:`crawlplug.frontier.part.Part`, which imports this module."""

    client: redis.Redis
    keys: CrawlKeys
    dedup: Dedup

    def record_seen(self, items: Sequence[tuple[bytes, str]]) -> str: ...


class DedupFrontier(Protocol):
    """A crawl's frontier as the dedup helpers see it: a :class:`crawlplug.frontier.core.Frontier`."""

    client: redis.Redis
    keys: CrawlKeys

    def dedup_parts(self) -> Sequence[DedupPart]: ...


class Dedup:
    """No dedup: every request is admitted (``scrapy.dupefilters.BaseDupeFilter``)."""

    mode = "none"

    def seen_key(self, keys: CrawlKeys) -> str:
        return keys.seen

    def param(self) -> str:
        return ""

    def extra_keys(self, keys: CrawlKeys) -> list[str]:
        return []

    def observe(self, state: str) -> None:
        """Learn the state the script reported (the Bloom filters' layer counts)."""

    def argument(self, fingerprint: bytes, ttl_ms: int | None = None) -> bytes:
        return fingerprint

    def call_keys(self, keys: CrawlKeys, arguments: Sequence[bytes]) -> tuple[list[str], list[bytes]]:
        """The keys one call's ``arguments`` need after the dedup state's (every one, for
        Redis Cluster) and the arguments as the script takes them. Most modes need the
        same keys for every call (:meth:`extra_keys`); the compact store
        (:mod:`crawlplug.frontier.fphash`) the buckets of the call's fingerprints."""
        return self.extra_keys(keys), list(arguments)

    def state_keys(self, keys: CrawlKeys) -> list[str]:
        """Every key holding dedup state (for purge and export)."""
        return [self.seen_key(keys)]

    def most_per_call(self) -> int:
        """The most requests one script call may carry (the frontier splits a bigger batch)."""
        return 1 << 30


class SetDedup(Dedup):
    """Exact: a set of raw 20-byte fingerprints."""

    mode = "set"


class TtlDedup(Dedup):
    """Exact, forgetting each fingerprint after a time-to-live.

    A sorted set maps fingerprint -> expiry time (ms, Redis clock). A request
    is new when its fingerprint is absent or expired; admitting it sets a new
    expiry. Expired entries are removed by the admission script
    (``ZREMRANGEBYSCORE``, each entry once), never by a scan.
    """

    mode = "ttl"

    def __init__(self, ttl: float) -> None:
        if ttl <= 0:
            raise ValueError("the dedup time-to-live must be positive")
        self.ttl_ms = int(ttl * 1000)

    def seen_key(self, keys: CrawlKeys) -> str:
        return keys.key("seen_ttl")

    def param(self) -> str:
        return str(self.ttl_ms)

    def argument(self, fingerprint: bytes, ttl_ms: int | None = None) -> bytes:
        return f"{'' if ttl_ms is None else int(ttl_ms)}:".encode() + fingerprint


class BloomDedup(Dedup):
    """A scalable Bloom filter in Redis strings (see :mod:`crawlplug.frontier.bloom`).

    ``seen_key`` (``bloom``) is a hash holding the filter's sizing (``spec``),
    so that nodes configured differently refuse to share it. Each filter has
    a hash of its layer counts (``layers``, ``count:<n>`` for layer n counted
    from 1) and layer n's bits in ``<filter>:<n>:<chunk>`` strings.

    With ``generations`` N > 0 the filter forgets, approximately: time is cut
    into windows of ``ttl / N`` (Redis clock); each window has its own filter
    (``bloom:g<window>``), a URL is checked against the current window's and
    the N before it and added to the current one, and older windows' keys
    expire. So a URL admitted at time t counts as seen (false positives
    aside) until at least ``t + ttl`` and at most ``t + ttl * (1 + 1/N)``;
    after that it may be admitted, hence crawled, again.
    """

    mode = "bloom"

    def __init__(self, spec: BloomSpec, *, ttl: float | None = None, generations: int = 0) -> None:
        if generations < 0 or (generations and not ttl):
            raise ValueError("Bloom generations need a positive count and a time-to-live")
        self.spec = spec
        self.generations = generations
        self.window_ms = int(ttl * 1000 / generations) if generations and ttl else 0  # ttl is set with generations
        if generations and self.window_ms < 1:
            raise ValueError("the Bloom generation window must be at least 1 ms")
        self.generation = 0  # Redis's current window, learnt from the script
        self.known: dict[int, int] = {}  # filter generation -> layers known to exist

    def seen_key(self, keys: CrawlKeys) -> str:
        return keys.key("bloom")

    def _filters(self) -> list[int]:
        """Generations of the filters to pass, newest (current) first."""
        if not self.generations:
            return [0]
        return [self.generation - i for i in range(self.generations + 1)]

    def _prefix(self, keys: CrawlKeys, generation: int) -> str:
        return keys.key("bloom") if not self.generations else keys.key(f"bloom:g{generation}")

    def meta_key(self, keys: CrawlKeys, generation: int = 0) -> str:
        """The hash of a filter's layer counts."""
        return f"{self._prefix(keys, generation)}:meta"

    def _count(self, position: int, generation: int) -> int:
        known = self.known.get(generation, 0)
        if position == 0:  # the current filter: its layers plus one spare (two if none yet)
            return max(known, 1) + 1
        return known

    def layer_keys(self, keys: CrawlKeys, count: int, generation: int = 0) -> list[str]:
        prefix = self._prefix(keys, generation)
        return [
            f"{prefix}:{layer.index + 1}:{chunk}" for layer in self.spec.layers(count) for chunk in range(layer.chunks)
        ]

    def param(self) -> str:
        expire = self.window_ms * (self.generations + 2) if self.generations else 0
        lines = [f"{self.window_ms} {self.generation} {expire}"]
        for position, generation in enumerate(self._filters()):
            count = self._count(position, generation)
            lines.append(";".join(layer.descriptor() for layer in self.spec.layers(count)) or "-")
        return "\n".join(lines)

    def extra_keys(self, keys: CrawlKeys) -> list[str]:
        out: list[str] = []
        for position, generation in enumerate(self._filters()):
            out.append(self.meta_key(keys, generation))
            out += self.layer_keys(keys, self._count(position, generation), generation)
        return out

    def observe(self, state: str) -> None:
        if not state:
            return
        for generation, count in zip(self._filters(), str(state).split(",")):
            self.known[generation] = max(self.known.get(generation, 0), int(count))

    def forget(self) -> None:
        """Forget the layers seen (the crawl was reset: the filter is new)."""
        self.known = {}

    def observe_generation(self, generation: int) -> None:
        self.generation = generation
        # forget generations that can no longer be passed
        oldest = generation - self.generations
        self.known = {g: n for g, n in self.known.items() if g >= oldest}

    def argument(self, fingerprint: bytes, ttl_ms: int | None = None) -> bytes:
        return hash_args(fingerprint)

    def state_keys(self, keys: CrawlKeys) -> list[str]:
        return [self.seen_key(keys), *self.extra_keys(keys)]


class NativeBloomDedup(Dedup):
    """The server's own scalable Bloom filter (RedisBloom's BF.*, built into Redis 8).

    Reserved at the first admission with half the configured error rate and
    an expansion of 2: RedisBloom halves the error of each new sub-filter, so
    the compound rate stays below the configured one, as with :class:`BloomDedup`.
    """

    mode = "bf"

    def __init__(self, spec: BloomSpec) -> None:
        self.spec = spec

    def seen_key(self, keys: CrawlKeys) -> str:
        return keys.key("bf")

    def param(self) -> str:
        return f"{self.spec.error_rate / 2!r} {self.spec.capacity}"


# -- the Bloom filter's place in Redis: its format, its size, what it holds ------------------


def has_native_bloom(client: redis.Redis) -> bool:
    """Whether the server has RedisBloom's BF.* commands (Redis 8, or the module)."""
    try:
        info = client.execute_command("COMMAND", "INFO", "BF.ADD")
    except Exception:  # noqa: BLE001 - an old server without COMMAND INFO: no native Bloom
        return False
    if isinstance(info, dict):  # redis-py parses the reply into {name: details}
        return bool(info)
    return bool(info and info[0])


def _choose_format(client: redis.Redis, keys: CrawlKeys, spec: BloomSpec, native: bool | str, generations: int) -> str:
    """ "lua" or "native": what the crawl already uses, else what is asked and possible."""
    key = BloomDedup(spec).seen_key(keys)
    stored = cast("bytes | None", client.hget(key, "format"))  # crawlplug's clients answer bytes
    available = has_native_bloom(client)
    if stored is not None:
        fmt = stored.decode()
        if fmt == "native" and not available:
            raise ConfigError(
                f"crawl {keys.crawl!r} uses the server's native Bloom filter (BF.*), which this Redis does not have"
            )
        if fmt == "lua" and native is True:
            logger.warning("crawlplug: crawl %r already uses the Lua Bloom filter; keeping it", keys.crawl)
        return fmt
    if native is True and not available:
        raise ConfigError("CRAWLPLUG_BLOOM_NATIVE=True but this Redis has no BF.* commands (RedisBloom / Redis 8)")
    fmt = "native" if native and available and not generations else "lua"
    client.hsetnx(key, "format", fmt)
    return (cast("bytes | None", client.hget(key, "format")) or fmt.encode()).decode()


def prepare_bloom(frontier: DedupFrontier, spec: BloomSpec, *, native: bool | str, generations: int) -> None:
    """Check (and record) a Bloom filter's format and size in every part of ``frontier``'s
    crawl, and give each part the strategy it must use (the native one where the crawl
    uses the server's filter). Nodes sized differently are refused: they would not agree."""
    for part in frontier.dedup_parts():
        client, keys = part.client, part.keys
        strategy = part.dedup
        if _choose_format(client, keys, spec, native, generations) == "native":
            strategy = NativeBloomDedup(spec)
        key = BloomDedup(spec).seen_key(keys)
        client.hsetnx(key, "spec", spec.identity())
        stored = cast("bytes | None", client.hget(key, "spec"))
        if stored is not None and stored.decode() != spec.identity():
            raise ConfigError(
                f"crawl {keys.crawl!r} already has a Bloom filter sized {stored.decode()} "
                f"(capacity:error_rate:...); this node is configured {spec.identity()}. "
                "Use the same CRAWLPLUG_BLOOM_* settings on every node, or a new CRAWLPLUG_CRAWL_ID."
            )
        if isinstance(strategy, BloomDedup) and not strategy.generations:
            strategy.observe(str(int(client.hget(strategy.meta_key(keys), "layers") or 0)))
        part.dedup = strategy


def bloom_info(frontier: DedupFrontier, spec: BloomSpec, strategy: Dedup | None = None) -> dict[str, object]:
    """What a crawl's Bloom filter holds: fill ratio, estimated count, estimated false-positive
    rate and memory (BITCOUNT: O(size), not for the hot path). ``strategy``: the one the
    crawl uses (native filters answer BF.INFO; a filter by generations its windows)."""
    client, keys = frontier.client, frontier.keys
    if isinstance(strategy, NativeBloomDedup):
        raw = client.execute_command("BF.INFO", strategy.seen_key(keys))
        if isinstance(raw, dict):  # redis-py parses it into a dict where it knows the module
            info = {text(k): v for k, v in raw.items()}
        else:
            info = {text(raw[i]): raw[i + 1] for i in range(0, len(raw), 2)}
        return {
            "native": True,
            "capacity": info.get("Capacity"),
            "memory_bytes": info.get("Size"),
            "filters": info.get("Number of filters"),
            "added": info.get("Number of items inserted"),
            "error_rate": spec.error_rate,
        }
    if isinstance(strategy, BloomDedup) and strategy.generations:
        return {"generations": strategy.generations, "window_ms": strategy.window_ms}
    plain = BloomDedup(spec)
    meta = {k.decode(): v.decode() for k, v in cast("dict[bytes, bytes]", client.hgetall(plain.meta_key(keys))).items()}
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
        estimate = -layer.bits_per_slice * math.log(1 - fill) if fill < 1 else float("inf")
        layers.append(
            {
                "layer": layer.index + 1,
                "capacity": layer.capacity,
                "error_rate": layer.error_rate,
                "added": int(meta.get(f"count:{layer.index + 1}", 0)),
                "estimated_count": round(estimate),
                "fill_ratio": fill,
                "false_positive_rate": fp_rate,
                "bits": layer.bits,
            }
        )
    return {
        "capacity": spec.capacity,
        "error_rate": spec.error_rate,
        "layers": layers,
        "added": sum(x["added"] for x in layers),
        "estimated_count": sum(x["estimated_count"] for x in layers),
        "false_positive_rate": 1 - miss_all,
        "memory_bytes": memory,
    }
