"""Operator actions on a crawl's dead letters, shared by the CLI and the dashboard."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from scrapy import Request
from scrapy.utils.httpobj import urlparse_cached

from ..crawl import views
from ..errors import CrawlplugError
from ..frontier.core import open_frontier
from ..frontier.keys import CrawlKeys
from ..frontier.results import DeadLetter
from ..queues import DomainQueue, PriorityQueue
from ..serializers import describe_payload


def pick_dead(client: redis.Redis, keys: CrawlKeys, indexes: Sequence[int], all_: bool) -> list[tuple[int, bytes]]:
    """The dead letters at ``indexes`` (as `crawlplug dead list` numbers them), or all."""
    if all_ == bool(indexes):
        raise CrawlplugError("give dead-letter indexes (as `crawlplug dead list` shows them) or all")
    raw = [letter for _, _, letter in views.dead_entries(client, keys)]
    wanted = range(len(raw)) if all_ else indexes
    out = []
    for i in wanted:
        if not 0 <= i < len(raw):
            raise CrawlplugError(f"no dead letter at index {i} (there are {len(raw)})")
        out.append((i, raw[i]))
    return out


def remove_dead(client: redis.Redis, keys: CrawlKeys, indexes: Sequence[int]) -> int:
    """Remove exactly these entries (as `crawlplug dead list` numbers them), safe against
    concurrent appends."""
    if not indexes:
        return 0
    where = {i: (key, local) for i, (key, local, _) in enumerate(views.dead_entries(client, keys))}
    return views.remove_dead_at(client, [where[i] for i in indexes])


def dead_count(client: redis.Redis, keys: CrawlKeys, run: int | None = None) -> int:
    return views.dead_count(client, keys, run)


def requeue_dead(
    client: redis.Redis, keys: CrawlKeys, indexes: Sequence[int] = (), all_: bool = False
) -> tuple[int, list[tuple[int, str]]]:
    """Put dead letters back in the queue (delivery count reset, dedup bypassed).

    Returns (how many went back, [(index, why it stayed)]): only valid
    crawlplug requests go back; invalid start entries and undecodable
    payloads stay dead.
    """
    picked = pick_dead(client, keys, indexes, all_)
    domain_key = views.domain_queue_key(client, keys)
    queue = DomainQueue(domain_key) if domain_key is not None else None
    frontier = open_frontier(client, keys, queue=queue or PriorityQueue)
    items: list[tuple[int, tuple[bytes, float, bytes, str, str]]] = []
    kept: list[tuple[int, str]] = []
    for i, raw in picked:
        letter = DeadLetter.parse(raw)
        data = describe_payload(letter.payload)  # any JSON format version
        if data is None:
            kept.append((i, "not a crawlplug request (a start entry? push it again with `crawlplug push`)"))
            continue
        url = data["url"]
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


def dead_rows(
    client: redis.Redis, keys: CrawlKeys, start: int = 0, stop: int = -1, run: int | None = None
) -> list[dict[str, Any]]:
    """Dead letters as plain dicts: index, url, reason, at (ms), deliveries, node
    (``run``: those an earlier run left)."""
    letters = [DeadLetter.parse(raw) for _, _, raw in views.dead_entries(client, keys, run)]
    total = len(letters)
    if start < 0:
        start = max(0, total + start)
    rows = []
    for index, letter in enumerate(letters[start : None if stop == -1 else stop + 1], start=start):
        head = letter.header
        rows.append(
            {
                "index": index,
                "url": payload_url(letter.payload),
                "reason": head.get("reason", "?"),
                "at": head.get("at"),
                "deliveries": head.get("deliveries"),
                "node": head.get("node"),
            }
        )
    return rows


def payload_url(payload: bytes) -> str:
    data = describe_payload(payload)
    if data is not None:
        return str(data["url"])
    text = payload.decode("utf-8", errors="replace").strip()
    if text.startswith(("http://", "https://")) and "\n" not in text:
        return text  # a plain start entry
    return f"<payload of {len(payload)} bytes, not a crawlplug JSON request>"
