"""Export: a crawl's state written as JSON lines (the format is described in crawlplug.crawl.transfer)."""

from __future__ import annotations

import base64
import json
import math
from datetime import datetime, timezone
from typing import Any, TextIO, cast

import redis

from ...config import START_KEY
from ...frontier.fpadmin import iter_fingerprints
from ...frontier.keys import CrawlKeys
from ...frontier.layout import parts
from ...frontier.store import rank_of, redis_ms, text
from ..nodes import live_nodes
from .common import _EXPORTED, _LOCAL, BATCH, FORMAT, STRING_CHUNK, VERSION, _batches, _enc

__all__ = ["export_crawl"]

# -- export -----------------------------------------------------------------------------


class _Out:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.records = 0

    def write(self, record: dict[str, Any], *, count: bool = True) -> None:
        self.out.write(json.dumps(record, separators=(",", ":")) + "\n")
        if count:
            self.records += 1


def _crawl_key_names(client: redis.Redis, keys: CrawlKeys) -> list[str]:
    """The names (after ``<prefix>:{<crawl>}:``) of every key the crawl has."""
    cut = len(keys.tag) + 1
    return sorted({text(k)[cut:] for k in client.scan_iter(match=keys.pattern(), count=BATCH)})


def _lanes(client: redis.Redis, keys: CrawlKeys) -> list[str]:
    """The crawl's lanes (``start_urls:<lane>``, its ``lanes`` set) that hold a list."""
    names = sorted(text(x) for x in client.smembers(keys.lanes)) if client.type(keys.lanes) == b"set" else []
    return [n for n in names if START_KEY.fullmatch(n) and n != "start_urls" and client.type(keys.key(n)) == b"list"]


def _lane(name: str) -> dict[str, str]:
    return {"lane": name} if name and name != "start_urls" else {}


def _not_exported(names: list[str], lanes: set[str]) -> list[str]:
    out = set()
    for name in names:
        if name in _EXPORTED or name in _LOCAL or name in lanes or name.startswith(("bloom", "fph")):
            continue
        out.add(
            f"{name.split(':', 1)[0]}:*" if name.startswith(("node:", "reply:", "job:", "hist:", "runstats:")) else name
        )
    return sorted(out)


def _dedup_mode(client: redis.Redis, keys: CrawlKeys) -> str:
    if client.exists(keys.key("bf")):
        return "bf"
    if client.exists(keys.key("bloom")):
        fmt = client.hget(keys.key("bloom"), "format")
        return "bf" if fmt == b"native" else "bloom"
    if client.exists(keys.key("seen_ttl")):
        return "ttl"
    if client.exists(keys.seen):
        return "set"
    if client.exists(keys.key("fph")):
        return "hash"
    return "none"


def export_crawl(client: redis.Redis, keys: CrawlKeys, out: TextIO) -> dict[str, object]:
    """Write crawl ``keys``'s state to ``out`` as JSON lines; returns what was written, counted.

    Safe to run beside a live crawl (it only reads), but then it is no snapshot:
    stop the crawl's nodes first (``counts["live_nodes"]`` says how many were live).
    A sharded crawl (CRAWLPLUG_SHARDS) is written part by part: the crawl's own keys,
    then each shard's, each after a ``part`` record; the header says how many shards.
    """
    w = _Out(out)
    counts: dict[str, Any] = {
        "requests": 0,
        "leased": 0,
        "start_entries": 0,
        "dead": 0,
        "seeds": 0,
        "dconf": 0,
        "domains": 0,
        "stats": 0,
        "fingerprints": 0,
        "bloom_keys": 0,
        "bloom_bytes": 0,
        "bf_chunks": 0,
        "orphans": 0,
    }
    now = redis_ms(client)
    all_parts = parts(client, keys)
    shards = len(all_parts) - 1
    names = {p.tag: _crawl_key_names(client, p) for p in all_parts}
    lanes = set(_lanes(client, keys))
    counts["not_exported"] = sorted({n for part_names in names.values() for n in _not_exported(part_names, lanes)})
    counts["live_nodes"] = live_nodes(client, keys, now)
    domain_mode = any(n in part_names for part_names in names.values() for n in ("dq", "domains", "dconf"))
    header = {
        "type": FORMAT,
        "version": VERSION,
        "crawl": keys.crawl,
        "exported_at": datetime.fromtimestamp(now / 1000, timezone.utc).isoformat(timespec="milliseconds"),
        "exported_at_ms": now,
        "queue": "domain" if domain_mode else "plain",
        "dedup": _dedup_mode(client, all_parts[-1]),
        "seq": int(client.get(keys.seq) or 0),
    }
    if shards:
        header["shards"] = shards
    w.write(header, count=False)
    for part in all_parts:
        if shards:
            w.write({"type": "part", "shard": part.shard, "seq": int(client.get(part.seq) or 0)})
        _export_part(client, part, w, counts, now, names[part.tag])
    w.write({"type": "end", "records": w.records, "counts": counts}, count=False)
    out.flush()
    return counts


def _export_part(
    client: redis.Redis, keys: CrawlKeys, w: _Out, counts: dict[str, Any], now: int, names: list[str]
) -> None:
    """Every record of one key set (a crawl's, or one shard's)."""

    def payloads(ids: list[str]) -> tuple[list[Any], list[Any]]:
        pipe = client.pipeline(transaction=False)
        pipe.hmget(keys.requests, ids)
        pipe.hmget(keys.deliveries, ids)
        found, deliveries = pipe.execute()
        return found, deliveries

    def emit(record: dict[str, Any], payload: bytes | None, deliveries: int) -> None:
        if payload is None:  # an id without a payload: pop.lua would drop it too
            counts["orphans"] += 1
            return
        record["payload"] = _enc(payload)
        if deliveries > 0:
            record["deliveries"] = deliveries
        w.write(record)
        counts["requests"] += 1

    # the plain queue
    for batch in _batches(client.zscan_iter(keys.queue, count=BATCH)):
        ids = [text(m) for m, _ in batch]
        found, deliveries = payloads(ids)
        for (rid, (_, score)), payload, d in zip(zip(ids, batch), found, deliveries):
            emit({"type": "request", "id": rid, "score": score}, payload, int(d or 0))

    # the per-domain queue: members "<domain>\t<rank><id>"
    for batch in _batches(client.zscan_iter(keys.dq, count=BATCH)):
        parsed = []
        for member, _ in batch:
            domain, tab, rest = member.partition(b"\t")
            if not tab or len(rest) <= 16 or not rest[:16].isdigit():
                counts["orphans"] += 1
                continue
            parsed.append((text(domain), rest[:16].decode(), rest[16:].decode()))
        found, deliveries = payloads([rid for _, _, rid in parsed]) if parsed else ([], [])
        for (domain, rank, rid), payload, d in zip(parsed, found, deliveries):
            emit({"type": "request", "id": rid, "domain": domain, "rank": rank}, payload, int(d or 0))

    # leases: in-flight work goes back to the queue on import
    start_leases: list[tuple[str, bytes, str]] = []
    for batch in _batches(client.hscan_iter(keys.leased, count=BATCH)):
        ids = [text(rid) for rid, _ in batch]
        found = cast("list[bytes | None]", client.hmget(keys.requests, ids))
        for rid, (_, info), payload in zip(ids, batch, found):
            parts = text(info).split("|")
            if len(parts) < 3:
                counts["orphans"] += 1
                continue
            score, d = parts[1], int(parts[2]) if parts[2].isdigit() else 1
            if score == "start" or score.startswith("start:"):  # a start entry taken by a node:
                if payload is not None:  # back to the head of the list it came from
                    start_leases.append((rid, payload, f"start_urls:{score[6:]}" if score[6:] else ""))
                continue
            domain = parts[3] if len(parts) > 3 and parts[3] not in ("", "f") else ""
            try:
                value = float(score)
            except ValueError:
                value = 0.0
            record: dict[str, Any] = {"type": "request", "id": rid}
            if domain:
                record.update(domain=domain, rank=rank_of(value))
            else:
                record["score"] = value
            record["leased"] = True
            before = counts["requests"]
            emit(record, payload, d)
            counts["leased"] += counts["requests"] - before

    # start entries: leased ones first (reap.lua puts them back at the head), then the list
    # (a lane's entries carry "lane": "start_urls:<lane>"; start_urls' none)
    for _, entry, lane in sorted(start_leases):
        w.write({"type": "start", "entry": _enc(entry), "leased": True, **_lane(lane)})
        counts["start_entries"] += 1
    lists = [(keys.start_urls, "start", "start_entries", "")]
    lists += [(keys.key(name), "start", "start_entries", name) for name in _lanes(client, keys)]
    for key, kind, counter, lane in [*lists, (keys.dead, "dead", "dead", "")]:
        start = 0
        while True:
            chunk = cast("list[bytes]", client.lrange(key, start, start + BATCH - 1))
            for raw in chunk:
                w.write({"type": kind, ("entry" if kind == "start" else "letter"): _enc(raw), **_lane(lane)})
                counts[counter] += 1
            if len(chunk) < BATCH:
                break
            start += BATCH

    # recurring seeds and their next run
    for batch in _batches(client.hscan_iter(keys.seeds, count=BATCH)):
        pipe = client.pipeline(transaction=False)
        for sid, _ in batch:
            pipe.zscore(keys.seeds_due, sid)
        for (sid, spec), due in zip(batch, pipe.execute()):
            w.write({"type": "seed", "id": _enc(sid), "spec": _enc(spec), "due": None if due is None else int(due)})
            counts["seeds"] += 1

    # small hashes, field by field
    def fields(kind: str, key: str, keep: Any = None) -> int:
        n = 0
        for batch in _batches(client.hscan_iter(key, count=BATCH)):
            pairs = [[_enc(f), _enc(v)] for f, v in batch if keep is None or keep(f)]
            if pairs:
                w.write({"type": kind, "fields": pairs})
                n += len(pairs)
        return n

    counts["dconf"] += fields("dconf", keys.dconf)
    fields("dstate", keys.dstate, lambda f: f.startswith(b"l:"))  # when each domain last sent
    for batch in _batches(client.zscan_iter(keys.domains, count=BATCH)):
        for domain, score in batch:
            w.write({"type": "domain", "domain": text(domain), "next": score if math.isfinite(score) else None})
            counts["domains"] += 1
    counts["stats"] += fields("stats", keys.stats)
    fields("crawlstats", keys.crawlstats)
    if keys.shard is None:  # the crawl's runs (crawlplug.crawl.runs): the current one and the history
        fields("run", keys.run, lambda f: f != b"epoch")
        fields("runs", keys.runs)

    # dedup state
    for batch in _batches(client.sscan_iter(keys.seen, count=BATCH)):
        w.write({"type": "seen", "hex": [fp.hex() for fp in batch]})
        counts["fingerprints"] += len(batch)
    # the compact store (crawlplug.frontier.fphash): its fingerprints whole, as "seen" records
    # with its bucketing (an import records them in the compact store again)
    spec = client.hget(keys.key("fph"), "spec")
    for batch in iter_fingerprints(client, keys, BATCH):
        w.write({"type": "seen", "hex": [fp.hex() for fp in batch], "hash_spec": text(spec)})
        counts["fingerprints"] += len(batch)
    for batch in _batches(client.zscan_iter(keys.key("seen_ttl"), count=BATCH)):
        live = [[fp.hex(), int(expiry)] for fp, expiry in batch if expiry > now]  # expired ones are forgotten
        if live:
            w.write({"type": "seen_ttl", "entries": live})
            counts["fingerprints"] += len(live)
    for name in names:
        if name == "bloom" or name.startswith("bloom:"):
            counts["bloom_bytes"] += _export_bloom_key(client, keys, name, now, w)
            counts["bloom_keys"] += 1
    if "bf" in names:
        it = 0
        while True:
            it, data = client.execute_command("BF.SCANDUMP", keys.key("bf"), it)
            if int(it) == 0:
                break
            w.write({"type": "bf", "iter": int(it), "data": base64.b64encode(data).decode("ascii")})
            counts["bf_chunks"] += 1
            counts["bloom_bytes"] += len(data)


def _export_bloom_key(client: redis.Redis, keys: CrawlKeys, name: str, now: int, w: _Out) -> int:
    """One key of the Lua Bloom filter: a hash (spec, layer counts) or a string of bits."""
    key = keys.key(name)
    kind = text(client.type(key))
    pttl = int(client.pttl(key))
    expire_at = now + pttl if pttl > 0 else None
    if kind == "hash":
        first = True
        for batch in _batches(client.hscan_iter(key, count=BATCH)):
            w.write(
                {
                    "type": "bloom",
                    "key": name,
                    "kind": "hash",
                    "fields": [[_enc(f), _enc(v)] for f, v in batch],
                    "expire_at": expire_at if first else None,
                }
            )
            first = False
        return 0
    if kind != "string":
        return 0
    size = int(client.strlen(key))
    w.write({"type": "bloom", "key": name, "kind": "string", "size": size, "expire_at": expire_at})
    for offset in range(0, size, STRING_CHUNK):
        data = cast(bytes, client.getrange(key, offset, offset + STRING_CHUNK - 1))
        if data.count(0) == len(data):
            continue  # the import allocates the string zeroed
        w.write({"type": "bloom_chunk", "key": name, "offset": offset, "data": base64.b64encode(data).decode("ascii")})
    return size
