"""A crawl's shard layout: how many parts its frontier has (``CRAWLPLUG_SHARDS``, recorded
in the crawl's ``meta`` hash by the first node), which part a domain belongs to, and the
key sets of every part. The sharded frontier (crawlplug.frontier.core), the runs and the
views all read it from here.
"""

from __future__ import annotations

import hashlib

import redis

from ..errors import ConfigError
from .keys import CrawlKeys

__all__ = ["claim_shards", "parts", "shard_of", "stored_shards"]


def shard_of(route: str, shards: int) -> int:
    """The shard of a request whose domain (or host) is ``route``: stable across
    processes and machines (BLAKE2b, not Python's salted ``hash``; CRC32 is linear
    and sends names that differ in one character to the same few shards)."""
    if shards <= 1:
        return 0
    return int.from_bytes(hashlib.blake2b(route.encode(), digest_size=8).digest(), "big") % shards


def stored_shards(client: redis.Redis, keys: CrawlKeys) -> int | None:
    """The shard count recorded for the crawl, or None if no node recorded one yet."""
    raw = client.hget(keys.meta, "shards")
    return None if raw is None else int(raw)


def claim_shards(client: redis.Redis, keys: CrawlKeys, shards: int) -> None:
    """Record the crawl's shard count, or refuse a node configured with another one.

    Changing N would move most domains to another shard, where their fingerprints
    and queued requests are not: duplicates and a split queue. It is refused.
    """
    if shards < 1:
        raise ConfigError(f"CRAWLPLUG_SHARDS must be 1 or more, got {shards}")
    stored = stored_shards(client, keys)
    if stored is None:
        if shards > 1 and _has_unsharded_state(client, keys):
            raise ConfigError(
                f"crawl {keys.crawl!r} already has requests or fingerprints in one shard; this node "
                f"is configured CRAWLPLUG_SHARDS={shards}. Finish it unsharded, or export it "
                "(`crawlplug export`), purge it and start it afresh sharded."
            )
        client.hsetnx(keys.meta, "shards", shards)
        stored = stored_shards(client, keys)
    if stored != shards:
        raise ConfigError(
            f"crawl {keys.crawl!r} is split into {stored} shards (CRAWLPLUG_SHARDS={stored}); this node "
            f"is configured CRAWLPLUG_SHARDS={shards}. A crawl keeps its shard count for its whole life: "
            f"use CRAWLPLUG_SHARDS={stored} on every node, or a new CRAWLPLUG_CRAWL_ID."
        )


def _has_unsharded_state(client: redis.Redis, keys: CrawlKeys) -> bool:
    pipe = client.pipeline(transaction=False)
    for name in ("queue", "dq", "leases", "seen", "fph"):
        pipe.exists(keys.key(name))
    pipe.exists(f"{keys.tag}:bloom")
    return any(pipe.execute())


def parts(client: redis.Redis, keys: CrawlKeys) -> list[CrawlKeys]:
    """Every key set holding part of the crawl's frontier: the crawl's own, then each shard's."""
    n = stored_shards(client, keys) or 1
    return [keys] + ([keys.shard_keys(i, n) for i in range(n)] if n > 1 else [])
