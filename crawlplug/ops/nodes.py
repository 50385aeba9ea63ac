"""Nodes as the views show them: live, silent (a late heartbeat) or dead.

A node publishes its metrics with every heartbeat (``node:<id>``, kept an hour
after the last one); reap.lua keeps a ``graveyard`` of the nodes whose
heartbeat expired and how many of their leases it put back in the queue (per
shard in a sharded crawl: the counts add up). From these, for ``crawlplug
status``, its JSON and the dashboard alike:

* "live": heartbeat on time;
* "silent for N s": no heartbeat for more than two intervals, its leases back in
  the queue when they expire (and the work that waits for them, :func:`held`);
* "dead since T (N leases requeued)": its heartbeat expired (3 missed heartbeats:
  reap.lua freed the per-domain slots of its leases then); while its leases have not
  expired yet, when they go back to the queue; shown with its last numbers until the next run
  begins, an hour at most.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from ..crawl import views
from ..crawl.nodes import is_live
from ..frontier.keys import CrawlKeys

#: How long reap.lua keeps a dead node in the graveyard (and the views show it).
GRAVEYARD_MS = 3_600_000
#: A node whose heartbeat is this many intervals late is "silent".
LATE_BEATS = 2
#: Defaults for nodes that publish no interval (crawlplug.defaults).
DEFAULT_HEARTBEAT_MS = 2_000
DEFAULT_LEASE_MS = 30_000


def nodes(client: redis.Redis, keys: CrawlKeys, deadlines: dict[str, int], now_ms: int) -> list[dict[str, Any]]:
    """Every node registered, and every node found dead in the last hour: its published
    metrics, heartbeat age (Redis clock) and state, live ones first.

    ``state`` is "live"; "silent" once its heartbeat is late (``silent_for`` seconds,
    its leases back in the queue in ``leases_back_in`` seconds); or "dead" after its
    heartbeat expired (``dead_since_ms``, ``requeued`` of its leases went back to the
    queue, ``dead_lettered`` to the dead letters), with its last numbers.
    """
    graves = views.graveyard(client, keys)
    ids = list(deadlines) + [n for n, g in graves.items() if n not in deadlines and g["since"]]
    out = []
    for node_id, metrics in zip(ids, views.node_records(client, keys, ids)):
        info = _node(node_id, metrics, deadlines.get(node_id), graves.get(node_id), now_ms)
        if info is not None:
            out.append(info)
    order = {"live": 0, "silent": 1, "dead": 2}
    out.sort(key=lambda n: (order[n["state"]], n["id"]))
    return out


def _node(
    node_id: str, metrics: dict[str, str], deadline: int | None, grave: dict[str, int] | None, now_ms: int
) -> dict[str, Any] | None:
    last_seen = metrics.pop("last_seen", None)
    seen_ms = int(last_seen) if last_seen and last_seen.isdigit() else None
    if deadline is None:  # only in the graveyard
        assert grave is not None
        if grave["since"] < now_ms - GRAVEYARD_MS:
            return None
        if seen_ms is not None and seen_ms > grave["since"]:
            return None  # it came back after it was found dead, then left: not dead
    host, _, _ = node_id.partition(":")
    info: dict[str, Any] = {"id": node_id, "host": host}
    for name, value in metrics.items():
        info[name] = int(value) if value.lstrip("-").isdigit() else value
    # never a negative age: a heartbeat may land between the clock read and this read
    age = None if seen_ms is None else max(0.0, (now_ms - seen_ms) / 1000)
    info["heartbeat_age"] = age
    info["last_seen_ms"] = seen_ms
    if isinstance(info.get("started"), int):
        info["uptime"] = max(0.0, ((seen_ms or now_ms) - info["started"]) / 1000)
    beat_ms = info.get("heartbeat_ms") if isinstance(info.get("heartbeat_ms"), int) else DEFAULT_HEARTBEAT_MS
    lease_ms = info.get("lease_ms") if isinstance(info.get("lease_ms"), int) else DEFAULT_LEASE_MS
    if is_live(deadline, now_ms):
        info["expires_in"] = (deadline - now_ms) / 1000
        late = age is not None and age * 1000 > LATE_BEATS * beat_ms
        info["state"] = "silent" if late else "live"
        if late:
            info["silent_for"] = round(age or 0.0, 1)
            back = ((seen_ms or now_ms) + lease_ms - now_ms) / 1000
            info["leases_back_in"] = round(max(0.0, back), 1)
    else:
        # its heartbeat expired: dead, whether a reaper noticed yet (the graveyard) or not
        info["expires_in"] = 0.0
        info["state"] = "dead"
        since = grave["since"] if grave and grave["since"] else (deadline or seen_ms or now_ms)
        info["dead_since_ms"] = since
        info["requeued"] = grave["requeued"] if grave else 0
        info["dead_lettered"] = grave["dead_lettered"] if grave else 0
        back = ((seen_ms or since) + lease_ms - now_ms) / 1000
        if back > 0 and info.get("leases"):  # declared dead before its leases expire
            info["leases_back_in"] = round(back, 1)
    info["alive"] = info["state"] == "live"
    info["state_text"] = node_state_text(info, now_ms)
    return info


def node_state_text(node: dict[str, Any], now_ms: int) -> str:
    """A node's state in words: "live", "silent for 7 s: ...", "dead since 12:03:04 (...)"."""
    if node["state"] == "live":
        return "paused" if node.get("paused") else "live"
    leases = node.get("leases")
    if node["state"] == "silent":
        held = (
            f"its {leases} leases go back to the queue in {node['leases_back_in']:.0f} s"
            if leases
            else "it holds no lease"
        )
        return f"silent for {node['silent_for']:.0f} s (no heartbeat: stalled or dead); {held}"
    when = time.strftime("%H:%M:%S", time.localtime(node["dead_since_ms"] / 1000))
    if node.get("leases_back_in") is not None:
        return (
            f"dead since {when} (its {node['leases']} leases go back to the queue in "
            f"{node['leases_back_in']:.0f} s; their domains' slots are free)"
        )
    what = f"{node['requeued']} leases requeued"
    if node.get("dead_lettered"):
        what += f", {node['dead_lettered']} to the dead letters"
    return f"dead since {when} ({what})"


def held(node_list: list[dict[str, Any]], expired: int, live: int) -> dict[str, Any] | None:
    """Work that waits for a lease to expire: held by silent nodes or by dead ones whose
    leases have not expired yet, or in expired leases no live node is there to put back.
    None when nothing waits so."""
    silent = [
        n
        for n in node_list
        if n["state"] in ("silent", "dead") and n.get("leases") and n.get("leases_back_in") is not None
    ]
    if silent:
        count = sum(int(n["leases"]) for n in silent)
        back = min(n["leases_back_in"] for n in silent)
        states = {n["state"] for n in silent}
        kind = "silent" if states == {"silent"} else "dead" if states == {"dead"} else "silent or dead"
        who = f"a {kind} node" if len(silent) == 1 else f"{len(silent)} {kind} nodes"
        return {
            "requests": count,
            "back_in": back,
            "text": f"{count} requests held by {who}, back in the queue in {back:.0f} s",
        }
    if expired and not live:
        return {
            "requests": expired,
            "back_in": None,
            "text": f"{expired} requests wait in expired leases: the first node that runs puts them back in the queue",
        }
    return None


def expired_leases(client: redis.Redis, keys: CrawlKeys, now_ms: int) -> int:
    return views.expired_leases(client, keys, now_ms)
