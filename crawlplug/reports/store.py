"""The Scrapy stats of the nodes of ended runs, kept for reports (``crawlplug report --run R``).

A new run starts without the last one's node records (crawlplug.crawl.runs.begin).
Just before they go, the stats each node wrote in the run that ends (``node:<id>:stats``,
crawlplug.stats.RedisStatsCollector) are copied to ``runstats:<run>``: a hash, node id ->
JSON object of its stats as stored (text). The last :data:`KEEP` runs are kept; a
crawl's runs are counted, so this is bounded like the node records it copies.

Copying again (a node taking over a beginning that stalled) rewrites the same values;
once the node records are gone there is nothing to copy and what was kept stays.
"""

from __future__ import annotations

import json

import redis
from redis.typing import EncodableT, FieldT

from ..frontier.keys import CrawlKeys
from ..frontier.store import text

__all__ = ["KEEP", "keep", "kept", "read", "runstats_key"]

#: How many ended runs keep their nodes' stats.
KEEP = 20


def runstats_key(keys: CrawlKeys, run: int) -> str:
    return keys.key(f"runstats:{run}")


def keep(client: redis.Redis, keys: CrawlKeys, run: int) -> int:
    """Copy the stats of every node of the crawl to run ``run``'s record, and forget the
    records of runs more than KEEP before it; how many nodes' stats were copied."""
    nodes = [text(n) for n in client.zrange(keys.statnodes, 0, -1)]
    pipe = client.pipeline(transaction=False)
    for node in nodes:
        pipe.hgetall(keys.node_stats(node))
    copied: dict[FieldT, EncodableT] = {
        node: json.dumps({text(k): text(v) for k, v in raw.items()}, separators=(",", ":"), sort_keys=True)
        for node, raw in zip(nodes, pipe.execute() if nodes else [])
        if raw
    }
    if copied:
        client.hset(runstats_key(keys, run), mapping=copied)
    old = [r for r in kept(client, keys) if r <= run - KEEP]
    if old:
        client.unlink(*(runstats_key(keys, r) for r in old))
    return len(copied)


def kept(client: redis.Redis, keys: CrawlKeys) -> list[int]:
    """The runs whose nodes' stats are kept, oldest first."""
    head = f"{keys.tag}:runstats:"
    found = {text(k)[len(head) :] for k in client.scan_iter(match=f"{head}*", count=1000)}
    return sorted(int(r) for r in found if r.isdigit())


def read(client: redis.Redis, keys: CrawlKeys, run: int) -> dict[str, dict[str, str]] | None:
    """Each node's stats as run ``run`` ended (text, as stored), or None if none are kept."""
    raw = client.hgetall(runstats_key(keys, run))
    if not raw:
        return None
    out: dict[str, dict[str, str]] = {}
    for node, value in sorted(raw.items()):
        try:
            stats = json.loads(value)
        except ValueError:
            continue
        if isinstance(stats, dict):
            out[text(node)] = {str(k): str(v) for k, v in stats.items()}
    return out
