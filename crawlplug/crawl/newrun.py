"""An operator begins a crawl's next run, with no node running (``crawlplug start
--new-run``, a scheduled run): the same step a node takes with
``CRAWLPLUG_FLUSH_ON_START`` (crawlplug.crawl.runs.join with ``want="new"``),
taken by the operator's tool in a node's stead, which then leaves at once.

The run it replaces keeps its summary (written here if its end wrote none): a
finished, stopped or limited run keeps its state and reason; a run cut short while
running (or interrupted) is recorded as ``reset`` with the operator's reason; both
with their totals. Live nodes of the old run are refused
by the epoch guard at their next call and join the new run.
"""

from __future__ import annotations

import json

import redis

from ..frontier.keys import CrawlKeys
from ..frontier.results import new_node_id
from ..frontier.store import redis_ms
from . import runs

__all__ = ["begin_new_run"]


def begin_new_run(
    client: redis.Redis, keys: CrawlKeys, *, by: str, reason: str, incremental: bool | None = None
) -> runs.Joined:
    """Begin the crawl's next run now, whatever the state of the last one.

    ``incremental`` (keep the fingerprints) defaults to what the last run recorded (the
    choice of the nodes that began it). Returns what :func:`runs.join` did ("new", or
    "join"/"resume" for a crawl from before runs existed that holds work: it is adopted
    as the running run).
    """
    current = runs.view(client, keys)
    if current.id is not None and current.state != "starting" and not client.hexists(keys.runs, str(current.id)):
        # join.lua would call it "reset by CRAWLPLUG_FLUSH_ON_START": say who ended it and why
        ended = current.state in ("finished", "limit", "stopped")
        parts = runs.part_keys(client, keys)
        summary = {
            "id": current.id,
            "state": current.state if ended else "reset",
            "reason": current.reason if ended and current.reason else reason,
            "started": current.started,
            "ended": current.ended if ended and current.ended else redis_ms(client),
            "by": current.by if ended and current.by else by,
            **runs.totals(client, parts),
        }
        client.hsetnx(keys.runs, str(current.id), json.dumps(summary, separators=(",", ":")))
    if incremental is None:
        incremental = current.incremental
    node = f"operator-{new_node_id()}"
    try:
        return runs.join(client, keys, node_id=node, ttl_ms=5000, want="new", incremental=incremental)
    finally:
        # the operator is no node: it leaves at once (a node it registered would count as live)
        pipe = client.pipeline(transaction=False)
        pipe.zrem(keys.nodes, node)
        pipe.zrem(keys.producers, node)
        pipe.unlink(keys.node(node))
        pipe.execute()
