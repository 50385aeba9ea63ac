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

Sizing and growth, by generations: the first generation has the fewest power-of-two
buckets that hold ``capacity`` (the expected crawl size, ``CRAWLPLUG_DEDUP_CAPACITY``)
at a mean of :data:`FILL` fingerprints a bucket, and takes ``FILL * buckets``. The script
that records them (``lua/dedup.lua``) then starts a new generation with four times the
buckets, and so on: a fingerprint is checked in every generation (one ``HEXISTS`` each)
and added to the newest (``HSETNX``). At a mean of 96 a bucket (Poisson), about one bucket
in 1,300 passes 128 fields (none comes near 512); a bucket past the server's limit is
converted to Redis's ordinary hash table (about three times the bytes): :func:`hash_info`
reports how many. A crawl sized right has one generation, one command a URL, as the set
had.

In Redis (one crawl part's keys): ``fph`` (hash) "spec" the bucketing, "gens" the
generation count, "count:<g>" fingerprints added to generation g; ``fph:<g>:<bucket
hex>`` (hash) generation g's buckets. Every bucket key a call touches is passed in KEYS.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, CorruptKey
from .dedup import Dedup, SetDedup
from .store import text

if TYPE_CHECKING:
    from .keys import CrawlKeys

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


class HashDedup(Dedup):
    """Exact: full fingerprints in compact hashes, by generations (this module's docstring).

    ``argument`` is the raw fingerprint; each call then names its buckets
    (:meth:`call_keys`): the bucket keys of its fingerprints, each once, and per
    fingerprint two bytes per generation saying which of them holds it."""

    mode = "hash"

    def __init__(self, spec: HashSpec) -> None:
        self.spec = spec
        #: generations (of buckets) the crawl has, learnt from the script's replies; not named
        #: "generations", which for a Bloom filter means forgetting windows (scheduler.joining)
        self.gens = 1

    def seen_key(self, keys: CrawlKeys) -> str:
        return keys.key("fph")

    def bucket(self, fingerprint: bytes, generation: int) -> int:
        bits = self.spec.gen_bits(generation)
        return int.from_bytes(fingerprint[:4], "big") >> (32 - bits) if bits else 0

    def bucket_key(self, keys: CrawlKeys, generation: int, bucket: int) -> str:
        return keys.key(f"fph:{generation}:{bucket:x}")

    def field(self, fingerprint: bytes, generation: int) -> bytes:
        """What generation ``generation`` stores: the bytes its bucket does not fix."""
        return fingerprint[self.spec.gen_bits(generation) // 8:]

    def param(self) -> str:
        gens = range(1, self.gens + 1)
        return f"{self.gens} {self.spec.identity()}" + "".join(f";{self.spec.gen_bits(g) // 8},{self.spec.capacity(g)}" for g in gens)

    def argument(self, fingerprint: bytes, ttl_ms: int | None = None) -> bytes:
        if len(fingerprint) < 4:
            raise ValueError(f"a fingerprint of {len(fingerprint)} bytes is too short for the compact store (4 or more)")
        return fingerprint

    def call_keys(self, keys: CrawlKeys, arguments: Sequence[bytes]) -> tuple[list[str], list[bytes]]:
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
                        raise ValueError("too many fingerprints in one call for the compact store (65,536 buckets "
                                         "at most): split the batch (Frontier.admit does, by most_per_call)")  # fmt: skip
                    names.append(name)
                refs += at.to_bytes(2, "big")
            out.append(bytes(refs) + fingerprint)
        return names, out

    def most_per_call(self) -> int:
        """A call names each bucket by two bytes, and a fingerprint takes one bucket a generation."""
        return 0x10000 // self.gens

    def observe(self, state: str) -> None:
        if state:
            self.gens = max(1, int(state))

    def observe_spec(self, identity: str) -> None:
        """The crawl buckets by ``identity`` (a call made with another was refused): follow it."""
        try:
            spec = HashSpec.parse(identity)
        except ValueError:
            raise ConfigError(f"the compact store's spec holds {identity!r}, not bits:fill:growth") from None
        logger.info("crawlplug: the crawl buckets its fingerprints as %s (bits:fill:growth), not as this node did "
                    "(%s): following the crawl's", identity, self.spec.identity())  # fmt: skip
        self.spec, self.gens = spec, 1

    def forget(self) -> None:
        self.gens = 1

    def bucket_pattern(self, keys: CrawlKeys) -> str:
        return f"{self.seen_key(keys)}:*"


def _bucket_names(client: Any, keys: CrawlKeys) -> list[str]:
    return [text(x) for x in client.scan_iter(match=f"{keys.key('fph')}:*", count=1000)]


def choose_store(frontier: Any, wanted: str, spec: HashSpec) -> None:
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
        legacy = [p for p in parts if p.client.exists(p.keys.seen)]
        store = "set" if legacy else wanted
        client.hsetnx(base.meta, STORE_FIELD, store)
        recorded = client.hget(base.meta, STORE_FIELD)
        if legacy and text(recorded) == "set" and wanted == "hash":
            logger.info("crawlplug: crawl %r keeps its fingerprint set (%d fingerprints in `seen`): "
                        "`crawlplug --crawl %s migrate seen-to-hash` moves it into the compact store (a third of the memory)",
                        base.crawl, sum(int(p.client.scard(p.keys.seen)) for p in legacy), base.crawl)  # fmt: skip
    store = text(recorded)
    if store not in STORES:
        raise ConfigError(f"crawl {base.crawl!r} records the exact store {store!r} in {base.meta} "
                          f"field {STORE_FIELD}, not one of {', '.join(STORES)}")  # fmt: skip
    if store != wanted:
        logger.info("crawlplug: crawl %r keeps its exact store %r (CRAWLPLUG_DEDUP_STORE=%r is for new crawls)",
                    base.crawl, store, wanted)  # fmt: skip
    for part in parts:
        part.dedup = SetDedup() if store == "set" else _hash_part(part, spec)


def bind_hash_parts(frontier: Any, spec: HashSpec) -> None:
    """Give every part of ``frontier`` the compact store, bucketed as its crawl recorded
    (else as ``spec``, recorded now)."""
    for part in frontier.dedup_parts():
        part.dedup = _hash_part(part, spec)


def _hash_part(part: Any, spec: HashSpec) -> HashDedup:
    """The part's compact store, bucketed as the crawl recorded: its store's "spec", else the
    crawl's ``meta`` (which outlives the store: a new run, a roll), else ``spec``, recorded in both."""
    strategy = HashDedup(spec)
    key, meta = strategy.seen_key(part.keys), part.keys.base.meta
    client = part.client
    recorded = client.hget(key, "spec") or client.hget(meta, SPEC_FIELD) or spec.identity()
    client.hsetnx(meta, SPEC_FIELD, recorded)
    client.hsetnx(key, "spec", recorded)
    raw = client.hmget(key, "spec", "gens")
    stored = text(raw[0]) if raw[0] is not None else spec.identity()
    if stored != spec.identity():
        logger.info("crawlplug: crawl %r buckets its fingerprints as %s (bits:fill:growth), not as this node's "
                    "CRAWLPLUG_DEDUP_CAPACITY would (%s): following the crawl's", part.keys.crawl, stored,
                    spec.identity())  # fmt: skip
        try:
            strategy = HashDedup(HashSpec.parse(stored))
        except ValueError:
            raise ConfigError(f"crawl key {key} field spec holds {stored!r}, not bits:fill:growth") from None
    strategy.observe(text(raw[1]) if raw[1] is not None else "")
    return strategy


def hash_info(frontier: Any, *, memory: bool = True) -> dict[str, Any]:
    """The bucket distribution of a crawl's compact store, over every part: buckets, mean
    fill, how many are past the compact limit (and the bytes those take, MEMORY USAGE),
    fingerprints by generation. SCAN and one HLEN a bucket: O(buckets), not for the hot path."""
    buckets = fingerprints = over = over_bytes = total_bytes = 0
    limit = 128
    largest = 0
    by_gen: dict[int, int] = {}
    for part in frontier.dedup_parts():
        client, keys = part.client, part.keys
        meta = {text(k): text(v) for k, v in client.hgetall(keys.key("fph")).items()}
        for name, value in meta.items():
            if name.startswith("count:"):
                by_gen[int(name[6:])] = by_gen.get(int(name[6:]), 0) + int(value)
        limit = _entries_limit(client)
        names = _bucket_names(client, keys)
        for start in range(0, len(names), 1000):
            chunk = names[start:start + 1000]
            pipe = client.pipeline(transaction=False)
            for name in chunk:
                pipe.hlen(name)
                if memory:
                    pipe.memory_usage(name, samples=0)
            raw = pipe.execute()
            step = 2 if memory else 1
            for i in range(len(chunk)):
                n = int(raw[i * step])
                size = int(raw[i * step + 1] or 0) if memory else 0
                buckets += 1
                fingerprints += n
                largest = max(largest, n)
                total_bytes += size
                if n > limit:
                    over += 1
                    over_bytes += size
    return {
        "store": "hash", "buckets": buckets, "fingerprints": fingerprints,
        "mean_fill": fingerprints / buckets if buckets else 0.0, "largest": largest,
        "compact_limit": limit, "over_limit": over, "over_limit_bytes": over_bytes,
        "memory_bytes": total_bytes, "generations": dict(sorted(by_gen.items())),
    }  # fmt: skip


def _entries_limit(client: Any) -> int:
    """The server's compact-hash entry limit (128 unless configured), if CONFIG is allowed."""
    for name in ("hash-max-listpack-entries", "hash-max-ziplist-entries"):
        try:
            got = client.config_get(name)
        except Exception:  # noqa: BLE001 - CONFIG refused by an ACL, or a cluster: the default
            return 128
        if got:
            value = next(iter(got.values()))
            return int(value)
    return 128


def iter_fingerprints(client: Any, keys: CrawlKeys, batch: int = 1000) -> Any:
    """Every fingerprint of one part's compact store, whole again (the stripped bytes are
    the bucket's leading bits), ``batch`` at a time: what export writes."""
    raw_spec = client.hget(keys.key("fph"), "spec")
    if raw_spec is None:
        return
    spec = HashSpec.parse(text(raw_spec))
    out: list[bytes] = []
    for name in _bucket_names(client, keys):
        generation, bucket = name.rsplit(":", 2)[-2:]
        bits = spec.gen_bits(int(generation))
        strip = bits // 8
        prefix = (int(bucket, 16) >> (bits - 8 * strip)).to_bytes(strip, "big") if strip else b""
        for field in client.hkeys(name):
            out.append(prefix + field)
            if len(out) >= batch:
                yield out
                out = []
    if out:
        yield out


def forget_hashed(client: Any, keys: CrawlKeys, fingerprints: Sequence[bytes]) -> str:
    """Remove ``fingerprints`` from one part's compact store, from every generation, in one
    transaction (MULTI/EXEC: every key under the part's hash tag); a flag per fingerprint,
    "1" removed, "0" not recorded. The generations' counts go down by what was removed. A
    bucket key of another type is refused, naming it, before anything is removed."""
    raw = client.hmget(keys.key("fph"), "spec", "gens")
    if raw[0] is None or not fingerprints:
        return "0" * len(fingerprints)
    strategy = HashDedup(HashSpec.parse(text(raw[0])))
    strategy.observe(text(raw[1]) if raw[1] is not None else "")
    gens = range(1, strategy.gens + 1)
    targets = [[(strategy.bucket_key(keys, g, strategy.bucket(fp, g)), strategy.field(fp, g)) for g in gens]
               for fp in fingerprints]  # fmt: skip
    pipe = client.pipeline(transaction=False)
    names = sorted({name for per_fp in targets for name, _ in per_fp})
    for name in names:
        pipe.type(name)
    for name, kind in zip(names, pipe.execute()):
        if text(kind) not in ("hash", "none"):
            raise CorruptKey(f"CORRUPT crawl key {name} holds a {text(kind)}, not a hash: nothing was done "
                             "(repair or delete the key; see docs/faults.md)", name)  # fmt: skip
    pipe = client.pipeline(transaction=True)
    for per_fp in targets:
        for name, field in per_fp:
            pipe.hdel(name, field)
    removed = pipe.execute()
    flags = []
    by_gen: dict[int, int] = {}
    for n, _ in enumerate(fingerprints):
        hits = removed[n * len(gens):(n + 1) * len(gens)]
        flags.append("1" if any(hits) else "0")
        for g, hit in zip(gens, hits):
            if hit:
                by_gen[g] = by_gen.get(g, 0) + 1
    if by_gen:
        pipe = client.pipeline(transaction=True)
        for g, count in by_gen.items():
            pipe.hincrby(keys.key("fph"), f"count:{g}", -count)
        pipe.execute()
    return "".join(flags)


def migrate_set(frontier: Any, *, batch: int = 1000) -> dict[str, int]:
    """Move a crawl's fingerprint set (``seen``, in every part) into the compact store and
    record that the crawl uses it (``meta`` field dedup_store). ``frontier``'s parts must
    have :class:`HashDedup` strategies. Copies through the admission's own check-and-record
    (``lua/seen.lua``), then records the store, then deletes the set: stopped part-way, the
    crawl still uses its set, whole, and running it again finishes. Run it with the crawl's
    nodes stopped (a node still bound to the set would go on writing there). Returns the
    fingerprints copied and already in the store."""
    parts = frontier.dedup_parts()
    if not all(isinstance(p.dedup, HashDedup) for p in parts):
        raise ConfigError("migrate_set needs a frontier whose parts use the compact store (HashDedup)")
    copied = already = 0
    for part in parts:
        for chunk in _chunks(part.client.sscan_iter(part.keys.seen, count=batch), batch):
            flags = part.record_seen([(fp, "") for fp in chunk])
            copied += flags.count("1")
            already += flags.count("0")
    base = parts[0].keys.base
    parts[0].client.hset(base.meta, STORE_FIELD, "hash")
    for part in parts:
        part.client.delete(part.keys.seen)
    return {"copied": copied, "already": already}


def _chunks(values: Any, size: int) -> Any:
    chunk: list[bytes] = []
    for value in values:
        chunk.append(value)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def store_info(frontier: Any) -> dict[str, Any]:
    """What the crawl's exact fingerprint store holds (``crawlplug dedup-info``): the compact
    store's buckets (:func:`hash_info`), or the set's size, whichever store the crawl has."""
    parts = frontier.dedup_parts()
    client, base = parts[0].client, parts[0].keys.base
    if client.hget(base.meta, STORE_FIELD) == b"hash" or any(p.client.exists(p.keys.key("fph")) for p in parts):
        return hash_info(frontier)
    return {"store": "set", "fingerprints": sum(int(p.client.scard(p.keys.seen)) for p in parts)}
