"""The Redis server's memory limit and eviction policy, as a crawl sees them.

A crawl's keys are its state: an eviction policy that may delete them
(``allkeys-*``) silently loses queued requests and fingerprints, and a full
Redis under ``noeviction`` refuses writes (the nodes keep their work and wait,
see the scheduler). The scheduler warns at start; ``crawlplug status`` and the
dashboard show the condition.
"""

from __future__ import annotations

from typing import Any

import redis

from ..errors import REDIS_ERRORS

#: how full (used / maxmemory) counts as "nearly out of memory"
NEARLY_FULL = 0.9


def memory(client: redis.Redis) -> dict[str, Any] | None:
    """used, maxmemory (0: no limit), policy and fill ratio of the fullest server
    (a cluster's primaries each have their own limit); None if INFO is not allowed."""
    try:
        raw = client.info("memory")
    except REDIS_ERRORS:
        return None
    infos = list(raw.values()) if raw and all(isinstance(v, dict) for v in raw.values()) else [raw]
    worst: dict[str, Any] | None = None
    for info in infos:
        used, limit = int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
        row = {
            "used": used,
            "max": limit,
            "policy": str(info.get("maxmemory_policy", "")),
            "ratio": round(used / limit, 3) if limit else 0.0,
        }
        if worst is None or row["ratio"] > worst["ratio"]:
            worst = row
    if worst is not None:
        worst["nearly_full"] = bool(worst["max"]) and worst["ratio"] >= NEARLY_FULL
    return worst


def eviction_risk(policy: str) -> str | None:
    """Why ``policy`` endangers a crawl, or None if it does not."""
    if policy.startswith("allkeys-"):
        return (
            f"maxmemory-policy {policy} lets Redis delete any key when it is full, including this "
            "crawl's queue, leases and fingerprints (requests lost, pages crawled twice); "
            "use noeviction: crawlplug then waits for memory instead of losing state"
        )
    if policy.startswith("volatile-"):
        return (
            f"maxmemory-policy {policy} lets Redis delete keys that have a TTL when it is full: "
            "crawlplug's node records and expiring fingerprints (CRAWLPLUG_DEDUP_TTL, Bloom "
            "generations) have one, so pages may be crawled again early; noeviction is safer"
        )
    return None
