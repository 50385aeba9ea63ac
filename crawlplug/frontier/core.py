"""A crawl's frontier: the data plane of one crawl (admit, lease, ack, reap) as one
:class:`Frontier` over its parts, one part for a crawl on one Redis, N + 1 for a crawl
split into N shards (``CRAWLPLUG_SHARDS``, for Redis Cluster).

A crawl's keys share one hash tag so that each Lua script runs on one slot: that makes
the whole crawl one slot of one primary. ``CRAWLPLUG_SHARDS = N`` splits the frontier
(queue, payloads, leases, dedup, per-domain schedule, dead letters, counters) into N
parts, each under its own hash tag (:meth:`crawlplug.frontier.keys.CrawlKeys.shard_keys`),
and the frontier routes every request by its domain (or host: :func:`route_key`). The same
URL always lands in the same shard, so "deduplicate and store" stays one atomic script
inside that shard. What stays under the crawl's own tag: the nodes and their heartbeats,
the operators' switches, start entries (and their leases), seeds, Scrapy stats and items.
Lease ids of a shard carry it (``"2.0000000000000042"``); an unsharded crawl's, and start
entries', do not.

Each call is built by the parts it touches (:class:`crawlplug.frontier.part.Part`: one
key set's script calls and what their replies say) and sent in one round trip
(:meth:`crawlplug.frontier.scripts.Scripts.run_many`); with one part, that is one script
call, as it always was.

The invariant that a request is acknowledged only after its children are stored holds
across shards: an ack rides in the admission script of its own shard when every child of
the batch goes to that shard (every ack, unsharded; most, sharded: most links stay on
their site), and otherwise waits for a second call made only after every shard stored its
part of the batch.

Any part may go back in time on its own (a Redis restarted from its snapshot, a Redis
Cluster primary replaced by a replica that lagged). Every part keeps each node's call
record (lua/record.lua), checked by the node's admissions and heartbeats there: the node
then gives back every lease it holds, in every part, and a shard found to have gone back
gets again what the node admitted to it within ``resend_window`` seconds
(crawlplug.frontier.record.ResendLog). Unsharded, a restored lease makes its page's links
again, and the node's own buffer is sent again (as the Scheduler does); what no lease
stands behind (a spider's start requests) is logged and sent again the same way.

Time is Redis's clock in milliseconds throughout (crawlplug.frontier.store.redis_ms), so
nodes with skewed clocks agree on what expired.

Its size: the one implementation of crawlplug.frontier.interface.CrawlFrontier, for one
part and N alike (it replaced two classes kept in step by a test); most of it is
:meth:`Frontier._admit`, the one place an admission, its acks and its pops are planned
over the parts, sent in one round trip and read back, with what a lost reply, a growing
Bloom filter, a refused part and a rollback mean for each.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import redis

from ..errors import AdmissionIncomplete, ConfigError, RolledBack
from .dedup import Dedup
from .domains import Domains
from .keys import CrawlKeys
from .layout import parts, shard_of, stored_shards
from .part import FrontierOptions, Part, PartOptions, admit_in_parts, log_went_back
from .record import ResendLog
from .results import Admission, AdmitResult, Beat, Idle, Leased, Leases
from .scripts import Scripts
from .store import text

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .calls import Arg, Call

__all__ = ["BASE", "Frontier", "open_domains", "open_frontier", "route_key"]

logger = logging.getLogger(__name__)

#: a part index for the crawl's own keys in a sharded crawl (start entries); shards are 0..N-1
BASE = -1


def open_frontier(
    client: redis.Redis,
    keys: CrawlKeys,
    *,
    shards: int | None = None,
    dedup_factory: Callable[[], Dedup] | None = None,
    **kwargs: Unpack[FrontierOptions],
) -> Frontier:
    """The one place a node's frontier is built: over as many shards as the crawl has
    (``shards``, else the count the crawl recorded, else one), each part's dedup strategy
    from ``dedup_factory`` (default: the exact set). The Scheduler, the tools and the
    dashboard all build theirs here."""
    n = shards or stored_shards(client, keys) or 1
    return Frontier(client, keys, shards=n, dedup_factory=dedup_factory, **kwargs)


def route_key(item: Admission) -> str:
    """What routes an admission to its shard: its per-domain queue's key (4th field), else
    the host of its URL (5th: the request's URL, or a host), else that field as it is.
    One site, one shard; a dupefilter on its own routes alike (crawlplug.queues.route)."""
    domain = item[3] if len(item) > 3 else ""
    if domain:
        return domain
    where = item[4] if len(item) > 4 else ""
    if "://" in where:
        return urlsplit(where).hostname or where
    if not where:
        raise ValueError("a sharded crawl needs each request's domain or URL to route it (the scheduler gives it)")
    return where


@dataclass
class _Plan:
    """Which part of the crawl gets which items (their indexes), acks and events of a call."""

    by_part: dict[int, list[int]]
    now_acks: dict[int, list[str]]
    later_acks: dict[int, list[str]]
    event_parts: dict[int, list[tuple[str, str]]]

    def touched(self) -> list[int]:
        return list(dict.fromkeys([*self.by_part, *self.now_acks, *self.event_parts]))

    def share(
        self, items: Sequence[Admission], part: int
    ) -> tuple[list[Admission], Sequence[str], Sequence[tuple[str, str]]]:
        return (
            [items[i] for i in self.by_part.get(part, ())],
            self.now_acks.get(part, ()),
            self.event_parts.get(part, ()),
        )


@dataclass
class _Tally:
    """What one call over the parts did so far: each item's flag ("" not stored yet), the acks
    made (as the caller names them), the leases taken, the parts found gone back, the first error."""

    flags: list[str]
    acked: int = 0
    stale: int = 0
    acks_done: list[str] = field(default_factory=list)
    leased: list[Leased] = field(default_factory=list)
    rolled: dict[int, RolledBack] = field(default_factory=dict)
    error: Exception | None = None


class Frontier:
    """The frontier of crawl ``keys`` on ``client`` over ``shards`` parts (one: unsharded)."""

    #: how long a shard that ran dry is left out of pops (this node's own admissions
    #: to it bring it back at once; other nodes' within this time)
    SKIP_EMPTY = 0.5
    #: the fewest requests a pop asks of one shard (a pop of 32 asks two shards)
    MIN_SHARE = 16

    def __init__(
        self,
        client: redis.Redis,
        keys: CrawlKeys,
        *,
        shards: int = 1,
        dedup: str | Dedup = "set",
        dedup_factory: Callable[[], Dedup] | None = None,
        node_id: str | None = None,
        epoch: int | str = "",
        resend_window: float = 300.0,
        **kwargs: Unpack[PartOptions],
    ) -> None:
        if shards < 1:
            raise ConfigError(f"CRAWLPLUG_SHARDS must be 1 or more, got {shards}")
        self.client = client
        self.keys = keys
        self.n = shards
        #: whether the crawl is split into shards (CRAWLPLUG_SHARDS > 1)
        self.sharded = shards > 1
        self._scripts = Scripts(client)
        strategy = (lambda: dedup_factory()) if dedup_factory else (lambda: dedup)
        if not self.sharded:
            # one key set: the crawl's own, holding its requests and dedup state too
            self.base = Part(
                client, keys, dedup=strategy(), node_id=node_id, scripts=self._scripts, epoch=epoch, **kwargs
            )
            self.shards = [self.base]
        else:
            # the crawl's own keys: nodes, control, start entries and their leases
            self.base = Part(client, keys, dedup="none", node_id=node_id, scripts=self._scripts, epoch=epoch, **kwargs)
            self.shards = [
                Part(
                    client,
                    keys.shard_keys(i, shards),
                    node_id=self.base.node_id,
                    scripts=self._scripts,
                    dedup=strategy(),
                    epoch=epoch,
                    **kwargs,
                )
                for i in range(shards)
            ]
        #: every distinct part, the crawl's own first
        self.all_parts = [self.base] if not self.sharded else [self.base, *self.shards]
        #: the part index lease ids without a shard name
        self._own = BASE if self.sharded else 0
        self.node_id = self.base.node_id
        self.queue = self.shards[0].queue
        self.lease_ms = self.base.lease_ms
        self.max_deliveries = self.base.max_deliveries
        self._rr = 0
        self._dry_until = [0.0] * shards
        self._shares_last: dict[int, int] = {}
        #: what this node admitted lately, sent again to a part that went back in time: to each
        #: shard everything (a page's ack may have gone to another shard than its links);
        #: unsharded, the requests no lease stands behind (start requests: Admission's sixth
        #: element), as a restored lease makes the rest again
        self.resend = [ResendLog(resend_window) for _ in range(shards)]

    # -- who it is ---------------------------------------------------------------
    @property
    def scripts(self) -> Scripts:
        """The registered scripts every part calls (a test may wrap them: every part then uses that)."""
        return self._scripts

    @scripts.setter
    def scripts(self, value: Scripts) -> None:
        self._scripts = value
        for part in self.all_parts:
            part.scripts = value

    @property
    def dedup(self) -> Dedup:
        """The dedup strategy of the crawl's parts."""
        return self.shards[0].dedup

    @property
    def lanes(self) -> tuple[str, ...]:
        """The start-entry lists this node reads besides start_urls (in the crawl's own keys)."""
        return self.base.lanes

    @lanes.setter
    def lanes(self, value: tuple[str, ...]) -> None:
        self.base.lanes = tuple(value)

    @property
    def queued_seen(self) -> int:
        """Requests waiting in the queues, as each part's last pop saw them (-1: none seen)."""
        seen = [f.queued_seen for f in self.shards if f.queued_seen >= 0]
        return sum(seen) if seen else -1

    @property
    def epoch(self) -> str:
        """The epoch every call carries (lua/epoch.lua): the run a node joined; "" checks nothing."""
        return self.base.epoch

    @epoch.setter
    def epoch(self, value: int | str) -> None:
        """A node joined a run (again or anew): what it admitted and held was of the old state,
        and what the parts knew of a Bloom filter's layers is learnt again from the first
        admission's reply (a reset crawl's filter is smaller than it was)."""
        if str(value) != self.base.epoch:
            for log in self.resend:  # what it admitted was of the old state
                log.clear()
        for part in self.all_parts:
            part.epoch = str(value)
        self.forget_dedup_layers()

    @property
    def run_id(self) -> int | None:
        return self.base.run_id

    @run_id.setter
    def run_id(self, value: int | None) -> None:
        for part in self.all_parts:
            part.run_id = value

    def parts(self) -> list[CrawlKeys]:
        """The key sets holding this crawl's frontier: its own, then each shard's."""
        return [f.keys for f in self.all_parts]

    def dedup_parts(self) -> list[Part]:
        """The parts holding this crawl's dedup state, each with its strategy."""
        return list(self.shards)

    def forget_dedup_layers(self) -> None:
        """The crawl was reset: what the strategies knew of a Bloom filter's layers is wrong."""
        for f in self.shards:
            f.forget_dedup_layers()

    def part(self, index: int) -> Part:
        return self.base if index == BASE else self.shards[index]

    def split_id(self, lease_id: str) -> tuple[int, str]:
        """(part, id in that part) of a lease id."""
        if not self.sharded:
            return 0, lease_id
        head, dot, rest = lease_id.partition(".")
        if not dot:
            return BASE, lease_id
        return int(head), rest

    def route(self, item: Admission) -> int:
        """The shard of an admission (:func:`route_key`)."""
        return shard_of(route_key(item), self.n) if self.sharded else 0

    def _group_ids(self, ids: Iterable[str]) -> dict[int, list[str]]:
        if not self.sharded:
            ids = list(ids)
            return {0: ids} if ids else {}
        out: dict[int, list[str]] = {}
        for lease_id in ids:
            part, raw = self.split_id(lease_id)
            out.setdefault(part, []).append(raw)
        return out

    def _named(self, part: int, ids: Sequence[str]) -> list[str]:
        """Lease ids of ``part`` as the caller names them (a shard's with its number)."""
        return list(ids) if part == self._own or part == BASE else [f"{part}.{x}" for x in ids]

    def _wrap(self, part: int, leased: list[Leased]) -> list[Leased]:
        if part != self._own and part != BASE:
            for x in leased:
                x.id = f"{part}.{x.id}"
        return leased

    # -- admission and leasing -------------------------------------------------
    def _most_per_call(self) -> int:
        return min(f.dedup.most_per_call() for f in self.shards)

    def admit(
        self, items: Sequence[Admission], acks: Sequence[str] = (), events: Sequence[tuple[str, str]] = ()
    ) -> AdmitResult:
        """Store new requests (deduplicated) and ack finished leases, the acks only once every
        child is stored. An item is (dedup argument, score, payload[, domain[, URL or host]]);
        the dedup argument comes from the strategy (``dedup.argument(fingerprint)``), b""
        never filters.

        Raises :class:`~crawlplug.errors.RolledBack` when Redis went back in time past this
        node's last recorded call: nothing was written, and every lease the node held was
        given back (their ids in the exception): the caller forgets them and the
        fingerprints it knew, and sends its requests again; AdmissionIncomplete when some
        parts stored theirs and others failed, saying which."""
        if len(items) > self._most_per_call():
            return admit_in_parts(self.admit, items, acks, events, self._most_per_call())
        return self._admit(items, acks, events, 0)[0] or AdmitResult("", 0, 0)

    def admit_and_pop(
        self, items: Sequence[Admission], acks: Sequence[str], n: int, events: Sequence[tuple[str, str]] = ()
    ) -> tuple[AdmitResult | None, Leases]:
        """:meth:`admit`, then lease up to ``n`` requests, in one round trip: in each part
        that admits and is asked for leases, one admit.lua call that pops after admitting
        (one guard pass and one epoch check; a key refusing either refuses the call, which
        then changed nothing), the other parts' pops beside it."""
        if len(items) > self._most_per_call():  # a batch too big for one call: admitted in parts, then a pop
            return admit_in_parts(self.admit, items, acks, events, self._most_per_call()), self.pop(n)
        result, leased = self._admit(items, acks, events, n)
        return (result if (items or acks or events) else None), leased

    def pop(self, n: int) -> Leases:
        """Lease up to ``n`` requests due now."""
        return self._admit((), (), (), n)[1]

    def push(self, items: Iterable[tuple[bytes, float | str, bytes]]) -> AdmitResult:
        """Admit (fingerprint, score, payload) items made outside a crawl (the CLI's push, an import)."""
        if self.sharded:
            raise TypeError("a sharded crawl routes requests by domain: use admit() with (fp, score, payload, domain)")
        return self.admit([(fp, float(score), payload) for fp, score, payload in items])

    def _admit(
        self, items: Sequence[Admission], acks: Sequence[str], events: Sequence[tuple[str, str]], pop: int
    ) -> tuple[AdmitResult | None, Leases]:
        """One admission with its acks and events, and a pop of ``pop``, over the parts: what
        was lost before is sent again first, then one round trip (each part's admission, with
        its pop where it has one), more pops if the shards asked ran dry, and the acks that
        had to wait for other shards' children last."""
        plan = self._route(items, acks, events)
        tally = _Tally([""] * len(items))
        self._settle(items, plan, tally)
        waits: list[int] = []
        admitting, asked = self._first_round(items, plan, pop, tally, waits)
        # a pop smaller than the number of shards asked only some of them: if those ran
        # dry, ask the others now (the dry ones are skipped for a moment after this); a
        # part whose admission was sent again (a Bloom filter grew) is asked now
        while pop and len(tally.leased) < pop and len(asked) < self.n:
            if not self._pop_more(pop - len(tally.leased), asked, admitting, tally, waits):
                break
        if plan.later_acks:
            self._ack_later(plan.later_acks, tally)
        return AdmitResult("".join(tally.flags), tally.acked, tally.stale), Leases(
            tally.leased, next_ready_ms=min(waits) if waits else -1, queued_seen=self.queued_seen
        )

    def _route(self, items: Sequence[Admission], acks: Sequence[str], events: Sequence[tuple[str, str]]) -> _Plan:
        """Which part gets which items, acks and events; an ack rides with its part's items
        only if no other part gets items (every child of its page stored first)."""
        if self.sharded:
            by_part: dict[int, list[int]] = {}
            for i, item in enumerate(items):
                by_part.setdefault(self.route(item), []).append(i)
        else:
            by_part = {0: list(range(len(items)))} if items else {}
        ack_parts = self._group_ids(acks)
        event_parts: dict[int, list[tuple[str, str]]] = {}
        for lease_id, kind in events:
            part, raw = self.split_id(lease_id)
            event_parts.setdefault(part, []).append((raw, kind))
        now_acks = {p: a for p, a in ack_parts.items() if set(by_part) <= {p}}
        later_acks = {p: a for p, a in ack_parts.items() if p not in now_acks}
        return _Plan(by_part, now_acks, later_acks, event_parts)

    def _settle(self, items: Sequence[Admission], plan: _Plan, tally: _Tally) -> None:
        """A part whose last admission's reply was lost gets it again first, exactly (answered
        as it was, its pop's leases too: admit.lua); the plan keeps the rest of its share."""
        for part in [p for p in plan.touched() if self.part(p).uncertain]:
            indexes, part_acks = plan.by_part.get(part, []), plan.now_acks.get(part, ())
            before, replayed, rest, rest_acks, rest_events = self.part(part).settle(
                [items[i] for i in indexes], part_acks, plan.event_parts.get(part, ())
            )
            if before is None:
                continue
            done = len(indexes) - len(rest)
            for i, flag in zip(indexes[:done], before.flags):
                tally.flags[i] = flag
            tally.acked, tally.stale = tally.acked + before.acked, tally.stale + before.stale
            tally.acks_done += self._named(part, part_acks[: len(part_acks) - len(rest_acks)])
            tally.leased += self._wrap(part, replayed)
            plan.by_part[part] = indexes[done:]
            if part in plan.now_acks:
                plan.now_acks[part] = list(rest_acks)
            if part in plan.event_parts:
                plan.event_parts[part] = list(rest_events)

    def _first_round(
        self, items: Sequence[Admission], plan: _Plan, pop: int, tally: _Tally, waits: list[int]
    ) -> tuple[set[int], set[int]]:
        """Each part's admission (with its share of the pop: admit.lua pops after admitting, one
        guard pass for both, and a key refusing either refuses the call there) and the other
        shards' pops, in one round trip, read back. Returns the parts admitting in this call
        and the shards asked for leases."""
        calls: list[Call] = []
        kinds: list[tuple[str, int]] = []
        asked: set[int] = set()
        share_of = dict(self._shares(pop - len(tally.leased) if pop else 0, asked))
        todo = [p for p in plan.touched() if plan.by_part.get(p) or plan.now_acks.get(p) or plan.event_parts.get(p)]
        for part in todo:
            args = plan.share(items, part)
            if part != BASE and part in share_of:
                calls.append(self.part(part).admit_pop_call(*args, share_of[part]))
                kinds.append(("admit+pop", part))
            else:
                calls.append(self.part(part).admit_call(*args))
                kinds.append(("admit", part))
        # a pop in a shard that admits in this call, or gets its acks after it, refuses with
        # the admission on a corrupt key: it takes nothing there (a pop that ran would have
        # leased, and then given back, in a part the call is refused in)
        admitting = set(todo) | set(plan.later_acks)
        for shard, share in share_of.items():
            if ("admit+pop", shard) not in kinds:
                calls.append(self.shards[shard].pop_call(share, after_admit=shard in admitting))
                kinds.append(("pop", shard))
        raw: Any  # a script's reply: read below by the shape its script answers
        for (kind, part), call, raw in zip(kinds, calls, self.scripts.run_many(calls) if calls else []):
            if kind == "pop":
                self._read_pop(part, call, raw, tally, waits)
                continue
            if kind == "admit+pop" and not isinstance(raw, Exception):
                if len(raw) > 1:  # {admission's reply, pop's reply}
                    tally.leased += self._took(part, self.part(part).read_leases(raw[1]), waits)
                else:  # the admission's alone: it must be sent again, the pop did not run (asked again)
                    asked.discard(part)
                raw = raw[0]
            self._read_admission(items, plan, part, call, raw, tally)
        self._raise_if_failed(tally)
        return admitting, asked

    def _read_admission(
        self, items: Sequence[Admission], plan: _Plan, part: int, call: Call, raw: Any, tally: _Tally
    ) -> None:
        """One part's admission reply (or the error it met) into ``tally``."""
        frontier = self.part(part)
        part_items, part_acks, part_events = plan.share(items, part)
        if isinstance(raw, RolledBack):
            tally.rolled[part] = raw
            return
        if isinstance(raw, Exception):
            # a reply lost may be of a call that ran: sent again first by the next batch
            frontier.note_uncertain(call, raw, len(part_items), len(part_acks), len(part_events))
            tally.error = tally.error or raw
            return
        try:
            result = frontier.read_admission(raw, call[2], part_acks)
            if not isinstance(result, AdmitResult):  # the Bloom filter grew: finish this part alone
                done = result or ""
                result = frontier.admit(part_items[len(done) :], part_acks, part_events)
                result.flags = done + result.flags
        except RolledBack as exc:
            tally.rolled[part] = exc
            return
        except AdmissionIncomplete as exc:  # the filter grew, then the rest failed (no ack made)
            for i, flag in zip(plan.by_part.get(part, ()), exc.flags):
                tally.flags[i] = "" if flag == "-" else flag
            tally.error = tally.error or exc.cause
            return
        except (redis.RedisError, RuntimeError) as exc:
            tally.error = tally.error or exc
            return
        for i, flag in zip(plan.by_part.get(part, ()), result.flags):
            tally.flags[i] = flag
        if self.sharded and part != BASE:
            call_id = cast(str, call[2][3])
            self.resend[part].add(call_id, [item for item, f in zip(part_items, result.flags) if f == "1"])
            if "1" in result.flags:
                self._dry_until[part] = 0.0
        elif not self.sharded and "1" in result.flags:
            roots = [item for item, f in zip(part_items, result.flags) if f == "1" and len(item) > 5 and item[5]]
            if roots:  # numbered by the part's last call: a Bloom filter's growth may have stored them in a later one
                self.resend[part].add(f":{frontier.record.last}", roots)
        tally.acked += result.acked
        tally.stale += result.stale
        tally.acks_done += self._named(part, part_acks)

    def _read_pop(self, shard: int, call: Call, raw: Any, tally: _Tally, waits: list[int]) -> None:
        """One shard's pop reply (or the error it met) into ``tally``."""
        try:
            tally.leased += self._took(shard, self.shards[shard].read_pop(raw, call), waits)
        except RolledBack as exc:
            tally.rolled[shard] = exc
        except redis.RedisError as exc:
            tally.error = tally.error or exc

    def _pop_more(self, n: int, asked: set[int], admitting: set[int], tally: _Tally, waits: list[int]) -> bool:
        """Pop ``n`` more from shards not asked yet in this call; False if there are none."""
        shares = self._shares(n, asked)
        if not shares:
            return False
        pops = [self.shards[s].pop_call(k, after_admit=s in admitting) for s, k in shares]
        for (shard, _), call, raw in zip(shares, pops, self.scripts.run_many(pops)):
            self._read_pop(shard, call, raw, tally, waits)
        self._raise_if_failed(tally)
        return True

    def _ack_later(self, later_acks: dict[int, list[str]], tally: _Tally) -> None:
        """Every child of the batch is stored: the parents are acknowledged in their parts."""
        calls = [self.part(p).admit_call((), a, ()) for p, a in later_acks.items()]
        raw: Any  # a script's reply: read below by the shape its script answers
        for (p, part_acks), call, raw in zip(later_acks.items(), calls, self.scripts.run_many(calls)):
            try:
                if isinstance(raw, Exception):
                    self.part(p).note_uncertain(call, raw, 0, len(part_acks), 0)
                    raise raw
                result = self.part(p).read_admission(raw, call[2], part_acks)
                if not isinstance(result, AdmitResult):  # a Bloom filter grew elsewhere: again
                    result = self.part(p).admit((), part_acks, ())
            except RolledBack as exc:
                tally.rolled[p] = exc
                continue
            except (redis.RedisError, RuntimeError) as exc:
                tally.error = tally.error or exc
                continue
            tally.acked += result.acked
            tally.stale += result.stale
            tally.acks_done += self._named(p, part_acks)
        # every request of the batch is stored: only the acks not made are to send again
        self._raise_if_failed(tally, incomplete=True)

    def _raise_if_failed(self, tally: _Tally, *, incomplete: bool = False) -> None:
        """A call that met an error in some part: if parts went back in time, every lease is
        given back first (:meth:`went_back`); what this call's pops took goes back; and if
        other parts stored requests or made acks (or ``incomplete``), AdmissionIncomplete
        says which, so that a retry sends only the rest and counts none of it twice."""
        if tally.rolled:
            tally.error = self.went_back(tally.rolled)
        error = tally.error
        if error is None:
            return
        if not isinstance(error, RolledBack):
            self._give_back(tally.leased)
        else:  # given back with the rest; the caller never had them, so they are not named to it
            mine = {x.id for x in tally.leased}
            error.given_back = [x for x in error.given_back if x not in mine]
        if incomplete or any(tally.flags) or tally.acks_done:
            raise AdmissionIncomplete(
                "".join(f or "-" for f in tally.flags), error, tally.acks_done, tally.acked, tally.stale
            ) from error
        raise error

    def _shares(self, n: int, asked: set[int]) -> list[tuple[int, int]]:
        """Split a pop of ``n`` over shards not yet ``asked`` in this call, in rotation,
        leaving out those that ran dry a moment ago (unless all did: then each is asked)."""
        self._shares_last = {}
        if n <= 0:
            return []
        if not self.sharded:
            if 0 in asked:
                return []
            asked.add(0)
            self._shares_last = {0: n}
            return [(0, n)]
        now = time.monotonic()
        order = [(self._rr + j) % self.n for j in range(self.n) if (self._rr + j) % self.n not in asked]
        live = [s for s in order if self._dry_until[s] <= now] or order
        self._rr = (self._rr + 1) % self.n
        # each shard asked gets MIN_SHARE requests at least: one script call per shard
        # has a fixed cost, and the rotation visits every shard anyway
        live = live[: max(1, n // self.MIN_SHARE)]
        base, extra = divmod(n, len(live)) if live else (0, 0)
        shares = [(s, base + (1 if j < extra else 0)) for j, s in enumerate(live)]
        shares = [(s, k) for s, k in shares if k > 0]
        asked.update(s for s, _ in shares)
        self._shares_last = dict(shares)
        return shares

    def _took(self, shard: int, got: Leases, waits: list[int]) -> list[Leased]:
        """Note what a shard's pop gave: a shard that gave less than asked ran dry; when its
        per-domain queue's next domain is due."""
        if len(got) < self._shares_last.get(shard, 0):
            self._dry_until[shard] = time.monotonic() + self.SKIP_EMPTY
        if got.next_ready_ms >= 0:
            waits.append(got.next_ready_ms)
        return self._wrap(shard, got)

    def _give_back(self, leased: list[Leased]) -> None:
        """Return leases taken in a call whose admission failed (best effort: they expire anyway)."""
        if not leased:
            return
        try:
            self.release([x.id for x in leased], unstarted=True)
        except redis.RedisError:
            logger.debug("crawlplug: could not give back %d leases now; they expire", len(leased))

    def record_seen(self, items: Sequence[tuple[bytes, str]]) -> str:
        """Check and record (dedup argument, route) items storing no request, each in one
        step (``lua/seen.lua``), in the route's shard, where the Scheduler's admissions
        record it: a dupefilter used on its own. One call per shard, sent at once; a flag
        per item, "1" new, "0" seen. (One part has no use for the route.)"""
        if not self.sharded:
            return self.base.record_seen(items)
        by_shard: dict[int, list[int]] = {}
        for i, (_, route) in enumerate(items):
            if not route:
                raise ValueError("a sharded crawl needs each request's route (its domain or host)")
            by_shard.setdefault(shard_of(route, self.n), []).append(i)
        shards = list(by_shard)
        calls = [self.shards[s].seen_call([items[i][0] for i in by_shard[s]]) for s in shards]
        flags = [""] * len(items)
        raw: Any  # a script's reply: read below by the shape its script answers
        for shard, raw in zip(shards, self.scripts.run_many(calls)):
            if isinstance(raw, Exception):
                raise raw
            frontier, indexes = self.shards[shard], by_shard[shard]
            result = frontier.read_admission(raw)
            if isinstance(result, AdmitResult):
                got = result.flags
            else:  # the Bloom filter grew: this shard alone, again
                done = result or ""
                got = done + frontier.record_seen([items[i] for i in indexes[len(done) :]])
            for i, flag in zip(indexes, got):
                flags[i] = flag
        return "".join(flags)

    def take_starts(
        self, n: int, legacy_key: str | Sequence[str] | None = None, lanes: Sequence[str] = ()
    ) -> list[tuple[str, bytes]]:
        """Lease up to ``n`` start entries from the crawl's ``lanes`` (start_urls alone by
        default), then scrapy-redis's ``legacy_key`` (one or several), in that order:
        [(lease id, raw entry)], acked with the admission of the requests made from it."""
        return self.base.take_starts(n, legacy_key, lanes)

    # -- leases ------------------------------------------------------------------
    def heartbeat(
        self,
        lease_ids: Iterable[str],
        *,
        producing: bool = False,
        metrics: Mapping[str, Arg] | None = None,
        totals: dict[str, int] | None = None,
    ) -> list[str]:
        """Mark this node alive, renew its leases, count its ``totals`` in the run's counters
        (what is new since they were counted: sent again, a beat counts nothing twice);
        return the ids it lost (:meth:`beat` answers with the rest of what it read)."""
        return self.beat(lease_ids, producing=producing, metrics=metrics, totals=totals).lost

    def beat(
        self,
        lease_ids: Iterable[str],
        *,
        producing: bool = False,
        metrics: Mapping[str, Arg] | None = None,
        totals: dict[str, int] | None = None,
    ) -> Beat:
        """:meth:`heartbeat`, answering with the :class:`Beat` (the leases lost, the pause, the
        run's state, a loss of data marked), without the reap."""
        return self._beat(lease_ids, producing, metrics, totals, reap_limit=None)

    def reap(self, limit: int = 1000) -> tuple[int, int]:
        """Requeue expired leases (dead-lettering over-delivered ones) in every part: (requeued, dead)."""
        requeued = dead = 0
        raw: Any  # a script's reply: read below by the shape its script answers
        for raw in self.scripts.run_many([f.reap_call(limit) for f in self.all_parts]):
            if isinstance(raw, Exception):
                raise raw
            requeued += int(raw[0])
            dead += int(raw[1])
        return requeued, dead

    def heartbeat_and_reap(
        self,
        lease_ids: Iterable[str],
        *,
        producing: bool = False,
        metrics: Mapping[str, Arg] | None = None,
        totals: dict[str, int] | None = None,
        limit: int = 1000,
    ) -> Beat:
        """:meth:`heartbeat`, then :meth:`reap` and a history sample (crawlplug.history.store)
        of every part, in one round trip (a shard's renewal before its reap: same keys, same
        node, in call order)."""
        return self._beat(lease_ids, producing, metrics, totals, reap_limit=limit)

    def _beat(
        self,
        lease_ids: Iterable[str],
        producing: bool,
        metrics: Mapping[str, Arg] | None,
        totals: dict[str, int] | None,
        reap_limit: int | None,
    ) -> Beat:
        """The heartbeat in the crawl's own keys, each shard's renewal of this node's leases
        and, with ``reap_limit``, every part's reap and history sample: one pipeline."""
        groups = self._group_ids(lease_ids)
        calls = [
            self.base.heartbeat_call(groups.get(self._own, ()), producing=producing, metrics=metrics, totals=totals)
        ]
        # each shard holding leases of this node, or its record (lua/record.lua: did it go back in time?)
        shards = [p for p in range(self.n) if p in groups or self.shards[p].record.confirmed] if self.sharded else []
        calls += [self.shards[p].renew_call(groups.get(p, ())) for p in shards]
        everyone = self.all_parts
        sampled: list[Any] = []
        samples: list[Call] = []
        if reap_limit is not None:
            calls += [f.reap_call(reap_limit) for f in everyone]
            # every part's history sample (a node's frontier has a sampler: crawlplug.history),
            # keys named by the crawl's own clock estimate
            now = self.base.redis_now_estimate()
            samples = [c for c in (f.history_call(now) for f in everyone) if c is not None]
            calls += samples
        results: list[Any] = self.scripts.run_many(calls)  # replies, read below by their scripts' shapes
        if samples:
            results, sampled = results[: -len(samples)], results[-len(samples) :]
        rolled = {p: raw for p, raw in zip([self._own, *shards], results) if isinstance(raw, RolledBack)}
        if rolled:
            raise self.went_back(rolled)
        for raw in results:
            if isinstance(raw, Exception):
                raise raw
        for reply in sampled:
            self.base.history_sampled(reply)
        lost, paused, run_state, data_lost = self.base.read_beat(results[0])
        for p, raw in zip(shards, results[1 : 1 + len(shards)]):
            lost += [f"{p}.{x}" for x in self.shards[p].read_renewal(raw)]
        reaped = results[1 + len(shards) :]
        return Beat(
            lost,
            (sum(int(raw[0]) for raw in reaped), sum(int(raw[1]) for raw in reaped)),
            paused=paused,
            run_state=run_state,
            data_lost=data_lost,
        )

    # -- when a part went back in time (crawlplug.frontier.record) -------------------------
    def went_back(self, rolled: dict[int, RolledBack]) -> RolledBack:
        """Parts ``rolled`` refused a call because they went back in time: every lease this
        node holds, in every part, is given back (a lost admission in one shard may be of
        any page's children); each shard that went back gets again what this node admitted
        to it since the last call it still has (:class:`~crawlplug.frontier.record.ResendLog`).
        Returns the error to raise, naming the leases given back: once per refusal (one a
        call inside this one met and settled already is returned as it is)."""
        first = next(iter(rolled.values()))
        if all(exc.settled for exc in rolled.values()):
            return first
        for index, exc in rolled.items():
            self.part(index).record.confirmed = exc.found  # what it has now: the next call is checked against it
        given: list[str] = []
        for index in [self._own] if not self.sharded else [BASE, *range(self.n)]:
            given += self._named(index, self.part(index).give_back_held())
        for index, exc in sorted(rolled.items()):
            log_went_back(self.part(index).keys, len(given))
            if index != BASE:  # (unsharded, the crawl's own part is index 0)
                self._resend_to(index, exc.found)
        out = RolledBack(str(first), given)
        out.settled = True
        return out

    def _resend_to(self, shard: int, found: int) -> None:
        """Admit again in ``shard`` what this node logged admitting there after its call
        ``found`` (unsharded: its start requests)."""
        where = f"shard {shard}" if self.sharded else "Redis"
        what = "requests" if self.sharded else "start requests"
        items, complete = self.resend[shard].since(found)
        if not complete:
            logger.error(
                "crawlplug: %s of crawl %r went back further than this node's resend log reaches "
                "(CRAWLPLUG_RESEND_WINDOW=%ss): %s it admitted there before then may be lost; the "
                "crawl goes on with what it holds (docs/faults.md, 'When Redis goes back in time')",
                where,
                self.keys.crawl,
                self.resend[shard].window,
                what,
            )
        if not items:
            return
        try:
            result = self.shards[shard].admit(items)
        except (redis.RedisError, RuntimeError) as exc:
            logger.error(
                "crawlplug: could not send %d %s again to %s after it went back in time (%s): they may be lost",
                len(items),
                what,
                where,
                exc,
            )
            return
        logger.warning(
            "crawlplug: sent %d %s again to %s, which went back in time (%d of them were missing there)",
            len(items),
            what,
            where,
            result.admitted,
        )

    def release(self, ids: Sequence[str], *, unstarted: bool) -> int:
        """Give leases back to the queue now (``unstarted``: without counting a delivery)."""
        groups = self._group_ids(ids)
        if not groups:
            return 0
        total = 0
        calls = [self.part(p).release_call(a, unstarted=unstarted) for p, a in groups.items()]
        raw: Any  # a script's reply: read below by the shape its script answers
        for (p, part_ids), raw in zip(groups.items(), self.scripts.run_many(calls)):
            if isinstance(raw, Exception):
                raise raw
            self.part(p).record.done(part_ids)
            total += int(raw)
        return total

    def dead_letter(self, lease_id: str, reason: str, **extra: object) -> bool:
        """Move a leased request to the dead letters, with why (a shard's letter names its shard)."""
        part, raw = self.split_id(lease_id)
        if self.sharded:
            extra["shard"] = part
        return self.part(part).dead_letter(raw, reason, **extra)

    # -- views ---------------------------------------------------------------------
    def idle_state(self) -> Idle:
        """(queued, leased, live producers) over every part, with the start entries waiting,
        whether the crawl's data was found lost and what start_urls holds if not a list: to
        tell an idle crawl from a done one."""
        queued = leased = producers = 0
        results: list[Any] = self.scripts.run_many([f.idle_call() for f in self.all_parts])  # idle.lua's replies
        for raw in results:
            if isinstance(raw, Exception):
                raise raw
            queued += int(raw[0])
            leased += int(raw[1])
            producers += int(raw[2])
        own = results[0]  # the crawl's own keys: its start entries, its loss mark, start_urls
        return Idle(
            queued,
            leased,
            producers,
            start_entries=int(own[3]),
            data_lost=bool(int(own[4])),
            start_urls_kind=text(own[5]),
        )

    def __len__(self) -> int:
        return sum(len(f) for f in self.shards)

    def purge(self) -> int:
        """Delete every key of the crawl's frontier, in every part; how many."""
        return sum(f.purge() for f in self.all_parts)


def open_domains(client: redis.Redis, keys: CrawlKeys) -> Domains:
    """The per-domain schedule of an existing crawl, over its shards if it has them."""
    return Domains(client, keys, parts(client, keys)[1:] or [keys])
