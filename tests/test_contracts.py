"""One contract, every backend: each dupefilter (set, Bloom, expiring) on each frontier
(plain priority queue, DomainQueue, sharded), as Scrapy's own scheduler tests run one
class across its queue backends.

What every combination must do, on a real Redis: a request is admitted once and then is
a duplicate for the dupefilter and for admission alike; two nodes never lease the same
request; acks, releases, reaping and dead letters leave the frontier's counts true; a
purge forgets the fingerprints. A backend that breaks one of these fails here under its
own name (``test_...[bloom-sharded]``), not in a crawl test that happens to use it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from scrapy import Request
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.test import get_crawler

from crawlplug.crawl import Crawl
from crawlplug.dupefilters import ExpiringDupeFilter, RedisBloomDupeFilter, RedisSetDupeFilter
from crawlplug.frontier import CrawlFrontier, open_frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.queues import BaseQueue, DomainQueue, PriorityQueue

DUPEFILTERS = {
    # the compact store (the default), so small that a test's few hundred URLs take it through generations
    "hash": (RedisSetDupeFilter, {"CRAWLPLUG_DEDUP_STORE": "hash", "CRAWLPLUG_DEDUP_CAPACITY": 100}),
    "set": (RedisSetDupeFilter, {"CRAWLPLUG_DEDUP_STORE": "set"}),
    "bloom": (RedisBloomDupeFilter, {"CRAWLPLUG_BLOOM_CAPACITY": 10_000, "CRAWLPLUG_BLOOM_ERROR_RATE": 0.001}),
    "expiring": (ExpiringDupeFilter, {"CRAWLPLUG_DEDUP_TTL": 3600}),
}
FRONTIERS = {
    "plain": {"queue": PriorityQueue, "shards": None},
    "domains": {"queue": DomainQueue, "shards": None},
    "sharded": {"queue": PriorityQueue, "shards": 3},
}
LEASE_TIMEOUT = 0.4  # seconds: short, so reaping is tested with a real expiry


@dataclass
class Node:
    """One node's view of the crawl: its dupefilter bound to its frontier."""

    df: Any
    frontier: CrawlFrontier
    queue: BaseQueue

    def admission(self, request: Request) -> tuple[bytes, float, bytes, str, str]:
        """As the scheduler's batch makes it: routed (sharded crawls) by domain, else host."""
        domain = self.queue.domain(request)
        return (
            self.df.argument(request),
            self.queue.score(request),
            request.url.encode(),
            domain,
            domain or urlparse_cached(request).hostname,
        )

    def admit(self, *requests: Request) -> int:
        return self.frontier.admit([self.admission(r) for r in requests]).admitted


@dataclass
class Backend:
    client: redis.Redis
    keys: CrawlKeys
    dupefilter: str
    frontier: str

    def node(self, name: str) -> Node:
        cls, settings = DUPEFILTERS[self.dupefilter]
        df = cls.from_crawler(get_crawler(settings_dict=settings))
        spec = FRONTIERS[self.frontier]
        queue = spec["queue"]()
        frontier = open_frontier(
            self.client,
            self.keys,
            shards=spec["shards"],
            dedup_factory=df.make_strategy,
            queue=queue,
            node_id=name,
            lease_timeout=LEASE_TIMEOUT,
            heartbeat=0.1,
        )
        df.bind(frontier)
        return Node(df, frontier, queue)


@pytest.fixture(params=[(d, f) for d in DUPEFILTERS for f in FRONTIERS], ids=lambda p: f"{p[0]}-{p[1]}")
def backend(request: pytest.FixtureRequest, r: redis.Redis) -> Iterator[Backend]:
    dupefilter, frontier = request.param
    yield Backend(r, CrawlKeys("contract"), dupefilter, frontier)


def _requests(n: int, start: int = 0) -> list[Request]:
    # two hosts, so DomainQueue schedules more than one domain
    return [Request(f"http://{'a' if i % 2 else 'b'}.example/{i}") for i in range(start, start + n)]


def _lease_all(frontier: CrawlFrontier, expected: int, tries: int = 40) -> list[Any]:
    """Pop until ``expected`` leases came, as a node does: a sharded pop may reach some
    shards on the next call, and DomainQueue starts a domain's next request once the
    node reported the last one sent (the "s" event a node sends with its next call)."""
    out: list[Any] = []
    for _ in range(tries):
        got = frontier.pop(expected - len(out))
        out += got
        if len(out) >= expected:
            break
        sent = [(x.id, "s") for x in got if "s" in x.report]
        if sent:
            frontier.admit([], events=sent)
    return out


class TestFrontierContract:
    def test_a_request_is_admitted_once_then_is_a_duplicate_everywhere(self, backend):
        node = backend.node("n1")
        reqs = _requests(10)
        assert node.admit(*reqs) == 10
        assert node.admit(*reqs) == 0, "admitted twice"
        assert all(node.df.request_seen(r) for r in reqs), "admission and the dupefilter disagree"
        other = backend.node("n2")
        assert other.admit(reqs[0]) == 0, "a second node's admission let a duplicate in"
        assert Crawl.of(backend.node("n3").frontier).status()["queued"] == 10

    def test_request_seen_records_for_admission(self, backend):
        node = backend.node("n1")
        req = Request("http://a.example/seen-first")
        assert node.df.request_seen(req) is False
        assert node.df.request_seen(req) is True
        assert node.admit(req) == 0, "a fingerprint the dupefilter recorded was admitted"

    def test_two_nodes_never_lease_the_same_request(self, backend):
        a, b = backend.node("a"), backend.node("b")
        assert a.admit(*_requests(20)) == 20
        first = _lease_all(a.frontier, 7)
        a.frontier.admit([], events=[(x.id, "s") for x in first if "s" in x.report])  # node a sent them
        second = _lease_all(b.frontier, 20 - len(first))
        ids = [x.id for x in first] + [x.id for x in second]
        assert len(ids) == 20 and len(set(ids)) == 20, ids
        assert {x.payload for x in first}.isdisjoint({x.payload for x in second})
        assert a.frontier.pop(5) == [] and b.frontier.pop(5) == []

    def test_acks_finish_the_work(self, backend):
        node = backend.node("n1")
        node.admit(*_requests(12))
        leased = _lease_all(node.frontier, 12)
        assert len(leased) == 12
        queued, in_flight, _ = node.frontier.idle_state()
        assert (queued, in_flight) == (0, 12)
        node.frontier.admit([], acks=[x.id for x in leased])
        assert node.frontier.idle_state()[:2] == (0, 0)
        assert Crawl.of(node.frontier).totals()["pages"] == 12

    def test_released_leases_come_back_without_a_delivery(self, backend):
        node = backend.node("n1")
        node.admit(*_requests(4))
        leased = _lease_all(node.frontier, 4)
        assert node.frontier.release([x.id for x in leased], unstarted=True) == 4
        again = _lease_all(node.frontier, 4)
        assert sorted(x.payload for x in again) == sorted(x.payload for x in leased)
        assert {x.deliveries for x in again} == {1}, "an unstarted lease given back counted a delivery"

    def test_a_silent_nodes_leases_are_reaped_for_the_others(self, backend):
        silent, alive = backend.node("silent"), backend.node("alive")
        silent.admit(*_requests(6))
        held = _lease_all(silent.frontier, 6)
        assert len(held) == 6
        assert alive.frontier.pop(6) == []
        time.sleep(LEASE_TIMEOUT + 0.3)  # the leases expire (Redis's clock decides)
        reaped, _ = alive.frontier.reap()
        assert reaped == 6
        back = _lease_all(alive.frontier, 6)
        assert sorted(x.payload for x in back) == sorted(x.payload for x in held)
        assert {x.deliveries for x in back} == {2}

    def test_a_dead_letter_leaves_the_queue_and_is_listed(self, backend):
        node = backend.node("n1")
        node.admit(*_requests(3))
        leased = _lease_all(node.frontier, 3)
        assert node.frontier.dead_letter(leased[0].id, "cannot be crawled") is True
        dead = Crawl.of(node.frontier).dead_letters()
        assert [d.header.get("reason") for d in dead] == ["cannot be crawled"]
        assert node.frontier.idle_state()[:2] == (0, 2)

    def test_a_purge_forgets_the_fingerprints(self, backend):
        node = backend.node("n1")
        reqs = _requests(5)
        node.admit(*reqs)
        assert node.frontier.purge() > 0
        fresh = backend.node("n2")
        assert Crawl.of(fresh.frontier).status()["queued"] == 0
        assert fresh.admit(*reqs) == 5, "a purged crawl still knew its fingerprints"
