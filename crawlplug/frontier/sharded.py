"""One crawl's frontier split into shards (``CRAWLPLUG_SHARDS``), for Redis Cluster.

A crawl's keys share one hash tag so that each Lua script runs on one slot:
that makes the whole crawl one slot of one primary. ``CRAWLPLUG_SHARDS = N``
splits the frontier (queue, payloads, leases, dedup, per-domain schedule,
dead letters, counters) into N parts, each under its own hash tag
(:meth:`crawlplug.frontier.keys.CrawlKeys.shard_keys`), and routes every request by a
hash of its domain. The same URL always lands in the same shard, so
"deduplicate and store" stays one atomic script inside that shard.

What stays under the crawl's own tag: the nodes and their heartbeats, the
operators' switches, start entries (and their leases), seeds, Scrapy stats and
items. :class:`ShardedFrontier` offers :class:`~crawlplug.frontier.Frontier`'s
interface over these N + 1 parts; lease ids carry their shard (``"2.0000000000000042"``).

The invariant that a request is acknowledged only after its children are
stored holds across shards: an ack rides in the admission script of its own
shard when every child of the batch goes to that shard (the common case:
most links stay on their site), and otherwise waits for a second call made
only after every shard stored its part of the batch.

Each shard may go back in time on its own (a Redis Cluster primary restarted from its
snapshot, or replaced by a replica that lagged), after the page's own shard took its ack.
Every shard keeps each node's call record (lua/record.lua), checked by the node's
admissions and heartbeats there: a shard found to have gone back gets again what the
node admitted to it within ``resend_window`` seconds (crawlplug.frontier.record.ResendLog),
and the node gives back every lease it holds, as an unsharded crawl's does.

Its size: :class:`ShardedFrontier` implements the whole
crawlplug.frontier.interface.CrawlFrontier over N + 1 parts; the shard layout is
crawlplug.frontier.layout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

import redis

from ..errors import AdmissionIncomplete, ConfigError, RolledBack
from .domains import Domains
from .interface import CrawlFrontier
from .keys import CrawlKeys
from .layout import claim_shards, parts, shard_of, stored_shards
from .record import ResendLog
from .results import Admission, AdmitResult, Beat, Idle, Leased, Leases
from .scripts import Scripts
from .single import Frontier, admit_in_parts, log_went_back
from .store import text

logger = logging.getLogger(__name__)

# the crawl's shard layout is crawlplug.frontier.layout's; its names stay importable from here
__all__ = ["BASE", "ShardedFrontier", "claim_shards", "open_domains", "open_frontier", "parts", "shard_of",
           "stored_shards"]  # fmt: skip

#: a part index for the crawl's own keys (start entries); shards are 0..N-1
BASE = -1


def open_frontier(client: redis.Redis, keys: CrawlKeys, *, shards: int | None = None, dedup_factory: Any = None,
                  **kwargs: Any) -> CrawlFrontier:  # fmt: skip
    """The one place a frontier is built: sharded if the crawl is (``shards``, else the count
    the crawl recorded), each part's dedup strategy from ``dedup_factory`` (default: the
    exact set). The Scheduler, the tools and the dashboard all build theirs here."""
    n = shards or stored_shards(client, keys) or 1
    if n > 1:
        return ShardedFrontier(client, keys, shards=n, dedup_factory=dedup_factory, **kwargs)
    kwargs.pop("resend_window", None)  # one part: a rollback loses no ack of another part's children
    return Frontier(client, keys, dedup=dedup_factory() if dedup_factory else kwargs.pop("dedup", "set"), **kwargs)


class ShardedFrontier:
    """:class:`~crawlplug.frontier.Frontier`'s interface over a crawl split into ``shards``."""

    #: whether the crawl is split into shards: yes
    sharded = True
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
        shards: int,
        dedup: Any = "set",
        dedup_factory: Any = None,
        node_id: str | None = None,
        epoch: int | str = "",
        resend_window: float = 300.0,
        **kwargs: Any,
    ) -> None:
        if shards < 2:
            raise ConfigError("a sharded frontier needs CRAWLPLUG_SHARDS of 2 or more")
        self.client = client
        self.keys = keys
        self.n = shards
        self.scripts = Scripts(client)
        # the crawl's own keys: nodes, control, start entries and their leases
        self.base = Frontier(client, keys, dedup="none", node_id=node_id, scripts=self.scripts, epoch=epoch,
                             **kwargs)
        self.node_id = self.base.node_id
        self.shards = [
            Frontier(
                client, keys.shard_keys(i, shards), node_id=self.node_id, scripts=self.scripts,
                dedup=dedup_factory() if dedup_factory else dedup, epoch=epoch, **kwargs,
            )
            for i in range(shards)
        ]  # fmt: skip
        self.queue = self.shards[0].queue
        self.lease_ms = self.base.lease_ms
        self.max_deliveries = self.base.max_deliveries
        self.next_ready_ms = -1
        self.start_entries = 0
        self.paused = False
        self.run_state = ""
        self.start_urls_kind = ""
        self._rr = 0
        self._dry_until = [0.0] * shards
        self._shares_last: dict[int, int] = {}
        #: what this node admitted to each shard lately, sent again to a shard that went back
        self.resend = [ResendLog(resend_window) for _ in range(shards)]

    # -- routing ---------------------------------------------------------------
    @property
    def dedup(self) -> Any:
        return self.shards[0].dedup

    @property
    def lanes(self) -> tuple[str, ...]:
        """The start-entry lists this node reads besides start_urls (they live in the crawl's own keys)."""
        return self.base.lanes

    @lanes.setter
    def lanes(self, value: tuple[str, ...]) -> None:
        self.base.lanes = tuple(value)

    @property
    def queued_seen(self) -> int:
        """Requests waiting in the shards' queues, as each shard's last pop saw them (-1: none seen)."""
        seen = [f.queued_seen for f in self.shards if f.queued_seen >= 0]
        return sum(seen) if seen else -1

    @property
    def epoch(self) -> str:
        return self.base.epoch

    @epoch.setter
    def epoch(self, value: int | str) -> None:
        if str(value) != self.base.epoch:
            for log in self.resend:  # what it admitted was of the old state
                log.clear()
        for part in (self.base, *self.shards):
            part.epoch = str(value)

    @property
    def run_id(self) -> int | None:
        return self.base.run_id

    @run_id.setter
    def run_id(self, value: int | None) -> None:
        for part in (self.base, *self.shards):
            part.run_id = value

    @property
    def data_lost(self) -> bool:
        return self.base.data_lost

    @data_lost.setter
    def data_lost(self, value: bool) -> None:
        self.base.data_lost = value

    @property
    def start_urls_kind(self) -> str:
        return self.base.start_urls_kind

    @start_urls_kind.setter
    def start_urls_kind(self, value: str) -> None:
        self.base.start_urls_kind = value

    def parts(self) -> list[CrawlKeys]:
        return [self.keys, *(f.keys for f in self.shards)]

    def dedup_parts(self) -> list[Frontier]:
        return list(self.shards)

    def forget_dedup_layers(self) -> None:
        for f in self.shards:
            f.forget_dedup_layers()

    def part(self, index: int) -> Frontier:
        return self.base if index == BASE else self.shards[index]

    def split_id(self, lease_id: str) -> tuple[int, str]:
        """(part, id in that part) of a lease id."""
        head, dot, rest = lease_id.partition(".")
        if not dot:
            return BASE, lease_id
        return int(head), rest

    def route(self, item: Admission) -> int:
        """The shard of an admission: by its route (5th field), else its domain (4th)."""
        key = item[4] if len(item) > 4 else (item[3] if len(item) > 3 else "")  # type: ignore[misc]
        if not key:
            raise ValueError("a sharded crawl needs each request's domain to route it (the scheduler gives it)")
        return shard_of(key, self.n)

    def _group_ids(self, ids: Iterable[str]) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for lease_id in ids:
            part, raw = self.split_id(lease_id)
            out.setdefault(part, []).append(raw)
        return out

    def _wrap(self, part: int, leased: list[Leased]) -> list[Leased]:
        if part != BASE:
            for x in leased:
                x.id = f"{part}.{x.id}"
        return leased

    # -- admission and leasing -------------------------------------------------
    def _most_per_call(self) -> int:
        return min(f.dedup.most_per_call() for f in self.shards)

    def admit(
        self, items: Sequence[Admission], acks: Sequence[str] = (), events: Sequence[tuple[str, str]] = ()
    ) -> AdmitResult:
        if len(items) > self._most_per_call():
            return admit_in_parts(self.admit, items, acks, events, self._most_per_call())
        return self._admit(items, acks, events, 0)[0] or AdmitResult("", 0, 0)

    def admit_and_pop(
        self, items: Sequence[Admission], acks: Sequence[str], n: int, events: Sequence[tuple[str, str]] = ()
    ) -> tuple[AdmitResult | None, Leases]:
        if len(items) > self._most_per_call():  # a batch too big for one call: admitted in parts, then a pop
            return admit_in_parts(self.admit, items, acks, events, self._most_per_call()), self.pop(n)
        result, leased = self._admit(items, acks, events, n)
        return (result if (items or acks or events) else None), leased

    def pop(self, n: int) -> Leases:
        return self._admit((), (), (), n)[1]

    def _admit(
        self, items: Sequence[Admission], acks: Sequence[str], events: Sequence[tuple[str, str]], pop: int
    ) -> tuple[AdmitResult | None, Leases]:
        by_shard: dict[int, list[int]] = {}
        for i, item in enumerate(items):
            by_shard.setdefault(self.route(item), []).append(i)
        ack_parts = self._group_ids(acks)
        event_parts: dict[int, list[tuple[str, str]]] = {}
        for lease_id, kind in events:
            part, raw = self.split_id(lease_id)
            event_parts.setdefault(part, []).append((raw, kind))
        # an ack may ride with its shard's items only if no other shard gets items
        now_acks = {p: a for p, a in ack_parts.items() if set(by_shard) <= {p}}
        later_acks = {p: a for p, a in ack_parts.items() if p not in now_acks}

        flags = [""] * len(items)
        acked = stale = 0
        acks_done: list[str] = []  # the acks made (acknowledged or found stale), as the caller named them
        leased: list[Leased] = []
        # a part whose last admission's reply was lost gets it again first, exactly (answered as
        # it was, its pop's leases too: admit.lua), then the rest of its share of this batch
        sent_again: dict[int, int] = {}  # part -> its items that call covered
        for part in [p for p in dict.fromkeys([*by_shard, *now_acks, *event_parts]) if self.part(p)._uncertain]:
            indexes = by_shard.get(part, [])
            before, replayed, rest, rest_acks, rest_events = self.part(part)._settle(
                [items[i] for i in indexes], now_acks.get(part, ()), event_parts.get(part, ()))  # fmt: skip
            if before is None:
                continue
            done = len(indexes) - len(rest)
            for i, flag in zip(indexes[:done], before.flags):
                flags[i] = flag
            acked, stale = acked + before.acked, stale + before.stale
            acks_done += self._named(part, now_acks.get(part, ())[:len(now_acks.get(part, ())) - len(rest_acks)])
            leased += self._wrap(part, replayed)
            by_shard[part] = indexes[done:]
            sent_again[part] = done
            if part in now_acks:
                now_acks[part] = list(rest_acks)
            if part in event_parts:
                event_parts[part] = list(rest_events)

        calls: list[tuple[str, list[str], list[Any]]] = []
        plan: list[tuple[str, int]] = []
        asked: set[int] = set()
        share_of = dict(self._shares(pop, asked))
        parts = [p for p in dict.fromkeys([*by_shard, *now_acks, *event_parts])
                 if by_shard.get(p) or now_acks.get(p) or event_parts.get(p)]  # fmt: skip
        for part in parts:
            part_items = [items[i] for i in by_shard.get(part, ())]
            args = (part_items, now_acks.get(part, ()), event_parts.get(part, ()))
            if part != BASE and part in share_of:
                # the shard's admission and its pop in one call (admit.lua's pop): one guard
                # pass for both, and a key refusing either refuses the call there
                calls.append(self.part(part).admit_pop_call(*args, share_of[part]))
                plan.append(("admit+pop", part))
            else:
                calls.append(self.part(part).admit_call(*args))
                plan.append(("admit", part))
        # a pop in a shard that admits in this call, or gets its acks after it, refuses with
        # the admission on a corrupt key: it takes nothing there (a pop that ran would have
        # leased, and then given back, in a part the call is refused in)
        admitting = set(parts) | set(later_acks)
        for shard, share in share_of.items():
            if ("admit+pop", shard) not in plan:
                calls.append(self.shards[shard].pop_call(share, after_admit=shard in admitting))
                plan.append(("pop", shard))
        results = self.scripts.run_many(calls) if calls else []

        error: Exception | None = None
        rolled: dict[int, RolledBack] = {}  # parts found gone back in time
        waits: list[int] = []
        for (kind, part), call, raw in zip(plan, calls, results):
            frontier = self.part(part)
            if isinstance(raw, RolledBack):
                rolled[part] = raw
                continue
            if kind == "pop":
                if isinstance(raw, Exception):
                    error = error or raw
                    continue
                leased += self._took(part, frontier._popped(raw, call[2]), waits)
                continue
            part_items = [items[i] for i in by_shard.get(part, ())]
            part_acks, part_events = now_acks.get(part, ()), event_parts.get(part, ())
            if isinstance(raw, Exception):
                # a reply lost may be of a call that ran: sent again first by the next batch
                frontier.note_uncertain(call, raw, len(part_items), len(part_acks), len(part_events))
                error = error or raw
                continue
            if kind == "admit+pop":  # {admission's reply, pop's reply}, or the admission's alone
                if len(raw) > 1:
                    leased += self._took(part, frontier._leased(raw[1]), waits)
                raw = raw[0]
            try:
                result = frontier._result(raw, call[2], part_acks)
                if not isinstance(result, AdmitResult):  # the Bloom filter grew: finish this part alone
                    done = result or ""
                    result = frontier._admit(part_items[len(done):], part_acks, part_events)
                    result.flags = done + result.flags
            except RolledBack as exc:
                rolled[part] = exc
                continue
            except AdmissionIncomplete as exc:  # the filter grew, then the rest failed (no ack made)
                for i, flag in zip(by_shard.get(part, ()), exc.flags):
                    flags[i] = "" if flag == "-" else flag
                error = error or exc.cause
                continue
            except (redis.RedisError, RuntimeError) as exc:
                error = error or exc
                continue
            for i, flag in zip(by_shard.get(part, ()), result.flags):
                flags[i] = flag
            if part != BASE:
                self.resend[part].add(call[2][3], [item for item, f in zip(part_items, result.flags) if f == "1"])
                if "1" in result.flags:
                    self._dry_until[part] = 0.0
            acked += result.acked
            stale += result.stale
            acks_done += self._named(part, part_acks)
        if rolled:
            error = self.went_back(rolled)
        if error is not None:
            self._fail(error, flags, acks_done, acked, stale, leased)
        # a pop smaller than the number of shards asked only some of them: if those ran
        # dry, ask the others now (the dry ones are skipped for a moment after this)
        while pop and len(leased) < pop and len(asked) < self.n:
            shares = self._shares(pop - len(leased), asked)
            if not shares:
                break
            pops = [self.shards[s].pop_call(k, after_admit=s in admitting) for s, k in shares]
            for (shard, _), call, raw in zip(shares, pops, self.scripts.run_many(pops)):
                if isinstance(raw, RolledBack):
                    rolled[shard] = raw
                    continue
                if isinstance(raw, Exception):
                    error = error or raw
                    continue
                leased += self._took(shard, self.shards[shard]._popped(raw, call[2]), waits)
            if rolled:
                error = self.went_back(rolled)
            if error is not None:  # what the others took goes back, with what was taken before
                self._fail(error, flags, acks_done, acked, stale, leased)
        self.next_ready_ms = min(waits) if waits else -1
        if later_acks:
            # every child of the batch is stored: the parents may be acknowledged
            calls = [self.part(p).admit_call((), a, ()) for p, a in later_acks.items()]
            failed: Exception | None = None
            for (p, part_acks), call, raw in zip(later_acks.items(), calls, self.scripts.run_many(calls)):
                try:
                    if isinstance(raw, Exception):
                        self.part(p).note_uncertain(call, raw, 0, len(part_acks), 0)
                        raise raw
                    result = self.part(p)._result(raw, call[2], part_acks)
                    if not isinstance(result, AdmitResult):  # a Bloom filter grew elsewhere: again
                        result = self.part(p)._admit((), part_acks, ())
                except RolledBack as exc:
                    rolled[p] = exc
                    continue
                except (redis.RedisError, RuntimeError) as exc:
                    failed = failed or exc
                    continue
                acked += result.acked
                stale += result.stale
                acks_done += self._named(p, part_acks)
            if rolled:
                failed = self.went_back(rolled)
            if failed is not None:
                # every request of the batch is stored: only the acks not made are to send again
                self._fail(failed, flags, acks_done, acked, stale, leased, incomplete=True)
        return AdmitResult("".join(flags), acked, stale), Leases(leased, next_ready_ms=self.next_ready_ms,
                                                                 queued_seen=self.queued_seen)  # fmt: skip

    def _fail(self, error: Exception, flags: list[str], acks_done: list[str], acked: int, stale: int,
              leased: list[Leased], *, incomplete: bool = False) -> NoReturn:  # fmt: skip
        """A call that met ``error`` in some part: what its pops took goes back, and if other
        parts stored requests or made acks (or ``incomplete``), AdmissionIncomplete says
        which, so that a retry sends only the rest and counts none of it twice. (A part that
        went back in time: every lease was given back already, these too.)"""
        if not isinstance(error, RolledBack):
            self._give_back(leased)
        if incomplete or any(flags) or acks_done:
            raise AdmissionIncomplete("".join(f or "-" for f in flags), error, acks_done, acked, stale) from error
        raise error

    @staticmethod
    def _named(part: int, ids: Sequence[str]) -> list[str]:
        """Lease ids of ``part`` as the caller names them (with their shard)."""
        return list(ids) if part == BASE else [f"{part}.{x}" for x in ids]

    def _shares(self, n: int, asked: set[int]) -> list[tuple[int, int]]:
        """Split a pop of ``n`` over shards not yet ``asked`` in this call, in rotation,
        leaving out those that ran dry a moment ago (unless all did: then each is asked)."""
        self._shares_last = {}
        if n <= 0:
            return []
        now = time.monotonic()
        order = [(self._rr + j) % self.n for j in range(self.n) if (self._rr + j) % self.n not in asked]
        live = [s for s in order if self._dry_until[s] <= now] or order
        self._rr = (self._rr + 1) % self.n
        # each shard asked gets MIN_SHARE requests at least: one script call per shard
        # has a fixed cost, and the rotation visits every shard anyway
        live = live[:max(1, n // self.MIN_SHARE)]
        base, extra = divmod(n, len(live)) if live else (0, 0)
        shares = [(s, base + (1 if j < extra else 0)) for j, s in enumerate(live)]
        shares = [(s, k) for s, k in shares if k > 0]
        asked.update(s for s, _ in shares)
        self._shares_last = dict(shares)
        return shares

    def _took(self, shard: int, got: list[Leased], waits: list[int]) -> list[Leased]:
        """Note what a shard's pop gave: a shard that gave less than asked ran dry."""
        if len(got) < self._shares_last.get(shard, 0):
            self._dry_until[shard] = time.monotonic() + self.SKIP_EMPTY
        nxt = self.shards[shard].next_ready_ms
        if getattr(self.queue, "order", None) == "domain" and nxt >= 0:
            waits.append(nxt)
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
        """Each (dedup argument, route) checked and recorded in its route's shard, where the
        Scheduler's admissions record it: one ``seen.lua`` call per shard, sent at once."""
        by_shard: dict[int, list[int]] = {}
        for i, (_, route) in enumerate(items):
            if not route:
                raise ValueError("a sharded crawl needs each request's route (its domain or host)")
            by_shard.setdefault(shard_of(route, self.n), []).append(i)
        shards = list(by_shard)
        calls = [self.shards[s].seen_call([items[i][0] for i in by_shard[s]]) for s in shards]
        flags = [""] * len(items)
        for shard, raw in zip(shards, self.scripts.run_many(calls)):
            if isinstance(raw, Exception):
                raise raw
            frontier, indexes = self.shards[shard], by_shard[shard]
            result = frontier._result(raw)
            if isinstance(result, AdmitResult):
                got = result.flags
            else:  # the Bloom filter grew: this shard alone, again
                done = result or ""
                got = done + frontier.record_seen([items[i] for i in indexes[len(done):]])
            for i, flag in zip(indexes, got):
                flags[i] = flag
        return "".join(flags)

    def push(self, items: Iterable[tuple[bytes, Any, bytes]]) -> AdmitResult:
        raise TypeError("a sharded crawl routes requests by domain: use admit() with (fp, score, payload, domain)")

    def take_starts(self, n: int, legacy_key: str | Sequence[str] | None = None,
                    lanes: Sequence[str] = ()) -> list[tuple[str, bytes]]:  # fmt: skip
        return self.base.take_starts(n, legacy_key, lanes)

    # -- leases ------------------------------------------------------------------
    def heartbeat(
        self, lease_ids: Iterable[str], *, producing: bool = False, metrics: dict[str, Any] | None = None,
        totals: dict[str, int] | None = None,
    ) -> list[str]:
        return self._beat(lease_ids, producing, metrics, totals, reap_limit=None)[0]

    def reap(self, limit: int = 1000) -> tuple[int, int]:
        requeued = dead = 0
        for raw in self.scripts.run_many([f.reap_call(limit) for f in (self.base, *self.shards)]):
            if isinstance(raw, Exception):
                raise raw
            requeued += int(raw[0])
            dead += int(raw[1])
        return requeued, dead

    def heartbeat_and_reap(
        self, lease_ids: Iterable[str], *, producing: bool = False, metrics: dict[str, Any] | None = None,
        totals: dict[str, int] | None = None, limit: int = 1000,
    ) -> Beat:  # fmt: skip
        """:meth:`heartbeat` then :meth:`reap`, the calls of every shard sent together
        (a shard's renewal before its reap: same keys, same node, in call order)."""
        return self._beat(lease_ids, producing, metrics, totals, reap_limit=limit)

    def _beat(self, lease_ids: Iterable[str], producing: bool, metrics: dict[str, Any] | None,
              totals: dict[str, int] | None, reap_limit: int | None) -> Beat:  # fmt: skip
        """The heartbeat in the crawl's own keys, each shard's renewal of this node's leases
        and, with ``reap_limit``, every part's reap: one pipeline. (lost lease ids, reaped)."""
        groups = self._group_ids(lease_ids)
        calls = [self.base.heartbeat_call(groups.get(BASE, ()), producing=producing, metrics=metrics,
                                          totals=totals)]  # fmt: skip
        # each shard holding leases of this node, or its record (lua/record.lua: did it go back in time?)
        shards = [p for p in range(self.n) if p in groups or self.shards[p].record.confirmed]
        calls += [self.shards[p].renew_call(groups.get(p, ())) for p in shards]
        everyone = (self.base, *self.shards)
        sampled: list[Any] = []
        if reap_limit is not None:
            calls += [f.reap_call(reap_limit) for f in everyone]
            # every part's history sample, keys named by the crawl's own clock estimate
            now = self.base.redis_now_estimate()
            calls += [f.history_call(now) for f in everyone]
        results = self.scripts.run_many(calls)
        if reap_limit is not None:
            results, sampled = results[:-len(everyone)], results[-len(everyone):]
        rolled = {p: raw for p, raw in zip([BASE, *shards], results) if isinstance(raw, RolledBack)}
        if rolled:
            raise self.went_back(rolled)
        for raw in results:
            if isinstance(raw, Exception):
                raise raw
        for reply in sampled:
            self.base.history_sampled(reply)
        lost = self.base._beaten(results[0])
        self.paused = self.base.paused
        self.run_state = self.base.run_state
        for p, raw in zip(shards, results[1:1 + len(shards)]):
            shard_lost = [text(x) for x in raw]
            self.shards[p].record.done(shard_lost)
            lost += [f"{p}.{x}" for x in shard_lost]
        reaped = results[1 + len(shards):]
        return Beat(lost, (sum(int(raw[0]) for raw in reaped), sum(int(raw[1]) for raw in reaped)),
                    paused=self.paused, run_state=self.run_state, data_lost=self.base.data_lost)  # fmt: skip

    # -- when a part went back in time (crawlplug.frontier.record) -------------------------
    def went_back(self, rolled: dict[int, RolledBack]) -> RolledBack:
        """Parts ``rolled`` refused a call because they went back in time: every lease this
        node holds, in every part, is given back (a lost admission in one shard may be of
        any page's children); each shard that went back gets again what this node admitted
        to it since the last call it still has (:class:`~crawlplug.frontier.record.ResendLog`).
        Returns the error to raise, naming the leases given back."""
        for index, exc in rolled.items():
            self.part(index).record.confirmed = exc.found  # what it has now: the next call is checked against it
        given: list[str] = []
        for index in (BASE, *range(self.n)):
            given += self._named(index, self.part(index).give_back_held())
        for index, exc in sorted(rolled.items()):
            log_went_back(self.part(index).keys, len(given))
            if index != BASE:
                self._resend_to(index, exc.found)
        first = next(iter(rolled.values()))
        return RolledBack(str(first), given)

    def _resend_to(self, shard: int, found: int) -> None:
        """Admit again in ``shard`` what this node admitted there after its call ``found``."""
        items, complete = self.resend[shard].since(found)
        if not complete:
            logger.error(
                "crawlplug: shard %d of crawl %r went back further than this node's resend log reaches "
                "(CRAWLPLUG_RESEND_WINDOW=%ss): requests it admitted there before then may be lost; the "
                "crawl goes on with what the shard holds (docs/faults.md, 'When Redis goes back in time')",
                shard, self.keys.crawl, self.resend[shard].window,
            )  # fmt: skip
        if not items:
            return
        try:
            result = self.shards[shard].admit(items)
        except (redis.RedisError, RuntimeError) as exc:
            logger.error("crawlplug: could not send %d requests again to shard %d after it went back in time "
                         "(%s): they may be lost", len(items), shard, exc)  # fmt: skip
            return
        logger.warning("crawlplug: sent %d requests again to shard %d, which went back in time (%d of them "
                       "were missing there)", len(items), shard, result.admitted)  # fmt: skip

    def release(self, ids: Sequence[str], *, unstarted: bool) -> int:
        groups = self._group_ids(ids)
        if not groups:
            return 0
        total = 0
        calls = [self.part(p).release_call(a, unstarted=unstarted) for p, a in groups.items()]
        for (p, part_ids), raw in zip(groups.items(), self.scripts.run_many(calls)):
            if isinstance(raw, Exception):
                raise raw
            self.part(p).record.done(part_ids)
            total += int(raw)
        return total

    def dead_letter(self, lease_id: str, reason: str, **extra: Any) -> bool:
        part, raw = self.split_id(lease_id)
        return self.part(part).dead_letter(raw, reason, shard=part, **extra)

    # -- views ---------------------------------------------------------------------
    def idle_state(self) -> Idle:
        queued = leased = producers = 0
        results = self.scripts.run_many([f.idle_call() for f in (self.base, *self.shards)])
        for i, raw in enumerate(results):
            if isinstance(raw, Exception):
                raise raw
            queued += int(raw[0])
            leased += int(raw[1])
            producers += int(raw[2])
            if i == 0:
                self.start_entries = int(raw[3])
                self.base.data_lost = bool(int(raw[4]))
                self.start_urls_kind = self.base.start_urls_kind = text(raw[5])
        return Idle(queued, leased, producers, start_entries=self.start_entries, data_lost=self.base.data_lost,
                    start_urls_kind=self.start_urls_kind)  # fmt: skip

    def __len__(self) -> int:
        return sum(len(f) for f in self.shards)

    def purge(self) -> int:
        deleted = self.base.purge()
        for f in self.shards:
            deleted += f.purge()
        return deleted


def open_domains(client: redis.Redis, keys: CrawlKeys) -> Domains:
    """The per-domain schedule of an existing crawl, over its shards if it has them."""
    return Domains(client, keys, parts(client, keys)[1:] or [keys])
