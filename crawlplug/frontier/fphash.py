"""The compact exact fingerprint store (dedup mode "hash"): full fingerprints in many
small Redis hashes that Redis keeps in its compact encoding.

A set of 20-byte fingerprints costs Redis about 72 bytes a member (a dict entry and an
sds string each). A small hash (at most ``hash-max-listpack-entries`` fields of at most
``hash-max-listpack-value`` bytes; ``hash-max-ziplist-*`` on Redis 6: 512 and 64 by
default on both, and we plan for 128, what an operator may have set) is one flat
allocation instead, a field costing its bytes plus two or three. So fingerprints are
bucketed by their first bits into 2^b hashes: the field is the fingerprint less the whole
bytes the bucket already fixes, the value empty, and a fingerprint costs about 23 bytes
plus its share of its bucket's key, still exact (no false positives: the whole
fingerprint is compared). Short buckets also keep each lookup short (a listpack is
searched field by field).

Sizing and growth, by splitting buckets (linear hashing, the default of a new crawl): the
store begins with one bucket (2^level, level 0; ``CRAWLPLUG_DEDUP_CAPACITY`` may begin it
larger) and, whenever it holds more than :data:`SPLIT_FILL` fingerprints a bucket, splits
the next bucket in turn: bucket ``next`` of ``level`` becomes buckets ``2 next`` and ``2 next
+ 1`` of level + 1 (its fields moved by their next bit), and once every bucket of a level
is split the level goes up. A fingerprint's bucket is the top ``level`` bits of its first
four bytes, or the top level + 1 bits where that bucket is already split: one lookup a
URL at any size, and buckets between :data:`SPLIT_FILL` and twice that full, so a crawl
of 5,000 URLs takes about a hundred keys and one of 10^7 about 200,000. A split moves one
bucket (HKEYS, two HSETs, a DEL) about once per :data:`SPLIT_FILL` new fingerprints; the
script splits only buckets whose keys the call names, so a node is told when splits are
due and names them in its next call. At most twice :data:`SPLIT_FILL` a bucket on average
before a level goes up (96), so about one bucket in 1,300 passes 128 fields.

By generations (crawls whose store began before splitting, a spec "bits:fill:growth", kept
as they are): the first generation has the fewest power-of-two buckets that hold
``capacity`` at a mean of :data:`FILL` fingerprints a bucket, and takes ``FILL * buckets``;
then a new generation with four times the buckets, and so on: a fingerprint is checked in
every generation (one ``HEXISTS`` each) and added to the newest (``HSETNX``). A bucket past
the server's limit is converted to Redis's ordinary hash table (about three times the
bytes): :func:`hash_info` reports how many.

In Redis (one crawl part's keys): ``fph`` (hash) "spec" the bucketing; splitting:
"level", "next" (the next bucket of the level to split), "count" (fingerprints held);
``fph:<level>:<bucket hex>`` (hash) the buckets. By generations: "gens" the generation
count, "count:<g>" fingerprints added to generation g; ``fph:<g>:<bucket hex>`` generation
g's buckets. Every bucket key a call touches is passed in KEYS.

Its size: the store's two layouts (splitting and generations) share their bucket arithmetic
and one Dedup class; this docstring is a tenth of the module.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigError, CorruptKey
from .dedup import Dedup, DedupFrontier, DedupPart, SetDedup
from .store import text

if TYPE_CHECKING:
    from .keys import CrawlKeys

__all__ = [
    "FILL",
    "GROWTH_BITS",
    "MAX_LEVEL",
    "NO_BUCKET",
    "SPEC_FIELD",
    "SPLIT_FILL",
    "STORES",
    "STORE_FIELD",
    "WINDOW",
    "HashDedup",
    "HashSpec",
    "Spec",
    "SplitSpec",
    "bind_hash_parts",
    "choose_store",
    "parse_spec",
]

logger = logging.getLogger(__name__)

#: the mean fingerprints a bucket holds when its generation is full (Redis keeps a hash of
#: up to 512 fields compact by default, 128 if an operator lowered it: at a mean of 96, 3.3
#: standard deviations below 128)
FILL = 96
#: each new generation has 2^GROWTH_BITS times the buckets of the one before
GROWTH_BITS = 2
#: the field of the crawl's ``meta`` hash recording its exact store ("hash" or "set")
STORE_FIELD = "dedup_store"
#: the field of the crawl's ``meta`` hash recording the compact store's bucketing: kept
#: across runs and rolls, which delete the store (and the "spec" it holds) with its buckets
SPEC_FIELD = "fph_spec"
STORES = ("hash", "set")
#: the mean fingerprints a bucket holds past which the splitting store splits one: buckets
#: then hold between SPLIT_FILL and 2 * SPLIT_FILL (96, as a full generation's) on average
SPLIT_FILL = 48
#: a splitting store's levels stop at 31 (2^31 buckets): a bucket's bits come from the
#: fingerprint's first four bytes
MAX_LEVEL = 31
#: the most splits one call makes (each names three keys): a batch that makes more due (a big
#: push of start URLs) leaves buckets fuller for the next calls, which split them in turn
WINDOW = 16
#: a bucket reference a call leaves empty (the bucket at that level was not named)
NO_BUCKET = 0xFFFF


@dataclass(frozen=True)
class HashSpec:
    """The bucketing of a crawl's compact store: 2^``bits`` buckets in its first generation."""

    bits: int
    fill: int = FILL
    growth_bits: int = GROWTH_BITS

    @classmethod
    def for_capacity(cls, capacity: int) -> HashSpec:
        if capacity < 1:
            raise ConfigError(f"CRAWLPLUG_DEDUP_CAPACITY must be a positive number of URLs, got {capacity}")
        return cls(min(24, max(0, math.ceil(math.log2(capacity / FILL)))))

    @classmethod
    def parse(cls, identity: str) -> HashSpec:
        bits, fill, growth = (int(x) for x in identity.split(":"))
        return cls(bits, fill, growth)

    def identity(self) -> str:
        return f"{self.bits}:{self.fill}:{self.growth_bits}"

    def gen_bits(self, generation: int) -> int:
        """Bucket bits of ``generation`` (from 1), at most 32 (the first four bytes)."""
        return min(32, self.bits + self.growth_bits * (generation - 1))

    def capacity(self, generation: int) -> int:
        return self.fill << self.gen_bits(generation)


@dataclass(frozen=True)
class SplitSpec:
    """The bucketing of a crawl's splitting store: it begins at ``level`` (2^level buckets)
    and splits a bucket whenever it holds more than ``fill`` fingerprints a bucket."""

    fill: int = SPLIT_FILL
    level: int = 0

    @classmethod
    def for_capacity(cls, capacity: int | None = None) -> SplitSpec:
        """Begun with one bucket, or with the buckets ``capacity`` URLs fill (fewer splits
        for a crawl known to be large; a small crawl then takes more keys than it needs)."""
        if capacity is None:
            return cls()
        if capacity < 1:
            raise ConfigError(f"CRAWLPLUG_DEDUP_CAPACITY must be a positive number of URLs, got {capacity}")
        return cls(level=min(24, max(0, math.ceil(math.log2(capacity / SPLIT_FILL)))))

    def identity(self) -> str:
        return f"split:{self.fill}:{self.level}"


Spec = HashSpec | SplitSpec


def parse_spec(identity: str) -> Spec:
    """A compact store's bucketing from what its crawl recorded: "split:<fill>:<level>" or,
    by generations, "bits:fill:growth" (ValueError otherwise)."""
    if identity.startswith("split:"):
        _, fill, level = identity.split(":")
        spec = SplitSpec(int(fill), int(level))
        if spec.fill < 1 or not 0 <= spec.level <= MAX_LEVEL:
            raise ValueError(identity)
        return spec
    return HashSpec.parse(identity)


class HashDedup(Dedup):
    """Exact: full fingerprints in compact hashes, by generations (this module's docstring).

    ``argument`` is the raw fingerprint; each call then names its buckets
    (:meth:`call_keys`): the bucket keys of its fingerprints, each once, and per
    fingerprint two bytes per generation saying which of them holds it."""

    mode = "hash"

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        #: generations (of buckets) the crawl has, learnt from the script's replies; not named
        #: "generations", which for a Bloom filter means forgetting windows (scheduler.joining)
        self.gens = 1
        #: a splitting store's level, next bucket to split and splits due, as the script last
        #: told (another node's splits since are learnt from the next reply)
        self.level = spec.level if isinstance(spec, SplitSpec) else 0
        self.next = 0
        self.due = 0

    def seen_key(self, keys: CrawlKeys) -> str:
        return keys.key("fph")

    def bucket(self, fingerprint: bytes, generation: int) -> int:
        """The bucket of ``fingerprint`` in ``generation`` of a store by generations (a
        splitting store's is :meth:`level_home`'s)."""
        bits = self._generations().gen_bits(generation)
        return int.from_bytes(fingerprint[:4], "big") >> (32 - bits) if bits else 0

    def bucket_key(self, keys: CrawlKeys, generation: int, bucket: int) -> str:
        return keys.key(f"fph:{generation}:{bucket:x}")

    def field(self, fingerprint: bytes, generation: int) -> bytes:
        """What generation ``generation`` stores: the bytes its bucket does not fix."""
        return fingerprint[self._generations().gen_bits(generation) // 8 :]

    def _generations(self) -> HashSpec:
        if isinstance(self.spec, SplitSpec):
            raise TypeError(
                "a splitting store has levels, not generations: HashDedup.level_home is its bucket and field"
            )
        return self.spec

    def param(self) -> str:
        if isinstance(self.spec, SplitSpec):
            return f"S {self.level} {self.next} {self._window()} {self.spec.identity()}"
        gens = range(1, self.gens + 1)
        return f"{self.gens} {self.spec.identity()}" + "".join(
            f";{self.spec.gen_bits(g) // 8},{self.spec.capacity(g)}" for g in gens
        )

    def argument(self, fingerprint: bytes, ttl_ms: int | None = None) -> bytes:
        if len(fingerprint) < 4:
            raise ValueError(
                f"a fingerprint of {len(fingerprint)} bytes is too short for the compact store (4 or more)"
            )
        return fingerprint

    def _window(self) -> int:
        """The buckets, from ``next`` on, whose split a call names (the splits due, within the level)."""
        if not self.due or self.level >= MAX_LEVEL:
            return 0
        return min(self.due, WINDOW, (1 << self.level) - self.next)

    def _split_keys(self, keys: CrawlKeys, arguments: Sequence[bytes]) -> tuple[list[str], list[bytes]]:
        """A call's keys for the splitting store: first the buckets of the splits it names
        (each: the bucket and its two halves), then each fingerprint's bucket at the level
        and, where it is split or may be by now, at the next: two bytes each, NO_BUCKET for none."""
        level, nxt = self.level, self.next
        window = self._window()
        low, high = f"{keys.tag}:fph:{level}:", f"{keys.tag}:fph:{level + 1}:"
        names: list[str] = []
        for b in range(nxt, nxt + window):
            names += [f"{low}{b:x}", f"{high}{2 * b:x}", f"{high}{2 * b + 1:x}"]
        index = {name: i for i, name in enumerate(names)}
        # a bucket past this may have been split by another node since the last reply: both named
        margin = nxt + window + 4
        shift = 32 - level
        none = NO_BUCKET.to_bytes(2, "big")
        out: list[bytes] = []
        for fingerprint in arguments:
            if not fingerprint:  # dont_filter
                out.append(fingerprint)
                continue
            top = int.from_bytes(fingerprint[:4], "big")
            bucket = top >> shift
            refs = []
            for wanted, name in (
                (bucket >= nxt, f"{low}{bucket:x}"),
                (bucket < margin, f"{high}{top >> (shift - 1):x}"),
            ):
                if not wanted:
                    refs.append(none)
                    continue
                at = index.get(name)
                if at is None:
                    at = index[name] = len(names)
                    if at >= NO_BUCKET:
                        raise ValueError(
                            "too many fingerprints in one call for the compact store (65,535 buckets "
                            "at most): split the batch (Frontier.admit does, by most_per_call)"
                        )
                    names.append(name)
                refs.append(at.to_bytes(2, "big"))
            out.append(refs[0] + refs[1] + fingerprint)
        return names, out

    @staticmethod
    def level_home(keys: CrawlKeys, fingerprint: bytes, level: int) -> tuple[str, bytes]:
        """A splitting store's bucket of ``fingerprint`` at ``level`` (its key) and its field there."""
        bucket = int.from_bytes(fingerprint[:4], "big") >> (32 - level) if level else 0
        return keys.key(f"fph:{level}:{bucket:x}"), fingerprint[level // 8 :]

    def call_keys(self, keys: CrawlKeys, arguments: Sequence[bytes]) -> tuple[list[str], list[bytes]]:
        if isinstance(self.spec, SplitSpec):
            return self._split_keys(keys, arguments)
        # the hot path of every admission: bucket_key and bucket, inlined (each generation's
        # key prefix and shift once per call)
        gens = [(f"{keys.tag}:fph:{g}:", 32 - self.spec.gen_bits(g)) for g in range(1, self.gens + 1)]
        index: dict[str, int] = {}
        names: list[str] = []
        out: list[bytes] = []
        for fingerprint in arguments:
            if not fingerprint:  # dont_filter
                out.append(fingerprint)
                continue
            top = int.from_bytes(fingerprint[:4], "big")
            refs = bytearray()
            for prefix, shift in gens:
                name = f"{prefix}{top >> shift:x}"
                at = index.get(name)
                if at is None:
                    at = index[name] = len(names)
                    if at > 0xFFFF:  # before to_bytes would raise OverflowError
                        raise ValueError(
                            "too many fingerprints in one call for the compact store (65,536 buckets "
                            "at most): split the batch (Frontier.admit does, by most_per_call)"
                        )
                    names.append(name)
                refs += at.to_bytes(2, "big")
            out.append(bytes(refs) + fingerprint)
        return names, out

    def most_per_call(self) -> int:
        """A call names each bucket by two bytes, and a fingerprint takes one bucket a
        generation (two buckets, splitting: at its level and the next, the splits' keys besides)."""
        if isinstance(self.spec, SplitSpec):
            return (NO_BUCKET - 3 * WINDOW) // 2
        return 0x10000 // self.gens

    def observe(self, state: str) -> None:
        if not state:
            return
        if isinstance(self.spec, SplitSpec):
            level, nxt, due = (int(x) for x in state.split())
            self.level, self.next, self.due = level, nxt, due
        else:
            self.gens = max(1, int(state))

    def observe_stored(self, raw: Sequence[bytes | str | None]) -> None:
        """Learn the store's state from its hash's "gens", "level", "next", "count" (None: not yet)."""
        gens, level, nxt, count = (text(x) if x is not None else None for x in raw)
        if not isinstance(self.spec, SplitSpec):
            self.observe(gens or "")
            return
        self.level = int(level) if level is not None else self.spec.level
        self.next = int(nxt or 0)
        int(count or 0)  # an integer, or the store is corrupt (the splits due: the script's first reply says)

    def observe_spec(self, identity: str) -> None:
        """The crawl buckets by ``identity`` (a call made with another was refused): follow it."""
        try:
            spec = parse_spec(identity)
        except ValueError:
            raise ConfigError(
                f"the compact store's spec holds {identity!r}, not split:fill:level or bits:fill:growth"
            ) from None
        logger.info(
            "crawlplug: the crawl buckets its fingerprints as %s, not as this node did (%s): following the crawl's",
            identity,
            self.spec.identity(),
        )
        self.spec = spec
        self.forget()

    def forget(self) -> None:
        self.gens, self.next, self.due = 1, 0, 0
        self.level = self.spec.level if isinstance(self.spec, SplitSpec) else 0

    def bucket_pattern(self, keys: CrawlKeys) -> str:
        return f"{self.seen_key(keys)}:*"


def choose_store(frontier: DedupFrontier, wanted: str, spec: Spec) -> None:
    """Give every part of ``frontier`` the exact store its crawl uses: the one recorded in
    the crawl's ``meta`` hash; else, for a crawl whose fingerprint set (``seen``) exists,
    the set (said in one log line: ``crawlplug migrate seen-to-hash`` moves it); else ``wanted``.
    The choice is recorded, so a crawl is never split across two stores, and kept across
    runs. The compact store's bucketing is the one its crawl recorded (a node configured
    with another capacity follows it, saying so: any bucketing is exact, only all nodes
    must agree)."""
    if wanted not in STORES:
        raise ConfigError(f"CRAWLPLUG_DEDUP_STORE must be one of {', '.join(STORES)}, got {wanted!r}")
    parts = frontier.dedup_parts()
    client, base = parts[0].client, parts[0].keys.base
    recorded = client.hget(base.meta, STORE_FIELD)
    if recorded is None:
        # TYPE, not EXISTS: the same answer, and a command name fewer for Redis 7 to keep a
        # latency histogram of (about 25 KB: docs/scaling.md)
        legacy = [p for p in parts if text(p.client.type(p.keys.seen)) != "none"]
        store = "set" if legacy else wanted
        client.hsetnx(base.meta, STORE_FIELD, store)
        recorded = client.hget(base.meta, STORE_FIELD)
        if legacy and text(recorded) == "set" and wanted == "hash":
            logger.info(
                "crawlplug: crawl %r keeps its fingerprint set (%d fingerprints in `seen`): "
                "`crawlplug --crawl %s migrate seen-to-hash` moves it into the compact store (a third of the memory)",
                base.crawl,
                sum(int(p.client.scard(p.keys.seen)) for p in legacy),
                base.crawl,
            )
    store = text(recorded)
    if store not in STORES:
        raise ConfigError(
            f"crawl {base.crawl!r} records the exact store {store!r} in {base.meta} "
            f"field {STORE_FIELD}, not one of {', '.join(STORES)}"
        )
    if store != wanted:
        logger.info(
            "crawlplug: crawl %r keeps its exact store %r (CRAWLPLUG_DEDUP_STORE=%r is for new crawls)",
            base.crawl,
            store,
            wanted,
        )
    for part in parts:
        part.dedup = SetDedup() if store == "set" else _hash_part(part, spec)


def bind_hash_parts(frontier: DedupFrontier, spec: Spec) -> None:
    """Give every part of ``frontier`` the compact store, bucketed as its crawl recorded
    (else as ``spec``, recorded now)."""
    for part in frontier.dedup_parts():
        part.dedup = _hash_part(part, spec)


def _hash_part(part: DedupPart, spec: Spec) -> HashDedup:
    """The part's compact store, bucketed as the crawl recorded: its store's "spec", else the
    crawl's ``meta`` (which outlives the store: a new run, a roll), else ``spec``, recorded in both."""
    key, meta = HashDedup(spec).seen_key(part.keys), part.keys.base.meta
    client = part.client
    recorded = client.hget(key, "spec") or client.hget(meta, SPEC_FIELD) or spec.identity()
    client.hsetnx(meta, SPEC_FIELD, recorded)
    client.hsetnx(key, "spec", recorded)
    raw = client.hmget(key, "spec", "gens", "level", "next", "count")
    stored = text(raw[0]) if raw[0] is not None else spec.identity()
    if stored != spec.identity():
        logger.info(
            "crawlplug: crawl %r buckets its fingerprints as %s, not as this node's "
            "CRAWLPLUG_DEDUP_CAPACITY would (%s): following the crawl's",
            part.keys.crawl,
            stored,
            spec.identity(),
        )
        try:
            spec = parse_spec(stored)
        except ValueError:
            raise ConfigError(
                f"crawl key {key} field spec holds {stored!r}, not split:fill:level or bits:fill:growth"
            ) from None
    strategy = HashDedup(spec)
    try:
        strategy.observe_stored(raw[1:])
    except ValueError:
        raise CorruptKey(
            f"CORRUPT crawl key {key}: gens, level, next or count is not an integer "
            f"({[text(x) if x is not None else None for x in raw[1:]]}); see docs/faults.md",
            key,
        ) from None
    return strategy
