"""One crawl's control plane as its readers, its operators and a node's own bookkeeping
see it: the switches (pause, resume), the counts and totals over every part, the dead
letters, start entries pushed, a node's record in the registry of nodes.

The data plane (admit, lease, ack, reap: crawlplug.frontier) never calls these: a node
makes them beside its frontier (a pause is read back by its heartbeat, the end of a run
is asked of finish.lua), and the CLI, the dashboard and the operator library make them
without building a frontier at all. A :class:`Crawl` is cheap: a client, the crawl's
keys and the key sets of its parts (its own, then each shard's).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict, cast

import redis
from redis.typing import EncodableT, FieldT

from ..frontier.keys import CrawlKeys
from ..frontier.layout import parts as stored_parts
from ..frontier.results import DeadLetter
from ..frontier.scripts import Scripts
from ..frontier.store import redis_ms, text
from . import runs, views

if TYPE_CHECKING:
    from ..frontier.core import Frontier

__all__ = ["Crawl", "CrawlStatus", "ShardStatus", "part_status"]


class _Counts(TypedDict):
    """What :class:`CrawlStatus` always holds."""

    #: key -> the error reading it (a key of the wrong type, written by hand)
    corrupt: dict[str, str]
    queued: int
    start_urls: int
    domains: int
    in_flight: int
    seen: int
    dead: int
    #: the crawl-wide counters (the ``stats`` hash)
    stats: dict[str, int]
    #: node id -> its heartbeat deadline (Redis-clock ms)
    nodes: dict[str, int]


class ShardStatus(TypedDict):
    """One shard's counts in a sharded crawl's :class:`CrawlStatus`."""

    queued: int
    in_flight: int
    dead: int


class CrawlStatus(_Counts, total=False):
    """The counts of a crawl (:meth:`Crawl.status`, summed over its parts) or of one part
    (:func:`part_status`); a sharded crawl's also per shard."""

    shards: list[ShardStatus]


class Crawl:
    """The control plane of crawl ``keys`` on ``client`` over ``parts`` (the crawl's own key
    set, then each shard's; by default as the crawl recorded them)."""

    def __init__(
        self,
        client: redis.Redis,
        keys: CrawlKeys,
        *,
        parts: Sequence[CrawlKeys] | None = None,
        scripts: Scripts | None = None,
    ) -> None:
        self.client = client
        self.keys = keys
        self._parts = list(parts) if parts is not None else None
        self._scripts = scripts

    @classmethod
    def of(cls, frontier: Frontier) -> Crawl:
        """The control plane of the crawl ``frontier`` (a crawlplug.frontier.CrawlFrontier) is part of, over its parts."""
        return cls(frontier.client, frontier.keys, parts=frontier.parts(), scripts=getattr(frontier, "scripts", None))

    def parts(self) -> list[CrawlKeys]:
        """The key sets holding this crawl: its own, then each shard's."""
        if self._parts is None:
            self._parts = stored_parts(self.client, self.keys)
        return list(self._parts)

    @property
    def scripts(self) -> Scripts:
        if self._scripts is None:
            self._scripts = Scripts(self.client)
        return self._scripts

    # -- the operators' switches ---------------------------------------------------
    def pause(self, by: str = "operator") -> bool:
        """Pause the crawl: every node stops taking requests (within a heartbeat) and
        finishes what it holds. False if it was already paused."""
        k = self.keys
        pipe = self.client.pipeline(transaction=True)
        pipe.hsetnx(k.control, "paused", json.dumps({"by": by, "at": redis_ms(self.client)}))
        pipe.hincrby(k.stats, "pauses", 1)
        return bool(pipe.execute()[0])

    def resume(self) -> bool:
        """Resume a paused crawl, and accept that Redis lost its data if a node found it
        so (control "lost", set by heartbeat.lua); False if neither was set."""
        return bool(self.client.hdel(self.keys.control, "paused", "lost"))

    def paused_info(self) -> dict[str, object] | None:
        """Who paused the crawl and when (None: it runs)."""
        raw = self.client.hget(self.keys.control, "paused")
        if raw is None:
            return None
        try:
            info = json.loads(raw)
            return info if isinstance(info, dict) else {"by": "?"}
        except ValueError:
            return {"by": "?"}

    # -- start entries -------------------------------------------------------------
    def push_starts(self, lines: Iterable[str | bytes], lane: str = "start_urls") -> int:
        """Append start entries (already validated) to the crawl's start_urls, or another of
        its start-entry lists (``lane``, a name crawlplug.config.start_keys accepts, recorded
        in the crawl's ``lanes`` so that readers count it); returns the list's new length."""
        lines = list(lines)
        if not lines:
            return 0
        # the lane recorded and its entries pushed together (MULTI/EXEC, one round trip: the
        # crawl's keys share one slot), so no reader sees entries in a lane it does not count
        pipe = self.client.pipeline(transaction=True)
        if lane != "start_urls":
            pipe.sadd(self.keys.lanes, lane)
        pipe.rpush(self.keys.key(lane), *lines)
        return int(pipe.execute()[-1])

    def add_lanes(self, names: Sequence[str]) -> None:
        """Record start-entry lists a node reads besides start_urls, so that readers (status,
        peek, crawls) count their entries as work."""
        if names:
            self.client.sadd(self.keys.lanes, *names)

    # -- a node's record in the registry of nodes --------------------------------------
    def publish(self, node_id: str, **metrics: EncodableT) -> None:
        """Set fields of node ``node_id``'s record at once (not waiting for its next heartbeat)."""
        # a dict[str, ...] is one, but Mapping's key type is invariant
        self.client.hset(self.keys.node(node_id), mapping=cast("Mapping[FieldT, EncodableT]", metrics))

    def leave(self, node_id: str) -> None:
        """Unregister node ``node_id`` (graceful close): its leases go back when they are
        released, expire or are reaped."""
        k = self.keys
        pipe = self.client.pipeline(transaction=False)
        pipe.zrem(k.nodes, node_id)
        pipe.zrem(k.producers, node_id)
        pipe.hset(k.node(node_id), "closed", redis_ms(self.client))
        pipe.execute()

    # -- the run ---------------------------------------------------------------------
    def finish_run(
        self, run_id: int, *, node_id: str, epoch: int | str, lanes: Sequence[str] = (), reason: str = "finished"
    ) -> tuple[str, int | None]:
        """Record run ``run_id`` as ended if the crawl is done (lua/finish.lua): ("finished",
        ended ms), ("busy", None) when work or a producer appeared, or (state, None)."""
        return runs.finish(
            self.client,
            self.keys,
            node_id=node_id,
            run_id=run_id,
            epoch=epoch,
            reason=reason,
            scripts=self.scripts,
            lanes=lanes,
        )

    def counter(self, name: str) -> int:
        """One of the run's counters in the crawl's own stats (start_taken, items, ...)."""
        value = self.client.hget(self.keys.stats, name)
        try:
            return int(value or 0)
        except ValueError:
            return 0

    def totals(self) -> dict[str, int]:
        """The run's counters summed over every part (crawlplug.crawl.runs.totals)."""
        return runs.totals(self.client, self.parts())

    # -- what readers see ------------------------------------------------------------
    def status(self) -> CrawlStatus:
        """Counts and crawl-wide counters (read-only), summed over every part; a sharded
        crawl's also per shard (``shards``)."""
        base, *shards = self.parts()
        out = part_status(self.client, base)
        if not shards:
            return out
        out["shards"] = []
        summed: tuple[Literal["queued", "domains", "in_flight", "seen", "dead"], ...] = (
            "queued",
            "domains",
            "in_flight",
            "seen",
            "dead",
        )
        for part in shards:
            st = part_status(self.client, part)
            for name in summed:
                out[name] += st[name]
            for counter, value in st["stats"].items():
                out["stats"][counter] = out["stats"].get(counter, 0) + value
            out["shards"].append({"queued": st["queued"], "in_flight": st["in_flight"], "dead": st["dead"]})
        return out

    def dead_letters(self, start: int = 0, stop: int = -1) -> list[DeadLetter]:
        """The dead letters of every part, oldest first within a part (the crawl's own, then each shard's)."""
        letters = [
            DeadLetter.parse(x) for k in self.parts() for x in cast("list[bytes]", self.client.lrange(k.dead, 0, -1))
        ]
        return letters[start : None if stop == -1 else stop + 1]

    def queued_elsewhere(self, domains: bool) -> int:
        """Requests waiting in the other kind of queue than a node's (``domains``: it uses
        the per-domain queue), over every part; a key of the wrong type counts none."""
        total = 0
        for k in self.parts():
            try:
                total += int(self.client.zcard(k.queue if domains else k.dq))
            except redis.ResponseError:  # a key of the wrong type: the scripts name it
                pass
        return total


def part_status(client: redis.Redis, k: CrawlKeys) -> CrawlStatus:
    """The counts of one part (read-only): a key of the wrong type (written by hand) is
    reported under ``corrupt``, not raised: status is what an operator runs to find out
    what is wrong."""
    pipe = client.pipeline(transaction=False)
    pipe.zcard(k.queue)
    pipe.zcard(k.dq)
    pipe.llen(k.start_urls)
    pipe.zcard(k.domains)
    pipe.zcard(k.leases)
    pipe.scard(k.seen)  # set dedup; other strategies report through their dupefilter
    pipe.llen(k.dead)
    pipe.hgetall(k.stats)
    pipe.zrange(k.nodes, 0, -1, withscores=True)
    pipe.hgetall(k.key("fph"))  # the compact store (fphash): its count, or its generations' counts
    names = [k.queue, k.dq, k.start_urls, k.domains, k.leases, k.seen, k.dead, k.stats, k.nodes, k.key("fph")]
    raw = pipe.execute(raise_on_error=False)
    corrupt = {name: str(value) for name, value in zip(names, raw) if isinstance(value, redis.ResponseError)}
    queued, dqueued, starts, domains, leased, seen, dead, stats, nodes, hashed = (
        ({} if i in (7, 9) else [] if i == 8 else 0) if isinstance(value, redis.ResponseError) else value
        for i, value in enumerate(raw)
    )
    # by generations, "count:<g>" each; splitting, one "count" (crawlplug.frontier.fphash)
    seen += sum(_int(v) for f, v in hashed.items() if text(f) == "count" or text(f).startswith("count:"))
    if k.shard is None:  # the crawl's lanes (start_urls:<lane>) are start entries too
        starts = views.start_entries(client, k) if not isinstance(raw[2], redis.ResponseError) else 0
    return {
        "corrupt": corrupt,
        "queued": queued + dqueued,
        "start_urls": starts,
        "domains": domains,
        "in_flight": leased,
        "seen": seen,
        "dead": dead,
        "stats": {text(a): _int(b) for a, b in stats.items()},
        "nodes": {text(n): int(s) for n, s in nodes},
    }


def _int(value: Any) -> int:
    try:
        return int(value)
    except ValueError:
        return 0
