"""How the admission script deduplicates: one strategy per dedup mode.

A strategy names the mode ``admit.lua`` applies, the key holding its state,
the extra keys and parameter the script needs, and how a fingerprint is
turned into the script's dedup argument. The Scrapy-facing dupefilters
(:mod:`crawlplug.dupefilters`) choose one; the :class:`~crawlplug.frontier.Frontier`
passes it to every admission call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .bloom import BloomSpec, hash_args

if TYPE_CHECKING:
    from .keys import CrawlKeys


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

    def state_keys(self, keys: CrawlKeys) -> list[str]:
        """Every key holding dedup state (for purge and export)."""
        return [self.seen_key(keys)]


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
        self.window_ms = int(ttl * 1000 / generations) if generations else 0
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
            f"{prefix}:{layer.index + 1}:{chunk}"
            for layer in self.spec.layers(count)
            for chunk in range(layer.chunks)
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
