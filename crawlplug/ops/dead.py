"""Operator actions on a crawl's dead letters, shared by the CLI and the dashboard."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import redis
from scrapy import Request
from scrapy.utils.httpobj import urlparse_cached

from ..errors import CrawlplugError
from ..frontier.single import DeadLetter
from ..frontier.keys import CrawlKeys
from ..queues import DomainQueue, PriorityQueue
from ..frontier.sharded import open_frontier, parts

_TOMBSTONE = "__crawlplug_removed__"


def pick_dead(client: redis.Redis, keys: CrawlKeys, indexes: Sequence[int], all_: bool) -> list[tuple[int, bytes]]:
    """The dead letters at ``indexes`` (as `crawlplug dead list` numbers them), or all."""
    if all_ == bool(indexes):
        raise CrawlplugError("give dead-letter indexes (as `crawlplug dead list` shows them) or all")
    raw = [letter for _, _, letter in _dead(client, keys)]
    wanted = range(len(raw)) if all_ else indexes
    out = []
    for i in wanted:
        if not 0 <= i < len(raw):
            raise CrawlplugError(f"no dead letter at index {i} (there are {len(raw)})")
        out.append((i, raw[i]))
    return out


def remove_dead(client: redis.Redis, keys: CrawlKeys, indexes: Sequence[int]) -> int:
    """Remove exactly these entries, safe against concurrent appends (tombstone, then LREM)."""
    if not indexes:
        return 0
    where = {i: (key, local) for i, (key, local, _) in enumerate(_dead(client, keys))}
    by_key: dict[str, list[int]] = {}
    for i in indexes:
        key, local = where[i]
        by_key.setdefault(key, []).append(local)
    removed = 0
    for key, locals_ in by_key.items():  # one list per shard: one slot per transaction
        pipe = client.pipeline(transaction=True)
        for i in locals_:
            pipe.lset(key, i, _TOMBSTONE)
        pipe.lrem(key, 0, _TOMBSTONE)
        removed += int(pipe.execute()[-1])
    return removed


def _dead_key(part: CrawlKeys, run: int | None) -> str:
    """The dead letters of the current run, or those an earlier run left (``dead:<run>``)."""
    return part.dead if run is None else part.key(f"dead:{run}")


def _dead(client: redis.Redis, keys: CrawlKeys, run: int | None = None) -> list[tuple[str, int, bytes]]:
    """Every dead letter of the crawl as (its list, its index there, the letter): the
    crawl's own list, then each shard's; `crawlplug dead list` numbers them in this order.
    ``run``: those of an earlier run (crawlplug.frontier.runs keeps them under ``dead:<run>``)."""
    out = []
    for part in parts(client, keys):
        key = _dead_key(part, run)
        out += [(key, i, raw) for i, raw in enumerate(client.lrange(key, 0, -1))]
    return out


def dead_count(client: redis.Redis, keys: CrawlKeys, run: int | None = None) -> int:
    return sum(int(client.llen(_dead_key(part, run))) for part in parts(client, keys))


def requeue_dead(
    client: redis.Redis, keys: CrawlKeys, indexes: Sequence[int] = (), all_: bool = False
) -> tuple[int, list[tuple[int, str]]]:
    """Put dead letters back in the queue (delivery count reset, dedup bypassed).

    Returns (how many went back, [(index, why it stayed)]): only valid
    crawlplug requests go back; invalid start entries and undecodable
    payloads stay dead.
    """
    picked = pick_dead(client, keys, indexes, all_)
    conf = parts(client, keys)[-1]  # a sharded crawl's limits live in its shards
    domain_mode = bool(client.exists(conf.dconf))
    queue = DomainQueue(_domain_key(client, conf)) if domain_mode else None
    frontier = open_frontier(client, keys, queue=queue or PriorityQueue)
    items: list[tuple[int, tuple[bytes, float, bytes, str, str]]] = []
    kept: list[tuple[int, str]] = []
    for i, raw in picked:
        letter = DeadLetter.parse(raw)
        try:
            data = json.loads(letter.payload)
            url = data["url"]
            if not isinstance(url, str):
                raise TypeError
        except (ValueError, TypeError, KeyError, UnicodeDecodeError):
            kept.append((i, "not a crawlplug request (a start entry? push it again with `crawlplug push`)"))
            continue
        domain = ""
        try:
            request = Request(url)
            if queue is not None:
                domain = queue.domain(request)
        except ValueError:
            kept.append((i, f"invalid URL {url!r:.100}"))
            continue
        route = domain or urlparse_cached(request).hostname or url
        priority = data.get("priority", 0)
        score = -float(priority) if isinstance(priority, int) and not isinstance(priority, bool) else 0.0
        items.append((i, (b"", score, letter.payload, domain, route)))
    if items:
        frontier.admit([item for _, item in items])
        remove_dead(client, keys, [i for i, _ in items])
    return len(items), kept


def dead_rows(client: redis.Redis, keys: CrawlKeys, start: int = 0, stop: int = -1,
              run: int | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Dead letters as plain dicts: index, url, reason, at (ms), deliveries, node
    (``run``: those an earlier run left)."""
    letters = [DeadLetter.parse(raw) for _, _, raw in _dead(client, keys, run)]
    total = len(letters)
    if start < 0:
        start = max(0, total + start)
    rows = []
    for index, letter in enumerate(letters[start:None if stop == -1 else stop + 1], start=start):
        head = letter.header
        rows.append({
            "index": index,
            "url": payload_url(letter.payload),
            "reason": head.get("reason", "?"),
            "at": head.get("at"),
            "deliveries": head.get("deliveries"),
            "node": head.get("node"),
        })  # fmt: skip
    return rows


def payload_url(payload: bytes) -> str:
    try:
        data = json.loads(payload)
    except (UnicodeDecodeError, ValueError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("url"), str):
        return data["url"]
    text = payload.decode("utf-8", errors="replace").strip()
    if text.startswith(("http://", "https://")) and "\n" not in text:
        return text  # a plain start entry
    return f"<payload of {len(payload)} bytes, not a crawlplug JSON request>"


def _domain_key(client: redis.Redis, keys: CrawlKeys) -> str:
    key = client.hget(keys.dconf, "key")
    return key.decode() if key else "host"
