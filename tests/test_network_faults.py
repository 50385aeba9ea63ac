"""Network faults between a node and Redis, through a TCP proxy the test controls.

Each node of a two-node crawl of the demo shop talks to Redis through its own
:class:`~tests.faultproxy.FaultProxy`; the test breaks one node's link, or both:

- a blackhole: the link stops answering and closes nothing; the node notices within
  a bounded time (its socket timeout, CRAWLPLUG_REDIS_TIMEOUT), goes into its outage
  handling, and the other node reaps its leases while it is away;
- 200 ms of added latency on every reply;
- the link cut and restored every few seconds.

Under each, the crawl finishes with every page fetched (none lost), pages fetched twice
at most what the faulted node held when the fault began, and the counts printed
(``-s`` shows them). Redis is the suite's; the shop serves on loopback.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import redis

from crawlplug.keys import CrawlKeys
from crawlplug.lua import source

from .faultproxy import FaultProxy

KEYS = CrawlKeys("shop")
SETTINGS: dict[str, object] = {
    "CRAWLPLUG_IDLE_CLOSE": 2,
    "CRAWLPLUG_HEARTBEAT": 0.5,
    "CRAWLPLUG_LEASE_TIMEOUT": 5,
    "CONCURRENT_REQUESTS": 2,
    "CRAWLPLUG_REDIS_OUTAGE_TIMEOUT": 120,
}
#: Longest a node may take to notice a link that stopped answering: generous against its
#: CRAWLPLUG_REDIS_TIMEOUT (5 s) and connect timeout (2 s); the old 30 s timeout, tried
#: twice, took 60 s, with the node's reactor blocked all along.
NOTICE_BOUND = 30.0
ADMIT_SHA = hashlib.sha1(source("admit").encode()).hexdigest().encode()


@pytest.fixture
def proxies(redis_url: str) -> Iterator[list[FaultProxy]]:
    """One proxy per node, both to the suite's Redis."""
    started = [FaultProxy.for_url(redis_url).start() for _ in range(2)]
    yield started
    for proxy in started:
        proxy.stop()


@dataclass
class Outcome:
    pages: int
    fetched: int
    never: int
    twice: int
    extra_fetches: int

    def line(self) -> str:
        return (f"{self.pages} pages, {self.fetched} fetched, {self.never} never, {self.twice} fetched twice "
                f"({self.extra_fetches} extra fetches)")  # fmt: skip


def outcome(shop) -> Outcome:
    hits, paths = shop.hits, shop.shop.paths()
    return Outcome(
        pages=len(paths),
        fetched=len(paths & set(hits)),
        never=len(paths - set(hits)),
        twice=sum(1 for p in paths if hits.get(p, 0) > 1),
        extra_fetches=sum(hits.get(p, 0) - 1 for p in paths if hits.get(p, 0) > 1),
    )


def wait_until(cond: Callable[[], object], timeout: float, what: str) -> float:
    """Seconds until ``cond()`` held; fails after ``timeout`` (a bound, not a measurement)."""
    start = time.monotonic()
    while not cond():
        assert time.monotonic() - start < timeout, f"not within {timeout}s: {what}"
        time.sleep(0.02)
    return time.monotonic() - start


def leases_of(client: redis.Redis, pid: int) -> int:
    """Leases held in Redis by the node of process ``pid`` (what it has in flight)."""
    marker = f":{pid}:".encode()
    return sum(1 for owner in client.hvals(KEYS.leased) if marker in owner.split(b"|", 1)[0])


def node_stats(node) -> dict[str, int]:
    """The crawlplug/... counters of the node's final stats dump."""
    out: dict[str, int] = {}
    for line in node.text().splitlines():
        line = line.strip().lstrip("{").rstrip(",}")
        if line.startswith("'crawlplug/") and ": " in line:
            name, _, value = line.partition(": ")
            if value.isdigit():
                out[name.strip("'{")] = int(value)
    return out


def start_nodes(crawl, shop, proxies: list[FaultProxy]) -> list:
    return [crawl(args={"base_url": shop.url}, settings={"REDIS_URL": p.url, **SETTINGS}) for p in proxies]


def finish(nodes: list, timeout: float = 240) -> None:
    for node in nodes:
        assert node.wait(timeout) == 0, node.text()[-4000:]
        assert "'finish_reason': 'finished'" in node.text(), node.text()[-3000:]


def assert_complete(shop, nodes: list, in_flight: int, name: str, **extra: object) -> Outcome:
    """Every page fetched and every item scraped; pages fetched twice bounded by ``in_flight``."""
    seen = outcome(shop)
    details = " ".join(f"{k}={v}" for k, v in extra.items())
    print(f"\n[network faults] {name}: {seen.line()}; in flight at the fault: {in_flight}; {details}")
    assert seen.never == 0, f"pages never fetched: {sorted(shop.shop.paths() - set(shop.hits))[:20]}"
    items = {json.loads(line)["url"] for node in nodes for line in node.item_lines() if line.endswith("}")}
    assert {u.split(shop.url, 1)[1] for u in items} == shop.shop.item_paths(), "every item scraped"
    assert seen.twice <= in_flight, (seen, in_flight)
    return seen


# -- two nodes crawling through the faults ----------------------------------------------------


def test_a_link_that_stops_answering_is_noticed_and_the_crawl_completes(crawl, make_shop, r, proxies):
    shop = make_shop(items=200, delay=0.2)
    nodes = start_nodes(crawl, shop, proxies)
    a = nodes[0]
    wait_until(lambda: sum(shop.hits.values()) >= 30 and leases_of(r, a.proc.pid) > 0, 60, "node A holding leases")
    in_flight = leases_of(r, a.proc.pid)
    proxies[0].blackhole()
    noticed = wait_until(lambda: "crawlplug: Redis error" in a.text(), NOTICE_BOUND, "node A noticing the blackhole")
    assert a.proc.poll() is None, "the node waits out an outage, it does not exit"
    # stay away past the lease timeout: the other node takes A's leases meanwhile
    wait_until(lambda: int(r.hget(KEYS.stats, "reaped") or 0) > 0, 30, "node B reaping A's leases")
    blackholed = proxies[0].blackholed_bytes
    proxies[0].restore()
    finish(nodes)
    assert "crawlplug: Redis is back after" in a.text()
    assert blackholed > 0, "the fault happened: the node sent into the void"
    assert_complete(shop, nodes, in_flight, "blackhole on node A", noticed_after_s=f"{noticed:.1f}",
                    reaped=int(r.hget(KEYS.stats, "reaped") or 0))  # fmt: skip


def test_two_hundred_ms_of_latency(crawl, make_shop, r, proxies):
    shop = make_shop(items=100, delay=0.02)
    for proxy in proxies:
        proxy.latency(0.2)
    started = time.monotonic()
    nodes = start_nodes(crawl, shop, proxies)
    finish(nodes)
    seen = assert_complete(shop, nodes, 0, "200 ms added to every reply, both nodes",
                           crawl_s=f"{time.monotonic() - started:.1f}")  # fmt: skip
    assert seen.twice == 0
    assert not any("Redis error" in node.text() for node in nodes), "latency is no outage"


def test_links_cut_and_restored_every_few_seconds(crawl, make_shop, r, proxies):
    shop = make_shop(items=200, delay=0.1)
    nodes = start_nodes(crawl, shop, proxies)
    wait_until(lambda: sum(shop.hits.values()) >= 10, 60, "the crawl under way")
    cuts, in_flight = 0, 0
    while any(node.proc.poll() is None for node in nodes) and cuts < 20:
        in_flight += sum(leases_of(r, node.proc.pid) for node in nodes)
        for proxy in proxies:
            proxy.cut()
        cuts += 1
        time.sleep(1.0)
        for proxy in proxies:
            proxy.restore()
        time.sleep(2.0)
    finish(nodes)
    assert cuts >= 3, "the crawl outlived several cuts"
    resets = sum(p.resets for p in proxies)
    assert resets > 0
    seen = assert_complete(shop, nodes, in_flight, "links cut for 1 s every 3 s, both nodes",
                           cuts=cuts, connections_reset=resets, refused=sum(p.refused for p in proxies))  # fmt: skip
    assert seen.twice == 0, "a cut shorter than the lease timeout makes no lease expire"
