"""What operators read of a crawl's frontier keys, and the few edits they make there.

The operator library (crawlplug.ops), the CLI and the dashboard never send commands on
a crawl's frontier keys themselves: they ask here. Every function takes a client and
the crawl's keys, reads every part of a sharded crawl, and adds the parts up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import redis

from ..frontier.keys import CrawlKeys
from ..frontier.layout import parts
from ..frontier.store import parse_dq_member, text

__all__ = [
    "Head",
    "dead_count",
    "dead_entries",
    "domain_queue_key",
    "expired_leases",
    "graveyard",
    "has_override",
    "head",
    "key_count",
    "lost",
    "node_ids",
    "node_records",
    "remove_dead_at",
    "series_per_part",
    "start_entries",
    "start_entries_waiting",
    "start_lists",
]

_TOMBSTONE = "__crawlplug_removed__"


# -- dead letters ----------------------------------------------------------------------


def _dead_key(part: CrawlKeys, run: int | None) -> str:
    """The dead letters of the current run, or those an earlier run left (``dead:<run>``)."""
    return part.dead if run is None else part.key(f"dead:{run}")


def dead_entries(client: redis.Redis, keys: CrawlKeys, run: int | None = None) -> list[tuple[str, int, bytes]]:
    """Every dead letter as (its list, its index there, the letter): the crawl's own list,
    then each shard's; `crawlplug dead list` numbers them in this order. ``run``: those
    of an earlier run (crawlplug.crawl.runs keeps them under ``dead:<run>``)."""
    out = []
    for part in parts(client, keys):
        key = _dead_key(part, run)
        out += [(key, i, raw) for i, raw in enumerate(cast("list[bytes]", client.lrange(key, 0, -1)))]
    return out


def dead_count(client: redis.Redis, keys: CrawlKeys, run: int | None = None) -> int:
    return sum(int(client.llen(_dead_key(part, run))) for part in parts(client, keys))


def remove_dead_at(client: redis.Redis, where: Sequence[tuple[str, int]]) -> int:
    """Remove exactly the entries at (list, index), safe against concurrent appends
    (tombstone, then LREM), one transaction per list (one slot: a shard's)."""
    by_key: dict[str, list[int]] = {}
    for key, index in where:
        by_key.setdefault(key, []).append(index)
    removed = 0
    for key, indexes in by_key.items():
        pipe = client.pipeline(transaction=True)
        for i in indexes:
            pipe.lset(key, i, _TOMBSTONE)
        pipe.lrem(key, 0, _TOMBSTONE)
        removed += int(pipe.execute()[-1])
    return removed


def domain_queue_key(client: redis.Redis, keys: CrawlKeys) -> str | None:
    """How the crawl's nodes map hosts to domains when it runs the per-domain queue
    (DomainQueue's key, recorded at start), else None."""
    conf = parts(client, keys)[-1]  # a sharded crawl's limits live in its shards
    if not client.exists(conf.dconf):
        return None
    key = cast("bytes | None", client.hget(conf.dconf, "key"))
    return key.decode() if key else "host"


def has_override(client: redis.Redis, keys: CrawlKeys, domain: str) -> bool:
    """Whether an operator set limits for ``domain`` at runtime (`crawlplug domains set`)."""
    return bool(client.hexists(parts(client, keys)[-1].dconf, f"o:{domain}"))


# -- nodes -------------------------------------------------------------------------------


def node_ids(client: redis.Redis, keys: CrawlKeys) -> list[str]:
    """The nodes the crawl's registry holds (live, or dead and not yet forgotten), by name."""
    return sorted(text(n) for n in client.zrange(keys.nodes, 0, -1))


def node_records(client: redis.Redis, keys: CrawlKeys, ids: Sequence[str]) -> list[dict[str, str]]:
    """Each node's published record (metrics, last heartbeat), as text."""
    pipe = client.pipeline(transaction=False)
    for node_id in ids:
        pipe.hgetall(keys.node(node_id))
    return [{text(k): text(v) for k, v in raw.items()} for raw in (pipe.execute() if ids else [])]


def graveyard(client: redis.Redis, keys: CrawlKeys) -> dict[str, dict[str, int]]:
    """Nodes found dead (lua/reap.lua) -> {"since": declared dead (ms, 0 if not), "requeued",
    "dead_lettered"}, over the shards."""
    out: dict[str, dict[str, int]] = {}
    for part in parts(client, keys):
        for raw_id, raw in client.hgetall(part.graveyard).items():
            fields = text(raw).split()
            if len(fields) != 4 or not all(f.isdigit() for f in fields):
                continue
            since, _, requeued, lettered = (int(f) for f in fields)
            entry = out.setdefault(text(raw_id), {"since": 0, "requeued": 0, "dead_lettered": 0})
            entry["since"] = max(entry["since"], since)
            entry["requeued"] += requeued
            entry["dead_lettered"] += lettered
    return out


def expired_leases(client: redis.Redis, keys: CrawlKeys, now_ms: int) -> int:
    """Leases past their deadline, not yet reaped."""
    return sum(int(client.zcount(part.leases, "-inf", now_ms)) for part in parts(client, keys))


def lost(client: redis.Redis, keys: CrawlKeys) -> bool:
    """Whether a node found Redis had lost the crawl's data (control "lost")."""
    return bool(client.hexists(keys.control, "lost"))


# -- the series (per-10 s counters and samples the scripts keep) ----------------------------


def series_per_part(client: redis.Redis, keys: CrawlKeys, fields: list[str]) -> list[list[bytes | None]]:
    """``fields`` of each part's series hash, part by part."""
    return [list(cast("list[bytes | None]", client.hmget(part.series, fields))) for part in parts(client, keys)]


# -- the queue's head ----------------------------------------------------------------------


@dataclass
class Head:
    """The next requests and start entries, as `crawlplug peek` shows them."""

    requests: list[tuple[str, bytes | None]]  # (id as the crawl names it, payload or None if missing)
    queued: int
    entries: list[str]
    entries_waiting: int


def start_lists(client: redis.Redis, keys: CrawlKeys) -> list[str]:
    """The crawl's start-entry lists: start_urls, then its lanes (start_urls:<lane>, as
    pushed or read by a node: the ``lanes`` set), by name."""
    try:
        lanes = sorted(text(x) for x in client.smembers(keys.lanes))
    except redis.ResponseError:  # a key of the wrong type: its scripts name it
        lanes = []
    return [keys.start_urls, *(keys.key(name) for name in lanes)]


def start_entries(client: redis.Redis, keys: CrawlKeys) -> int:
    """Start entries waiting in every start-entry list of the crawl (a list of another type counts 0)."""
    pipe = client.pipeline(transaction=False)
    for key in start_lists(client, keys):
        pipe.llen(key)
    return sum(int(x) for x in pipe.execute(raise_on_error=False) if not isinstance(x, Exception))


def head(client: redis.Redis, keys: CrawlKeys, count: int) -> Head:
    """The first ``count`` requests of each part's queue (a sharded crawl: shard by shard),
    and the first start entries waiting, start_urls then its lanes (read-only)."""
    rows: list[tuple[str, bytes | None]] = []
    queued = 0
    for part in parts(client, keys):
        ids = [text(x) for x in client.zrange(part.queue, 0, count - 1)]
        ids += [parse_dq_member(m).id for m in cast("list[bytes]", client.zrange(part.dq, 0, count - 1))]
        payloads = cast("list[bytes | None]", client.hmget(part.requests, ids)) if ids else []
        for rid, payload in zip(ids, payloads):
            rows.append((rid if part.shard is None else f"{part.shard}.{rid}", payload))
        queued += client.zcard(part.queue) + client.zcard(part.dq)
    entries: list[str] = []
    for key in start_lists(client, keys):
        if len(entries) < count:
            entries += [text(x) for x in client.lrange(key, 0, count - 1 - len(entries))]
    return Head(rows[:count], queued, entries, start_entries(client, keys))


def start_entries_waiting(client: redis.Redis, keys: CrawlKeys, lane: str = "start_urls") -> int:
    """Entries waiting in the crawl's start_urls, or in another of its start-entry lists."""
    return int(client.llen(keys.key(lane)))


def key_count(client: redis.Redis, keys: CrawlKeys) -> int:
    """How many keys the crawl has (every part)."""
    return sum(
        1 for pattern in (keys.pattern(), keys.shards_pattern()) for _ in client.scan_iter(match=pattern, count=1000)
    )
