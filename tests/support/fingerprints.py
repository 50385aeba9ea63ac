"""What a crawl's exact dedup state holds, whichever store it uses: the set (``seen``) of
crawls begun before the compact store, or the compact store (``fph``, crawlplug.frontier.fphash)."""

from __future__ import annotations

import redis

from crawlplug.frontier.fpadmin import iter_fingerprints
from crawlplug.frontier.keys import CrawlKeys


def recorded(client: redis.Redis, keys: CrawlKeys) -> set[bytes]:
    """Every raw fingerprint recorded in one part's exact dedup state (set or compact store)."""
    out = set(client.smembers(keys.seen))
    for batch in iter_fingerprints(client, keys):
        out.update(batch)
    return out


def exact_store_exists(client: redis.Redis, keys: CrawlKeys) -> bool:
    """Whether the part has an exact dedup state (the set or the compact store's hash)."""
    return bool(client.exists(keys.seen) or client.exists(keys.key("fph")))
