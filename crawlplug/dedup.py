"""How the admission script deduplicates: one strategy per dedup mode.

A strategy names the mode ``admit.lua`` applies, the key holding its state,
the extra keys and parameter the script needs, and how a fingerprint is
turned into the script's dedup argument. The Scrapy-facing dupefilters
(:mod:`crawlplug.dupefilters`) choose one; the :class:`~crawlplug.frontier.Frontier`
passes it to every admission call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .bloom import BloomSpec, hash_pair

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

    def observe(self, layers: int) -> None:
        """Learn the state the script reported (the Bloom filter's layer count)."""

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
    """A scalable Bloom filter in Redis strings (see :mod:`crawlplug.bloom`).

    ``seen_key`` is a hash: ``layers`` (how many exist), ``count:<n>`` (items
    added to layer n, counted from 1) and ``spec`` (the sizing, so that nodes
    configured differently refuse to share the filter). Layer n's bits are in
    ``bloom:<n>:<chunk>`` strings.
    """

    mode = "bloom"

    def __init__(self, spec: BloomSpec) -> None:
        self.spec = spec
        self.known = 0  # layers this node knows exist

    def seen_key(self, keys: CrawlKeys) -> str:
        return keys.key("bloom")

    def layer_keys(self, keys: CrawlKeys, count: int) -> list[str]:
        return [
            keys.key(f"bloom:{layer.index + 1}:{chunk}")
            for layer in self.spec.layers(count)
            for chunk in range(layer.chunks)
        ]

    def _passed(self) -> int:
        # every layer known to exist plus one spare the script may create
        # (two when none exists yet: the first layer and its successor)
        return max(self.known, 1) + 1

    def param(self) -> str:
        return self.spec.param(self._passed())

    def extra_keys(self, keys: CrawlKeys) -> list[str]:
        return self.layer_keys(keys, self._passed())

    def observe(self, layers: int) -> None:
        self.known = max(self.known, layers)

    def argument(self, fingerprint: bytes, ttl_ms: int | None = None) -> bytes:
        return hash_pair(fingerprint)

    def state_keys(self, keys: CrawlKeys) -> list[str]:
        return [self.seen_key(keys), *self.layer_keys(keys, self._passed())]
