"""A model-based test of the frontier: the real Lua scripts, driven through the
Frontier's public methods by hypothesis's RuleBasedStateMachine, against a plain
Python model of what the crawl should hold.

Three simulated nodes (one Frontier each, one node id each) join the crawl as a
node does (crawlplug.crawl.runs.join: their calls carry the run's epoch), admit batches
with duplicates, ``dont_filter`` requests, fingerprint-only records and redirects,
pop, ack, release, dead-letter, take and push start entries; a node stalls (its
last heartbeat gives its leases a short deadline, then it stops renewing), its
leases are reaped once they expired (real sleeps) and dead-lettered after
MAX_DELIVERIES, it comes back and learns what it lost. Corruption steps break one
crawl key (a wrong type, a non-integer counter); other steps delete a key whose
loss costs no work (seq, the node registry, ...). Restart steps SIGKILL the Redis
server and start it again, with its data (an RDB saved just before) or without.

The model never reads its expected state back from Redis. After every step:

* every request the model knows is in exactly one place in Redis: queued, leased
  (to the node the model says), or gone (acknowledged, or in the dead letters);
  every payload in Redis is one the model has queued or leased, every queued or
  leased id has its payload, every lease one record and one holder, a node of the crawl;
* the recorded fingerprints (set, compact store and expiring dedup) are the model's; Bloom dedup
  drops a new URL only as a false positive, counted and bounded by its error rate;
* the counters in Redis's stats agree with the model's;
* the crawl reads as finished only when the model has nothing left, and says its
  data was lost exactly while the model says so (until the operator accepts it).

A call that meets a corrupt key must refuse whole: no write at all (every key of
the crawl is compared before and after; on a sharded crawl, every key of the part
holding it), and its error names the key and what to do. Once the key is
repaired (its content put back, or the key deleted where it held none) the model
matches again.

After a restart without its data every node's next call must be refused for its
epoch; the node joins again (crawlplug.crawl.runs.rejoin), as the Scheduler does, and
must say the data was lost; from then on the model is rebuilt from what survived
(nothing), only the pairings above are checked, and the crawl must not read as
finished while the loss stands.

All of it goes through :class:`FrontierUnderTest`, the one adapter between the
model and crawlplug's API.

Configurations: set, compact store (hash), Bloom and expiring dedup; PriorityQueue and DomainQueue;
unsharded and sharded (2 shards): seven combinations. In CI each runs 25 examples
of up to 50 steps (about 1,000 steps per configuration, 45 s in all on two cores;
each run also asserts it made at least 10 steps per example). For a longer hunt:
``CRAWLPLUG_MODEL_EXAMPLES=500 CRAWLPLUG_MODEL_STEPS=100``; pytest's
``--hypothesis-seed`` replays a run, and a failure prints its shortest sequence.
"""

from __future__ import annotations

import hashlib
import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from crawlplug.crawl import Crawl, runs
from crawlplug.errors import AdmissionIncomplete, StaleEpoch
from crawlplug.frontier.bloom import BloomSpec
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.dedup import BloomDedup, Dedup, SetDedup, TtlDedup
from crawlplug.frontier.fpadmin import iter_fingerprints
from crawlplug.frontier.fphash import HashDedup, HashSpec, SplitSpec
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.layout import claim_shards, shard_of
from crawlplug.queues import DomainQueue, PriorityQueue

from .support.servers import RedisServer, free_port

#: a private redis-server of its own (SIGKILLed and started again by the restart steps)
pytestmark = pytest.mark.integration

set_hypothesis_home_dir(os.path.join(os.environ.get("TMPDIR", "/tmp"), "crawlplug-hypothesis"))

EXAMPLES = int(os.environ.get("CRAWLPLUG_MODEL_EXAMPLES", "25"))
STEPS = int(os.environ.get("CRAWLPLUG_MODEL_STEPS", "50"))
NODES = ("a", "b", "c")
HOSTS = ("a.test", "b.test", "c.test")  # both shards of a sharded crawl get hosts (asserted below)
URLS = [f"http://{h}/{p}" for h in HOSTS for p in range(6)]
LEASE = 60.0  # live nodes: never expires within an example
SHORT = 0.15  # a stalling node's last heartbeat: its leases expire this soon
MAX_DELIVERIES = 2
BLOOM = BloomSpec(8, 0.01)  # tiny: the filter chains new layers within an example
ERROR_RATE = BLOOM.error_rate
K = CrawlKeys("model")
SHARDS = 2
assert {shard_of(h, SHARDS) for h in HOSTS} == set(range(SHARDS)), "every shard needs hosts"


def fingerprint(url: str) -> bytes:
    return hashlib.sha1(url.encode()).digest()


def host(url: str) -> str:
    return url.split("/")[2]


@dataclass(frozen=True)
class Config:
    dedup: str  # "set", "hash" (splitting buckets), "hashgen" (by generations), "ttl", "bloom"
    domains: bool  # DomainQueue, else PriorityQueue
    sharded: bool

    def __str__(self) -> str:
        return f"{self.dedup}-{'domain' if self.domains else 'priority'}-{'sharded' if self.sharded else 'single'}"


CONFIGS = [
    Config("set", False, False),
    Config("bloom", False, False),
    Config("ttl", False, False),
    Config("set", True, False),
    Config("set", False, True),
    Config("bloom", True, True),
    Config("hash", True, True),  # the compact store, 2 a bucket: buckets split and levels rise within a run
    Config("hashgen", False, False),  # the compact store of crawls begun by generations: 2 buckets first
]


class Rejoined(Exception):
    """A call refused for its epoch (lua/epoch.lua: the crawl was reset, or Redis lost its
    data, since the node joined): the node has joined the crawl again, as the Scheduler's
    ``_rejoin`` does. ``lost``: it found Redis lost the data; ``kept``: it is in the same run
    of the same epoch (the epoch key had been deleted by hand, and was put back), and keeps
    what it holds, else it drops it."""

    def __init__(self, node: str, lost: bool, kept: bool, cause: Exception) -> None:
        super().__init__(node, lost, kept, cause)
        self.node, self.lost, self.kept, self.cause = node, lost, kept, cause


class FrontierUnderTest:
    """The one adapter between the model and crawlplug: every call the test makes
    on the frontier, and every read of Redis the invariants make, goes through here.

    Each node joins the crawl as a node does (the shard count claimed, then
    :func:`crawlplug.crawl.runs.join`), so its calls carry the epoch it joined; a call
    refused for its epoch makes it join again (:func:`crawlplug.crawl.runs.rejoin`, which
    tells a Redis that lost its data from a purge) and raises :class:`Rejoined`.

    Requests are identified by their payload (unique per admitted request), start
    entries by their text; lease ids are those the frontier hands out.
    """

    def __init__(self, client: redis.Redis, config: Config) -> None:
        self.client = client
        self.config = config
        self.frontiers: dict[tuple[str, bool], Any] = {}
        self.joined: dict[str, runs.Joined] = {}

    # -- building ------------------------------------------------------------------
    def _dedup(self) -> Dedup:
        if self.config.dedup == "bloom":
            return BloomDedup(BLOOM)
        if self.config.dedup == "ttl":
            return TtlDedup(3600)
        if self.config.dedup == "hash":
            return HashDedup(SplitSpec(fill=2))
        if self.config.dedup == "hashgen":
            return HashDedup(HashSpec(bits=1, fill=4))
        return SetDedup()

    @property
    def shards(self) -> int:
        return SHARDS if self.config.sharded else 1

    def _build(self, node: str, short: bool) -> Any:
        kwargs: dict[str, Any] = {
            "queue": DomainQueue() if self.config.domains else PriorityQueue(),
            "node_id": f"node-{node}",
            "lease_timeout": SHORT if short else LEASE,
            "heartbeat": SHORT / 3 if short else 2.0,
            "max_deliveries": MAX_DELIVERIES,
            "epoch": self.joined[node].epoch,
        }
        if self.config.sharded:
            return Frontier(self.client, K, shards=SHARDS, dedup_factory=self._dedup, **kwargs)
        return Frontier(self.client, K, dedup=self._dedup(), **kwargs)

    def _join_args(self, node: str) -> dict[str, Any]:
        return {"node_id": f"node-{node}", "ttl_ms": int(LEASE * 1000)}

    def join(self, node: str) -> None:
        """Node ``node`` starts: it claims the crawl's shard count, joins the run (as a
        producer, join.lua), and builds its frontier (and the same node with short leases,
        for its last heartbeat before it stalls)."""
        claim_shards(self.client, K, self.shards)
        self.joined[node] = runs.join(self.client, K, **self._join_args(node))
        for short in (False, True):
            self.frontiers[(node, short)] = self._build(node, short)

    def frontier(self, node: str, *, short: bool = False) -> Any:
        """Node ``node``'s frontier (``short``: the same node with short leases)."""
        return self.frontiers[(node, short)]

    def _run(self, node: str, fn: Callable[[], Any]) -> Any:
        """Call ``fn``. Refused for its epoch, ``node`` joins again and :class:`Rejoined` is
        raised; done in part (a sharded call), :class:`Partial` is (with the rejoin, if the
        rest was refused for its epoch)."""
        try:
            return fn()
        except StaleEpoch as exc:
            raise self._rejoin(node, exc) from exc
        except AdmissionIncomplete as exc:
            rejoined = rejoin_error = None
            if isinstance(exc.cause, StaleEpoch):
                try:
                    rejoined = self._rejoin(node, exc.cause)
                except redis.ResponseError as rexc:
                    # the join met a corrupt key (the Scheduler's liveness part logs it and
                    # tries again at the next refusal): the node stays of its epoch, and the
                    # part done is still done
                    rejoin_error = rexc
            raise Partial(exc.flags, exc.cause, exc.acks_done, exc.acked, exc.stale, rejoined, rejoin_error) from exc

    def _rejoin(self, node: str, refusal: StaleEpoch) -> Rejoined:
        before = self.joined[node]
        joined, lost = runs.rejoin(self.client, K, refusal, before, shards=self.shards, **self._join_args(node))
        self.joined[node] = joined
        kept = (joined.run, joined.epoch) == (before.run, before.epoch) and not lost
        if not kept:  # what the Scheduler's liveness part does after a rejoin: a new state, or a loss
            for short in (False, True):
                f = self.frontier(node, short=short)
                f.epoch = joined.epoch
                f.forget_dedup_layers()
        return Rejoined(node, lost, kept, refusal)

    def shard_of(self, url: str) -> int | None:
        return shard_of(host(url), SHARDS) if self.config.sharded else None

    # -- the frontier's API ------------------------------------------------------------
    def _items(self, node: str, items: list[tuple[str, str, float, str]]) -> list[tuple[Any, ...]]:
        """(url, kind, score, payload) -> admissions; kind "n" normal, "d" dont_filter, "r" record only."""
        dedup = self.frontier(node).dedup
        out: list[tuple[Any, ...]] = []
        for url, kind, score, payload in items:
            arg = b"" if kind == "d" else dedup.argument(fingerprint(url))
            item: tuple[Any, ...] = (arg, score, payload.encode() if kind != "r" else b"")
            item += (host(url) if self.config.domains else "",)
            if self.config.sharded:
                item += (host(url),)
            out.append(item)
        return out

    def admit(
        self, node: str, items: list[tuple[str, str, float, str]], acks: list[str], events: list[tuple[str, str]]
    ) -> tuple[str, int, int]:
        """(flags, acked, stale); raises :class:`Partial` when only part of the batch was stored."""
        result = self._run(node, lambda: self.frontier(node).admit(self._items(node, items), acks, events))
        return result.flags, result.acked, result.stale

    def admit_and_pop(
        self,
        node: str,
        items: list[tuple[str, str, float, str]],
        acks: list[str],
        events: list[tuple[str, str]],
        n: int,
    ) -> tuple[str, int, int, list[tuple[str, str, int, str]]]:
        """(flags, acked, stale, what was leased)."""
        f = self.frontier(node)
        result, leased = self._run(node, lambda: f.admit_and_pop(self._items(node, items), acks, n, events))
        flags, acked, stale = (result.flags, result.acked, result.stale) if result is not None else ("", 0, 0)
        return flags, acked, stale, [(x.id, x.payload.decode(), x.deliveries, x.report) for x in leased]

    def pop(self, node: str, n: int) -> list[tuple[str, str, int, str]]:
        leased = self._run(node, lambda: self.frontier(node).pop(n))
        return [(x.id, x.payload.decode(), x.deliveries, x.report) for x in leased]

    def heartbeat(self, node: str, ids: list[str], *, short: bool = False) -> list[str]:
        """The node's heartbeat: renews ``ids``, and says it no longer reads start requests."""
        return self._run(node, lambda: self.frontier(node, short=short).heartbeat(ids))

    def reap(self, node: str) -> tuple[int, int]:
        return self._run(node, lambda: self.frontier(node).reap())

    def release(self, node: str, ids: list[str], unstarted: bool) -> int:
        return self._run(node, lambda: self.frontier(node).release(ids, unstarted=unstarted))

    def dead_letter(self, node: str, lease_id: str) -> bool:
        return self._run(node, lambda: self.frontier(node).dead_letter(lease_id, "model test"))

    def push_starts(self, entries: list[str]) -> None:
        Crawl.of(self.frontier(NODES[0])).push_starts(entries)

    def take_starts(self, node: str, n: int) -> list[tuple[str, str]]:
        return [(i, e.decode()) for i, e in self._run(node, lambda: self.frontier(node).take_starts(n))]

    def accept_loss(self) -> bool:
        """The operator accepts that Redis lost the crawl's data (`crawlplug resume`)."""
        return Crawl.of(self.frontier(NODES[0])).resume()

    def finished(self, node: str) -> tuple[bool, tuple[int, int, int], bool]:
        """(whether the crawl reads as finished to ``node`` as the scheduler decides it:
        nothing queued or leased anywhere, no producer, no loss of data marked; the idle
        counts; whether a loss of data is marked)."""
        state = self.frontier(node).idle_state()  # its loss mark read with the counts
        return (state == (0, 0, 0) and not state.data_lost), state, state.data_lost

    # -- reading Redis, for the invariants ---------------------------------------------------
    def parts(self) -> list[CrawlKeys]:
        return [K] + ([K.shard_keys(i, SHARDS) for i in range(SHARDS)] if self.config.sharded else [])

    def part_keys(self, shard: int | None) -> CrawlKeys:
        return K if shard is None else K.shard_keys(shard, SHARDS)

    def view(self) -> dict[str, Any]:
        """What Redis holds, with lease ids as the frontier names them (read in one round trip)."""
        out: dict[str, Any] = {
            "requests": {},
            "queued": set(),
            "leases": {},
            "deliveries": {},
            "dead": Counter(),
            "seen": set(),
            "stats": Counter(),
        }
        pipe = self.client.pipeline(transaction=False)
        parts = self.parts()
        for part in parts:
            pipe.hgetall(part.requests)
            pipe.zrange(part.queue, 0, -1)
            pipe.zrange(part.dq, 0, -1)
            pipe.zrange(part.leases, 0, -1)
            pipe.hgetall(part.leased)
            pipe.hgetall(part.deliveries)
            pipe.lrange(part.dead, 0, -1)
            pipe.hgetall(part.stats)
            if self.config.dedup == "set":
                pipe.smembers(part.seen)
            elif self.config.dedup == "ttl":
                pipe.zrange(part.key("seen_ttl"), 0, -1)
        pipe.lrange(K.start_urls, 0, -1)
        replies = iter(pipe.execute())
        for i, _ in enumerate(parts):
            prefix = "" if i == 0 else f"{i - 1}."
            for rid, payload in next(replies).items():
                out["requests"][prefix + rid.decode()] = payload.decode()
            out["queued"] |= {prefix + x.decode() for x in next(replies)}
            for member in next(replies):
                out["queued"].add(prefix + member.decode().split("\t", 1)[1][16:])
            leases = {x.decode() for x in next(replies)}
            leased = {k.decode(): v.decode() for k, v in next(replies).items()}
            assert leases == set(leased), f"leases {leases} and their records {set(leased)} differ"
            for rid, info in leased.items():
                out["leases"][prefix + rid] = info.split("|", 1)[0]
            for rid, d in next(replies).items():
                out["deliveries"][prefix + rid.decode()] = int(d)
            for raw in next(replies):
                out["dead"][raw.decode().split("\n", 1)[1]] += 1
            for name, value in next(replies).items():
                out["stats"][name.decode()] += int(value)
            if self.config.dedup in ("set", "ttl"):
                out["seen"] |= set(next(replies))
        out["start_urls"] = [x.decode() for x in next(replies)]
        if self.config.dedup in ("hash", "hashgen"):  # the compact store's fingerprints, whole again
            for part in parts:
                for batch in iter_fingerprints(self.client, part):
                    out["seen"] |= set(batch)
        return out

    def snapshot(self) -> dict[bytes, bytes | None]:
        """Every key of the crawl, dumped: a refused call must leave all of them as they were."""
        keys = sorted(self.client.scan_iter(match="crawlplug:*", count=1000))
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.dump(key)
        return dict(zip(keys, pipe.execute()))

    def key(self, name: str, shard: int | None) -> str:
        part = self.part_keys(shard)
        if name == "seen":
            return {
                "set": part.seen,
                "hash": part.key("fph"),
                "hashgen": part.key("fph"),
                "ttl": part.key("seen_ttl"),
                "bloom": f"{part.tag}:bloom:meta",
            }[self.config.dedup]
        return part.key(name)


class Partial(Exception):
    """An admission that went through in part: ``flags`` per item, "-" for not done; the
    acks ``acks_done`` made (``acked`` acknowledged, ``stale`` no longer held); ``rejoined``
    if the rest was refused for its epoch (the node then joined again), ``rejoin_error`` if
    it was and the join met a corrupt key (the node is still of its epoch)."""

    def __init__(
        self,
        flags: str,
        cause: Exception,
        acks_done: list[str],
        acked: int,
        stale: int,
        rejoined: Rejoined | None = None,
        rejoin_error: Exception | None = None,
    ) -> None:
        super().__init__(flags, cause, acks_done)
        self.flags, self.cause, self.acks_done, self.acked, self.stale = flags, cause, acks_done, acked, stale
        self.rejoined, self.rejoin_error = rejoined, rejoin_error


@dataclass
class Req:
    """The model's request (or start entry while leased)."""

    payload: str
    url: str
    start: bool
    order: tuple[float, int]
    state: str = "queued"  # queued, leased, acked, dead
    node: str | None = None
    lease: str | None = None
    deliveries: int = 0  # deliveries so far (the last pop's count while leased)
    reaped_id: str | None = None  # the id it keeps when requeued
    short_at: float | None = None  # while leased: when its lease was renewed short (a stall), else None


@dataclass
class NodeModel:
    held: dict[str, str] = field(default_factory=dict)  # lease id -> payload, as the node believes
    reports: list[tuple[str, str]] = field(default_factory=list)  # events due (DomainQueue)
    stalled: float | None = None  # monotonic time of its last (short) heartbeat


#: what :meth:`FrontierModel.call` returns for a call refused by a corrupt key, and for
#: one refused for its epoch (the node joined again)
REFUSED, REJOINED = object(), object()
NOT_DONE = (REFUSED, REJOINED)

#: keys a corruption step may break, with the part they live in ("shard": a shard's
#: keys on a sharded crawl, the crawl's own otherwise; "base": always the crawl's own)
CORRUPTIBLE = {
    "queue": "shard",
    "requests": "shard",
    "seq": "shard",
    "leases": "shard",
    "leased": "shard",
    "deliveries": "shard",
    "stats": "shard",
    "dead": "shard",
    "seen": "shard",
    "epoch": "shard",
    "start_urls": "base",
    "nodes": "base",
    "producers": "base",
    "control": "base",
    "run": "base",
}
DOMAIN_KEYS = {"dq": "shard", "domains": "shard", "dstate": "shard", "dconf": "shard"}
#: statistic-only keys: of the wrong type they are started again, not refused (guard.lua)
STATISTICS = ("series", "graveyard", "node")
#: keys whose deletion is a repair: they hold nothing a request needs (the epoch is put back
#: by the first node refused for it, from the run's record)
DELETABLE = {"seq", "nodes", "producers", "series", "graveyard", "epoch"}


class FrontierModel(RuleBasedStateMachine):
    """Drives one configuration; subclassed per configuration below."""

    config: Config
    server: RedisServer
    false_positives = 0
    new_checks = 0
    #: what the runs of one configuration did: steps, restarts, refusals, rejoins, ...
    tally: ClassVar[Counter[str]] = Counter()
    #: whether a refusal must name the key (off only to hunt other defects on old code)
    named_errors = True

    def __init__(self) -> None:
        super().__init__()
        self.client = redis.Redis.from_url(self.server.url)
        FrontierModel.tally["examples"] += 1
        self.client.flushall()
        self.client.script_flush()  # the server's script cache too: every example starts alike
        (Path(self.server.directory) / "dump.rdb").unlink(missing_ok=True)
        self.f = FrontierUnderTest(self.client, self.config)
        self.reqs: dict[str, Req] = {}  # payload -> request
        self.by_lease: dict[str, Req] = {}
        self.nodes = {n: NodeModel() for n in NODES}
        self.start_list: list[str] = []
        self.seen: set[str] = set()
        self.counters: Counter[str] = Counter()
        self.n = 0  # payload numbering
        self.seq = 0  # the unsharded crawl's seq, for the plain queue's order
        self.corrupt: tuple[str, bytes | None, str] | None = None  # (key, its dump, how)
        self.corrupt_part: int | None = None  # the shard holding it (None: the crawl's own keys)
        self.pairings_only = False  # after Redis came back empty
        self.work_lost = False  # Redis came back empty while the model had work left
        self.loss_marked = False  # ... and the crawl must say so until the operator accepts it
        self.stale: set[str] = set()  # nodes whose epoch is of a state Redis lost
        self.epoch_deleted = False  # an epoch key deleted by hand, not yet put back by a node
        self.restarts = 0
        self.order_known = True  # False once seq was deleted: new ids may sort before old ones
        for node in NODES:
            self.f.join(node)
        for node in NODES:
            assert self._beat(node)  # its first heartbeat: it no longer reads start requests

    def teardown(self) -> None:
        self.client.close()

    # -- helpers -----------------------------------------------------------------------------
    def call(self, fn: Callable[[], Any]) -> Any:
        """Run one frontier call; a refusal must name the corrupt key and write nothing.

        On a sharded crawl a call spans parts that cannot change together: the part
        holding the corrupt key must be untouched; the other parts may have stored
        their share of a batch (returned as :class:`Partial`, applied by the rule),
        done their share of a release or a reap (applied by the rule), and given back
        what their pops took (the lease and release counters rise alike: see
        :meth:`redis_matches_the_model`).

        A call refused for its epoch (:class:`Rejoined`) must come from a node of a
        state Redis lost, and say the data was lost while that is unaccepted; the node
        then holds nothing, and beats again as its heartbeat loop would.
        """
        before = self.f.snapshot()
        try:
            return fn()
        except Rejoined as exc:
            self._rejoined(exc)
            return REJOINED
        except Partial as exc:
            if exc.rejoined is not None:  # the rest was refused for its epoch: the rule applies the part done
                self._rejoined(exc.rejoined)
                return exc
            return self._refused(exc, before)
        except redis.ResponseError as exc:
            return self._refused(exc, before)

    def _rejoined(self, exc: Rejoined) -> None:
        """A node refused for its epoch joined again: it must be a node of a state Redis lost
        (then it drops what it holds, and beats again as its heartbeat loop would), or the
        first to meet an epoch key deleted by hand (then it keeps everything)."""
        FrontierModel.tally["rejoined"] += 1
        assert exc.lost == self.loss_marked, f"node {exc.node} rejoined saying lost={exc.lost}"
        if exc.kept:
            FrontierModel.tally["rejoined, epoch put back"] += 1
            assert self.epoch_deleted, f"node {exc.node} refused for its epoch with no reset: {exc.cause}"
            self.epoch_deleted = False  # put back by this node: nobody else is refused
            return
        assert exc.node in self.stale, f"node {exc.node} refused for its epoch with no reset: {exc.cause}"
        self.stale.discard(exc.node)
        model = self.nodes[exc.node]
        model.held.clear()
        model.reports.clear()
        model.stalled = None
        self._beat(exc.node)

    def _refused(self, exc: redis.ResponseError | Partial, before: dict[bytes, bytes | None]) -> Any:
        """A call refused by a corrupt key (in part, on a sharded crawl)."""
        # a part refused for its epoch whose join met the corrupt key: the join's error names it
        cause = (exc.rejoin_error or exc.cause) if isinstance(exc, Partial) else exc
        after = self.f.snapshot()
        changed = sorted(k.decode() for k in set(before) | set(after) if before.get(k) != after.get(k))
        if self.config.sharded and self.corrupt is not None:
            tag = self.corrupt[0].rsplit("}:", 1)[0] + "}:"
            changed = [k for k in changed if k.startswith(tag)]
        assert not changed, f"a refused call ({cause}) wrote to {changed}"
        assert self.corrupt is not None, f"refused with no corrupt key: {cause}"
        if self.named_errors:
            assert self.corrupt[0] in str(cause), f"the error does not name the corrupt key {self.corrupt[0]}: {cause}"
            assert "repair or delete" in str(cause), f"the error does not say what to do: {cause}"
        FrontierModel.tally["refused" if not isinstance(exc, Partial) else "partly done"] += 1
        return exc if isinstance(exc, Partial) else REFUSED

    def _done_elsewhere(self, lease_or_req: str | Req) -> bool:
        """Whether a sharded call refused in the corrupt part did its share for this lease
        id or request anyway (it lives in another part)."""
        if not self.config.sharded or self.corrupt is None:
            return False
        if isinstance(lease_or_req, Req):
            part = None if lease_or_req.start else self.f.shard_of(lease_or_req.url)
        else:
            head, dot, _ = lease_or_req.partition(".")
            part = int(head) if dot else None
        return part != self.corrupt_part

    def _start_urls_corrupt(self) -> bool:
        """start_urls of the wrong type: start-entry leases stay leased (release and reap leave them)."""
        return self.corrupt is not None and self.corrupt[0] == K.start_urls

    def live(self) -> list[str]:
        return [n for n, m in self.nodes.items() if m.stalled is None]

    def next_payload(self, url: str) -> str:
        self.n += 1
        return f"{url}#{self.n}"

    def queued(self) -> list[Req]:
        return [r for r in self.reqs.values() if r.state == "queued"]

    def leased(self) -> list[Req]:
        return [r for r in self.reqs.values() if r.state == "leased"]

    # -- admission -------------------------------------------------------------------------------
    def _expect_admit(self, items: list[tuple[str, str, float, str]], flags: str) -> None:
        assert len(flags) == len(items), (flags, items)
        for (url, kind, score, payload), flag in zip(items, flags):
            new = kind == "d" or url not in self.seen
            if self.config.dedup == "bloom" and new and kind != "d" and flag == "0":
                FrontierModel.false_positives += 1  # a false positive: the filter may say seen
                new = False
            if kind != "d":
                FrontierModel.new_checks += url not in self.seen
                self.seen.add(url)
            assert flag == ("1" if new else "0"), f"{url} ({kind}) admitted {flag}, the model says {int(new)}"
            if not new:
                self.counters["filtered"] += 1
            elif kind != "r":
                self.counters["enqueued"] += 1
                self.seq += 1
                self.reqs[payload] = Req(payload, url, False, (score, self.seq))

    def _expect_partial(
        self, node: str, items: list[tuple[str, str, float, str]], acks: list[str], partial: Partial
    ) -> None:
        """The part of a batch stored, and the acks made, while another part was refused."""
        done = [(item, flag) for item, flag in zip(items, partial.flags) if flag != "-"]
        self._expect_admit([item for item, _ in done], "".join(flag for _, flag in done))
        assert set(partial.acks_done) <= set(acks), (partial.acks_done, acks)
        assert (partial.acked, partial.stale) == self._expect_acks(node, partial.acks_done)

    def _expect_acks(self, node: str, acks: list[str]) -> tuple[int, int]:
        acked = stale = 0
        for lease in acks:
            payload = self.nodes[node].held.pop(lease)
            req = self.reqs.get(payload)
            if req is not None and req.state == "leased" and req.node == node and req.lease == lease:
                req.state = "acked"
                if req.start:
                    self.counters["start_acked"] += 1
                    del self.reqs[payload]
                else:
                    acked += 1
            elif (
                req is not None
                and req.state == "queued"
                and not self.config.domains
                and not req.start
                and req.reaped_id == lease
                and req.deliveries > 0
            ):
                req.state = "acked"  # reaped while its node stalled, taken by no one: finished now
                acked += 1
            else:
                stale += 1
        self.counters["acked"] += acked
        self.counters["stale_acks"] += stale
        return acked, stale

    def _take_leases(self, node: str, leased: list[tuple[str, str, int, str]]) -> None:
        for lease, payload, deliveries, report in leased:
            req = self.reqs.get(payload)
            assert req is not None and req.state == "queued", f"popped {payload!r}, which the model has not queued"
            assert deliveries == req.deliveries + 1, (payload, deliveries, req.deliveries)
            req.state, req.node, req.lease, req.deliveries = "leased", node, lease, deliveries
            req.short_at = None
            self.by_lease[lease] = req
            self.nodes[node].held[lease] = payload
            self.counters["leased"] += 1
            self.counters["redelivered"] += deliveries > 1
            for kind in report:
                self.nodes[node].reports.append((lease, kind))

    def _check_pop_order(self, queued: list[Req], n: int, got: list[tuple[str, str, int, str]]) -> None:
        """The plain queue pops the first ``n`` of ``queued`` in order."""
        if self.config.domains or self.config.sharded or not self.order_known:
            assert len(got) <= n
            return
        popped = [p for _, p, _, _ in got]
        expected = sorted(queued, key=lambda r: r.order)[:n]
        assert popped == [r.payload for r in expected], f"the plain queue pops in order: {popped}, not {expected}"

    batch = st.lists(
        st.tuples(st.sampled_from(URLS), st.sampled_from("nnnnndr"), st.sampled_from([0.0, -1.0])),
        max_size=5,
    )

    def _batch(self, raw: list[tuple[str, str, float]]) -> list[tuple[str, str, float, str]]:
        return [(url, kind, score, self.next_payload(url)) for url, kind, score in raw]

    def _acks(self, node: str, data: st.DataObject, most: int = 3) -> list[str]:
        held = sorted(self.nodes[node].held)
        return data.draw(st.lists(st.sampled_from(held), unique=True, max_size=min(most, len(held)))) if held else []

    @precondition(lambda self: self.live())
    @rule(data=st.data(), raw=batch)
    def admit(self, data: st.DataObject, raw: list[tuple[str, str, float]]) -> None:
        node = data.draw(st.sampled_from(self.live()))
        self._admit(node, self._batch(raw), self._acks(node, data))

    def _admit(self, node: str, items: list[tuple[str, str, float, str]], acks: list[str]) -> bool:
        """One admission; False if it was refused."""
        events = list(self.nodes[node].reports)
        out = self.call(lambda: self.f.admit(node, items, acks, events))
        if isinstance(out, Partial):
            self._expect_partial(node, items, acks, out)
            return False
        if out in NOT_DONE:
            return False
        flags, acked, stale = out
        self.nodes[node].reports = []
        self._expect_admit(items, flags)
        assert (acked, stale) == self._expect_acks(node, acks)
        return True

    @precondition(lambda self: self.live())
    @rule(data=st.data(), raw=batch, n=st.integers(1, 6))
    def admit_and_pop(self, data: st.DataObject, raw: list[tuple[str, str, float]], n: int) -> None:
        node = data.draw(st.sampled_from(self.live()))
        items, acks, events = self._batch(raw), self._acks(node, data), list(self.nodes[node].reports)
        out = self.call(lambda: self.f.admit_and_pop(node, items, acks, events, n))
        if isinstance(out, Partial):
            self._expect_partial(node, items, acks, out)
            return
        if out in NOT_DONE:
            return
        flags, acked, stale, got = out
        self.nodes[node].reports = []
        if items or acks or events:
            self._expect_admit(items, flags)
            assert (acked, stale) == self._expect_acks(node, acks)
        if self.corrupt is not None and self.corrupt_name == "run" and not self.config.sharded:
            # the pop reads the run's limits (pop.lua) and is refused whole; the admission
            # stands (Frontier.admit_and_pop), and the next pop says what is wrong. (A shard's
            # pop cannot read the crawl's run record: its limits come with the heartbeat.)
            assert got == [], f"a pop went through with the run key corrupt: {got}"
        elif self.config.dedup != "bloom":  # a filter that grew finishes its batch after the pop
            self._check_pop_order(self.queued(), n, got)  # the pop sees the queue after the admission
        self._take_leases(node, got)

    @precondition(lambda self: self.live())
    @rule(data=st.data(), n=st.integers(1, 6))
    def pop(self, data: st.DataObject, n: int) -> None:
        node = data.draw(st.sampled_from(self.live()))
        before = self.queued()
        got = self.call(lambda: self.f.pop(node, n))
        if got in NOT_DONE:
            return
        self._check_pop_order(before, n, got)
        self._take_leases(node, got)

    @precondition(lambda self: any(self.nodes[n].held for n in self.live()))
    @rule(data=st.data(), to=st.sampled_from(URLS), kind=st.sampled_from("nnd"))
    def redirect(self, data: st.DataObject, to: str, kind: str) -> None:
        """A redirect: the new request is stored and its parent's lease acked, in one call."""
        node = data.draw(st.sampled_from([n for n in self.live() if self.nodes[n].held]))
        parent = data.draw(st.sampled_from(sorted(self.nodes[node].held)))
        items = [(to, kind, 0.0, self.next_payload(to))]
        out = self.call(lambda: self.f.admit(node, items, [parent], []))
        if isinstance(out, Partial):
            self._expect_partial(node, items, [parent], out)
            return
        if out in NOT_DONE:
            return
        self._expect_admit(items, out[0])
        assert out[1:] == self._expect_acks(node, [parent])

    @precondition(lambda self: any(self.nodes[n].held for n in self.live()))
    @rule(data=st.data(), unstarted=st.booleans())
    def release(self, data: st.DataObject, unstarted: bool) -> None:
        node = data.draw(st.sampled_from([n for n in self.live() if self.nodes[n].held]))
        ids = self._acks(node, data, most=4)
        got = self.call(lambda: self.f.release(node, ids, unstarted))
        if got is REJOINED or (got is REFUSED and not self.config.sharded):
            return
        released, back = 0, []
        for lease in ids:
            if got is REFUSED and not self._done_elsewhere(lease):
                continue  # its part refused: still held
            req = self.reqs.get(self.nodes[node].held.pop(lease))
            if req is None or req.state != "leased" or req.node != node or req.lease != lease:
                continue
            if req.start and self._start_urls_corrupt():
                continue  # left leased until start_urls is repaired (the node let it go: it expires)
            released += 1
            req.short_at = None
            if req.start:
                back.append(req.payload)
                req.state = "returned"
                del self.reqs[req.payload]
            else:
                req.state, req.node, req.reaped_id = "queued", None, lease
                if unstarted:
                    req.deliveries -= 1
        self.start_list[:0] = back
        self.counters["released"] += released
        assert got is REFUSED or got == released

    @precondition(lambda self: any(self.nodes[n].held for n in self.live()))
    @rule(data=st.data())
    def dead_letter(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from([n for n in self.live() if self.nodes[n].held]))
        lease = data.draw(st.sampled_from(sorted(self.nodes[node].held)))
        got = self.call(lambda: self.f.dead_letter(node, lease))
        if got in NOT_DONE:
            return
        req = self.reqs.get(self.nodes[node].held.pop(lease))
        mine = req is not None and req.state == "leased" and req.node == node and req.lease == lease
        assert got == mine
        if mine:
            req.state = "dead"
            self.counters["dead"] += 1
            self.dead[req.payload] += 1

    @property
    def dead(self) -> Counter[str]:
        if not hasattr(self, "_dead"):
            self._dead: Counter[str] = Counter()
        return self._dead

    # -- start entries -------------------------------------------------------------------------------
    @rule(urls=st.lists(st.sampled_from(URLS), min_size=1, max_size=3))
    def push_starts(self, urls: list[str]) -> None:
        entries = [self.next_payload(u) for u in urls]
        try:
            self.f.push_starts(entries)  # a plain RPUSH, as `crawlplug push` does
        except redis.ResponseError:
            assert self.corrupt is not None and self.corrupt[0] == K.start_urls
            return  # the RPUSH met the corrupt key: nothing pushed
        self.start_list += entries

    @precondition(lambda self: self.live())
    @rule(data=st.data(), n=st.integers(1, 3))
    def take_starts(self, data: st.DataObject, n: int) -> None:
        self._take(data.draw(st.sampled_from(self.live())), n)

    def _take(self, node: str, n: int) -> bool:
        got = self.call(lambda: self.f.take_starts(node, n))
        if got in NOT_DONE:
            return False
        expected, self.start_list = self.start_list[:n], self.start_list[n:]
        assert [e for _, e in got] == expected
        for lease, entry in got:
            self.seq += 1
            req = Req(entry, entry.split("#")[0], True, (0, self.seq), "leased", node, lease, 1)
            self.reqs[entry] = req
            self.by_lease[lease] = req
            self.nodes[node].held[lease] = entry
        self.counters["start_taken"] += len(got)
        return True

    # -- liveness ------------------------------------------------------------------------------------
    @precondition(lambda self: self.live())
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from(self.live()))
        self._beat(node)

    def _beat(self, node: str) -> bool:
        held = sorted(self.nodes[node].held)
        lost = self.call(lambda: self.f.heartbeat(node, held))
        if lost is REFUSED:
            # a sharded heartbeat refused in one part renewed the leases of the others
            self._renewed(node, None, [i for i in held if self._done_elsewhere(i)])
        if lost in NOT_DONE:
            return False
        expected = [i for i in held if not self._holds(node, i)]
        assert sorted(lost) == expected, "the heartbeat reports exactly the leases the node lost"
        for i in lost:
            del self.nodes[node].held[i]
        self._renewed(node, None)
        return True

    def _renewed(self, node: str, short_at: float | None, ids: list[str] | None = None) -> None:
        """The node's leases (``ids``, default all it holds) now expire after LEASE, or
        SHORT after ``short_at``."""
        for lease in self.nodes[node].held if ids is None else ids:
            if self._holds(node, lease):
                self.by_lease[lease].short_at = short_at

    def _holds(self, node: str, lease: str) -> bool:
        req = self.by_lease.get(lease)
        return req is not None and req.state == "leased" and req.node == node and req.lease == lease

    def _can_stall(self) -> list[str]:
        """Live nodes that may stall (all but the first), holding leases to lose."""
        return [n for n in self.live() if n != NODES[0] and self.nodes[n].held]

    @precondition(lambda self: self._can_stall())
    @rule(data=st.data())
    def stall(self, data: st.DataObject) -> None:
        """A node's last heartbeat (short leases), then it stops renewing: frozen, killed, cut off."""
        node = data.draw(st.sampled_from(self._can_stall()))
        held = sorted(self.nodes[node].held)
        lost = self.call(lambda: self.f.heartbeat(node, held, short=True))
        at = time.monotonic()  # after the call: the deadlines it set are at most SHORT from now
        if lost is REFUSED:
            # a sharded heartbeat refused in one part renewed the leases of the others
            self._renewed(node, at, [i for i in held if self._done_elsewhere(i)])
        if lost in NOT_DONE:
            return
        assert sorted(lost) == [i for i in held if not self._holds(node, i)]
        for i in lost:
            del self.nodes[node].held[i]
        self._renewed(node, at)
        self.nodes[node].stalled = at

    @precondition(lambda self: any(m.stalled is not None for m in self.nodes.values()))
    @rule()
    def reap_after_expiry(self) -> None:
        self._reap()

    def _reap(self) -> bool:
        """Any node's reap, once every short lease surely expired (real sleeps)."""
        short = [r.short_at for r in self.leased() if r.short_at is not None]
        wait = max(short, default=0.0) + SHORT + 0.05 - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        got = self.call(lambda: self.f.reap(NODES[0]))
        if got is REJOINED or (got is REFUSED and not self.config.sharded):
            return False
        requeued = killed = 0
        back: list[tuple[float, str, str]] = []
        for req in list(self.leased()):
            if req.short_at is None or (got is REFUSED and not self._done_elsewhere(req)):
                continue
            if req.start and self._start_urls_corrupt():
                continue  # left leased until start_urls is repaired
            if req.start:
                back.append((req.short_at, req.lease or "", req.payload))
                req.state = "returned"
                del self.reqs[req.payload]
                self.counters["start_returned"] += 1
            elif req.deliveries >= MAX_DELIVERIES:
                req.state = "dead"
                self.dead[req.payload] += 1
                self.counters["dead"] += 1
                killed += 1
            else:
                req.state, req.reaped_id = "queued", req.lease
                req.node = None
                self.counters["reaped"] += 1
                requeued += 1
            req.short_at = None
        back.sort()
        self.start_list[:0] = [p for _, _, p in back]
        if got is REFUSED:
            return False
        assert tuple(got) == (requeued + len(back), killed)
        FrontierModel.tally["reaped"] += requeued + len(back) + killed
        return True

    @precondition(lambda self: any(m.stalled is not None for m in self.nodes.values()))
    @rule(data=st.data())
    def revive(self, data: st.DataObject) -> None:
        """A stalled node comes back: its heartbeat renews what was not reaped, reports the rest lost."""
        node = data.draw(st.sampled_from([n for n, m in self.nodes.items() if m.stalled is not None]))
        if self._beat(node):
            self.nodes[node].stalled = None

    # -- corruption -----------------------------------------------------------------------------------
    #: the keys corruption steps may break (narrowed only to hunt one defect)
    corrupt_only: tuple[str, ...] = ()

    def _corruptible(self) -> dict[str, str]:
        keys = {**CORRUPTIBLE, **(DOMAIN_KEYS if self.config.domains else {})}
        return {k: v for k, v in keys.items() if k in self.corrupt_only} if self.corrupt_only else keys

    @precondition(lambda self: self.corrupt is None and not self.pairings_only)
    @rule(data=st.data(), how=st.sampled_from(["type", "type", "int"]))
    def corrupt_a_key(self, data: st.DataObject, how: str) -> None:
        """Break one crawl key as an operator's slip would; the next call on it must refuse whole."""
        name = data.draw(st.sampled_from(sorted(self._corruptible())))
        shard = 0 if self.config.sharded and self._corruptible()[name] == "shard" else None
        key = self.f.key(name, shard)
        c = self.client
        backup = c.dump(key)
        if how == "int" and name in ("seq", "stats"):
            if name == "seq":
                c.set(key, "12abc")
            else:
                c.hset(
                    key,
                    data.draw(
                        st.sampled_from(
                            ["enqueued", "filtered", "acked", "leased", "reaped", "released", "dead", "start_taken"]
                        )
                    ),
                    "1.5x",
                )
        else:
            kind = c.type(key).decode()
            c.delete(key)
            # an epoch of any string is no wrong type (another epoch: a reset), even where it was absent
            if kind == "string" or name == "epoch":
                c.rpush(key, "not a counter")
            else:
                c.set(key, "junk")
        self.corrupt = (key, backup, how)
        self.corrupt_part = shard
        self.corrupt_name = name
        FrontierModel.tally["corrupted"] += 1
        # the call that touches it now: an admission of a URL new to the crawl (every
        # shard-level key, the epoch), a heartbeat (nodes, producers, control, run; a pop
        # reads the run too, for its limits), a reap (dead), a take (start_urls)
        node = self.live()[0] if self.live() else None
        if node is None:
            return
        if name in ("nodes", "producers", "control", "run"):
            done = self._beat(node)
        elif name == "dead":
            done = self._reap()
        elif name == "start_urls":
            done = self._take(node, 1)
        else:
            here = [u for u in URLS if shard is None or self.f.shard_of(u) == shard]
            fresh = [u for u in here if u not in self.seen]
            url = fresh[0] if fresh else here[0]
            done = self._admit(node, [(url, "n" if fresh else "d", 0.0, self.next_payload(url))], [])
        assert not done or not self.named_errors, f"a call on the corrupt {key} went through"

    @precondition(lambda self: self.corrupt is None and not self.pairings_only and self.live())
    @rule(name=st.sampled_from(STATISTICS), how=st.sampled_from(["string", "list"]))
    def corrupt_a_statistic(self, name: str, how: str) -> None:
        """A statistic-only key of the wrong type (the per-10 s series, the graveyard, a node's
        metrics) refuses nothing: the next call that writes it starts it again."""
        node = self.live()[0]
        shard = 0 if self.config.sharded and name != "node" else None
        key = self.f.part_keys(None).node(f"node-{node}") if name == "node" else self.f.key(name, shard)
        self.client.delete(key)
        if how == "string":
            self.client.set(key, "junk")
        else:
            self.client.rpush(key, "junk")

        def write_it() -> Any:
            if name == "node":
                return self._beat(node)
            if name == "graveyard":
                return self._reap()
            # the series: written by an admission that stores a request
            url = next(u for u in URLS if shard is None or self.f.shard_of(u) == shard)
            return self._admit(node, [(url, "d", 0.0, self.next_payload(url))], [])

        deleted = self.epoch_deleted
        done = write_it()
        if not done and deleted and not self.epoch_deleted:
            done = write_it()  # the call was refused for the epoch deleted by hand, which it put back: again
        assert done, f"a corrupt statistic ({key}) refused the call"
        assert self.client.type(key) in (b"hash", b"none"), f"{key} was not started again"

    @precondition(lambda self: self.corrupt is not None)
    @rule(delete=st.booleans())
    def repair(self, delete: bool) -> None:
        """The operator's way (docs/faults.md): put the key's content back, or delete it if it
        holds nothing the crawl needs (seq, the node registry, the epoch, ...) or held nothing."""
        key, backup, _ = self.corrupt
        self.client.delete(key)
        if backup is not None and not (delete and self.corrupt_name in DELETABLE):
            self.client.restore(key, 0, backup)
        elif backup is not None:
            self.order_known = self.order_known and self.corrupt_name != "seq"
            self.epoch_deleted = self.epoch_deleted or self.corrupt_name == "epoch"
        self.corrupt = None

    @precondition(lambda self: self.corrupt is None and not self.pairings_only and self.live())
    @rule(name=st.sampled_from(["seq", "seq", "nodes", "producers", "series", "graveyard"]))
    def delete_a_key(self, name: str) -> None:
        """A key whose loss costs no work deleted by hand, in every part: `seq` (new ids must
        not overwrite requests that hold old ones), the node registry, the producers, the
        per-10 s series, the graveyard. The crawl goes on as if nothing happened."""
        for part in self.f.parts():
            self.client.delete(part.key(name))
        if name == "seq":
            self.order_known = False

    @precondition(lambda self: self.loss_marked and self.corrupt is None)
    @rule()
    def accept_loss(self) -> None:
        """The operator accepts what Redis lost (`crawlplug resume`): the crawl may finish again."""
        assert self.f.accept_loss()
        self.loss_marked = self.work_lost = False

    # -- restarts ---------------------------------------------------------------------------------------
    @precondition(lambda self: self.corrupt is None and self.restarts < 2)
    @rule(persist=st.booleans())
    def restart_redis(self, persist: bool) -> None:
        """Redis killed (SIGKILL) and started again, with its data (an RDB saved just before)
        or without (Redis comes back empty). Twice per example at most: each costs a
        server start, and an empty one leaves only the pairings to check."""
        self.restarts += 1
        server = self.server
        dump = Path(server.directory) / "dump.rdb"
        if persist:
            self.client.save()
        elif dump.exists():
            dump.unlink()
        FrontierModel.tally["restarts kept" if persist else "restarts empty"] += 1
        assert server.proc is not None
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(10)
        server.start()
        self.client.connection_pool.disconnect()
        if not persist:
            if self.queued() or self.leased() or self.start_list:
                self.work_lost = True
            # the model is rebuilt from what survived: nothing (the start of a new run,
            # begun by the first node to join again, clears what a node wrote meanwhile)
            self.reqs.clear()
            self.by_lease.clear()
            self.start_list.clear()
            self.seen.clear()
            self.counters.clear()
            self.dead.clear()
            self.pairings_only = True
            self.seq = 0
            # every node holds the epoch of a state Redis lost: its next call is refused,
            # and it joins again saying the data was lost
            self.stale = set(NODES)
            self.loss_marked = True
            self.epoch_deleted = False  # gone with the rest
        # every live node's next heartbeat comes within one heartbeat interval, before
        # any grace period for termination could pass
        deleted = self.epoch_deleted  # kept by a restart with its data: still to be put back
        for node in self.live():
            done = self._beat(node)
            if not done and deleted and not self.epoch_deleted:
                deleted = False  # this node put the epoch back (and kept everything): it beats again
                done = self._beat(node)
            assert done == persist, f"node {node}'s heartbeat after the restart: done={done}"
            assert node not in self.stale, f"node {node} of the lost state was not refused for its epoch"

    # -- invariants ---------------------------------------------------------------------------------
    @invariant()
    def redis_matches_the_model(self) -> None:
        FrontierModel.tally["checks"] += 1
        if self.corrupt is not None:
            return
        v = self.f.view()
        by_payload: dict[str, str] = {}
        for rid, payload in v["requests"].items():
            assert payload not in by_payload, f"payload {payload!r} stored twice"
            by_payload[payload] = rid
        # pairings: each stored request in exactly one of queue and leases, each queued or
        # leased id with its payload, each lease held by a node
        for rid in v["requests"]:
            assert (rid in v["queued"]) + (rid in v["leases"]) == 1, f"request {rid} is queued and leased, or neither"
        for rid in v["queued"] | set(v["leases"]):
            assert rid in v["requests"], f"id {rid} is queued or leased without its payload"
        for rid, holder in v["leases"].items():
            assert holder in {f"node-{n}" for n in NODES}, f"lease {rid} held by {holder!r}"
        if self.pairings_only:
            return
        for req in self.reqs.values():
            rid = by_payload.get(req.payload)
            if req.state in ("queued", "leased"):
                assert rid is not None, f"{req.payload!r} ({req.state}) is not stored"
            else:
                assert rid is None, f"{req.payload!r} ({req.state}) is still stored"
            if req.state == "queued":
                assert rid in v["queued"], f"{req.payload!r} should be queued"
                assert v["deliveries"].get(rid, 0) == req.deliveries, f"{req.payload!r} deliveries"
            elif req.state == "leased":
                assert v["leases"].get(req.lease) == f"node-{req.node}", f"{req.payload!r} leased to {req.node}"
        known = {r.payload for r in self.reqs.values() if r.state in ("queued", "leased")}
        assert set(by_payload) == known, f"stored but not in the model: {set(by_payload) - known}"
        assert v["dead"] == self.dead, "dead letters"
        assert v["start_urls"] == self.start_list, "start entries"
        if self.config.dedup in ("set", "hash", "hashgen", "ttl"):
            assert v["seen"] == {fingerprint(u) for u in self.seen}, "recorded fingerprints"
        for name in (
            "enqueued",
            "filtered",
            "acked",
            "start_acked",
            "stale_acks",
            "reaped",
            "dead",
            "start_taken",
            "start_returned",
        ):
            assert v["stats"].get(name, 0) == self.counters[name], (
                f"counter {name}: {v['stats'].get(name, 0)} in Redis, {self.counters[name]} in the model"
            )
        # a sharded pop that met a corrupt shard gave back, unstarted, what the other shards
        # leased in the same call: those count as leased and released alike (the model does
        # not know how many: that is the shards' rotation)
        extra = v["stats"].get("leased", 0) - self.counters["leased"]
        assert extra == v["stats"].get("released", 0) - self.counters["released"], "leases taken, not given back"
        assert extra == 0 or (extra > 0 and self.config.sharded), "counter leased"
        assert 0 <= v["stats"].get("redelivered", 0) - self.counters["redelivered"] <= extra, "counter redelivered"

    @invariant()
    def finished_only_when_nothing_is_left(self) -> None:
        if self.corrupt is not None or not self.live():
            return
        done, (queued, leased, _), lost = self.f.finished(self.live()[0])
        assert lost == self.loss_marked, f"the crawl says its data was lost: {lost}; the model: {self.loss_marked}"
        if not self.pairings_only:
            assert (queued, leased) == (len(self.queued()) + len(self.start_list), len(self.leased()))
        if done:
            assert not self.work_lost, "the crawl reads as finished after Redis lost work"
            assert not (self.queued() or self.leased() or self.start_list), "finished with work left"


@pytest.fixture(scope="module")
def model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(free_port(), tmp_path_factory.mktemp("model-redis")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_the_frontier_matches_its_model(config: Config, model_server: RedisServer) -> None:
    machine = type(f"Model_{config}".replace("-", "_"), (FrontierModel,), {"config": config, "server": model_server})
    FrontierModel.false_positives = FrontierModel.new_checks = 0
    FrontierModel.tally = Counter()
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=False,
            suppress_health_check=list(HealthCheck),
        ),
    )
    tally = FrontierModel.tally
    tally["steps"] = tally["checks"] - tally["examples"]
    print(f"{config}: {dict(sorted(tally.items()))}")
    assert tally["steps"] >= 10 * EXAMPLES, f"the examples were too short to prove anything: {tally}"
    if config.dedup == "bloom":
        # dropped new URLs are false positives only, within what the error rate allows
        n, fp = FrontierModel.new_checks, FrontierModel.false_positives
        assert fp <= 3 + 3 * ERROR_RATE * n, (fp, n)


def test_an_admission_done_in_part_whose_rejoin_meets_a_corrupt_key_keeps_the_part_done(
    model_server: RedisServer,
) -> None:
    """The steps CI's draw found (shrunk by hand): on a sharded crawl, one shard's epoch key
    deleted by hand (a repair the docs allow: the first node refused for it puts it back),
    then the crawl's control key corrupt. A batch over both shards is stored in the shard
    that kept its epoch and refused for its epoch in the other; the node's join to put the
    epoch back meets the corrupt key. What was stored stays stored and counted, the node
    stays of its epoch, and after the repair Redis and the model agree again."""
    machine = type("Model_replay", (FrontierModel,), {"config": Config("hash", True, True), "server": model_server})
    state = machine()
    try:
        by_shard = {s: [u for u in URLS if shard_of(host(u), SHARDS) == s] for s in range(SHARDS)}
        kept, refused = by_shard[0][0], by_shard[1][0]
        state.client.delete(state.f.key("epoch", 1))
        state.epoch_deleted = True
        control = state.f.key("control", None)
        state.corrupt = (control, state.client.dump(control), "type")
        state.corrupt_part, state.corrupt_name = None, "control"
        state.client.delete(control)
        state.client.set(control, "junk")
        items = state._batch([(kept, "n", 0.0), (refused, "n", 0.0)])
        assert not state._admit("b", items, [])
        stored = set(state.f.view()["requests"].values())
        assert stored == {items[0][3]}, stored  # the shard that kept its epoch stored its part
        assert state.epoch_deleted, "the join met the corrupt key: nobody put the epoch back"
        state.repair(delete=False)
        state.redis_matches_the_model()
        state.finished_only_when_nothing_is_left()
        # the next refusal's join puts the epoch back (the call is not done: sent again)
        assert not state._admit("b", state._batch([(refused, "n", 0.0)]), [])
        assert not state.epoch_deleted
        assert state._admit("b", state._batch([(refused, "n", 0.0)]), [])
        state.redis_matches_the_model()
        state.finished_only_when_nothing_is_left()
    finally:
        state.teardown()
