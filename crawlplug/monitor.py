"""A read-only snapshot of a running crawl: counts, rates, ETA, nodes.

Everything here is read from Redis in two round trips; nothing is written.
``crawlplug status`` prints it, ``--watch`` redraws it, and the dashboard
serves it. Rates come from the ``series`` hash (requests finished and
admitted per 10 s, kept an hour by the nodes' scripts), node rates from what
each node publishes with its heartbeat, failures from the crawl-wide Scrapy
stats when the crawl uses :class:`crawlplug.stats.RedisStatsCollector`.
"""

from __future__ import annotations

from typing import Any

import redis

from .keys import CrawlKeys
from . import runs
from .memory import memory as redis_memory
from .shards import open_frontier, parts
from .stats import crawl_stats

BUCKET_MS = 10_000
#: Scrapy stats counted as failures (crawl-wide), when the stats collector is in Redis.
FAILURE_STATS = ("downloader/exception_count", "spider_exceptions/count", "item_dropped_count")


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _series_values(client: redis.Redis, keys: CrawlKeys, fields: list[str]) -> list[int | None]:
    """``fields`` of the crawl's series hash, summed over its shards (None: in none of them)."""
    out: list[int | None] = [None] * len(fields)
    for part in parts(client, keys):
        for i, value in enumerate(client.hmget(part.series, fields)):
            if value is not None:
                out[i] = (out[i] or 0) + int(value)
    return out


def _series(client: redis.Redis, keys: CrawlKeys, now_ms: int, minutes: int) -> dict[str, list[int]]:
    """Per-minute acked/enqueued counts, oldest first, the current (partial) minute excluded."""
    last = now_ms // BUCKET_MS  # the current, incomplete bucket
    buckets = list(range(last - minutes * 6, last))
    fields = [f"a:{b}" for b in buckets] + [f"e:{b}" for b in buckets]
    values = [v or 0 for v in _series_values(client, keys, fields)]
    n = len(buckets)
    acked, enqueued = values[:n], values[n:]
    per_min = lambda xs: [sum(xs[i:i + 6]) for i in range(0, n, 6)]  # noqa: E731
    return {"acked": per_min(acked), "enqueued": per_min(enqueued)}


def _rates(client: redis.Redis, keys: CrawlKeys, now_ms: int, minutes: int = 5) -> tuple[float, float, int]:
    """(pages/min, net drain/min, pages in the last minute) over the last ``minutes``,
    counted from the first busy 10 s bucket: a crawl that started 40 s ago is not
    averaged over five minutes, and the current bucket counts for the time it covers."""
    current = now_ms // BUCKET_MS
    buckets = list(range(current - minutes * 6, current + 1))
    values = _series_values(client, keys, [f"a:{b}" for b in buckets] + [f"e:{b}" for b in buckets])
    n = len(buckets)
    acked = [int(v or 0) for v in values[:n]]
    admitted = [int(v or 0) for v in values[n:]]
    first = next((i for i in range(n) if acked[i] or admitted[i]), None)
    if first is None:
        return 0.0, 0.0, 0
    elapsed = max(10.0, (now_ms - buckets[first] * BUCKET_MS) / 1000)
    done = sum(acked[first:])
    pages = done * 60 / elapsed
    net = (done - sum(admitted[first:])) * 60 / elapsed
    return pages, net, sum(acked[-7:-1]) + acked[-1]


def snapshot(client: redis.Redis, keys: CrawlKeys, *, history_minutes: int = 15) -> dict[str, Any]:
    """The crawl's state now: see the module docstring."""
    frontier = open_frontier(client, keys)
    st = frontier.status()
    sec, usec = client.time()
    now_ms = sec * 1000 + usec // 1000
    series = _series(client, keys, now_ms, history_minutes)
    stats = st["stats"]
    done = stats.get("acked", 0)
    pages_per_min, net, last_min = _rates(client, keys, now_ms)
    remaining = st["queued"] + st["in_flight"] + st.get("start_urls", 0)
    eta = None
    if remaining == 0:
        eta = 0.0
    elif net > 0:
        eta = remaining / net * 60  # seconds, at the recent net drain rate
    scrapy_stats = crawl_stats(client, keys)
    failed = None
    if scrapy_stats:
        failed = sum(int(scrapy_stats.get(k, 0) or 0) for k in FAILURE_STATS)
        failed += sum(int(v) for k, v in scrapy_stats.items()
                      if k.startswith("downloader/response_status_count/") and k.rsplit("/", 1)[-1][:1] in "45")  # fmt: skip
    live = sum(1 for deadline in st["nodes"].values() if deadline > now_ms)
    run = runs.view(client, keys, live_nodes=live, work=remaining)
    return {
        "crawl": keys.crawl,
        "now_ms": now_ms,
        "run": run.as_dict(),
        "paused": frontier.paused_info(),
        "queued": st["queued"],
        "start_urls": st.get("start_urls", 0),
        "in_flight": st["in_flight"],
        "seen": st["seen"],
        "done": done,
        "failed": failed,
        "dead": st["dead"],
        "domains": st.get("domains", 0),
        "shards": st.get("shards"),
        "redis_memory": redis_memory(client),  # used, max, policy, ratio, nearly_full (None: no INFO)  # a sharded crawl: queued, in flight, dead per shard
        "pages_per_min": round(pages_per_min, 1),
        "pages_last_min": last_min,
        "net_drain_per_min": round(net, 1),
        "eta_seconds": None if eta is None else round(eta),
        "history": {"minutes": history_minutes, **series},
        "counters": dict(sorted(stats.items())),
        "scrapy_stats": scrapy_stats,
        "nodes": nodes(client, keys, st["nodes"], now_ms),
    }


def history(client: redis.Redis, keys: CrawlKeys, minutes: int = 60) -> dict[str, Any]:
    """Per-10 s points of the last ``minutes``: finished and admitted requests (counts per
    bucket), queued, in flight and dead letters (sampled by the nodes' heartbeats; None
    where no node was running)."""
    sec, usec = client.time()
    now_ms = sec * 1000 + usec // 1000
    last = now_ms // BUCKET_MS
    buckets = list(range(last - minutes * 6 + 1, last + 1))
    names = {"a": "done", "e": "admitted", "q": "queued", "f": "in_flight", "x": "dead"}
    fields = [f"{p}:{b}" for p in names for b in buckets]
    values = _series_values(client, keys, fields)
    n = len(buckets)
    out: dict[str, Any] = {"bucket_seconds": BUCKET_MS // 1000, "t": [b * BUCKET_MS for b in buckets]}
    for i, (prefix, name) in enumerate(names.items()):
        chunk = values[i * n:(i + 1) * n]
        if prefix in "ae":
            out[name] = [int(v or 0) for v in chunk]
        else:
            out[name] = [None if v is None else int(v) for v in chunk]
    return out


def nodes(client: redis.Redis, keys: CrawlKeys, deadlines: dict[str, int], now_ms: int) -> list[dict[str, Any]]:
    """Registered nodes, their published metrics and heartbeat age (Redis clock), live ones first."""
    pipe = client.pipeline(transaction=False)
    for node_id in deadlines:
        pipe.hgetall(keys.node(node_id))
    out = []
    for (node_id, deadline), raw in zip(deadlines.items(), pipe.execute()):
        metrics = {_text(k): _text(v) for k, v in raw.items()}
        last_seen = metrics.pop("last_seen", None)
        age = (now_ms - int(last_seen)) / 1000 if last_seen and last_seen.isdigit() else None
        host, _, rest = node_id.partition(":")
        info: dict[str, Any] = {
            "id": node_id,
            "host": host,
            "alive": deadline > now_ms,
            "heartbeat_age": age,
            "expires_in": (deadline - now_ms) / 1000,
        }
        for name, value in metrics.items():
            info[name] = int(value) if value.lstrip("-").isdigit() else value
        if "started" in info and isinstance(info["started"], int):
            info["uptime"] = max(0.0, (now_ms - info["started"]) / 1000)
        out.append(info)
    out.sort(key=lambda n: (not n["alive"], n["id"]))
    return out


def duration(seconds: float | None) -> str:
    """1h02m, 3m05s, 42s; "-" when unknown."""
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"
