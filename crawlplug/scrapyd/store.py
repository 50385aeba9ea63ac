"""The Scrapyd jobs of a crawl: which node each daemon started, for which run, and how it ended.

``crawlplug start`` and scheduled runs (crawlplug.scrapyd.launch) record each job they
hand a Scrapyd daemon (``schedule.json``) before the daemon starts it; the node the
job becomes records, from inside (crawlplug.scrapyd.node), when it opened (its node id,
host, pid and the run it joined) and when it closed (reason, pages, items); and what
the daemon says of the job (``listjobs.json``: pending, running, finished) is written
by whoever asks it (crawlplug.scrapyd.launch.refresh). Each writer sets its own fields of
the job's hash, so no write needs to read the others first.

Redis, under the crawl's hash tag: ``jobs`` (zset: job id -> when it was scheduled, ms)
and one hash ``job:<id>`` per job. They are kept across runs (each job names its run),
the newest :data:`KEEP` of them; a purge deletes them with the rest of the crawl.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import redis
from redis.typing import EncodableT, FieldT

from ..frontier.keys import CrawlKeys
from ..frontier.store import redis_ms, text

__all__ = [
    "DAEMON_STATES",
    "INT_FIELDS",
    "KEEP",
    "OPEN_STATES",
    "all_jobs",
    "by_node",
    "get",
    "node_closed",
    "node_opened",
    "record",
    "state",
    "update",
    "with_firing",
]

#: How many jobs a crawl keeps (the oldest are dropped when more are recorded).
KEEP = 1000

#: Fields holding whole numbers (read back as int).
INT_FIELDS = frozenset(
    {"scheduled", "run", "slot", "pid", "started", "ended", "pages", "items", "daemon_pid", "checked", "fence"}
)

#: What the daemon said of a job (``listjobs.json``), or what became of asking it.
DAEMON_STATES = ("pending", "running", "finished", "cancelled", "unknown", "error")


def record(
    client: redis.Redis, keys: CrawlKeys, job_id: str, fields: Mapping[str, object], *, scheduled_ms: int | None = None
) -> None:
    """Record job ``job_id`` (a new one with ``scheduled_ms``), setting ``fields`` (None values
    are left out); the oldest jobs past :data:`KEEP` are dropped."""
    values: dict[FieldT, EncodableT] = {k: str(v) for k, v in fields.items() if v is not None}
    pipe = client.pipeline(transaction=True)
    if scheduled_ms is not None:
        values["scheduled"] = str(scheduled_ms)
        pipe.zadd(keys.jobs, {job_id: scheduled_ms})
    if values:
        pipe.hset(keys.job(job_id), mapping=values)
    pipe.execute()
    if scheduled_ms is not None:
        _prune(client, keys)


def update(client: redis.Redis, keys: CrawlKeys, job_id: str, fields: Mapping[str, object]) -> bool:
    """Set ``fields`` of a recorded job; False (nothing written) if no such job is recorded."""
    if client.zscore(keys.jobs, job_id) is None:
        return False
    values: dict[FieldT, EncodableT] = {k: str(v) for k, v in fields.items() if v is not None}
    if values:
        client.hset(keys.job(job_id), mapping=values)
    return True


def _prune(client: redis.Redis, keys: CrawlKeys) -> None:
    old = [text(x) for x in client.zrange(keys.jobs, 0, -KEEP - 1)]
    if not old:
        return
    pipe = client.pipeline(transaction=True)
    pipe.zrem(keys.jobs, *old)
    pipe.unlink(*[keys.job(j) for j in old])
    pipe.execute()


def _decode(job_id: str, raw: dict[Any, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"id": job_id}
    for k, v in raw.items():
        name, value = text(k), text(v)
        if name in INT_FIELDS:
            try:
                out[name] = int(value)
                continue
            except ValueError:
                pass
        out[name] = value
    out["state"] = state(out)
    return out


def state(job: Mapping[str, object]) -> str:
    """What a job is now, from what its node and its daemon said:

    * ``scheduled``: handed to the daemon, which has not said more yet;
    * ``pending``: waiting in the daemon's queue (its ``max_proc`` slots are busy);
    * ``starting``: the daemon started the process, the spider has not opened yet;
    * ``running``: the node opened its spider and has not closed it;
    * ``ended``: the node closed (its ``reason``: finished, shutdown, ...);
    * ``exited``: the process ended without closing its spider (killed: SIGKILL, a crash);
    * ``failed``: the process ended before its spider opened (read its log on the daemon);
    * ``cancelled``: cancelled (``cancel.json``) before the daemon started it;
    * ``refused``: the daemon refused to schedule it (``error``).
    """
    daemon = job.get("daemon_state")
    if "ended" in job:
        return "ended"
    if daemon == "error":
        return "refused"
    if "started" in job:
        return "exited" if daemon == "finished" else "running"
    if daemon == "finished":
        return "failed"
    if daemon == "cancelled":
        return "cancelled"
    if daemon == "running":
        return "starting"
    if daemon == "pending":
        return "pending"
    return "scheduled"


#: States in which a job may still run (a node live, or about to be).
OPEN_STATES = frozenset({"scheduled", "pending", "starting", "running"})


def get(client: redis.Redis, keys: CrawlKeys, job_id: str) -> dict[str, object] | None:
    raw = client.hgetall(keys.job(job_id))
    return _decode(job_id, raw) if raw else None


def all_jobs(
    client: redis.Redis, keys: CrawlKeys, *, run: int | None = None, ids: Iterable[str] | None = None
) -> list[dict[str, object]]:
    """The crawl's recorded jobs, oldest first (of run ``run`` only, if given)."""
    names = [text(x) for x in client.zrange(keys.jobs, 0, -1)] if ids is None else list(ids)
    pipe = client.pipeline(transaction=False)
    for job_id in names:
        pipe.hgetall(keys.job(job_id))
    out = [_decode(j, raw) for j, raw in zip(names, pipe.execute(), strict=True) if raw]
    if run is not None:
        out = [j for j in out if j.get("run") == run]
    return out


def with_firing(client: redis.Redis, keys: CrawlKeys, firing: str) -> list[dict[str, object]]:
    """The jobs scheduled by one firing of a schedule (``<schedule>@<due ms>``)."""
    return [j for j in all_jobs(client, keys) if j.get("firing") == firing]


def by_node(client: redis.Redis, keys: CrawlKeys) -> dict[str, dict[str, object]]:
    """Node id -> the job it is (for nodes started through Scrapyd)."""
    return {str(j["node"]): j for j in all_jobs(client, keys) if j.get("node")}


def node_opened(
    client: redis.Redis, keys: CrawlKeys, job_id: str, *, node: str, host: str, pid: int, run: int | None
) -> dict[str, object]:
    """The node of job ``job_id`` opened its spider (written by the node). A job no
    ``crawlplug start`` recorded (scheduled on the daemon by hand, say) is recorded now."""
    fields: dict[str, Any] = {"node": node, "host": host, "pid": pid, "run": run, "started": redis_ms(client)}
    if client.zscore(keys.jobs, job_id) is None:
        record(client, keys, job_id, {**fields, "by": "scrapyd"}, scheduled_ms=fields["started"])
    else:
        client.hset(keys.job(job_id), mapping={k: str(v) for k, v in fields.items() if v is not None})
    return fields


def node_closed(client: redis.Redis, keys: CrawlKeys, job_id: str, *, reason: str, pages: int, items: int) -> None:
    """The node of job ``job_id`` closed its spider with ``reason`` (written by the node)."""
    update(client, keys, job_id, {"ended": redis_ms(client), "reason": reason, "pages": pages, "items": items})
