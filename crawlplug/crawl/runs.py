"""Crawl runs: a crawl is crawled in runs, and every node knows which one it is in.

A crawl (named after the spider unless ``CRAWLPLUG_CRAWL_ID`` says otherwise)
has one current run, kept in its ``run`` hash, and the history of the runs
before it in ``runs``. A run is

* ``running``: nodes crawl it; shown as **interrupted** when no node is live
  while work is queued or leased (a crash, or every node stopped);
* ``finished``: recorded by ``lua/finish.lua`` at the moment a node finds the
  whole crawl done, the same step that lets every node close with
  ``finished`` (never inferred later from an empty queue);
* ``limit`` / ``stopped``: ended by a crawl-wide limit or by an operator (``draining``
  on the way: the nodes admit nothing new and crawl what is queued); such a run stays
  ended until an operator continues it or starts a new one (crawlplug.crawl.control).

A node that starts (:func:`join`, ``lua/join.lua``, atomic) joins the running
run, resumes an interrupted one, or begins the next run after a finished one:
the next run starts without the last one's fingerprints (unless the crawl is
incremental, ``CRAWLPLUG_INCREMENTAL``), counters, Scrapy stats and queue
state; its dead letters are kept under the old run (``dead:<run>``). Items
already exported, domain limits, seeds, site definitions, the per-10 s series
and the history of runs stay.

Every part of a crawl (its own keys, and each shard's) holds an ``epoch``, a
random token: a new one is drawn when a run begins and when the crawl is reset
(``crawlplug purge``, ``CRAWLPLUG_FLUSH_ON_START``, ``crawlplug import``).
Every script a node sends carries the epoch it joined, and a script of another
epoch refuses the call whole (``lua/epoch.lua``): a live node of the old state
learns so at its next call, drops its caches and in-flight work, and joins
again (the Scheduler's ``_rejoin``).

Its size: a run's whole life (join, begin, finish, reset, read) around the ``run`` hash
it shares; each step is a few lines around one script (lua/join.lua, runstart.lua,
finish.lua), and the registry of crawls is crawlplug.crawl.registry.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

import redis

from ..errors import ConfigError, CorruptKey, RunEnded, RunOver, StaleEpoch
from ..frontier.keys import DEDUP_NAMES, DEDUP_PREFIXES, CrawlKeys
from ..frontier.layout import claim_shards, parts
from ..frontier.scripts import Scripts
from ..frontier.store import json_record, redis_ms, text
from ..reports import store as runstats
from . import registry, views
from .nodes import count_live
from .nodes import live_nodes as count_live_nodes

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "BEGIN_GRACE_MS",
    "NODE_PREFIX",
    "RUN_STATE_NAMES",
    "JoinArgs",
    "Joined",
    "Overtaken",
    "RunView",
    "begin",
    "crawl_rows",
    "ended_message",
    "finish",
    "format_ms",
    "history",
    "join",
    "lane_keys",
    "mark_lost",
    "new_epoch",
    "new_token",
    "part_keys",
    "purge",
    "record",
    "rejoin",
    "totals",
    "vanished",
    "view",
]

#: The Scrapy stat holding the run a node works for, set when it joins one (for pipelines
#: that mark what each run saw: crawlplug.pipelines.sqlitems).
RUN_STAT = "crawlplug/run"

logger = logging.getLogger(__name__)

#: How long a node beginning a run may take to clear the last one before another takes over (ms).
BEGIN_GRACE_MS = 30_000

#: Key names (after a part's ``<tag>:``) a new run starts without: the queue state, the
#: run's counters and stats, error samples, node records. Everything not named here
#: or in DEDUP_NAMES is kept: seq, meta, dconf, seeds, control, series, items, run,
#: runs, epoch, dead letters of earlier runs, start entries waiting, the history (hist:*)
#: and the node stats of ended runs (runstats:*, crawlplug.reports.store).
RUN_STATE_NAMES = frozenset(
    {
        "queue",
        "requests",
        "leases",
        "leased",
        "deliveries",
        "dq",
        "domains",
        "dstate",
        "stats",
        "counted",
        "errors",
        "crawlstats",
        "statnodes",
        "producers",
        "graveyard",
    }
)
#: Name prefixes of per-node records (live metrics, Scrapy stats), of the run that ends.
NODE_PREFIX = "node:"


class _JoinArgs(TypedDict):
    """:class:`JoinArgs`, those always given."""

    node_id: str
    ttl_ms: int
    incremental: bool
    worker: bool
    lanes: Sequence[str]


class JoinArgs(_JoinArgs, total=False):
    """A node's arguments of :func:`join` (and :func:`rejoin`) besides ``want``:
    crawlplug.scheduler.joining builds them once and joins again with the same."""

    for_run: int | None  #: CRAWLPLUG_FOR_RUN: begin no run after it


@dataclass
class Joined:
    """What :func:`join` did."""

    action: str  #: "join", "resume" (an interrupted run) or "new" (this node began the run)
    run: int
    epoch: str
    live_nodes: int = 0  #: other live nodes when it joined
    previous: dict[str, object] | None = None  #: the run the new one follows (action "new")
    cleared: bool = False  #: fingerprints cleared when the run began (not incremental)
    incremental: bool = False
    waited: float = 0.0  #: seconds spent waiting for another node to begin the run
    at_ms: int = 0  #: when it joined (Redis clock)
    why: str = ""  #: what let this node begin the run after one ended by a limit (CRAWLPLUG_NEW_RUN_AFTER_LIMIT)


@dataclass
class RunView:
    """A crawl's current run as operators see it."""

    id: int | None
    state: str  #: running, interrupted, finished, limit, stopped, starting, or "none"
    started: int | None = None
    ended: int | None = None
    reason: str | None = None
    by: str | None = None
    epoch: str = ""
    incremental: bool = False
    raw: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        limits = {
            name[4:]: int(value) for name, value in self.raw.items() if name.startswith("lim_") and value.isdigit()
        }
        if "timeout" in limits:
            limits["timeout"] = limits["timeout"] / 1000  # type: ignore[assignment]
        return {
            "id": self.id,
            "state": self.state,
            "started": self.started,
            "ended": self.ended,
            "reason": self.reason,
            "by": self.by,
            "epoch": self.epoch,
            "incremental": self.incremental,
            "limits": limits,
            "next": self.raw.get("next"),
        }


def part_keys(client: redis.Redis, keys: CrawlKeys) -> list[CrawlKeys]:
    """The crawl's own keys, then each shard's (crawlplug.frontier.layout)."""
    return parts(client, keys)


# -- joining ------------------------------------------------------------------


def _shard_work(client: redis.Redis, parts: Sequence[CrawlKeys]) -> int:
    """Requests queued or leased in the shards (parts after the first)."""
    if len(parts) < 2:
        return 0
    pipe = client.pipeline(transaction=False)
    for k in parts[1:]:
        pipe.zcard(k.queue)
        pipe.zcard(k.dq)
        pipe.zcard(k.leases)
    return sum(int(x) for x in pipe.execute())


def lane_keys(keys: CrawlKeys, lanes: Sequence[str]) -> list[str]:
    """The keys of the crawl's lanes among ``lanes`` (crawlplug.frontier.keys.CrawlKeys.lane_keys)."""
    return keys.lane_keys(lanes)


def _holds_state(client: redis.Redis, parts: Sequence[CrawlKeys]) -> bool:
    """Whether any part holds fingerprints or counters (a crawl that ran before runs were recorded)."""
    pipe = client.pipeline(transaction=False)
    for k in parts:
        for name in ("seen", "seen_ttl", "bloom", "bf", "stats"):
            pipe.type(k.key(name))  # not EXISTS: a command name fewer a crawl runs (docs/scaling.md)
    return any(text(t) != "none" for t in pipe.execute())


def join(
    client: redis.Redis,
    keys: CrawlKeys,
    *,
    node_id: str,
    ttl_ms: int,
    want: str = "auto",
    incremental: bool = False,
    worker: bool = False,
    timeout: float = 120.0,
    scripts: Scripts | None = None,
    lanes: Sequence[str] = (),
    for_run: int | None = None,
) -> Joined:
    """Join the crawl's run as node ``node_id``, resume it, or begin the next one.

    ``want="new"`` begins a new run whatever the state (CRAWLPLUG_FLUSH_ON_START:
    the queue goes too); ``want="after-limit"`` begins one after a run ended by a limit
    (CRAWLPLUG_NEW_RUN_AFTER_LIMIT, a node started at a terminal), as after a finished
    one, but never after a stop. Raises :class:`~crawlplug.errors.RunEnded` when the run
    ended by a limit or an operator. Registers the crawl in the Redis's crawl
    registry. Waits (up to ``timeout`` s) while another node begins a run.

    ``for_run``: the run this node was started for (CRAWLPLUG_FOR_RUN): it joins that run
    or a later one running, and raises :class:`~crawlplug.errors.RunOver` rather than
    begin a run after it (a node whose daemon started it late, once its run had finished).
    """
    scripts = scripts or Scripts(client)
    k = keys
    started = time.monotonic()
    begin_as = want
    while True:
        parts = part_keys(client, keys)
        raw = scripts.join(
            keys=[
                k.run,
                k.runs,
                k.epoch,
                k.nodes,
                k.producers,
                k.queue,
                k.dq,
                k.leases,
                k.start_urls,
                *lane_keys(k, lanes),
            ],
            args=[
                node_id,
                ttl_ms,
                begin_as,
                "1" if incremental else "0",
                BEGIN_GRACE_MS,
                "1" if worker else "0",
                _shard_work(client, parts),
                "1" if _holds_state(client, parts) else "0",
                new_token(),
                for_run or 0,
            ],
        )
        action, run_id, epoch, detail = text(raw[0]), int(raw[1]), text(raw[2]), raw[4]
        if action in ("join", "resume"):
            _adopt_epoch(client, parts, epoch)
            registry.register(client, keys)
            return Joined(
                action,
                run_id,
                epoch,
                live_nodes=int(detail),
                incremental=incremental,
                waited=time.monotonic() - started,
                at_ms=redis_ms(client),
            )
        if action == "ended":
            state = text(raw[3])
            summary = json_record(detail) or _ended_fields(record(client, keys))
            reason = (summary or {}).get("reason") if state == "limit" else "stopped"
            raise RunEnded(ended_message(keys, run_id, state, summary), str(reason or state), state)
        if action == "over":
            summary = json_record(detail) or {}
            state = text(raw[3]) or str(summary.get("state") or "ended")
            raise RunOver(
                f"crawl {keys.crawl!r}: run {for_run}, which this node was started for, has "
                f"{'finished' if state == 'finished' else 'ended (' + state + ')'} and no later run "
                f"is running; this node begins none (`crawlplug start {keys.crawl}` begins the next)",
                "finished" if state == "finished" else str(summary.get("reason") or state),
                state,
            )
        if action == "wait":
            if time.monotonic() - started > timeout:
                raise ConfigError(
                    f"crawl {keys.crawl!r}: node {text(detail)} has been beginning run {run_id} for "
                    f"{timeout:.0f}s; try again, or reset the crawl (`crawlplug purge`)"
                )
            time.sleep(0.2)
            continue
        # "begin": this node clears what the last run left behind, then the run runs
        previous = json_record(detail)
        try:
            cleared = begin(
                client,
                keys,
                parts,
                epoch=epoch,
                previous=previous,
                incremental=incremental,
                flush=begin_as == "new",
                fence=int(raw[5]),
                scripts=scripts,
            )
        except Overtaken:  # it stalled past its grace and another node took the beginning over: join again
            begin_as = "auto" if begin_as == "new" else begin_as
            continue
        started_raw = scripts.runstart(keys=[k.run, k.nodes, k.producers], args=[node_id, epoch, ttl_ms])
        if text(started_raw[0]) != "running":
            # another node took the beginning over, or the crawl was reset: again (a flush is not
            # asked twice; a node that may begin after a limit still may)
            begin_as = "auto" if begin_as == "new" else begin_as
            continue
        registry.register(client, keys)
        return Joined(
            "new",
            run_id,
            epoch,
            previous=previous,
            cleared=cleared,
            incremental=incremental,
            waited=time.monotonic() - started,
            at_ms=redis_ms(client),
        )


def rejoin(
    client: redis.Redis,
    keys: CrawlKeys,
    refusal: StaleEpoch,
    joined: Joined,
    *,
    shards: int = 1,
    **kwargs: Unpack[JoinArgs],
) -> tuple[Joined, bool]:
    """Join again after a script refused a node's epoch (``refusal``): (the run joined now,
    whether Redis lost the crawl's data). The epoch vanished without a purge since the node
    joined ``joined``: the data was lost (a restart without persistence, a flush, a failover
    to an empty replica), and the crawl is marked so (control "lost": it does not read as
    finished until an operator accepts the loss, `crawlplug resume`).

    ``shards`` is the node's CRAWLPLUG_SHARDS: a purge or a loss took the record of the
    crawl's layout with it, and without it the run would begin in the crawl's own keys
    only, every shard's epoch unset, and each call to a shard refused again, forever."""
    _check_keys(client, keys)
    claim_shards(client, keys, shards)
    if refusal.stored == "0" and _restore_deleted_epoch(client, keys, joined):
        # still in its run and registered: nothing to join again (join.lua's checks could
        # refuse the call for a corrupt key after the epoch was put back: a write already made)
        return joined, bool(client.hexists(keys.control, "lost"))
    # another node may have seen the loss first and begun a run since (then the epoch is
    # no longer "0"): its mark says so
    lost = (refusal.stored == "0" and vanished(client, keys, joined.at_ms)) or bool(
        client.hexists(keys.control, "lost")
    )
    if lost:
        mark_lost(client, keys, kwargs.get("node_id", "?"))  # before the join: the next node sees it
    return join(client, keys, **kwargs), lost


def _restore_deleted_epoch(client: redis.Redis, keys: CrawlKeys, joined: Joined) -> bool:
    """An epoch key deleted by hand (``DEL``, the repair of any key the docs allow), with
    the run the node joined still recorded under that epoch: nothing was lost or reset, so
    the epoch is put back in every part that lacks it (never over another) and the node
    carries on in its run. True if it did so."""
    if text(client.type(keys.run)) != "hash":
        return False  # absent: lost or purged (one of the wrong type was refused before)
    record = client.hmget(keys.run, "epoch", "id", "state")
    epoch, run_id, state = (text(x) if x is not None else None for x in record)
    if epoch != joined.epoch or run_id != str(joined.run) or state != "running":
        return False  # a purge, a new run, or Redis lost the run too
    pipe = client.pipeline(transaction=False)
    for part in part_keys(client, keys):
        pipe.set(part.epoch, joined.epoch, nx=True)
    pipe.execute()
    logger.warning(
        "crawlplug: crawl %r: its epoch key was deleted (by hand?) while its run %d went on; put back",
        keys.crawl,
        joined.run,
    )
    return True


def _check_keys(client: redis.Redis, keys: CrawlKeys) -> None:
    """``control`` or ``run`` of the wrong type (written by hand) refuses the rejoin as the
    scripts refuse a corrupt key (CorruptKey, naming it), before anything is written (the
    loss marked, the epoch put back): the node stays of the old epoch and tries again at its
    next call, once the key is repaired. (A run record of the wrong type cannot tell a
    deleted epoch from a loss of the crawl's data.)"""
    pipe = client.pipeline(transaction=False)
    for key in (keys.control, keys.run):
        pipe.type(key)
    for key, held in zip((keys.control, keys.run), pipe.execute()):
        held = text(held)
        if held not in ("hash", "none"):
            raise CorruptKey(
                f"CORRUPT crawl key {key} holds a {held}, not a hash: nothing was done "
                "(repair or delete the key; see docs/faults.md)",
                key,
            )


def vanished(client: redis.Redis, keys: CrawlKeys, since_ms: int) -> bool:
    """Whether the crawl's state is gone from Redis with no purge since ``since_ms``."""
    return not registry.purged_since(client, keys, since_ms)


def mark_lost(client: redis.Redis, keys: CrawlKeys, node_id: str) -> None:
    """Record that Redis lost the crawl's data (seen by ``node_id``): lua/idle.lua and the
    heartbeat report it, and the crawl does not read as finished until `crawlplug resume`."""
    entry = json.dumps({"node": node_id, "at": redis_ms(client)}, separators=(",", ":"))
    client.hsetnx(keys.control, "lost", entry)


def new_token() -> str:
    """A new epoch: random, so that no reset can bring back one a live node still holds."""
    return secrets.token_hex(8)


def _adopt_epoch(client: redis.Redis, parts: Sequence[CrawlKeys], epoch: str) -> None:
    """Shards of a run that began without runs (adopted, migrated, imported) get its epoch;
    never over another one (a run begun meanwhile set its own)."""
    if len(parts) < 2:
        return
    pipe = client.pipeline(transaction=False)
    for part in parts[1:]:
        pipe.set(part.epoch, epoch, nx=True)
    pipe.execute()


class Overtaken(Exception):
    """A node beginning a run stalled past its grace and another took the beginning over:
    its clearing was refused (lua/runclear.lua), having deleted nothing since."""


def begin(
    client: redis.Redis,
    keys: CrawlKeys,
    parts: Sequence[CrawlKeys],
    *,
    epoch: str,
    previous: dict[str, object] | None,
    incremental: bool,
    flush: bool = False,
    fence: int,
    scripts: Scripts | None = None,
) -> bool:
    """Clear what the last run leaves behind, in every part; idempotent (a node that
    takes a stalled beginning over does it again). Returns whether fingerprints were
    cleared. Every step is fenced by ``fence``, the token join.lua handed this beginning
    (lua/runclear.lua): once another node took it over, this one deletes nothing more and
    raises :class:`Overtaken`. Each part is claimed first, the shards taking the new epoch
    in the same step, so a node of the old state can write nothing there any more; the
    crawl's own epoch was set by join.lua."""
    scripts = scripts or Scripts(client)

    def fenced(part: CrawlKeys, action: str, *names: str, epoch_for: str = "") -> int:
        out = scripts.runclear(keys=[part.key("runfence"), *names], args=[fence, action, epoch_for])
        if text(out[0]) != "ok":
            logger.warning(
                "crawlplug: crawl %r: another node took over the beginning of its run (this one "
                "stalled past %.0f s): this node clears nothing and joins again",
                keys.crawl,
                BEGIN_GRACE_MS / 1000,
            )
            raise Overtaken
        return int(out[1])

    for i, part in enumerate(parts):
        fenced(part, "claim", part.epoch, epoch_for=epoch if i > 0 else "")
    if previous is not None and "pages" not in previous and (flush or previous.get("state") == "limit"):
        # a run cut short by CRAWLPLUG_FLUSH_ON_START, or one ended by a limit whose nodes
        # all died before one closed: record what it had done
        previous.update(totals(client, parts))
        client.hset(keys.runs, str(previous.get("id")), json.dumps(previous, separators=(",", ":")))
    prev_id = previous.get("id") if previous else None
    if isinstance(prev_id, int) and prev_id > 0:
        runstats.keep(client, keys, prev_id)  # its nodes' stats, for reports, before they go
    if previous is not None and previous.get("state") in ("finished", "reset"):
        client.hdel(keys.control, "lost")  # a loss of the last run does not hold the next one
    clear_dedup = not incremental
    for part in parts:
        doomed: list[str] = []
        dead_to: str | None = None
        for raw in client.scan_iter(match=part.pattern(), count=1000):
            key = text(raw)
            name = key[len(part.tag) + 1 :]
            run_state = name in RUN_STATE_NAMES or name.startswith(NODE_PREFIX)
            dedup = name in DEDUP_NAMES or name.startswith(DEDUP_PREFIXES)
            if run_state or (clear_dedup and dedup):
                doomed.append(key)
            elif name == "dead" and isinstance(prev_id, int) and prev_id > 0:
                dead_to = part.key(f"dead:{prev_id}")
        if dead_to is not None:  # the run's dead letters under dead:<run> (appended to a retried beginning's)
            fenced(part, "dead", part.dead, dead_to)
        for i in range(0, len(doomed), 500):
            fenced(part, "unlink", *doomed[i : i + 500])
    return clear_dedup


def totals(client: redis.Redis, parts: Sequence[CrawlKeys]) -> dict[str, int]:
    """The run's counters summed over every part: pages (acknowledged), enqueued,
    filtered, redelivered, dead, items and errors (reported by the nodes)."""
    pipe = client.pipeline(transaction=False)
    for k in parts:
        pipe.hgetall(k.stats)
        pipe.llen(k.dead)
    raw = pipe.execute()
    out = {"pages": 0, "enqueued": 0, "filtered": 0, "redelivered": 0, "dead": 0, "items": 0, "errors": 0}
    for i in range(0, len(raw), 2):
        stats = {text(a): int(b) for a, b in raw[i].items() if text(b).lstrip("-").isdigit()}
        out["pages"] += stats.get("acked", 0)
        for name in ("enqueued", "filtered", "redelivered", "items", "errors"):
            out[name] += stats.get(name, 0)
        out["dead"] += int(raw[i + 1])
    return out


# -- finishing ------------------------------------------------------------------


def finish(
    client: redis.Redis,
    keys: CrawlKeys,
    *,
    node_id: str,
    run_id: int,
    epoch: int | str,
    reason: str = "finished",
    scripts: Scripts | None = None,
    lanes: Sequence[str] = (),
) -> tuple[str, int | None]:
    """Record the run as finished if the crawl is done: ("finished", ended ms), ("busy", None)
    when work or a producer appeared, or (state, None) when it ended otherwise."""
    scripts = scripts or Scripts(client)
    k = keys
    summary = totals(client, part_keys(client, keys))
    raw = scripts.finish(
        keys=[k.run, k.runs, k.producers, k.queue, k.dq, k.leases, k.start_urls, *lane_keys(k, lanes), k.epoch],
        args=[node_id, run_id, reason, json.dumps(summary, separators=(",", ":")), str(epoch)],
    )
    state = text(raw[0])
    return state, (int(raw[1]) if len(raw) > 1 else None)


# -- reading --------------------------------------------------------------------


def record(client: redis.Redis, keys: CrawlKeys) -> dict[str, str]:
    return {text(a): text(b) for a, b in client.hgetall(keys.run).items()}


def _int(value: Any) -> int | None:
    """``value`` as an integer; None if it is none (absent, not a number, a pipeline's error)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def view(client: redis.Redis, keys: CrawlKeys, *, live_nodes: int | None = None, work: int | None = None) -> RunView:
    """The current run, with ``interrupted`` derived: running, no live node, work left."""
    raw = record(client, keys)
    if not raw:
        return RunView(None, "none", raw=raw)
    state = raw.get("state", "?")
    if state == "running":
        if live_nodes is None:
            live_nodes = count_live_nodes(client, keys)
        if work is None:
            work = _work(client, part_keys(client, keys))
        if live_nodes == 0 and work > 0:
            state = "interrupted"
    return RunView(
        _int(raw.get("id")),
        state,
        _int(raw.get("started")),
        _int(raw.get("ended")),
        raw.get("reason"),
        raw.get("by"),
        raw.get("epoch", ""),
        raw.get("incremental") == "1",
        raw,
    )


def _work(client: redis.Redis, parts: Sequence[CrawlKeys]) -> int:
    pipe = client.pipeline(transaction=False)
    for k in parts:
        pipe.zcard(k.queue)
        pipe.zcard(k.dq)
        pipe.zcard(k.leases)
    # a key of the wrong type (written by hand: the scripts refuse it and name it, `crawlplug
    # status` lists it) counts 0, so views still answer
    return sum(_int(x) or 0 for x in pipe.execute(raise_on_error=False)) + views.start_entries(client, parts[0])


def history(client: redis.Redis, keys: CrawlKeys) -> list[dict[str, object]]:
    """Every run, oldest first: the ended ones from ``runs``, then the current one if it
    has not ended (with its totals so far)."""
    out: list[dict[str, Any]] = []
    for raw_id, raw in client.hgetall(keys.runs).items():
        summary = json_record(raw) or {}
        summary.setdefault("id", _int(text(raw_id)))
        out.append(summary)
    out.sort(key=lambda s: s.get("id") or 0)
    current = view(client, keys)
    if current.id is not None and not any(s.get("id") == current.id for s in out):
        row = current.as_dict()
        row.update(totals(client, part_keys(client, keys)))
        out.append(row)
    return out


def _ended_fields(raw: dict[str, str]) -> dict[str, Any]:
    """The run hash's record of how it ended (before its summary is written)."""
    out: dict[str, Any] = {k: raw[k] for k in ("reason", "by", "drain_by") if raw.get(k)}
    for name in ("ended", "drain_at", "lim_pages", "lim_items", "lim_errors", "lim_timeout"):
        if _int(raw.get(name)) is not None:
            out[name] = _int(raw.get(name))
    return out


def ended_message(keys: CrawlKeys, run_id: int, state: str, summary: Mapping[str, object] | None) -> str:
    """What a node started on an ended (or draining) run says before it exits."""
    info = summary or {}
    crawl = keys.crawl
    if state == "draining":
        by, when = info.get("drain_by"), info.get("drain_at")
        said = "being stopped (`crawlplug stop --drain`: the nodes running crawl what is queued)"
    else:
        by, when = info.get("by"), info.get("ended")
        said = {"limit": "ended by a limit", "stopped": "stopped" if by else "stopped by an operator"}.get(state, state)
        if state == "limit":
            by = None  # the node whose heartbeat found the limit reached: not news
            reason = info.get("reason")
            limit = {
                "closespider_pagecount": ("lim_pages", "pages"),
                "closespider_itemcount": ("lim_items", "items"),
                "closespider_errorcount": ("lim_errors", "spider errors"),
                "closespider_timeout": ("lim_timeout", "s"),
            }.get(str(reason), ("", ""))
            value = info.get(limit[0])
            if limit[1] == "s" and isinstance(value, int):
                value = f"{value / 1000:g}"
            if reason:
                said += f" ({reason}: {value} {limit[1]})" if value is not None else f" ({reason})"
    who = f" by {by}" if by else ""
    at = f" at {format_ms(when)}" if isinstance(when, int) else ""
    how = f"`crawlplug continue {crawl}`"
    if state == "limit":
        how += " with the limit raised, e.g. --pages N"
    return (
        f"run {run_id} of crawl {crawl!r} was {said}{who}{at}; it stays so until an operator continues it "
        f"({how}) or starts a new run (`crawlplug new-run {crawl}`)"
    )


def format_ms(ms: int | None) -> str:
    if ms is None:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


# -- resets ------------------------------------------------------------------------


def purge(client: redis.Redis, keys: CrawlKeys) -> int:
    """Delete every key of the crawl: every part, its runs and their history, its epoch.
    A live node of it holds an epoch no script finds any more: it is refused at its next
    call and joins the crawl afresh. Returns how many keys were deleted."""
    # the epochs first: from this moment no node of the old state writes anything; the
    # registry says it was a purge (a node refused by its epoch tells it from data lost)
    registry.mark_purged(client, keys)
    deleted = int(client.unlink(*[k.epoch for k in part_keys(client, keys)]))
    names = [
        text(x)
        for pattern in (keys.pattern(), keys.shards_pattern())
        for x in client.scan_iter(match=pattern, count=1000)
    ]
    for i in range(0, len(names), 500):
        deleted += int(client.unlink(*names[i : i + 500]))
    return deleted


def new_epoch(client: redis.Redis, keys: CrawlKeys) -> str:
    """A new epoch in every part (after ``crawlplug import`` wrote a new state): live
    nodes of the old one are refused at their next call. Returns it."""
    epoch = new_token()
    pipe = client.pipeline(transaction=False)
    pipe.set(keys.epoch, epoch)
    for part in part_keys(client, keys)[1:]:
        pipe.set(part.epoch, epoch)
    if client.exists(keys.run):
        pipe.hset(keys.run, "epoch", epoch)
    pipe.execute()
    return epoch


# -- the crawls on this Redis ---------------------------------------------------------


def crawl_rows(
    client: redis.Redis, prefix: str = "crawlplug", names: Iterable[str] | None = None
) -> list[dict[str, object]]:
    """One row per crawl: name, current run and its state, queued, in flight, done,
    live nodes, last activity (ms, Redis clock)."""
    now = redis_ms(client)
    rows: list[dict[str, object]] = []
    for crawl in registry.known_crawls(client, prefix) if names is None else names:
        keys = CrawlKeys(crawl, prefix)
        parts = part_keys(client, keys)
        pipe = client.pipeline(transaction=False)
        for k in parts:
            pipe.zcard(k.queue)
            pipe.zcard(k.dq)
            pipe.zcard(k.leases)
            pipe.hget(k.stats, "acked")
        count_live(pipe, keys.nodes, now)
        pipe.zrange(keys.nodes, -1, -1, withscores=True)
        raw = pipe.execute(raise_on_error=False)  # a key of the wrong type counts 0 (_work)
        queued = in_flight = done = 0
        for i in range(len(parts)):
            q, dq, leased, acked = raw[4 * i : 4 * i + 4]
            queued += (_int(q) or 0) + (_int(dq) or 0)
            in_flight += _int(leased) or 0
            done += _int(acked) or 0
        live, last_node = _int(raw[-2]) or 0, raw[-1]
        starts = views.start_entries(client, keys)  # start_urls and its lanes
        run = view(client, keys, live_nodes=live, work=queued + in_flight + starts)
        activity = [v for v in (run.started, run.ended) if v]
        if last_node and not isinstance(last_node, redis.ResponseError):
            activity.append(int(last_node[0][1]))
        rows.append(
            {
                "crawl": crawl,
                "run": run.id,
                "state": run.state,
                "queued": queued,
                "start_entries": starts,
                "in_flight": in_flight,
                "done": done,
                "live_nodes": live,
                "last_activity": max(activity) if activity else None,
            }
        )
    return rows
