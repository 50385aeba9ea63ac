"""The compact exact store's operator side (crawlplug.frontier.fphash is its hot path): what
it holds (``crawlplug dedup-info``), its fingerprints whole again (export), forgetting some
(``crawlplug forget``), and moving a crawl's fingerprint set into it (``migrate seen-to-hash``).
Each reads the store's bucketing from the crawl, whichever way it grows (splitting or by
generations); none is on the hot path (O(buckets) reads, SCAN)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, cast

from ..errors import ConfigError, CorruptKey
from .fphash import MAX_LEVEL, STORE_FIELD, HashDedup, SplitSpec, parse_spec
from .store import text

if TYPE_CHECKING:
    import redis

    from .dedup import DedupFrontier
    from .keys import CrawlKeys

__all__ = ["forget_hashed", "hash_info", "iter_fingerprints", "migrate_set", "store_info"]

logger = logging.getLogger(__name__)


def _bucket_names(client: redis.Redis, keys: CrawlKeys) -> list[str]:
    return [text(x) for x in client.scan_iter(match=f"{keys.key('fph')}:*", count=1000)]


def hash_info(frontier: DedupFrontier, *, memory: bool = True) -> dict[str, object]:
    """The bucket distribution of a crawl's compact store, over every part: buckets, mean
    fill, how many are past the compact limit (and the bytes those take, MEMORY USAGE),
    fingerprints by generation, or, splitting, each part's level and next bucket and the
    fingerprints it counts. SCAN and one HLEN a bucket: O(buckets), not for the hot path."""
    buckets = fingerprints = over = over_bytes = total_bytes = 0
    limit = 128
    largest = splitting = 0
    by_gen: dict[int, int] = {}
    levels: list[tuple[int, int]] = []  # each splitting part's (level, next)
    for part in frontier.dedup_parts():
        client, keys = part.client, part.keys
        meta = {text(k): text(v) for k, v in client.hgetall(keys.key("fph")).items()}
        for name, value in meta.items():
            if name.startswith("count:"):
                by_gen[int(name[6:])] = by_gen.get(int(name[6:]), 0) + int(value)
        if meta.get("spec", "").startswith("split:"):
            levels.append((int(meta.get("level", 0)), int(meta.get("next", 0))))
            splitting += int(meta.get("count", 0))
        limit = _entries_limit(client)
        names = _bucket_names(client, keys)
        for start in range(0, len(names), 1000):
            chunk = names[start : start + 1000]
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
        "store": "hash",
        "buckets": buckets,
        "fingerprints": fingerprints,
        "mean_fill": fingerprints / buckets if buckets else 0.0,
        "largest": largest,
        "compact_limit": limit,
        "over_limit": over,
        "over_limit_bytes": over_bytes,
        "memory_bytes": total_bytes,
        "generations": dict(sorted(by_gen.items())),
        "splitting": bool(levels),
        "levels": [{"level": a, "next": b} for a, b in levels],
        "counted": splitting,
    }


def _entries_limit(client: redis.Redis) -> int:
    """The server's compact-hash entry limit (128 unless configured), if CONFIG is allowed."""
    for name in ("hash-max-listpack-entries", "hash-max-ziplist-entries"):
        try:
            got = client.config_get(name)
        except Exception:  # noqa: BLE001 - CONFIG refused by an ACL, or a cluster: the default
            return 128
        if got:
            value = next(iter(got.values()))
            return int(cast(str, value))
    return 128


def iter_fingerprints(client: redis.Redis, keys: CrawlKeys, batch: int = 1000) -> Iterator[list[bytes]]:
    """Every fingerprint of one part's compact store, whole again (the stripped bytes are
    the bucket's leading bits), ``batch`` at a time: what export writes."""
    raw_spec = client.hget(keys.key("fph"), "spec")
    if raw_spec is None:
        return
    spec = parse_spec(text(raw_spec))
    out: list[bytes] = []
    for name in _bucket_names(client, keys):
        layer, bucket = name.rsplit(":", 2)[-2:]  # a splitting store's level, else a generation
        bits = int(layer) if isinstance(spec, SplitSpec) else spec.gen_bits(int(layer))
        strip = bits // 8
        prefix = (int(bucket, 16) >> (bits - 8 * strip)).to_bytes(strip, "big") if strip else b""
        for field in cast("list[bytes]", client.hkeys(name)):
            out.append(prefix + field)
            if len(out) >= batch:
                yield out
                out = []
    if out:
        yield out


def forget_hashed(client: redis.Redis, keys: CrawlKeys, fingerprints: Sequence[bytes]) -> str:
    """Remove ``fingerprints`` from one part's compact store, from every generation (every
    level a split may have moved it to), in one
    transaction (MULTI/EXEC: every key under the part's hash tag); a flag per fingerprint,
    "1" removed, "0" not recorded. The generations' counts go down by what was removed. A
    bucket key of another type is refused, naming it, before anything is removed."""
    raw = client.hmget(keys.key("fph"), "spec", "gens", "level")
    if raw[0] is None or not fingerprints:
        return "0" * len(fingerprints)
    spec = parse_spec(text(raw[0]))
    if isinstance(spec, SplitSpec):
        # its bucket at the level read and the two after: a node's splits between this read and
        # the transaction move a fingerprint one level down, never further in that time
        level = int(raw[2]) if raw[2] is not None else spec.level
        gens = range(level, min(level + 3, MAX_LEVEL + 2))
        targets = [[HashDedup.level_home(keys, fp, g) for g in gens] for fp in fingerprints]
    else:
        strategy = HashDedup(spec)
        strategy.observe(text(raw[1]) if raw[1] is not None else "")
        gens = range(1, strategy.gens + 1)
        targets = [
            [(strategy.bucket_key(keys, g, strategy.bucket(fp, g)), strategy.field(fp, g)) for g in gens]
            for fp in fingerprints
        ]
    pipe = client.pipeline(transaction=False)
    names = sorted({name for per_fp in targets for name, _ in per_fp})
    for name in names:
        pipe.type(name)
    for name, kind in zip(names, pipe.execute()):
        if text(kind) not in ("hash", "none"):
            raise CorruptKey(
                f"CORRUPT crawl key {name} holds a {text(kind)}, not a hash: nothing was done "
                "(repair or delete the key; see docs/faults.md)",
                name,
            )
    pipe = client.pipeline(transaction=True)
    for per_fp in targets:
        for name, field in per_fp:
            pipe.hdel(name, field)
    removed = pipe.execute()
    flags = []
    by_gen: dict[int, int] = {}
    for n, _ in enumerate(fingerprints):
        hits = removed[n * len(gens) : (n + 1) * len(gens)]
        flags.append("1" if any(hits) else "0")
        for g, hit in zip(gens, hits):
            if hit:
                by_gen[g] = by_gen.get(g, 0) + 1
    if by_gen:
        pipe = client.pipeline(transaction=True)
        if isinstance(spec, SplitSpec):
            pipe.hincrby(keys.key("fph"), "count", -sum(by_gen.values()))
        else:
            for g, count in by_gen.items():
                pipe.hincrby(keys.key("fph"), f"count:{g}", -count)
        pipe.execute()
    return "".join(flags)


def migrate_set(frontier: DedupFrontier, *, batch: int = 1000) -> dict[str, int]:
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


def _chunks(values: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for value in values:
        chunk.append(value)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def store_info(frontier: DedupFrontier) -> dict[str, object]:
    """What the crawl's exact fingerprint store holds (``crawlplug dedup-info``): the compact
    store's buckets (:func:`hash_info`), or the set's size, whichever store the crawl has."""
    parts = frontier.dedup_parts()
    client, base = parts[0].client, parts[0].keys.base
    if client.hget(base.meta, STORE_FIELD) == b"hash" or any(p.client.exists(p.keys.key("fph")) for p in parts):
        return hash_info(frontier)
    return {"store": "set", "fingerprints": sum(int(p.client.scard(p.keys.seen)) for p in parts)}
