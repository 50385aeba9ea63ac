"""Scheduled runs in Redis: each crawl's schedules, who fires them, and each firing.

A schedule (``crawlplug schedule``) is a JSON spec in the crawl's ``schedules`` hash:
its cron expression and time zone, the Scrapyd daemons and what to start on them,
``next`` (when it is due, ms, Redis clock) and ``last`` (its last firing). The crawls
that have schedules are named in ``<prefix>:scheduled`` (a set), so a control
process finds them without scanning the Redis.

Control processes (``crawlplug control``, crawlplug.controlprocess) fire them. Several
may run: for each crawl, one of them is the **leader** (``lua/leader.lua``: a lease
in the crawl's ``leader`` key, renewed while it runs) and holds a **fencing token**,
one more than the leader before it (``fence``). Every write of a firing goes through
``lua/firing.lua``, which refuses it unless the writer still holds the lease with
that token: a leader that stalled past its lease (a long pause, a lost network) and
was replaced writes nothing when it wakes. A firing is **claimed** (the schedule's
``next`` moved on, in the same step, so no other leader fires the same time again),
then carried out (crawlplug.scrapyd.launch), then **done** (its outcome recorded, and
pushed on the crawl's ``fires`` list). A firing left claimed by a leader that died
is **adopted** by the next one (crawlplug.controlprocess decides what becomes of it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import redis

from ..crawl.leadership import Leadership
from ..frontier.keys import CrawlKeys
from ..frontier.scripts import Scripts
from ..frontier.store import json_record, multi, text

__all__ = ["ScheduleLeadership", "all_schedules", "delete", "fires", "get", "index_key", "put", "scheduled_crawls"]


def index_key(prefix: str = "crawlplug") -> str:
    """The set naming every crawl that has schedules on this Redis."""
    return f"{prefix}:scheduled"


def put(client: redis.Redis, keys: CrawlKeys, spec: Mapping[str, object]) -> bool:
    """Store schedule ``spec["name"]`` (replacing one of that name: True if it is new)."""
    pipe = multi(client)  # the crawl's key and the Redis-wide index: two slots on a cluster
    pipe.hset(keys.schedules, str(spec["name"]), json.dumps(spec, separators=(",", ":")))
    pipe.sadd(index_key(keys.prefix), keys.crawl)
    return bool(pipe.execute()[0])


def delete(client: redis.Redis, keys: CrawlKeys, name: str) -> bool:
    """Delete one schedule; False if the crawl has none of that name."""
    removed = bool(client.hdel(keys.schedules, name))
    if not client.exists(keys.schedules):
        client.srem(index_key(keys.prefix), keys.crawl)
    return removed


def get(client: redis.Redis, keys: CrawlKeys, name: str) -> dict[str, object] | None:
    raw = client.hget(keys.schedules, name)
    return json_record(raw) if raw is not None else None


def all_schedules(client: redis.Redis, keys: CrawlKeys) -> dict[str, dict[str, object]]:
    """Name -> spec; an unreadable spec is given as {"name": ..., "unreadable": raw text}."""
    out: dict[str, dict[str, Any]] = {}
    for raw_name, raw in client.hgetall(keys.schedules).items():
        name = text(raw_name)
        spec = json_record(raw)
        out[name] = spec if spec is not None else {"name": name, "unreadable": text(raw)[:200]}
    return dict(sorted(out.items()))


def plan_daemons(client: redis.Redis, prefix: str = "crawlplug") -> dict[str, set[str]]:
    """Scrapyd daemon URL -> the crawls whose schedules start nodes on it."""
    out: dict[str, set[str]] = {}
    for crawl in scheduled_crawls(client, prefix):
        for spec in all_schedules(client, CrawlKeys(crawl, prefix)).values():
            plan = spec.get("plan")
            daemons = plan.get("daemons") if isinstance(plan, dict) else None
            for url in daemons if isinstance(daemons, list) else []:
                out.setdefault(str(url), set()).add(crawl)
    return out


def scheduled_crawls(client: redis.Redis, prefix: str = "crawlplug") -> list[str]:
    """The crawls with schedules (the index); a crawl whose schedules are gone (purged) is
    dropped from it."""
    names = sorted(text(x) for x in client.smembers(index_key(prefix)))
    out = []
    for crawl in names:
        if client.exists(CrawlKeys(crawl, prefix).schedules):
            out.append(crawl)
        else:
            client.srem(index_key(prefix), crawl)
    return out


def fires(client: redis.Redis, keys: CrawlKeys, n: int = 200) -> list[dict[str, object]]:
    """The crawl's last firings, newest first."""
    return [r for r in (json_record(x) for x in client.lrange(keys.fires, 0, n - 1)) if r is not None]


class ScheduleLeadership(Leadership):
    """The leadership of a crawl's schedules (:class:`~crawlplug.crawl.leadership.Leadership`
    with ``duty="schedules"``) and the firings it writes through ``lua/firing.lua``."""

    def __init__(
        self, client: redis.Redis, keys: CrawlKeys, owner: str, lease_ms: int, scripts: Scripts | None = None
    ) -> None:
        super().__init__(client, keys, owner, lease_ms, scripts, duty="schedules")

    def _firing(self, name: str, mode: str, due: int, arg: Any = "", times: int = 1) -> tuple[str, str]:
        raw = self.scripts.firing(
            keys=[self.keys.leader, self.keys.schedules, self.keys.fires],
            args=[self.owner, self.fence, name, mode, due, arg, times],
        )
        return text(raw[0]), (text(raw[1]) if len(raw) > 1 else "")

    def claim(self, name: str, due: int, next_due: int, times: int = 1) -> tuple[str, str]:
        """Claim the firing of ``name`` due at ``due``, moving its next due time to ``next_due``."""
        return self._firing(name, "claim", due, next_due, times)

    def adopt(self, name: str, due: int) -> tuple[str, str]:
        """Take over the firing of ``name`` due at ``due`` that an earlier leader left unfinished."""
        return self._firing(name, "adopt", due)

    def done(self, name: str, due: int, outcome: Mapping[str, object]) -> tuple[str, str]:
        """Record the outcome of this leader's firing of ``name`` due at ``due``."""
        return self._firing(name, "done", due, json.dumps(outcome, separators=(",", ":")))
