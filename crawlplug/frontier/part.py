"""One part of a crawl's frontier: the calls on one key set (a crawl's own keys, or one
shard's), as the Lua scripts of :mod:`crawlplug.frontier.scripts` take them, and what
their replies say.

A :class:`Part` builds each script call (admission, pop, renewal, heartbeat, reap,
release, idle read, history sample), reads its reply, and keeps what is this node's in
this key set: its call record (record.py: the ids that tell it Redis went back in time,
the leases it holds), the admission whose reply was lost (sent again, first, by the next
one) and the pop whose reply was lost. It decides nothing across parts:
:class:`crawlplug.frontier.core.Frontier` drives one part (an unsharded crawl) or N + 1
(a sharded one) with the same code. Its value types are crawlplug.frontier.results, its
formats crawlplug.frontier.store.

Its size: about thirty short methods, each building one script call or reading one reply
(their key and argument lists mirror the scripts'), and the rules for an admission or a
pop whose reply was lost (:meth:`Part.settle`), which only a part can apply.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, cast

import redis

from ..errors import AdmissionIncomplete, RedisFailure, ReplyLost, RolledBack, StaleEpoch, failure_kind
from ..queues import BaseQueue, PriorityQueue
from .dedup import Dedup, SetDedup
from .keys import NAMES, CrawlKeys
from .record import CallRecord
from .results import Admission, AdmitResult, Leased, Leases, joined, leased_from, new_node_id
from .scripts import Scripts
from .store import redis_ms, text

if TYPE_CHECKING:
    from .calls import Arg, Call, Reply, Sampler

__all__ = ["POP_ARG", "POP_AT", "FrontierOptions", "Part", "PartOptions", "admit_in_parts", "log_went_back"]

logger = logging.getLogger(__name__)

#: admit.lua's ARGV[POP_AT + 1]: the pop made after the admission in the same call
#: ("" none: :meth:`Part._admit_args`; :meth:`Part.admit_pop_call` fills it in)
POP_AT = 4
POP_ARG = "{n} {lease_ms} {order}"


class PartOptions(TypedDict, total=False):
    """A part's settings besides its keys, client, dedup, node id, scripts and epoch, as
    :class:`crawlplug.frontier.core.Frontier` hands them to each of its parts."""

    queue: type[BaseQueue] | BaseQueue
    lease_timeout: float
    heartbeat: float
    max_deliveries: int
    run_id: int | None
    #: what the heartbeat samples into the crawl's history (None: no history)
    sampler: Sampler | None


class FrontierOptions(PartOptions, total=False):
    """crawlplug.frontier.core.open_frontier's settings besides the shards and the dedup
    factory: a Frontier's own, and the :class:`PartOptions` it hands on (here, beside them)."""

    dedup: str | Dedup
    node_id: str | None
    epoch: int | str
    resend_window: float


class Part:
    """The calls on one key set ``keys`` of a crawl's frontier, on ``client``, with its
    queue kind and dedup strategy, as node ``node_id``."""

    NO_LANES: tuple[str, ...] = ()

    def __init__(
        self,
        client: redis.Redis,
        keys: CrawlKeys,
        *,
        queue: type[BaseQueue] | BaseQueue = PriorityQueue,
        dedup: str | Dedup = "set",
        node_id: str | None = None,
        lease_timeout: float = 30.0,
        heartbeat: float = 2.0,
        max_deliveries: int = 5,
        scripts: Scripts | None = None,
        epoch: int | str = "",
        run_id: int | None = None,
        sampler: Sampler | None = None,
    ) -> None:
        self.client = client
        self.keys = keys
        self.queue = queue() if isinstance(queue, type) else queue
        self.dedup = _dedup(dedup)
        self.node_id = node_id or new_node_id()
        self.lease_ms = int(lease_timeout * 1000)
        # a node is declared dead after 3 missed heartbeats (reap.lua frees its per-domain
        # slots then; its leases wait for lease_timeout)
        self.node_ttl_ms = int(3 * heartbeat * 1000)
        self.heartbeat_ms = int(heartbeat * 1000)
        self.max_deliveries = max_deliveries
        self.scripts = scripts or Scripts(client)
        #: the history's sample call of this part, with each heartbeat (None: none)
        self.sampler = sampler
        #: the ids of its admissions, the last one Redis recorded, the leases it holds: what
        #: tells it that Redis went back in time, and what it then gives back (record.py)
        self.record = CallRecord()
        #: the admission whose reply was lost (sent again, first, with its id: see
        #: settle), as (call id, keys, args, number of items, of acks, of events)
        self.uncertain: tuple[str, list[str], list[Arg], int, int, int] | None = None
        self._epoch = str(epoch)
        k = keys
        #: requests waiting in the queue, as the last pop saw them (-1: none seen yet)
        self.queued_seen = -1
        #: the run this node joined (crawlplug.crawl.runs; None: none): its history samples carry it
        self.run_id = run_id
        #: the crawl's start-entry lists this node reads besides start_urls (its lanes,
        #: CRAWLPLUG_START_KEYS): their entries count as work, and return there when given back
        self.lanes = self.NO_LANES
        #: Redis's clock at the last heartbeat's reply (ms) and this process's monotonic
        #: clock then: the estimate of Redis's clock the history keys are named by
        self._clock: tuple[int, float] | None = None
        self._history_failed = False  # a failed history sample was logged (once)
        dk = k.domain_keys()
        # the run hash last but one: its state and limits (a shard's is absent: no limit there)
        self._pop_keys = [
            k.queue,
            k.requests,
            k.leases,
            k.leased,
            k.deliveries,
            k.stats,
            *dk,
            k.reply(self.node_id),
            k.run,
            k.epoch,
        ]
        #: a pop whose reply was lost: (keys, args), sent again first by the next pop (its
        #: leases come back, pop.lua's replay, instead of waiting to expire): pop_call, read_pop
        self._uncertain_pop: tuple[list[str], list[Any]] | None = None
        self._reap_keys = [
            k.leases,
            k.leased,
            k.queue,
            k.deliveries,
            k.requests,
            k.dead,
            k.stats,
            k.nodes,
            k.producers,
            *dk,
            k.start_urls,
            k.series,
            k.graveyard,
        ]

    @property
    def epoch(self) -> str:
        """The epoch this frontier's calls carry (lua/epoch.lua): the run a node joined
        (crawlplug.crawl.runs); "" checks nothing (operator tools, tests). Another epoch
        is another state of the crawl: what the node held and its call record are of the old one."""
        return self._epoch

    @epoch.setter
    def epoch(self, value: int | str) -> None:
        if str(value) != self._epoch:
            self.record.forget_all()
        self._epoch = str(value)

    # -- admission and leasing ---------------------------------------------
    def _admit_keys(self, extra: Sequence[str]) -> list[str]:
        k = self.keys
        return [
            self.dedup.seen_key(k),
            k.queue,
            k.requests,
            k.seq,
            k.leases,
            k.leased,
            k.deliveries,
            k.stats,
            *k.domain_keys(),
            k.series,
            k.reply(self.node_id),
            k.run,
            *extra,
            k.epoch,
        ]

    def _admit_args(
        self,
        items: Sequence[Admission],
        acks: Sequence[str],
        events: Sequence[tuple[str, str]] = (),
        call: str = "",
        dedup_args: Sequence[bytes] | None = None,
    ) -> list[Any]:
        """The admission's ARGV, with no pop (:data:`POP_ARG`); ``dedup_args``: the items'
        dedup arguments as the call takes them (Dedup.call_keys), else :meth:`_dedup_keys`'s."""
        if dedup_args is None:
            dedup_args = self._dedup_keys([item[0] for item in items])[1]
        args: list[Any] = [self.dedup.mode, self.node_id, self.dedup.param(), call, "", len(acks), *acks, len(events)]
        for lease_id, kind in events:
            args += [lease_id, kind]
        for item, darg in zip(items, dedup_args):
            args += [darg, item[1], item[2], item[3] if len(item) > 3 else ""]
        args.append(self.epoch)
        return args

    def _dedup_keys(self, arguments: Sequence[bytes]) -> tuple[list[str], list[bytes]]:
        """The dedup keys a call with ``arguments`` passes after the dedup state's, and the
        arguments it sends (Dedup.call_keys)."""
        return self.dedup.call_keys(self.keys, arguments)

    def read_admission(
        self, raw: Reply, args: Sequence[Arg] | None = None, acks: Sequence[str] = ()
    ) -> AdmitResult | str | None:
        """The script's answer: a result, None to call again (Bloom filter grew
        elsewhere), or the flags of a partial batch (Bloom filter grew twice). ``args``:
        the admission's ARGV, whose call id is then recorded as Redis's last of this
        node when the reply says it kept it; ``acks``: its acks, no longer held once done."""
        raw = cast("list[Any]", raw)  # admit.lua's and seen.lua's replies
        if raw[0] == b"STALE":
            self.dedup.observe(text(raw[1]))
            return None
        if raw[0] == b"STALE_GEN":
            self.dedup.observe_generation(int(raw[1]))  # type: ignore[attr-defined]
            return None
        if raw[0] == b"STALE_SPEC":  # the compact store buckets by another spec: the crawl's
            self.dedup.observe_spec(text(raw[1]))  # type: ignore[attr-defined]
            return None
        if raw[0] == b"PARTIAL":
            self.dedup.observe(text(raw[2]))
            if args is not None and len(raw) == 3:
                self.record.recorded(cast(str, args[3]))  # the call id
            return text(raw[1])
        self.dedup.observe(text(raw[3]))
        if args is not None and len(raw) == 4:  # a fifth element: "unrecorded" (admit.lua)
            self.record.recorded(cast(str, args[3]))
        self.record.done(acks)
        return AdmitResult(text(raw[0]), int(raw[1]), int(raw[2]))

    def admit(
        self, items: Sequence[Admission], acks: Sequence[str] = (), events: Sequence[tuple[str, str]] = ()
    ) -> AdmitResult:
        """Store ``items`` (deduplicated) and make ``acks`` in this part, the acks in the call
        that stores the last item: an uncertain admission this one repeats is sent again
        first (:meth:`settle`), and the call again while a Bloom filter grows elsewhere.
        Raises what the script raised (a RolledBack as it is: the frontier gives back)."""
        most = self.dedup.most_per_call()
        if len(items) > most:
            return admit_in_parts(self.admit, items, acks, events, most)
        before, replayed, items, acks, events = self.settle(items, acks, events)
        if replayed:  # an uncertain admit-and-pop's leases, not asked for now: back to the queue
            self.release([x.id for x in replayed], unstarted=True)
        if before is not None and not items and not acks and not events:
            return before
        done = ""
        stale_rounds = 0
        while True:
            rest = items[len(done) :]
            call = self.admit_call(rest, acks, events)
            try:
                raw = self._guarded(call, len(rest), len(acks), len(events), self.scripts.admit)
            except RolledBack:
                raise
            except redis.RedisError as exc:
                stored = (before.flags if before is not None else "") + done
                if stored:  # an earlier call (sent again, or before a Bloom layer) stored its part
                    raise AdmissionIncomplete(stored + "-" * len(rest), exc) from exc
                raise
            result = self.read_admission(raw, call[2], acks)
            if isinstance(result, AdmitResult):
                result.flags = done + result.flags
                return joined(before, result)
            if result is None:
                stale_rounds += 1
                if stale_rounds > 10:
                    raise RuntimeError("the Bloom filter keeps growing elsewhere; giving up this admission")
            else:
                done += result

    def record_seen(self, items: Sequence[tuple[bytes, str]]) -> str:
        """Check and record dedup arguments without storing a request (a dupefilter used on
        its own): one ``lua/seen.lua`` call, each argument checked and set in one step.
        An item is (dedup argument, route); one part has no use for the route. Returns a
        flag per item, "1" new, "0" seen. Called again only when the script changed
        nothing because a Bloom filter grew elsewhere (or its window turned), or for
        the rest of a batch that needed two new layers."""
        most = self.dedup.most_per_call()
        if len(items) > most:
            return "".join(self.record_seen(items[i : i + most]) for i in range(0, len(items), most))
        done = ""
        for _ in range(12):
            rest = [arg for arg, _ in items[len(done) :]]
            if not rest:
                return done
            _, keys, args = self.seen_call(rest)
            result = self.read_admission(self.scripts.seen(keys=keys, args=args))
            if isinstance(result, AdmitResult):
                return done + result.flags
            done += result or ""
        raise RuntimeError("the Bloom filter keeps growing elsewhere; giving up this check")

    def seen_call(self, args: Sequence[bytes]) -> Call:
        """The ``seen.lua`` call of :meth:`record_seen` (a sharded crawl sends its shards' at once)."""
        d, k = self.dedup, self.keys
        extra, out = self._dedup_keys(args)
        return ("seen", [d.seen_key(k), *extra], [d.mode, d.param(), *out])

    def read_pop(self, raw: Reply, call: Call) -> Leases:
        """A pop.lua reply to ``call`` (or the error it met, raised): the leases, and the call
        recorded if it leased any. A reply lost (the connection broke) may be of a pop that
        ran: the next :meth:`pop_call` sends it again by the same id, and pop.lua answers
        the leases it gave, instead of their waiting to expire."""
        _, keys, args = call
        if isinstance(raw, Exception):
            lost = failure_kind(raw) is ReplyLost and keys == self._pop_keys
            self._uncertain_pop = (keys, args) if lost else None
            raise raw
        self._uncertain_pop = None
        leased = self.read_leases(raw)
        if leased:
            self.record.recorded(cast(str, args[4]))  # the pop's call id
        return leased

    def _pop_args(self, n: int) -> list[Any]:
        return [self.node_id, n, self.lease_ms, self.queue.order, self.record.next_call(), self.epoch]

    def _pop_after_admit_call(self, n: int) -> Call:
        """A pop sent beside an admission to this part in another call of one batch (a sharded
        crawl's acks sent in a later round): it checks the keys an admission with no items
        passes now (a Bloom filter's, as it has grown so far; pop.lua), so a corrupt key
        refuses both and the part changes nothing. An admission and a pop of one call are
        one admit.lua call (:meth:`admit_pop_call`)."""
        k = self.keys
        extra = self._dedup_keys(())[0]
        keys = [
            *self._pop_keys[:-3],
            self.dedup.seen_key(k),
            k.seq,
            k.series,
            *extra,
            k.reply(self.node_id),
            k.run,
            k.epoch,
        ]
        args = [*self._pop_args(n)[:-1], self.dedup.mode, self.dedup.param(), self.epoch]
        return ("pop", keys, args)

    # -- the calls, for a sharded crawl to pipeline over its shards (crawlplug.frontier.core) --
    def admit_call(
        self, items: Sequence[Admission], acks: Sequence[str], events: Sequence[tuple[str, str]] = ()
    ) -> Call:
        self._uncertain_pop = None  # a pop sent again after this call would not be answered as it was
        extra, dedup_args = self._dedup_keys([item[0] for item in items])
        return ("admit", self._admit_keys(extra), self._admit_args(items, acks, events, self._call_id(), dedup_args))

    def admit_pop_call(
        self, items: Sequence[Admission], acks: Sequence[str], events: Sequence[tuple[str, str]], n: int
    ) -> Call:
        """An admission that then pops ``n`` in the same admit.lua call (a sharded crawl's
        admit-and-pop in one shard); its reply is {admission's reply, pop's reply}, or the
        admission's alone (in a list) when it must be sent again (STALE, PARTIAL)."""
        name, keys, args = self.admit_call(items, acks, events)
        return (name, keys, self._with_pop(args, n))

    def _with_pop(self, args: list[Any], n: int) -> list[Any]:
        """An admission's ARGV with the pop of ``n`` after it (admit.lua ARGV[5])."""
        pop = POP_ARG.format(n=max(0, int(n)), lease_ms=self.lease_ms, order=self.queue.order)
        return [*args[:POP_AT], pop, *args[POP_AT + 1 :]]

    # -- admissions whose reply was lost ------------------------------------------
    # admit.lua answers a call sent again with its id (the connection reset after the
    # script ran, and redis-py retried) with the reply it had, doing nothing twice.
    # When the retry failed too, the caller (the scheduler) sends the same batch again
    # later, with more appended: that call first sends the lost one again, exactly,
    # then the rest.
    def _call_id(self) -> str:
        return self.record.next_call()

    def _guarded(
        self, call: tuple[str, list[str], list[Any]], n_items: int, n_acks: int, n_events: int, run: Any
    ) -> Any:
        """``run(keys=, args=)`` for an admission call; a Redis error leaves it uncertain."""
        _, keys, args = call
        try:
            raw = run(keys=keys, args=args)
        except ReplyLost:  # it may have run: its reply was lost
            self.uncertain = (args[3], keys, args, n_items, n_acks, n_events)
            raise
        except RedisFailure:  # refused (a corrupt key, a full Redis, another epoch): it wrote nothing
            self.uncertain = None
            raise
        self.uncertain = None
        return raw

    def note_uncertain(self, call: Call, exc: BaseException, n_items: int, n_acks: int, n_events: int) -> None:
        """An admission ``call`` sent outside :meth:`admit` (a sharded crawl's pipeline) met
        ``exc``: if its reply may have been lost, the next admission sends it again first."""
        if failure_kind(exc) is ReplyLost:
            _, keys, args = call
            self.uncertain = (cast(str, args[3]), keys, args, n_items, n_acks, n_events)

    def settle(
        self, items: Sequence[Admission], acks: Sequence[str], events: Sequence[tuple[str, str]]
    ) -> tuple[AdmitResult | None, Leases, Sequence[Admission], Sequence[str], Sequence[tuple[str, str]]]:
        """Before an admission: send the uncertain one again first if this one repeats it,
        exactly (with its pop, if it had one: admit.lua answers the leases it gave).

        Returns the result of the one sent again (None if none was), the leases its pop
        gave, and what is left of this admission to send. An admission that does not
        begin with the uncertain one drops it: if that one ran, the requests it stored
        count as duplicates when sent again under a new id (counted wrong, nothing lost),
        and its pop's leases expire.
        """
        uncertain, self.uncertain = self.uncertain, None
        if uncertain is None:
            return None, Leases(), items, acks, events
        call, keys, args, n_items, n_acks, n_events = uncertain
        admission = [*args[:POP_AT], "", *args[POP_AT + 1 :]]  # the call's admission alone
        repeated = (
            len(items) >= n_items
            and len(acks) >= n_acks
            and len(events) >= n_events
            and self._admit_args(items[:n_items], acks[:n_acks], events[:n_events], call) == admission
        )
        if not repeated:
            return None, Leases(), items, acks, events
        raw = self._guarded(("admit", keys, args), n_items, n_acks, n_events, self.scripts.admit)
        leased = Leases()
        if args[POP_AT]:  # {admission's reply, the leases its pop gave} (or the admission's alone)
            leased = self.read_leases(raw[1]) if len(raw) > 1 else Leases()
            raw = raw[0]
        result = self.read_admission(raw, args, acks[:n_acks])
        if isinstance(result, AdmitResult):
            return result, leased, items[n_items:], acks[n_acks:], events[n_events:]
        if result is None:  # a Bloom filter grew elsewhere: that call changed nothing
            return None, leased, items, acks, events
        # PARTIAL: the requests its flags cover are stored, none of its acks made
        return AdmitResult(result, 0, 0), leased, items[len(result) :], acks, events

    def pop_call(self, n: int, *, after_admit: bool = False) -> Call:
        """A pop of ``n``: the one whose reply was lost, if any, sent again as it was."""
        if after_admit:
            return self._pop_after_admit_call(n)
        if self._uncertain_pop is not None:
            return ("pop", *self._uncertain_pop)
        return ("pop", self._pop_keys, self._pop_args(n))

    def renew_call(self, lease_ids: Sequence[str]) -> Call:
        """Renew ``lease_ids`` in this part (a shard) and check that it did not go back in time."""
        k = self.keys
        return (
            "renew",
            [k.leases, k.leased, k.reply(self.node_id), k.epoch],
            [self.node_id, self.lease_ms, self.record.check(), *lease_ids, self.epoch],
        )

    def reap_call(self, limit: int = 1000) -> Call:
        return ("reap", [*self._reap_keys, *self.keys.lane_keys(self.lanes)], [self.max_deliveries, limit])

    def idle_call(self) -> Call:
        k = self.keys
        return ("idle", [k.queue, k.leases, k.producers, k.dq, k.start_urls, k.control, *k.lane_keys(self.lanes)], [])

    def release_call(self, ids: Sequence[str], *, unstarted: bool) -> Call:
        k = self.keys
        return (
            "release",
            [
                k.leases,
                k.leased,
                k.queue,
                k.deliveries,
                k.stats,
                *k.domain_keys(),
                k.requests,
                k.start_urls,
                *k.lane_keys(self.lanes),
                k.epoch,
            ],
            [self.node_id, "1" if unstarted else "0", *ids, self.epoch],
        )

    def heartbeat_call(
        self,
        lease_ids: Iterable[str],
        *,
        producing: bool = False,
        metrics: Mapping[str, Arg] | None = None,
        totals: Mapping[str, int] | None = None,
    ) -> Call:
        k = self.keys
        # how often it beats and how long its leases live: the views tell a late heartbeat
        # ("silent for 7 s") and when a silent node's leases return to the queue
        pairs: list[Any] = ["heartbeat_ms", self.heartbeat_ms, "lease_ms", self.lease_ms]
        for name, value in (metrics or {}).items():
            pairs += [name, value]
        added: list[Any] = []
        for name, value in (totals or {}).items():
            added += [name, int(value)]
        return (
            "heartbeat",
            [
                k.nodes,
                k.leases,
                k.leased,
                k.node(self.node_id),
                k.producers,
                k.control,
                k.stats,
                k.run,
                k.counted,
                k.reply(self.node_id),
                k.epoch,
            ],
            [
                self.node_id,
                self.lease_ms,
                self.node_ttl_ms,
                "1" if producing else "0",
                self.record.check(),
                len(pairs) // 2,
                *pairs,
                len(added) // 2,
                *added,
                *lease_ids,
                self.epoch,
            ],
        )

    # -- the history (crawlplug.history.store, through ``sampler``) ------------------
    def note_clock(self, redis_now_ms: int) -> None:
        """Remember Redis's clock as a heartbeat's reply gave it."""
        self._clock = (redis_now_ms, time.monotonic())

    def redis_now_estimate(self) -> int:
        """Redis's clock now, as the last heartbeat's reply and the time since tell it (this
        machine's clock before the first one): what the history keys are named by."""
        if self._clock is None:
            return int(time.time() * 1000)
        at, then = self._clock
        return at + int((time.monotonic() - then) * 1000)

    def history_call(self, now_ms: int | None = None) -> Call | None:
        """The call sampling this part into the crawl's history (crawlplug/history/lua/history.lua);
        None without a sampler."""
        if self.sampler is None:
            return None
        now = self.redis_now_estimate() if now_ms is None else now_ms
        return self.sampler(self.keys, now, self.epoch, self.run_id)

    def history_sampled(self, reply: Reply) -> None:
        """A history sample's reply: a failure (a full Redis refuses it, a key written by hand)
        is logged once and costs the crawl nothing; the heartbeat it rode with went through."""
        if isinstance(reply, Exception):
            if not isinstance(reply, StaleEpoch) and not self._history_failed:
                self._history_failed = True
                logger.warning(
                    "crawlplug: could not write the crawl's history (%s); the crawl goes on, "
                    "its history has a gap (said once, until a sample goes through again)",
                    reply,
                )
            return
        self._history_failed = False

    def read_leases(self, raw: Reply) -> Leases:
        """A pop's reply: its leases (held from now on), and what it says of the queue."""
        raw = cast("list[Any]", raw)  # pop.lua's: (id, payload, deliveries[, reports]) flat, then its counts
        self.queued_seen = int(raw[-1])
        raw = raw[:-1]
        if getattr(self.queue, "order", None) != "domain":
            leased = Leases(leased_from(raw), queued_seen=self.queued_seen)
        else:
            # the per-domain queue: a report flag per request, and when its next domain is ready
            next_ready_ms = int(raw[-1])
            leased = Leases(
                (
                    Leased(text(raw[i]), raw[i + 1], int(raw[i + 2]), text(raw[i + 3]))
                    for i in range(0, len(raw) - 1, 4)
                ),
                next_ready_ms=next_ready_ms,
                queued_seen=self.queued_seen,
            )
        self.record.took(x.id for x in leased)
        return leased

    # -- when Redis went back in time (record.py, lua/record.lua) ---------------------------
    def give_back_held(self) -> list[str]:
        """Give back every lease this part holds, now (a release: each returns to the queue,
        a start entry to the head of its list, where Redis still has it leased to this
        node). Returns their ids; the node must forget them. A release that fails leaves
        them to expire, as a dead node's do."""
        ids = list(self.record.held)
        self.record.held.clear()
        if ids:
            try:
                _, keys, args = self.release_call(ids, unstarted=False)
                self.scripts.release(keys=keys, args=args)
            except redis.RedisError as exc:
                logger.warning(
                    "crawlplug: could not give back %d leases now (%s); they expire and are fetched again then",
                    len(ids),
                    exc,
                )
        return ids

    def take_starts(
        self, n: int, legacy_key: str | Sequence[str] | None = None, lanes: Sequence[str] = ()
    ) -> list[tuple[str, bytes]]:
        """Lease up to ``n`` start entries: [(lease id, raw entry)]. Ack a lease
        with the admission of the requests made from it (``admit(..., acks)``).

        Entries come from the crawl's own lists in ``lanes`` order (key names after the
        crawl's tag: ``start_urls`` and ``start_urls:<lane>``; crawlplug.config.start_keys),
        ``start_urls`` alone when none is given, then from scrapy-redis's ``legacy_key``
        (``<spider>:start_urls``, or several, in priority order): every entry of a key
        before any of the next."""
        k = self.keys
        own = [k.key(name) for name in (lanes or ("start_urls",))]
        legacy = [legacy_key] if isinstance(legacy_key, str) else list(legacy_key or ())
        legacy = [key for key in dict.fromkeys(legacy) if key not in own]
        raw = self.scripts.starts(
            keys=[k.requests, k.seq, k.leases, k.leased, k.stats, *own, *legacy, k.epoch],
            args=[self.node_id, n, self.lease_ms, len(own), self.epoch],
        )
        taken = [(text(raw[i]), raw[i + 1]) for i in range(0, len(raw), 2)]
        self.record.took(lease_id for lease_id, _ in taken)
        return taken

    def read_beat(self, out: Reply) -> tuple[list[str], bool, str, bool]:
        """A heartbeat's reply: the ids this node lost, whether the crawl is paused, the run's
        state, whether a node found the crawl's data lost."""
        out = cast("list[Any]", out)  # heartbeat.lua's
        self.note_clock(int(out[0]))
        lost = [text(x) for x in out[4:]]
        self.record.done(lost)
        return lost, bool(int(out[1])), text(out[2]), bool(int(out[3]))

    def read_renewal(self, out: Reply) -> list[str]:
        """A renewal's reply (renew.lua): the ids this node lost in this part."""
        out = cast("list[bytes]", out)
        lost = [text(x) for x in out]
        self.record.done(lost)
        return lost

    def release(self, ids: Sequence[str], *, unstarted: bool) -> int:
        """Give leases back to the queue now (closing node)."""
        if not ids:
            return 0
        _, keys, args = self.release_call(ids, unstarted=unstarted)
        released = int(self.scripts.release(keys=keys, args=args))
        self.record.done(ids)
        return released

    def forget_dedup_layers(self) -> None:
        """The crawl was reset: what the dedup strategy knew of a Bloom filter's layers is wrong."""
        forget = getattr(self.dedup, "forget", None)
        if forget is not None:
            forget()

    def redis_ms(self) -> int:
        """Redis's clock (ms): every time a crawl shows or compares, whatever the node's clock says."""
        return redis_ms(self.client)

    def dead_letter(self, lease_id: str, reason: str, **extra: object) -> bool:
        """Move a leased request to the dead letters with ``reason``."""
        k = self.keys
        header: dict[str, object] = {"id": lease_id, "reason": reason, "node": self.node_id, "at": self.redis_ms()}
        header.update(extra)
        moved = self.scripts.dead(
            keys=[k.leases, k.leased, k.requests, k.deliveries, k.dead, k.stats, *k.domain_keys(), k.epoch],
            args=[self.node_id, lease_id, json.dumps(header, separators=(",", ":")), self.epoch],
        )
        self.record.done((lease_id,))
        return bool(moved)

    def __len__(self) -> int:
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(self.keys.queue)
        pipe.zcard(self.keys.dq)
        return sum(pipe.execute())

    def purge(self) -> int:
        """Delete every key of this crawl; returns how many were deleted."""
        names = [self.keys.key(n) for n in NAMES] + self.dedup.state_keys(self.keys)
        for pattern in ("node:*", "reply:*", "bloom*", "seen*", "fph*", "start_urls:*"):  # start_urls:*: its lanes
            names += [text(x) for x in self.client.scan_iter(match=f"{self.keys.tag}:{pattern}", count=1000)]
        names = list(dict.fromkeys(names))
        return sum(int(self.client.delete(*names[i : i + 1000])) for i in range(0, len(names), 1000))


def _dedup(dedup: str | Dedup) -> Dedup:
    if isinstance(dedup, Dedup):
        return dedup
    if dedup == "set":
        return SetDedup()
    if dedup == "hash":
        from .fphash import HashDedup, SplitSpec  # noqa: PLC0415 - fphash builds on this module's Dedup

        return HashDedup(SplitSpec())
    if dedup == "none":
        return Dedup()
    raise ValueError(f"unknown dedup mode {dedup!r}; pass a crawlplug.frontier.dedup strategy")


def admit_in_parts(
    admit: Callable[[Sequence[Admission], Sequence[str], Sequence[tuple[str, str]]], AdmitResult],
    items: Sequence[Admission],
    acks: Sequence[str],
    events: Sequence[tuple[str, str]],
    most: int,
) -> AdmitResult:
    """``admit`` over ``items`` in parts of ``most``, the acks and events with the last (never
    before a request of the batch is stored). A part that fails after others went through
    raises AdmissionIncomplete saying which requests are stored."""
    done: AdmitResult | None = None
    for start in range(0, len(items), most):
        last = start + most >= len(items)
        try:
            result = admit(items[start : start + most], acks if last else (), events if last else ())
        except AdmissionIncomplete as exc:
            flags = (done.flags if done else "") + exc.flags
            raise AdmissionIncomplete(
                flags + "-" * (len(items) - len(flags)), exc.cause, exc.acks_done, exc.acked, exc.stale
            ) from exc
        except redis.RedisError as exc:
            if done is None:
                raise
            raise AdmissionIncomplete(done.flags + "-" * (len(items) - start), exc) from exc
        done = joined(done, result)
    assert done is not None
    return done


def log_went_back(keys: CrawlKeys, given: int) -> None:
    """The one line a node logs when it finds that Redis went back in time."""
    logger.warning(
        "crawlplug: Redis went back in time for crawl %r (%s): it holds an older state than this node's last "
        "call (a restart from a snapshot, a failover to a replica that lagged, a restored backup), so what "
        "this node's pages produced since may be lost. It gave back the %d leases it held, to be fetched "
        "again, and forgets the fingerprints it knew (docs/faults.md, 'When Redis goes back in time')",
        keys.crawl,
        keys.tag,
        given,
    )
