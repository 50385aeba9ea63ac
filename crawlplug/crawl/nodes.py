"""The one live-node rule, for Python readers: a node (or a producer) is live while its
deadline in the crawl's ``nodes`` (``producers``) zset, Redis-clock ms that each heartbeat
moves on, is later than now; at or before now it is dead, and reap.lua takes it out.

The scripts hold the same rule once, in ``lua/leases.lua`` (``live_count``, ``is_live``);
every reader that counts or lists live nodes goes through these functions, so no two
places can disagree about a node whose deadline is exactly now.
"""

from __future__ import annotations

from collections.abc import Mapping

import redis

from ..frontier.keys import CrawlKeys
from ..frontier.store import redis_ms

__all__ = ["count_live", "is_live", "live_nodes", "live_of"]


def is_live(deadline: float | None, now_ms: int) -> bool:
    """Whether a node whose heartbeat deadline is ``deadline`` is live at ``now_ms``."""
    return deadline is not None and deadline > now_ms


def live_of(deadlines: Mapping[str, float], now_ms: int) -> list[str]:
    """The ids among ``deadlines`` (node id -> deadline, as status() reads them) live at ``now_ms``."""
    return [node for node, deadline in deadlines.items() if is_live(deadline, now_ms)]


def count_live(client: redis.Redis, zset: str, now_ms: int) -> int:
    """ZCOUNT of the members of ``zset`` live at ``now_ms``, on a client (an int) or
    queued on a pipeline (its reply comes with the pipeline's; redis-py types it int too)."""
    return client.zcount(zset, f"({now_ms}", "+inf")


def live_nodes(client: redis.Redis, keys: CrawlKeys, now_ms: int | None = None) -> int:
    """How many nodes of crawl ``keys`` are live now (Redis's clock unless ``now_ms``)."""
    return int(count_live(client, keys.nodes, redis_ms(client) if now_ms is None else now_ms))
