"""The registry of the crawls on one Redis (``<prefix>:crawls``, a hash crawl -> JSON
{"created": ms, "purged_at": ms}): which crawls exist, so that a mistyped ``--crawl`` is
named as such instead of creating a crawl, and a purge is told from data Redis lost.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import redis

from ..frontier.keys import CrawlKeys
from ..frontier.store import json_record, redis_ms, text

__all__ = [
    "entry",
    "exists",
    "known_crawls",
    "mark_purged",
    "purged_since",
    "register",
    "registered",
    "registered_crawls",
    "registry_key",
    "unknown_crawl_message",
]


def registry_key(prefix: str = "crawlplug") -> str:
    """The hash naming every crawl started on this Redis: crawl -> JSON {created (ms)}."""
    return f"{prefix}:crawls"


def entry(client: redis.Redis, keys: CrawlKeys) -> dict[str, object] | None:
    """The crawl's registry entry, or None if it has none."""
    raw = client.hget(registry_key(keys.prefix), keys.crawl)
    return json_record(raw) if raw is not None else None


def registered(record: Mapping[str, object] | None) -> bool:
    """A registry entry names a crawl unless it was purged since it was created."""
    if record is None:
        return False
    created, purged = record.get("created"), record.get("purged_at")
    return not isinstance(purged, int) or (isinstance(created, int) and created > purged)


def register(client: redis.Redis, keys: CrawlKeys) -> bool:
    """Record the crawl in the Redis's registry (True if it was not there, or purged since).
    The time of its last purge stays: a node refused by its epoch tells a purge by it."""
    record = entry(client, keys)
    if registered(record):
        return False
    fresh: dict[str, object] = {"created": redis_ms(client)}
    if record is None:
        return bool(client.hsetnx(registry_key(keys.prefix), keys.crawl, json.dumps(fresh)))
    fresh["purged_at"] = record.get("purged_at")
    client.hset(registry_key(keys.prefix), keys.crawl, json.dumps(fresh, separators=(",", ":")))
    return True


def _scan_crawls(client: redis.Redis, prefix: str) -> set[str]:
    """Crawl names found in key names (``<prefix>:{<crawl>}:...``, shards' tags mapped to their crawl)."""
    found: set[str] = set()
    head = f"{prefix}:{{"
    for raw in client.scan_iter(match=f"{prefix}:{{*}}:*", count=1000):
        key = text(raw)
        if not key.startswith(head):
            continue
        crawl = key[len(head) :].split("}", 1)[0].split("#", 1)[0]
        if crawl:
            found.add(crawl)
    return found


def registered_crawls(client: redis.Redis, prefix: str = "crawlplug") -> list[str]:
    """The crawls in the registry (one HGETALL, no scan: what a scrape every few seconds reads)."""
    return sorted(text(n) for n, raw in client.hgetall(registry_key(prefix)).items() if registered(json_record(raw)))


def known_crawls(client: redis.Redis, prefix: str = "crawlplug") -> list[str]:
    """Every crawl on this Redis: the registry, plus a scan for crawls made before it existed."""
    names = {text(n) for n, raw in client.hgetall(registry_key(prefix)).items() if registered(json_record(raw))}
    names |= _scan_crawls(client, prefix)
    return sorted(names)


def exists(client: redis.Redis, keys: CrawlKeys) -> bool:
    """Whether the crawl is registered (and not purged since) or has any key on this Redis."""
    if registered(entry(client, keys)):
        return True
    for pattern in (keys.pattern(), keys.shards_pattern()):
        for _ in client.scan_iter(match=pattern, count=1000):
            return True
    return False


def mark_purged(client: redis.Redis, keys: CrawlKeys) -> None:
    """Record that the crawl is being purged now (``crawlplug purge``): a node refused by its
    epoch afterwards tells a purge from data lost (crawlplug.crawl.runs.vanished)."""
    record = entry(client, keys) or {}
    record["purged_at"] = redis_ms(client)
    client.hset(registry_key(keys.prefix), keys.crawl, json.dumps(record, separators=(",", ":")))


def purged_since(client: redis.Redis, keys: CrawlKeys, since_ms: int) -> bool:
    """Whether the crawl was purged at ``since_ms`` or later."""
    record = entry(client, keys)
    purged = record.get("purged_at") if record else None
    return isinstance(purged, int) and purged >= since_ms


def unknown_crawl_message(client: redis.Redis, keys: CrawlKeys) -> str:
    known = known_crawls(client, keys.prefix)
    listed = ", ".join(repr(c) for c in known) if known else "none"
    return f"no crawl {keys.crawl!r} on this Redis; known crawls: {listed} (`crawlplug crawls`)"
