"""Operator actions on a crawl's dead letters, shared by the CLI and the dashboard."""

from __future__ import annotations

import json
from typing import Any, Sequence

import redis
from scrapy import Request

from .errors import CrawlplugError
from .frontier import DeadLetter, Frontier
from .keys import CrawlKeys
from .queues import DomainQueue, PriorityQueue

_TOMBSTONE = "__crawlplug_removed__"


def pick_dead(client: redis.Redis, keys: CrawlKeys, indexes: Sequence[int], all_: bool) -> list[tuple[int, bytes]]:
    """The dead letters at ``indexes`` (as `crawlplug dead list` numbers them), or all."""
    if all_ == bool(indexes):
        raise CrawlplugError("give dead-letter indexes (as `crawlplug dead list` shows them) or all")
    raw = client.lrange(keys.dead, 0, -1)
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
    pipe = client.pipeline(transaction=True)
    for i in indexes:
        pipe.lset(keys.dead, i, _TOMBSTONE)
    pipe.lrem(keys.dead, 0, _TOMBSTONE)
    return int(pipe.execute()[-1])


def requeue_dead(
    client: redis.Redis, keys: CrawlKeys, indexes: Sequence[int] = (), all_: bool = False
) -> tuple[int, list[tuple[int, str]]]:
    """Put dead letters back in the queue (delivery count reset, dedup bypassed).

    Returns (how many went back, [(index, why it stayed)]): only valid
    crawlplug requests go back; invalid start entries and undecodable
    payloads stay dead.
    """
    picked = pick_dead(client, keys, indexes, all_)
    domain_mode = bool(client.exists(keys.dconf))
    queue = DomainQueue(_domain_key(client, keys)) if domain_mode else None
    frontier = Frontier(client, keys, queue=queue or PriorityQueue)
    items: list[tuple[int, tuple[bytes, float, bytes, str]]] = []
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
        if queue is not None:
            try:
                domain = queue.domain(Request(url))
            except ValueError:
                kept.append((i, f"invalid URL {url!r:.100}"))
                continue
        priority = data.get("priority", 0)
        score = -float(priority) if isinstance(priority, int) and not isinstance(priority, bool) else 0.0
        items.append((i, (b"", score, letter.payload, domain)))
    if items:
        frontier.admit([item for _, item in items])
        remove_dead(client, keys, [i for i, _ in items])
    return len(items), kept


def dead_rows(client: redis.Redis, keys: CrawlKeys, start: int = 0, stop: int = -1) -> list[dict[str, Any]]:
    """Dead letters as plain dicts: index, url, reason, at (ms), deliveries, node."""
    frontier = Frontier(client, keys)
    total = int(client.llen(keys.dead))
    if start < 0:
        start = max(0, total + start)
    rows = []
    for index, letter in enumerate(frontier.dead_letters(start, stop), start=start):
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
