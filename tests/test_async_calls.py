"""A node's pops made by a worker thread (CRAWLPLUG_ASYNC_CALLS, crawlplug.scheduler.calls):
turned on by a Redis far away, and losing nothing, counting nothing twice, when the node is
killed or Redis goes back in time. Real nodes, a real Redis, and a proxy on loopback that
holds every reply (tests/support/faultproxy.py)."""

from __future__ import annotations

import json
import re
import socket

import pytest
import scrapy

from crawlplug.crawl import Crawl
from crawlplug.frontier import open_frontier
from crawlplug.frontier.keys import CrawlKeys

from .support.engine import open_scheduler
from .support.faultproxy import FaultProxy
from .support.nodes import start_each_joined, stop_holding

KEYS = CrawlKeys("shop")
SETTINGS: dict[str, object] = {
    "CRAWLPLUG_IDLE_CLOSE": 1,
    "CRAWLPLUG_HEARTBEAT": 0.5,
    "CRAWLPLUG_LEASE_TIMEOUT": 3,
    "CONCURRENT_REQUESTS": 8,
}
ON_LINE = re.compile(
    r"crawlplug: pops run off the reactor \(CRAWLPLUG_ASYNC_CALLS=(\w+)(?:; Redis answers a PING in ([0-9.]+) ms)?\)"
)


def _stats(r) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in r.hgetall(KEYS.stats).items()}


def _node_stat(node, name: str) -> int:
    found = re.search(rf"'{re.escape(name)}': (\d+)", node.text())
    return int(found.group(1)) if found else 0


def _finish(nodes, timeout: float = 180) -> None:
    for node in nodes:
        assert node.wait(timeout) == 0, node.text()[-3000:]
        assert "'finish_reason': 'finished'" in node.text(), node.text()[-3000:]
        assert "Traceback" not in node.text(), node.text()[-3000:]


def test_a_redis_far_away_turns_them_on_and_the_crawl_is_whole(crawl, make_shop, r, redis_url):
    """Two nodes reach Redis through a proxy that holds each reply 3 ms (auto: on); a third
    on loopback keeps its pops on the reactor. Every page fetched once, admitted once and
    acknowledged once, crawl-wide and by the nodes' own counts."""
    shop = make_shop(items=150, delay=0.01)
    proxies = [FaultProxy.for_url(redis_url).start() for _ in range(2)]
    try:
        for proxy in proxies:
            proxy.latency(0.003)
        # the shop is held until all three have joined the run: a node that comes up first (the
        # near one, or a far one on a loaded machine) could crawl the whole shop, and end the run,
        # before another joined, which then starts a run of its own and fetches every page again
        nodes = start_each_joined(
            [
                *(
                    lambda p=p: crawl(args={"base_url": shop.url}, settings={"REDIS_URL": p.url, **SETTINGS})
                    for p in proxies
                ),
                lambda: crawl(
                    args={"base_url": shop.url}, settings={"REDIS_URL": redis_url, **SETTINGS, "LOG_LEVEL": "DEBUG"}
                ),
            ],
            shop,
        )
        far, near = nodes[:2], nodes[2]
        _finish(nodes)
    finally:
        for proxy in proxies:
            proxy.stop()
    for node in far:
        found = ON_LINE.search(node.text())
        assert found and found.group(1) == "auto" and float(found.group(2)) >= 3.0, node.text()[-2000:]
    # a Redis on loopback answers in a tenth of a millisecond: the pops stay on the reactor (the
    # rule, not the machine's speed, is what is checked: a starved machine may take longer)
    stay = re.search(r"Redis answers a PING in ([0-9.]+) ms: pops stay on the reactor", near.text())
    on = ON_LINE.search(near.text())
    assert bool(stay) != bool(on), near.text()[-2000:]
    assert (float(stay.group(1)) < 0.5) if stay else (float(on.group(2)) >= 0.5)
    print(f"\nloopback PING {(stay or on).group(1 if stay else 2)} ms: async calls {'off' if stay else 'on'}")
    hits, paths = shop.hits, shop.shop.paths()
    assert set(hits) >= paths and all(hits[p] == 1 for p in paths), "every page fetched once"
    stats = _stats(r)
    assert stats["enqueued"] == stats["acked"] == len(paths), stats
    assert stats.get("stale_acks", 0) == 0 and stats.get("reaped", 0) == 0, stats
    assert sum(_node_stat(n, "crawlplug/acked") for n in nodes) == len(paths)
    assert sum(_node_stat(n, "crawlplug/admitted") for n in nodes) == len(paths)
    assert all(_node_stat(n, "response_received_count") > 0 for n in far), "the far nodes crawled"
    status = Crawl.of(open_frontier(r, KEYS)).status()
    assert (status["queued"], status["in_flight"], status["dead"]) == (0, 0, 0)


def _leases_of(r, pid: int) -> int:
    prefix = f"{socket.gethostname()}:{pid}:".encode()
    return sum(1 for v in r.hvals(KEYS.leased) if v.startswith(prefix))


def test_a_node_killed_with_a_pop_in_flight_loses_nothing(crawl, make_shop, r, redis_url):
    """Both nodes make their pops in a worker thread (on) through a 20 ms proxy, so the
    victim is killed with calls on their way: its leases are reaped and fetched by the other,
    every page fetched, none twice but those the victim held."""
    shop = make_shop(items=200, delay=0.02)
    proxies = [FaultProxy.for_url(redis_url).start() for _ in range(2)]
    try:
        for proxy in proxies:
            proxy.latency(0.02)
        settings = {**SETTINGS, "CRAWLPLUG_ASYNC_CALLS": "on"}
        victim, survivor = start_each_joined(
            [
                lambda p=p: crawl(args={"base_url": shop.url}, settings={"REDIS_URL": p.url, **settings})
                for p in proxies
            ],
            shop,
        )
        held = stop_holding(
            victim, ready=lambda: sum(shop.hits.values()) >= 40, holding=lambda: _leases_of(r, victim.proc.pid)
        )
        victim.kill()
        _finish([survivor])
    finally:
        for proxy in proxies:
            proxy.stop()
    assert ON_LINE.search(victim.text()) and ON_LINE.search(survivor.text())
    hits, paths = shop.hits, shop.shop.paths()
    assert not paths - set(hits), f"never fetched: {sorted(paths - set(hits))[:10]}"
    twice = sum(1 for p in paths if hits[p] > 1)
    assert twice <= held, (twice, held)
    stats = _stats(r)
    assert stats["reaped"] >= held, stats
    status = Crawl.of(open_frontier(r, KEYS)).status()
    assert (status["queued"], status["in_flight"], status["dead"]) == (0, 0, 0)
    items = {json.loads(line)["url"] for n in (victim, survivor) for line in n.item_lines() if line.endswith("}")}
    assert {u.split(shop.url, 1)[1] for u in items} == shop.shop.item_paths(), "every item scraped"


# -- the Scheduler's contract, in process: a pop in flight ---------------------------------------


def test_a_pop_in_flight_leaves_work_pending_and_lands_before_any_other_call(redis_url, r):
    """next_request starts the pop and answers None (Scrapy asks again); the node has work
    pending meanwhile; the pop lands before the next frontier call of any part, so what it
    leased is the node's before that call is made."""
    with open_scheduler(redis_url, CRAWLPLUG_ASYNC_CALLS="on") as (scheduler, _):
        batch = scheduler.batch
        assert batch.flights is not None
        assert scheduler.enqueue_request(scrapy.Request("http://site.test/a"))
        batch.flush()  # stored (a flush of the node's own is made on the reactor)
        assert batch.flights.flying is None
        assert scheduler.next_request() is None, "the pop is on its way"
        assert batch.flights.flying is not None and scheduler.has_pending_requests()
        assert scheduler.next_request() is None, "one call at a time: no second pop"
        # another part's call (the idle poll) lands the pop first, through Settled
        landed = batch.flights.landed
        queued, leased, _ = scheduler.frontier.idle_state()[:3]
        assert batch.flights.landed == landed + 1 and batch.flights.flying is None
        assert (queued, leased) == (0, 1), "the idle poll ran after the pop: the request is leased"
        request = scheduler.next_request()
        assert request is not None and request.url == "http://site.test/a"
        scheduler.batch.finished(request)
        assert scheduler.next_request() is None  # the ack rides with this pop
        batch.settle()
        assert int(r.hget(CrawlKeys("contract").stats, "acked")) == 1
        assert not scheduler.has_pending_requests()


def test_a_value_that_is_none_of_auto_on_off_is_refused_with_its_name():
    """A misspelt mode stops the node at start with the setting's name (config_error), never
    a guess; the usual spellings of a boolean are taken."""
    from scrapy.settings import Settings

    from crawlplug.config import SchedulerConfig
    from crawlplug.errors import ConfigError

    for value, mode in (("auto", "auto"), ("On", "on"), (True, "on"), ("0", "off"), (False, "off")):
        assert SchedulerConfig.from_settings(Settings({"CRAWLPLUG_ASYNC_CALLS": value})).async_calls == mode
    with pytest.raises(ConfigError, match="CRAWLPLUG_ASYNC_CALLS must be auto, on or off, got 'sometimes'"):
        SchedulerConfig.from_settings(Settings({"CRAWLPLUG_ASYNC_CALLS": "sometimes"}))
