"""The model test's rollback step: Redis replaced by an RDB copy taken at an earlier step.

tests/test_frontier_model.py holds the frontier to an exact model of every request; that
model cannot follow Redis back in time (what a node holds and what Redis holds part ways
on purpose). This machine drives the same frontier, through the same adapter
(:class:`~tests.test_frontier_model.FrontierUnderTest`), the way a crawl does instead: a
site whose every URL yields the same children each time it is fetched, start entries
pushed by an operator, start requests a node's spider makes itself (no lease behind them:
the node's resend log brings them back), three nodes that lease pages, fetch them, admit their children in
several calls while "the callback runs" and ack each page in the same call as its last
children or a later one, beat, release and reap. At any step Redis may be SIGKILLed and
started again from an RDB file saved at an earlier step (a restart from a snapshot, a
failover to a replica that lagged, a restored backup); on a sharded crawl one shard alone
may go back (a Cluster primary: its keys put back as they were, tests/support/rollback.py).

At teardown the nodes drain the crawl as nodes do (every page fetched, every child sent,
every ack made, expired leases reaped) and the property is checked: every request a node
admitted from a page or a start entry it leased, or as its spider's start request, was
fetched by the end, and every URL reachable from the start entries and the spiders' start
requests was. Excluded, as docs/faults.md says: start entries an operator pushed after the
snapshot that was restored (that push is lost with everything
else Redis lost; the subtree of each push is its own here, so its pages are excluded with
it).

In CI each configuration runs 10 examples of up to 40 steps (about 30 s each on two cores).
For a longer hunt: ``CRAWLPLUG_MODEL_EXAMPLES=200 CRAWLPLUG_MODEL_STEPS=80``.
"""

from __future__ import annotations

import os
import shutil
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
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from crawlplug.crawl import Crawl, runs
from crawlplug.errors import AdmissionIncomplete, RolledBack
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.dedup import Dedup, SetDedup
from crawlplug.frontier.fphash import HashDedup, SplitSpec
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.layout import claim_shards
from crawlplug.queues import DomainQueue, PriorityQueue

from .support.rollback import Snapshot, restore, snapshot
from .support.servers import RedisServer, free_port
from .test_frontier_model import fingerprint

pytestmark = pytest.mark.integration  # a private redis-server, SIGKILLed and started again

EXAMPLES = int(os.environ.get("CRAWLPLUG_MODEL_EXAMPLES", "30"))
STEPS = int(os.environ.get("CRAWLPLUG_MODEL_STEPS", "60"))
NODES = ("a", "b", "c")
LEASE = 1.0  # a lease nobody renews (restored by a rollback, its node gone on) expires this soon
K = CrawlKeys("rollback-model")
SHARDS = 2
ROOT_HOSTS = ("a.test", "b.test", "c.test")  # one site per start entry: pushes 0, 1, 2
SPIDER_HOSTS = ("s.test", "t.test")  # one site per start request a node's spider makes
DEPTH = 3


def children(url: str) -> list[str]:
    """What fetching ``url`` yields, the same every time: two links a level down to depth
    DEPTH, and at the bottom a link back to the site's root (a duplicate)."""
    scheme_host, _, path = url.rpartition("/")
    if len(path) < DEPTH:
        return [f"{url}{c}" for c in "01"]
    return [f"{scheme_host}/"]


def site(root: str) -> set[str]:
    """Every URL reachable from ``root``."""
    out, todo = set(), [root]
    while todo:
        url = todo.pop()
        if url not in out:
            out.add(url)
            todo += children(url)
    return out


def host(url: str) -> str:
    return url.split("/")[2]


@dataclass(frozen=True)
class Config:
    dedup: str  # "set", "hash"
    domains: bool
    sharded: bool

    def __str__(self) -> str:
        return f"{self.dedup}-{'domain' if self.domains else 'priority'}-{'sharded' if self.sharded else 'single'}"


CONFIGS = [Config("set", False, False), Config("hash", True, False), Config("set", False, True)]


@dataclass
class Lease:
    url: str
    start: bool  # a start entry's lease (its one request is the entry's URL)
    fetched: bool = False
    report: str = ""  # what the per-domain queue wants to hear of it, not yet sent ("s", "r")


@dataclass
class Node:
    frontier: Any = None
    held: dict[str, Lease] = field(default_factory=dict)
    #: what its pages produced, not yet admitted: (lease id it came from, url, kind), in order
    pending: list[tuple[str, str, str]] = field(default_factory=list)


class CrawlWithRollbacks(RuleBasedStateMachine):
    config: Config
    server: RedisServer
    tally: ClassVar[Counter[str]] = Counter()

    def __init__(self) -> None:
        super().__init__()
        CrawlWithRollbacks.tally["examples"] += 1
        self.client = redis.Redis.from_url(self.server.url)
        self.client.flushall()
        self.client.script_flush()
        self.dir = Path(self.server.directory)
        #: (RDB copy, pushes then, admissions then, shard 1's keys)
        self.snapshots: list[tuple[Path, int, int, Snapshot | None]] = []
        self.admissions = 0  # admission calls that went through
        self.saved = 0
        self.pushed: list[str] = []  # the roots pushed, in order
        self.spider_roots: list[str] = []  # the start requests nodes' spiders made, in order
        self.excluded: set[str] = set()  # roots whose push Redis lost (pushed after the snapshot restored)
        self.admitted: set[str] = set()  # URLs a node admitted as new from a page or entry it leased
        self.fetched: set[str] = set()
        self.rollbacks = 0
        self.nodes = {n: Node() for n in NODES}
        self.n = 0
        claim_shards(self.client, K, SHARDS if self.config.sharded else 1)
        for name in NODES:
            joined = runs.join(self.client, K, node_id=f"node-{name}", ttl_ms=int(LEASE * 1000))
            self.nodes[name].frontier = self._build(name, joined.epoch)

    def _dedup(self) -> Dedup:
        return HashDedup(SplitSpec(fill=2)) if self.config.dedup == "hash" else SetDedup()

    def _build(self, name: str, epoch: str) -> Any:
        kwargs: dict[str, Any] = {
            "queue": DomainQueue() if self.config.domains else PriorityQueue(),
            "node_id": f"node-{name}",
            "lease_timeout": LEASE,
            "heartbeat": LEASE / 4,
            "epoch": epoch,
        }
        if self.config.sharded:
            return Frontier(self.client, K, shards=SHARDS, dedup_factory=self._dedup, **kwargs)
        return Frontier(self.client, K, dedup=self._dedup(), **kwargs)

    def teardown(self) -> None:
        try:
            older = self._older()
            if not self.rollbacks and older:
                # an example whose steps drew no rollback goes back once before the end, to
                # the latest snapshot older than an admission: every example that can test
                # the property does (the draws alone gave 8 rollbacks in 30 examples once)
                self._back_to(older[-1])
            self.drain()
        finally:
            self.client.close()

    # -- one node's calls ----------------------------------------------------------------
    def _call(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run a node's call; a rollback found, the node does what the Scheduler does: forget
        the leases the frontier gave back (their pages are fetched again). Returns None then."""
        node = self.nodes[name]
        try:
            return fn()
        except RolledBack as exc:
            self._given_back(node, exc.given_back)
        except AdmissionIncomplete as exc:  # a sharded call done in part: the part that went back
            assert isinstance(exc.cause, RolledBack), exc
            # the parts that did not go back may have leased in this call (given back too, never
            # seen) or made its acks (no longer held: the shard that went back gets the children
            # again from the node's resend log)
            self._given_back(node, exc.cause.given_back, acked=exc.acks_done)
            return exc
        return None

    def _given_back(self, node: Node, ids: list[str], acked: list[str] | None = None) -> None:
        CrawlWithRollbacks.tally["rollbacks found"] += 1
        if acked is None:
            assert set(ids) == set(node.held), f"gave back {sorted(ids)}, the node held {sorted(node.held)}"
        else:
            held = set(node.held) - set(acked)
            assert held <= set(ids), f"gave back {sorted(ids)}, the node held {sorted(held)} (acked {acked})"
        node.held.clear()

    def _items(self, node: Node, sent: list[tuple[str, str, str]]) -> list[tuple[Any, ...]]:
        out = []
        for _, url, kind in sent:
            self.n += 1
            arg = b"" if kind in ("d", "s") else node.frontier.dedup.argument(fingerprint(url))
            item: tuple[Any, ...] = (
                arg,
                0.0,
                f"{url}#{self.n}".encode() if kind != "r" else b"",
                host(url) if self.config.domains else "",
            )
            if self.config.sharded or kind == "s":
                item += (host(url) if self.config.sharded else "",)
            if kind == "s":  # a spider's start request (dont_filter, as Scrapy's are): no lease behind it
                item += (True,)
            out.append(item)
        return out

    def _leased(self, node: Node, got: list[Any]) -> None:
        for x in got:
            url = x.payload.decode().split("#")[0]
            node.held[x.id] = Lease(url, False, report=x.report)
            CrawlWithRollbacks.tally["leased"] += 1

    def _send(self, name: str, k: int, acks: list[str], pop: int = 0) -> None:
        """Admit the first ``k`` things node ``name``'s pages produced, with ``acks``; pop."""
        node = self.nodes[name]
        sent = node.pending[:k]
        items = self._items(node, sent)
        # the per-domain queue's reports of every lease it holds (sent and downloaded at once)
        events = [(i, kind) for i, x in sorted(node.held.items()) for kind in x.report]
        if pop:
            out = self._call(name, lambda: node.frontier.admit_and_pop(items, acks, pop, events))
        else:
            out = self._call(name, lambda: (node.frontier.admit(items, acks, events), []))
        if out is None:
            return  # refused: nothing admitted (sent again later), the leases given back
        self.admissions += bool(items or acks)
        for i, _ in events:
            if i in node.held:
                node.held[i].report = ""
        if isinstance(out, AdmissionIncomplete):
            flags, acks_done = out.flags, out.acks_done
            leased: list[Any] = []
        else:
            result, leased = out
            flags, acks_done = (result.flags if result is not None else ""), acks
        kept = []
        for (lease_id, url, kind), flag in zip(sent, flags):
            if flag == "-":
                kept.append((lease_id, url, kind))
            elif flag == "1" and kind != "r":
                self.admitted.add(url)
        node.pending = kept + node.pending[k:]
        for lease_id in acks_done:
            node.held.pop(lease_id, None)
        self._leased(node, leased)

    # -- rules ---------------------------------------------------------------------------
    @initialize()
    def first_start_entry(self) -> None:
        self.push_start_entry()

    def push_start_entry(self) -> None:
        """An operator pushes the next site's root (a plain RPUSH, as `crawlplug push` does)."""
        if len(self.pushed) >= len(ROOT_HOSTS):
            return
        root = f"http://{ROOT_HOSTS[len(self.pushed)]}/"
        Crawl.of(self.nodes["a"].frontier).push_starts([root])
        self.pushed.append(root)

    def spider_start(self, name: str) -> None:
        """Node ``name``'s spider makes the next site's root, a start request of its own (its
        start(), as Scrapy calls it): admitted with the node's next call, no lease behind it."""
        if len(self.spider_roots) >= len(SPIDER_HOSTS):
            return
        root = f"http://{SPIDER_HOSTS[len(self.spider_roots)]}/"
        self.nodes[name].pending.append(("", root, "s"))
        self.spider_roots.append(root)

    #: what happens next: a node's action, an operator's push, or Redis saving a snapshot
    #: or going back to one (all of it, or one shard of a sharded crawl). One rule, so that
    #: hypothesis's choice of rules per example (swarm testing) never leaves one out.
    ACTIONS = (
        "take",
        "take",
        "pop",
        "fetch",
        "fetch",
        "fetch",
        "admit",
        "admit",
        "admit",
        "heartbeat",
        "reap",
        "release",
        "push",
        "start",
        "snapshot",
        "snapshot",
        "back",
        "back",
        "shard back",
    )

    @rule(data=st.data(), name=st.sampled_from(NODES), action=st.sampled_from(ACTIONS))
    def step(self, data: st.DataObject, name: str, action: str) -> None:
        if action == "push":
            self.push_start_entry()
        elif action == "start":
            self.spider_start(name)
        elif action == "snapshot":
            if self._work_left():
                self.save_snapshot()
        elif action == "back" or (action == "shard back" and not self.config.sharded):
            # an unsharded crawl's "shard back" is all of Redis going back: as many rollbacks
            # drawn as a sharded crawl's (a full run drew 7 in 30 examples, under the 10 asked)
            if self._older() and self.rollbacks < 3:
                self.redis_goes_back(data)
        elif action == "shard back":
            if self._older() and self.rollbacks < 3:
                self.one_shard_goes_back(data)
        else:
            getattr(self, f"_{action}")(data, name)

    def _take(self, data: st.DataObject | None, name: str) -> None:
        node = self.nodes[name]
        got = self._call(name, lambda: node.frontier.take_starts(2))
        for lease_id, raw in got or ():
            node.held[lease_id] = Lease(raw.decode(), True)

    def _pop(self, data: st.DataObject, name: str) -> None:
        node = self.nodes[name]
        n = data.draw(st.integers(1, 4))
        self._leased(node, self._call(name, lambda: node.frontier.pop(n)) or [])

    def _fetch(self, data: st.DataObject, name: str) -> None:
        """A page's download and callback: what it yields waits to be admitted."""
        node = self.nodes[name]
        todo = sorted(i for i, h in node.held.items() if not h.fetched)
        if todo:
            self._fetched(node, data.draw(st.sampled_from(todo)))

    def _fetched(self, node: Node, lease_id: str) -> None:
        lease = node.held[lease_id]
        lease.fetched = True
        if lease.start:  # the entry's request: crawled even if seen, its fingerprint recorded
            node.pending += [(lease_id, lease.url, "r"), (lease_id, lease.url, "d")]
        else:
            self.fetched.add(lease.url)
            node.pending += [(lease_id, url, "n") for url in children(lease.url)]

    def _finished(self, node: Node, k: int) -> list[str]:
        """Leases whose page is fetched and whose children are all sent once the first ``k``
        pending ones are: they may be acked in that call."""
        waiting = {lease_id for lease_id, _, _ in node.pending[k:]}
        return sorted(i for i, x in node.held.items() if x.fetched and i not in waiting)

    def _admit(self, data: st.DataObject, name: str) -> None:
        """Send part of what the node's pages produced, with the acks of some finished pages
        (the ack of a page in the call of its last children, or in a later one), and pop."""
        node = self.nodes[name]
        k = data.draw(st.integers(min(1, len(node.pending)), len(node.pending)))
        finished = self._finished(node, k)
        acks = [i for i in finished if data.draw(st.booleans())]  # each acked now or in a later call
        pop = data.draw(st.sampled_from([0, 3]))
        if k or acks or pop:
            self._send(name, k, acks, pop)

    def _heartbeat(self, data: st.DataObject | None, name: str) -> None:
        node = self.nodes[name]
        lost = self._call(name, lambda: node.frontier.heartbeat(sorted(node.held)))
        for lease_id in lost or ():
            node.held.pop(lease_id, None)  # expired and reaped: its children are still sent, its ack is not

    def _reap(self, data: st.DataObject | None, name: str) -> None:
        self._call(name, lambda: self.nodes[name].frontier.reap())

    def _release(self, data: st.DataObject, name: str) -> None:
        """A node gives back a page it has not begun (a pause, a close)."""
        node = self.nodes[name]
        todo = sorted(i for i, h in node.held.items() if not h.fetched)
        if todo:
            lease_id = data.draw(st.sampled_from(todo))
            self._call(name, lambda: node.frontier.release([lease_id], unstarted=True))
            node.held.pop(lease_id, None)  # released, or given back with the rest

    def _work_left(self) -> bool:
        return any(n.held or n.pending for n in self.nodes.values()) or len(self.pushed) < len(ROOT_HOSTS)

    def save_snapshot(self) -> None:
        """Redis saves an RDB file (BGSAVE's, as a snapshot schedule would); kept aside."""
        self.client.save()
        self.snapshots = self.snapshots[-2:]  # the last three kept
        copy = self.dir / f"snapshot-{self.saved % 3}.rdb"
        self.saved += 1
        shutil.copy(self.dir / "dump.rdb", copy)
        shard = snapshot(self.client, K.shard_keys(1, SHARDS).pattern()) if self.config.sharded else None
        self.snapshots.append((copy, len(self.pushed), self.admissions, shard))

    def _older(self) -> list[tuple[Path, int, int, Snapshot | None]]:
        """The snapshots older than some admission made since (going back to one of the
        others loses nothing of the nodes')."""
        return [x for x in self.snapshots if x[2] < self.admissions]

    def redis_goes_back(self, data: st.DataObject) -> None:
        """Redis SIGKILLed and started again from an earlier RDB file."""
        self._back_to(data.draw(st.sampled_from(self._older())))

    def _back_to(self, snapshot: tuple[Path, int, int, Snapshot | None]) -> None:
        copy, pushes, _, _ = snapshot
        self.rollbacks += 1
        CrawlWithRollbacks.tally["rollbacks"] += 1
        proc = self.server.proc
        assert proc is not None
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        shutil.copy(copy, self.dir / "dump.rdb")
        self.server.start()
        self.client.connection_pool.disconnect()
        self.excluded |= set(self.pushed[pushes:])

    def one_shard_goes_back(self, data: st.DataObject) -> None:
        """One shard's keys put back as an earlier snapshot had them (a Cluster primary that
        restarted from its own snapshot): the other shards and the crawl's own keys go on."""
        _, _, _, shard = data.draw(st.sampled_from(self._older()))
        assert shard is not None
        self.rollbacks += 1
        CrawlWithRollbacks.tally["shard rollbacks"] += 1
        restore(self.client, shard)

    @invariant()
    def count_steps(self) -> None:
        CrawlWithRollbacks.tally["steps"] += 1

    # -- the end: drain, then the property -------------------------------------------------
    def drain(self) -> None:
        """Every node works until the crawl is done: it beats, sends everything its pages
        produced with the acks of its finished pages, pops and fetches; expired leases are
        reaped. Then every page admitted from a leased one, and every reachable one, was fetched."""
        deadline = time.monotonic() + 60
        while True:
            for name, node in self.nodes.items():
                self._heartbeat(None, name)
                self._take(None, name)
                for lease_id in [i for i, x in node.held.items() if not x.fetched]:
                    self._fetched(node, lease_id)
                self._send(name, len(node.pending), self._finished(node, len(node.pending)), pop=4)
                self._reap(None, name)
            busy = any(node.held or node.pending for node in self.nodes.values())
            if not busy and self._call("a", lambda: self.nodes["a"].frontier.idle_state()) == (0, 0, 0):
                break
            assert time.monotonic() < deadline, f"the crawl did not drain: {self.nodes}"
            time.sleep(0.05)
        roots = [r for r in self.pushed if r not in self.excluded] + self.spider_roots
        expected = set().union(*(site(r) for r in roots)) if roots else set()
        kept = {u for u in self.admitted if f"http://{host(u)}/" not in self.excluded}
        CrawlWithRollbacks.tally["pages fetched"] += len(self.fetched)
        assert kept <= self.fetched, (
            f"admitted (from a leased page or as a start request) and never fetched: {sorted(kept - self.fetched)}"
        )
        assert expected <= self.fetched, f"reachable and never fetched: {sorted(expected - self.fetched)}"


@pytest.fixture(scope="module")
def rollback_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(free_port(), tmp_path_factory.mktemp("rollback-redis")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_no_page_is_lost_when_redis_goes_back_in_time(config: Config, rollback_server: RedisServer) -> None:
    machine = type(
        f"Rollback_{config}".replace("-", "_"), (CrawlWithRollbacks,), {"config": config, "server": rollback_server}
    )
    CrawlWithRollbacks.tally = Counter()
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )
    tally = CrawlWithRollbacks.tally
    print(f"{config}: {dict(sorted(tally.items()))}")
    assert tally["rollbacks"] + tally["shard rollbacks"] >= EXAMPLES // 3, (
        f"too few rollbacks to prove anything: {tally}"
    )
    assert tally["rollbacks found"] > 0, tally
