"""The Redis side of one crawl: admission, leases, acks, reaping, status.

A :class:`Frontier` knows nothing of Scrapy's engine: it moves opaque
payloads between the queue, the leases and the dead letters through the Lua
scripts of :mod:`crawlplug.frontier.scripts`. The Scheduler drives it; tests and the
operator command use it directly.

Its size: :class:`Frontier` is the whole crawlplug.frontier.interface.CrawlFrontier,
about forty short methods that each build or read one script call; its value types are
crawlplug.frontier.results, its formats crawlplug.frontier.store, the per-domain view
crawlplug.frontier.domains.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import redis

from ..errors import AdmissionIncomplete, StaleEpoch
from ..queues import BaseQueue, PriorityQueue
from . import history, runs
from .dedup import Dedup, SetDedup
from .keys import NAMES, CrawlKeys
from .results import Admission, AdmitResult, DeadLetter, Leased, joined, leased_from, new_node_id
from .scripts import Scripts
from .store import redis_ms, text

logger = logging.getLogger(__name__)

#: admit.lua's ARGV[POP_AT + 1]: the pop made after the admission in the same call
#: ("" none: :meth:`Frontier._admit_args`; :meth:`Frontier.admit_and_pop` fills it in)
POP_AT = 4
POP_ARG = "{n} {lease_ms} {order}"

class Frontier:
    """Queue, leases and dedup of crawl ``keys`` on ``client``."""

    #: whether the crawl is split into shards (crawlplug.frontier.sharded): no, one key set
    sharded = False

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
        # admission call ids: unique to this object, so no other caller's reply is ever taken for ours
        self._call_prefix = uuid.uuid4().hex[:8]
        self._calls = itertools.count(1)
        #: the admission whose reply was lost or refused (sent again, first, with its id: see
        #: _settle), as (call id, keys, args, number of items, of acks, of events)
        self._uncertain: tuple[str, list[str], list[Any], int, int, int] | None = None
        #: the epoch this frontier's calls carry (lua/epoch.lua): the run a node joined
        #: (crawlplug.frontier.runs); "" checks nothing (operator tools, tests)
        self.epoch = str(epoch)
        k = keys
        #: ms until the next domain is ready, from the last pop (DomainQueue; -1: unknown)
        self.next_ready_ms = -1
        #: start entries waiting in start_urls, at the last idle_state()
        self.start_entries = 0
        #: whether an operator paused the crawl, at the last heartbeat
        self.paused = False
        #: the run's state at the last heartbeat (crawlplug.frontier.runs; "" before one)
        self.run_state = ""
        #: whether a node found the crawl's data lost (control "lost"), at the last
        #: heartbeat or idle_state(): the crawl must then not read as finished
        self.data_lost = False
        #: the type start_urls holds when it is not a list ("" if it is one, or absent)
        self.start_urls_kind = ""
        #: the run this node joined (crawlplug.frontier.runs; None: none): its history samples carry it
        self.run_id = run_id
        #: Redis's clock at the last heartbeat's reply (ms) and this process's monotonic
        #: clock then: the estimate of Redis's clock the history keys are named by
        self._clock: tuple[int, float] | None = None
        self._history_failed = False  # a failed history sample was logged (once)
        dk = k.domain_keys()
        # the run hash last but one: its state and limits (a shard's is absent: no limit there)
        self._pop_keys = [k.queue, k.requests, k.leases, k.leased, k.deliveries, k.stats, *dk, k.run, k.epoch]
        self._reap_keys = [
            k.leases, k.leased, k.queue, k.deliveries, k.requests, k.dead, k.stats, k.nodes, k.producers, *dk,
            k.start_urls, k.series, k.graveyard,
        ]  # fmt: skip

    # -- admission and leasing ---------------------------------------------
    def _admit_keys(self, extra: Sequence[str]) -> list[str]:
        k = self.keys
        return [
            self.dedup.seen_key(k), k.queue, k.requests, k.seq, k.leases, k.leased, k.deliveries, k.stats,
            *k.domain_keys(), k.series, k.reply(self.node_id), k.run, *extra, k.epoch,
        ]  # fmt: skip

    def _admit_args(
        self, items: Sequence[Admission], acks: Sequence[str], events: Sequence[tuple[str, str]] = (),
        call: str = "", dedup_args: Sequence[bytes] | None = None,
    ) -> list[Any]:  # fmt: skip
        """The admission's ARGV, with no pop (:data:`POP_ARG`); ``dedup_args``: the items'
        dedup arguments as the call takes them (Dedup.call_keys), else :meth:`_dedup_keys`'s."""
        if dedup_args is None:
            dedup_args = self._dedup_keys([item[0] for item in items])[1]
        args: list[Any] = [self.dedup.mode, self.node_id, self.dedup.param(), call, "", len(acks), *acks,
                           len(events)]  # fmt: skip
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

    def _result(self, raw: Sequence[Any]) -> AdmitResult | str | None:
        """The script's answer: a result, None to call again (Bloom filter grew
        elsewhere), or the flags of a partial batch (Bloom filter grew twice)."""
        if raw[0] == b"STALE":
            self.dedup.observe(text(raw[1]))
            return None
        if raw[0] == b"STALE_GEN":
            self.dedup.observe_generation(int(raw[1]))  # type: ignore[attr-defined]
            return None
        if raw[0] == b"PARTIAL":
            self.dedup.observe(text(raw[2]))
            return text(raw[1])
        self.dedup.observe(text(raw[3]))
        return AdmitResult(text(raw[0]), int(raw[1]), int(raw[2]))

    def admit(
        self, items: Sequence[Admission], acks: Sequence[str] = (), events: Sequence[tuple[str, str]] = ()
    ) -> AdmitResult:
        """Store new requests (deduplicated) and ack finished leases, atomically.

        An item is (dedup argument, score, payload); the dedup argument comes
        from the strategy (``dedup.argument(fingerprint)``), b"" never filters.
        The acks happen in the call that stores the last item of the batch.
        """
        before, items, acks, events = self._settle(items, acks, events)
        if before is not None and not items and not acks and not events:
            return before
        done = ""
        stale_rounds = 0
        while True:
            rest = items[len(done):]
            try:
                raw = self._guarded(self.admit_call(rest, acks, events), len(rest), len(acks), len(events),
                                    self.scripts.admit)  # fmt: skip
            except redis.RedisError as exc:
                stored = (before.flags if before is not None else "") + done
                if stored:  # an earlier call (sent again, or before a Bloom layer) stored its part
                    raise AdmissionIncomplete(stored + "-" * len(rest), exc) from exc
                raise
            result = self._result(raw)
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
        done = ""
        for _ in range(12):
            rest = [arg for arg, _ in items[len(done):]]
            if not rest:
                return done
            _, keys, args = self.seen_call(rest)
            result = self._result(self.scripts.seen(keys=keys, args=args))
            if isinstance(result, AdmitResult):
                return done + result.flags
            done += result or ""
        raise RuntimeError("the Bloom filter keeps growing elsewhere; giving up this check")

    def seen_call(self, args: Sequence[bytes]) -> tuple[str, list[str], list[Any]]:
        """The ``seen.lua`` call of :meth:`record_seen` (a sharded crawl sends its shards' at once)."""
        d, k = self.dedup, self.keys
        extra, out = self._dedup_keys(args)
        return ("seen", [d.seen_key(k), *extra], [d.mode, d.param(), *out])

    def pop(self, n: int) -> list[Leased]:
        """Lease up to ``n`` requests to this node."""
        return self._leased(self.scripts.pop(keys=self._pop_keys, args=self._pop_args(n)))

    def _pop_args(self, n: int) -> list[Any]:
        return [self.node_id, n, self.lease_ms, self.queue.order, self.epoch]

    def _pop_after_admit_call(self, n: int) -> tuple[str, list[str], list[Any]]:
        """A pop sent beside an admission to this part in another call of one batch (a sharded
        crawl's acks sent in a later round): it checks the keys an admission with no items
        passes now (a Bloom filter's, as it has grown so far; pop.lua), so a corrupt key
        refuses both and the part changes nothing. An admission and a pop of one call are
        one admit.lua call (:meth:`admit_pop_call`)."""
        k = self.keys
        extra = self._dedup_keys(())[0]
        keys = [*self._pop_keys[:-2], self.dedup.seen_key(k), k.seq, k.series, *extra, k.run,
                k.epoch]  # fmt: skip
        args = [*self._pop_args(n)[:-1], self.dedup.mode, self.dedup.param(), self.epoch]
        return ("pop", keys, args)

    # -- the calls, for a sharded crawl to pipeline over its shards (crawlplug.frontier.sharded) --
    def admit_call(
        self, items: Sequence[Admission], acks: Sequence[str], events: Sequence[tuple[str, str]] = ()
    ) -> tuple[str, list[str], list[Any]]:
        extra, dedup_args = self._dedup_keys([item[0] for item in items])
        return ("admit", self._admit_keys(extra), self._admit_args(items, acks, events, self._call_id(), dedup_args))

    def admit_pop_call(
        self, items: Sequence[Admission], acks: Sequence[str], events: Sequence[tuple[str, str]], n: int
    ) -> tuple[str, list[str], list[Any]]:
        """An admission that then pops ``n`` in the same admit.lua call (a sharded crawl's
        admit-and-pop in one shard); its reply is {admission's reply, pop's reply}, or the
        admission's alone (in a list) when it must be sent again (STALE, PARTIAL)."""
        name, keys, args = self.admit_call(items, acks, events)
        return (name, keys, self._with_pop(args, n))

    def _with_pop(self, args: list[Any], n: int) -> list[Any]:
        """An admission's ARGV with the pop of ``n`` after it (admit.lua ARGV[5])."""
        pop = POP_ARG.format(n=max(0, int(n)), lease_ms=self.lease_ms, order=self.queue.order)
        return [*args[:POP_AT], pop, *args[POP_AT + 1:]]

    # -- admissions whose reply was lost ------------------------------------------
    # admit.lua answers a call sent again with its id (the connection reset after the
    # script ran, and redis-py retried) with the reply it had, doing nothing twice.
    # When the retry failed too, the caller (the scheduler) sends the same batch again
    # later, with more appended: that call first sends the lost one again, exactly,
    # then the rest.
    def _call_id(self) -> str:
        return f"{self._call_prefix}:{next(self._calls)}"

    def _guarded(self, call: tuple[str, list[str], list[Any]], n_items: int, n_acks: int, n_events: int,
                 run: Any) -> Any:  # fmt: skip
        """``run(keys=, args=)`` for an admission call; a Redis error leaves it uncertain."""
        _, keys, args = call
        try:
            raw = run(keys=keys, args=args)
        except StaleEpoch:
            raise  # refused before any write: nothing to send again
        except redis.RedisError:
            self._uncertain = (args[3], keys, args, n_items, n_acks, n_events)
            raise
        self._uncertain = None
        return raw

    def _settle(
        self, items: Sequence[Admission], acks: Sequence[str], events: Sequence[tuple[str, str]]
    ) -> tuple[AdmitResult | None, Sequence[Admission], Sequence[str], Sequence[tuple[str, str]]]:
        """Before an admission: send the uncertain one again first if this one repeats it.

        Returns the result of the one sent again (None if none was) and what is left
        of this admission to send. An admission that does not begin with the uncertain
        one drops it: if that one ran, the requests it stored count as duplicates when
        sent again under a new id (counted wrong, nothing lost).
        """
        uncertain, self._uncertain = self._uncertain, None
        if uncertain is None:
            return None, items, acks, events
        call, keys, args, n_items, n_acks, n_events = uncertain
        repeated = (
            len(items) >= n_items and len(acks) >= n_acks and len(events) >= n_events
            and self._admit_args(items[:n_items], acks[:n_acks], events[:n_events], call) == args
        )  # fmt: skip
        if not repeated:
            return None, items, acks, events
        raw = self._guarded(("admit", keys, args), n_items, n_acks, n_events, self.scripts.admit)
        result = self._result(raw)  # (a call with a pop is kept uncertain without it: admit_and_pop)
        if isinstance(result, AdmitResult):
            return result, items[n_items:], acks[n_acks:], events[n_events:]
        if result is None:  # a Bloom filter grew elsewhere: that call changed nothing
            return None, items, acks, events
        # PARTIAL: the requests its flags cover are stored, none of its acks made
        return AdmitResult(result, 0, 0), items[len(result):], acks, events

    def pop_call(self, n: int, *, after_admit: bool = False) -> tuple[str, list[str], list[Any]]:
        if after_admit:
            return self._pop_after_admit_call(n)
        return ("pop", self._pop_keys, self._pop_args(n))

    def renew_call(self, lease_ids: Sequence[str]) -> tuple[str, list[str], list[Any]]:
        k = self.keys
        return ("renew", [k.leases, k.leased, k.epoch], [self.node_id, self.lease_ms, *lease_ids, self.epoch])

    def reap_call(self, limit: int = 1000) -> tuple[str, list[str], list[Any]]:
        return ("reap", self._reap_keys, [self.max_deliveries, limit])

    def idle_call(self) -> tuple[str, list[str], list[Any]]:
        k = self.keys
        return ("idle", [k.queue, k.leases, k.producers, k.dq, k.start_urls, k.control], [])

    def release_call(self, ids: Sequence[str], *, unstarted: bool) -> tuple[str, list[str], list[Any]]:
        k = self.keys
        return (
            "release",
            [k.leases, k.leased, k.queue, k.deliveries, k.stats, *k.domain_keys(), k.requests, k.start_urls,
             k.epoch],
            [self.node_id, "1" if unstarted else "0", *ids, self.epoch],
        )

    def heartbeat_call(
        self, lease_ids: Iterable[str], *, producing: bool = False, metrics: dict[str, Any] | None = None,
        counts: dict[str, int] | None = None,
    ) -> tuple[str, list[str], list[Any]]:
        k = self.keys
        # how often it beats and how long its leases live: the views tell a late heartbeat
        # ("silent for 7 s") and when a silent node's leases return to the queue
        pairs: list[Any] = ["heartbeat_ms", self.heartbeat_ms, "lease_ms", self.lease_ms]
        for name, value in (metrics or {}).items():
            pairs += [name, value]
        added: list[Any] = []
        for name, value in (counts or {}).items():
            added += [name, int(value)]
        return (
            "heartbeat",
            [k.nodes, k.leases, k.leased, k.node(self.node_id), k.producers, k.control, k.stats, k.run, k.epoch],
            [self.node_id, self.lease_ms, self.node_ttl_ms, "1" if producing else "0", len(pairs) // 2, *pairs,
             len(added) // 2, *added, *lease_ids, self.epoch],
        )  # fmt: skip

    # -- the history (crawlplug.frontier.history) ------------------------------------
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

    def history_call(self, now_ms: int | None = None) -> tuple[str, list[str], list[Any]]:
        """The call sampling this part into the crawl's history (lua/history.lua)."""
        now = self.redis_now_estimate() if now_ms is None else now_ms
        return history.sample_call(self.keys, now, self.epoch, self.run_id)

    def history_sampled(self, reply: Any) -> None:
        """A history sample's reply: a failure (a full Redis refuses it, a key written by hand)
        is logged once and costs the crawl nothing; the heartbeat it rode with went through."""
        if isinstance(reply, Exception):
            if not isinstance(reply, StaleEpoch) and not self._history_failed:
                self._history_failed = True
                logger.warning("crawlplug: could not write the crawl's history (%s); the crawl goes on, "
                               "its history has a gap (said once, until a sample goes through again)", reply)  # fmt: skip
            return
        self._history_failed = False

    def renew(self, lease_ids: Sequence[str]) -> list[str]:
        """Renew leases without a heartbeat (a shard's leases); return the ids lost."""
        _, keys, args = self.renew_call(lease_ids)
        return [text(x) for x in self.scripts.renew(keys=keys, args=args)] if lease_ids else []

    def _leased(self, raw: Sequence[Any]) -> list[Leased]:
        if getattr(self.queue, "order", None) != "domain":
            return leased_from(raw)
        # the per-domain queue: a report flag per request, and when its next domain is ready
        self.next_ready_ms = int(raw[-1])
        return [
            Leased(text(raw[i]), raw[i + 1], int(raw[i + 2]), text(raw[i + 3])) for i in range(0, len(raw) - 1, 4)
        ]

    def admit_and_pop(
        self, items: Sequence[Admission], acks: Sequence[str], n: int, events: Sequence[tuple[str, str]] = ()
    ) -> tuple[AdmitResult | None, list[Leased]]:
        """:meth:`admit` then :meth:`pop`, in one round trip: one admit.lua call that pops
        after admitting (its ARGV[5]), so the two share one guard pass and one epoch check,
        and a key that refuses either refuses the call, which then changed nothing (a full
        Redis refuses it at its first write: nothing is leased either).

        A call whose reply was lost is kept uncertain as the admission alone (its pop is
        not sent again: redis-py's own retry of the same call pops afresh, and the leases
        of the lost reply expire). When the admission must be sent again (a Bloom filter
        grew, or needed two layers: "STALE", "PARTIAL"), the call leased nothing: the rest
        is admitted with :meth:`admit`, and then :meth:`pop` pops."""
        before, items, acks, events = self._settle(items, acks, events)
        if not items and not acks and not events:
            return before, self.pop(n)

        def run(keys: list[str], args: list[Any]) -> Any:
            return self.scripts.admit(keys=keys, args=self._with_pop(args, n))

        try:
            raw = self._guarded(self.admit_call(items, acks, events), len(items), len(acks), len(events), run)
        except redis.RedisError as exc:
            if before is not None and before.flags:
                raise AdmissionIncomplete(before.flags + "-" * len(items), exc) from exc
            raise
        result = self._result(raw[0])
        popped = raw[1] if len(raw) > 1 else None
        if not isinstance(result, AdmitResult):  # the Bloom filter grew: finish the batch alone
            done = result or ""
            result = self.admit(items[len(done):], acks, events)
            result.flags = done + result.flags
        if popped is None:
            try:
                return joined(before, result), self.pop(n)
            except redis.RedisError as exc:  # the admission stands: its leases wait for the next call
                logger.debug("crawlplug: the pop after an admission failed (%s); the admission stands", exc)
                return joined(before, result), []
        return joined(before, result), self._leased(popped)

    def take_starts(self, n: int, legacy_key: str | Sequence[str] | None = None,
                    lanes: Sequence[str] = ()) -> list[tuple[str, bytes]]:  # fmt: skip
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
        return [(text(raw[i]), raw[i + 1]) for i in range(0, len(raw), 2)]

    def push_starts(self, lines: Iterable[str | bytes], lane: str = "start_urls") -> int:
        """Append start entries (already validated) to the crawl's start_urls, or another of
        its start-entry lists (``lane``, a name crawlplug.config.start_keys accepts); returns
        the list's new length."""
        lines = list(lines)
        return int(self.client.rpush(self.keys.key(lane), *lines)) if lines else 0
    def push(self, items: Iterable[tuple[bytes, Any, bytes]]) -> AdmitResult:
        """Admit (fingerprint, request-or-score, payload) items: a convenience for tests and tools."""
        return self.admit([(fp, float(score), payload) for fp, score, payload in items])

    # -- leases -------------------------------------------------------------
    def heartbeat(
        self, lease_ids: Iterable[str], *, producing: bool = False, metrics: dict[str, Any] | None = None,
        counts: dict[str, int] | None = None,
    ) -> list[str]:
        """Mark this node alive, renew its leases, add ``counts`` to the run's counters;
        return the ids it lost. :attr:`paused` and :attr:`run_state` follow the reply."""
        _, keys, args = self.heartbeat_call(lease_ids, producing=producing, metrics=metrics, counts=counts)
        out = self.scripts.heartbeat(keys=keys, args=args)
        self.note_clock(int(out[0]))
        self.paused = bool(int(out[1]))
        self.run_state = text(out[2])
        self.data_lost = bool(int(out[3]))
        return [text(x) for x in out[4:]]

    def reap(self, limit: int = 1000) -> tuple[int, int]:
        """Requeue expired leases (dead-lettering over-delivered ones): (requeued, dead)."""
        _, keys, args = self.reap_call(limit)
        requeued, dead = self.scripts.reap(keys=keys, args=args)
        return int(requeued), int(dead)

    def heartbeat_and_reap(
        self, lease_ids: Iterable[str], *, producing: bool = False, metrics: dict[str, Any] | None = None,
        counts: dict[str, int] | None = None, limit: int = 1000,
    ) -> tuple[list[str], tuple[int, int]]:  # fmt: skip
        """:meth:`heartbeat` then :meth:`reap`, and a history sample (crawlplug.frontier.history),
        in one round trip: (ids lost, (requeued, dead))."""
        out, reaped, sampled = self.scripts.pipelined([
            self.heartbeat_call(lease_ids, producing=producing, metrics=metrics, counts=counts),
            self.reap_call(limit),
            self.history_call(),
        ])  # fmt: skip
        for raw in (out, reaped):
            if isinstance(raw, Exception):
                raise raw
        self.note_clock(int(out[0]))
        self.history_sampled(sampled)
        self.paused = bool(int(out[1]))
        self.run_state = text(out[2])
        self.data_lost = bool(int(out[3]))
        return [text(x) for x in out[4:]], (int(reaped[0]), int(reaped[1]))

    def release(self, ids: Sequence[str], *, unstarted: bool) -> int:
        """Give leases back to the queue now (closing node)."""
        if not ids:
            return 0
        _, keys, args = self.release_call(ids, unstarted=unstarted)
        return int(self.scripts.release(keys=keys, args=args))

    def pause(self, by: str = "operator") -> bool:
        """Pause the crawl: every node stops taking requests (within a heartbeat) and
        finishes what it holds. False if it was already paused."""
        k = self.keys
        pipe = self.client.pipeline(transaction=True)
        pipe.hsetnx(k.control, "paused", json.dumps({"by": by, "at": self.redis_ms()}))
        pipe.hincrby(k.stats, "pauses", 1)
        return bool(pipe.execute()[0])

    def resume(self) -> bool:
        """Resume a paused crawl, and accept that Redis lost its data if a node found it
        so (control "lost", set by heartbeat.lua); False if neither was set."""
        return bool(self.client.hdel(self.keys.control, "paused", "lost"))

    def paused_info(self) -> dict[str, Any] | None:
        raw = self.client.hget(self.keys.control, "paused")
        if raw is None:
            return None
        try:
            info = json.loads(raw)
            return info if isinstance(info, dict) else {"by": "?"}
        except ValueError:
            return {"by": "?"}

    # -- the node's records, runs --------------------------------------------------
    def parts(self) -> list[CrawlKeys]:
        """The key sets holding this crawl's frontier: its own (a sharded crawl: then each shard's)."""
        return [self.keys]

    def queued_elsewhere(self, domains: bool) -> int:
        """Requests waiting in the other kind of queue than this node's (``domains``: it uses
        the per-domain queue), over every part; a key of the wrong type counts none."""
        total = 0
        for k in self.parts():
            try:
                total += int(self.client.zcard(k.queue if domains else k.dq))
            except redis.ResponseError:  # a key of the wrong type: the scripts name it
                pass
        return total

    def publish(self, **metrics: Any) -> None:
        """Set fields of this node's record at once (not waiting for the next heartbeat)."""
        self.client.hset(self.keys.node(self.node_id), mapping=metrics)

    def counter(self, name: str) -> int:
        """One of the run's counters in the crawl's own stats (start_taken, items, ...)."""
        value = self.client.hget(self.keys.stats, name)
        try:
            return int(value or 0)
        except ValueError:
            return 0

    def totals(self) -> dict[str, int]:
        """The run's counters summed over every part (crawlplug.frontier.runs.totals)."""
        return runs.totals(self.client, self.parts())

    def finish_run(self, run_id: int, reason: str = "finished") -> tuple[str, int | None]:
        """Record run ``run_id`` as ended if the crawl is done (lua/finish.lua): ("finished",
        ended ms), ("busy", None) when work or a producer appeared, or (state, None)."""
        return runs.finish(self.client, self.keys, node_id=self.node_id, run_id=run_id, epoch=self.epoch,
                           reason=reason, scripts=self.scripts)  # fmt: skip

    def dedup_parts(self) -> list[Frontier]:
        """The frontiers holding this crawl's dedup state, each with its strategy: itself."""
        return [self]

    def forget_dedup_layers(self) -> None:
        """The crawl was reset: what the dedup strategy knew of a Bloom filter's layers is wrong."""
        forget = getattr(self.dedup, "forget", None)
        if forget is not None:
            forget()

    def leave(self) -> None:
        """Unregister this node (graceful close)."""
        k = self.keys
        pipe = self.client.pipeline(transaction=False)
        pipe.zrem(k.nodes, self.node_id)
        pipe.zrem(k.producers, self.node_id)
        pipe.hset(k.node(self.node_id), "closed", self.redis_ms())
        pipe.execute()

    def redis_ms(self) -> int:
        """Redis's clock (ms): every time a crawl shows or compares, whatever the node's clock says."""
        return redis_ms(self.client)

    def dead_letter(self, lease_id: str, reason: str, **extra: Any) -> bool:
        """Move a leased request to the dead letters with ``reason``."""
        k = self.keys
        header = {"id": lease_id, "reason": reason, "node": self.node_id, "at": self.redis_ms()}
        header.update(extra)
        moved = self.scripts.dead(
            keys=[k.leases, k.leased, k.requests, k.deliveries, k.dead, k.stats, *k.domain_keys(), k.epoch],
            args=[self.node_id, lease_id, json.dumps(header, separators=(",", ":")), self.epoch],
        )
        return bool(moved)

    # -- views ----------------------------------------------------------------
    def idle_state(self) -> tuple[int, int, int]:
        """(queued, leased, live producers) across the whole crawl."""
        _, keys, _ = self.idle_call()
        q, leased, producers, starts, lost, kind = self.scripts.idle(keys=keys, args=[])
        self.start_entries = int(starts)
        self.data_lost = bool(int(lost))
        self.start_urls_kind = text(kind)
        return int(q), int(leased), int(producers)

    def __len__(self) -> int:
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(self.keys.queue)
        pipe.zcard(self.keys.dq)
        return sum(pipe.execute())

    def status(self) -> dict[str, Any]:
        """Counts and crawl-wide counters (read-only)."""
        k = self.keys
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(k.queue)
        pipe.zcard(k.dq)
        pipe.llen(k.start_urls)
        pipe.zcard(k.domains)
        pipe.zcard(k.leases)
        pipe.scard(k.seen)  # set dedup; other strategies report through their dupefilter
        pipe.llen(k.dead)
        pipe.hgetall(k.stats)
        pipe.zrange(k.nodes, 0, -1, withscores=True)
        pipe.hgetall(k.key("fph"))  # the compact store (fphash): its generations' counts
        names = [k.queue, k.dq, k.start_urls, k.domains, k.leases, k.seen, k.dead, k.stats, k.nodes, k.key("fph")]
        raw = pipe.execute(raise_on_error=False)
        # a key of the wrong type (written by hand) is reported, not raised: status is
        # what an operator runs to find out what is wrong
        corrupt = {name: str(value) for name, value in zip(names, raw) if isinstance(value, redis.ResponseError)}
        queued, dqueued, starts, domains, leased, seen, dead, stats, nodes, hashed = (
            ({} if i in (7, 9) else [] if i == 8 else 0) if isinstance(value, redis.ResponseError) else value
            for i, value in enumerate(raw)
        )
        seen += sum(_int(v) for f, v in hashed.items() if text(f).startswith("count:"))
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

    def dead_letters(self, start: int = 0, stop: int = -1) -> list[DeadLetter]:
        return [DeadLetter.parse(x) for x in self.client.lrange(self.keys.dead, start, stop)]

    def purge(self) -> int:
        """Delete every key of this crawl; returns how many were deleted."""
        names = [self.keys.key(n) for n in NAMES] + self.dedup.state_keys(self.keys)
        for pattern in ("node:*", "reply:*", "bloom*", "seen*", "fph*", "start_urls:*"):  # start_urls:*: its lanes
            names += [text(x) for x in self.client.scan_iter(match=f"{self.keys.tag}:{pattern}", count=1000)]
        names = list(dict.fromkeys(names))
        return sum(int(self.client.delete(*names[i:i + 1000])) for i in range(0, len(names), 1000))


def _dedup(dedup: str | Dedup) -> Dedup:
    if isinstance(dedup, Dedup):
        return dedup
    if dedup == "set":
        return SetDedup()
    if dedup == "hash":
        from .fphash import HashDedup, HashSpec  # noqa: PLC0415 - fphash builds on this module's Dedup

        return HashDedup(HashSpec.for_capacity(1_000_000))
    if dedup == "none":
        return Dedup()
    raise ValueError(f"unknown dedup mode {dedup!r}; pass a crawlplug.frontier.dedup strategy")


def _int(value: Any) -> int:
    try:
        return int(value)
    except ValueError:
        return 0
