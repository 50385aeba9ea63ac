"""Acceptance tests of "zero loss under crashes": real nodes, real signals.

Each test starts real ``scrapy crawl shop`` processes of the demo project
against a slowed-down demo shop, hurts them with SIGKILL / SIGSTOP while they
crawl, restarts them, and checks the end state against the shop's truth:

* every page of the site was fetched (nothing lost);
* every item is in the union of the nodes' feed outputs;
* a page is fetched again only for a request a node held when it died (or
  stalled): the extra fetches are bounded by the leases held at death, read
  from Redis.

Tests a) and b) run twice: with Scrapy's default local feed storage, and with
a line-flushed one (below). With the default one, crawlplug flushes the
feed files before it acknowledges requests, so a killed node loses no item;
the line-flushed one shows the same without relying on that flush.

Timings are short (heartbeat 0.5 s, lease 3 s, idle close 2 s). The random
choices of the kill test come from ``random.Random(seed)``; the seed is
printed and recorded as a junit property, and ``CRAWLPLUG_KILL_SEED=<n>``
replays it.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy.extensions.feedexport import FileFeedStorage

from crawlplug.frontier.keys import CrawlKeys

from .support.nodes import start_each_joined, start_joined
from .support.patience import patient

SETTINGS: dict[str, object] = {
    "CRAWLPLUG_HEARTBEAT": 0.5,
    "CRAWLPLUG_LEASE_TIMEOUT": 3,
    "CRAWLPLUG_IDLE_CLOSE": 2,
    "CONCURRENT_REQUESTS": 8,
}
KEYS = CrawlKeys("shop")
WARNING = "leases of this node expired"


class LineFlushedFileFeedStorage(FileFeedStorage):
    """A local feed file written unbuffered: each item reaches the OS when it is exported.

    Scrapy's own FileFeedStorage opens the file block-buffered (8 KiB), so a
    node killed with SIGKILL would lose the items still in that buffer unless
    crawlplug flushed it before acknowledging their requests (it does).
    """

    def open(self, spider):
        path = Path(self.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path.open(self.write_mode, buffering=0)


#: -s settings selecting the feed storage of a test variant
FEEDS = {
    "scrapy-default": {},
    "line-flushed": {
        "FEED_STORAGES": json.dumps(
            {"": f"{__name__}.LineFlushedFileFeedStorage", "file": f"{__name__}.LineFlushedFileFeedStorage"}
        )
    },
}


class ItemsLost(AssertionError):
    """Some item is in no node's output."""


FEED_PARAMS = [
    pytest.param("scrapy-default"),
    pytest.param("line-flushed"),
]


# -- helpers ------------------------------------------------------------------------------


def _settings(redis_url: str, feed: str = "scrapy-default") -> dict[str, object]:
    return {"REDIS_URL": redis_url, **SETTINGS, **FEEDS[feed]}


def _node_of(info: bytes) -> str:
    """The node id of a ``leased`` hash value "node|score|deliveries"."""
    return info.decode().rsplit("|", 2)[0]


def held_by(client: redis.Redis, pid: int) -> dict[str, str]:
    """Leases (request id -> holder node id) held by the process ``pid``."""
    marker = f":{pid}:"
    held = {}
    for rid, info in client.hgetall(KEYS.leased).items():
        node = _node_of(info)
        if marker in node:
            held[rid.decode()] = node
    return held


def fetched(shop) -> int:
    return sum(shop.hits.values())


def wait_until(cond: Callable[[], bool], timeout: float, what: str, nodes=()) -> None:
    deadline = time.monotonic() + patient(timeout)
    while not cond():
        for node in nodes:
            rc = node.proc.poll()
            assert rc is None, (
                f"a node exited ({rc}) while waiting for {what}"
                + ("; the crawl ended too early: slow the site down" if rc == 0 else "")
                + f":\n{node.text()[-3000:]}"
            )
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.02)


def read_items(nodes) -> tuple[list[dict[str, Any]], int]:
    """Items of every node's feed; a killed node's last line may be cut: counted, skipped."""
    items, partial = [], 0
    for node in nodes:
        for line in node.item_lines():
            try:
                items.append(json.loads(line))
            except ValueError:
                partial += 1
    return items, partial


def _lines(nodes) -> list[str]:
    return [x for x in (line for n in nodes for line in n.item_lines()) if x.endswith("}")]


def final_stats(node) -> dict[str, Any]:
    """The 'Dumping Scrapy stats' block of a node's log, as a dict of the simple entries."""
    text = node.text()
    start = text.rfind("Dumping Scrapy stats")
    assert start >= 0, f"no stats dump in the log:\n{text[-3000:]}"
    block = text[start : text.find("}", start) + 1]
    return {k: v for k, v in re.findall(r"'([^']+)': ([-\w.']+)", block)}


def finish(nodes, timeout: float = 120) -> None:
    """Wait for ``nodes`` to exit; each must exit 0 with finish_reason 'finished'."""
    deadline = time.monotonic() + patient(timeout)
    for node in nodes:
        rc = node.wait(max(1.0, deadline - time.monotonic()))
        assert rc == 0, f"node exited {rc}:\n{node.text()[-3000:]}"
        assert "'finish_reason': 'finished'" in node.text(), node.text()[-3000:]


def assert_everything_fetched(shop) -> Counter:
    hits = shop.hits
    site = shop.shop
    missing = site.paths() - set(hits)
    unknown = set(hits) - site.paths()
    assert not missing, f"{len(missing)} pages never fetched, e.g. {sorted(missing)[:10]}"
    assert not unknown, f"fetched pages outside the site: {sorted(unknown)[:10]}"
    return hits


def assert_every_item(shop, all_nodes) -> None:
    """Every item is in some node's output, with the right content (checked last)."""
    hits = shop.hits
    site = shop.shop
    items, _ = read_items(all_nodes)
    truth = site.truth()
    got = {}
    for item in items:
        path = item["url"].split(shop.url, 1)[1]
        expected = {k: v for k, v in truth[path].items() if k != "url_path"}
        assert {k: item[k] for k in expected} == expected, item
        got[path] = item
    lost_items = site.item_paths() - set(got)
    if lost_items:
        raise ItemsLost(
            f"{len(lost_items)} items in no node's output, e.g. {sorted(lost_items)[:10]}; "
            f"their pages were fetched {[hits[p] for p in sorted(lost_items)[:10]]} times"
        )


def assert_redis_drained(client: redis.Redis) -> None:
    assert client.zcard(KEYS.queue) == 0, "queue not empty at the end"
    assert client.zcard(KEYS.leases) == 0, "leases left at the end"
    assert client.hlen(KEYS.leased) == 0, "leased hash not empty at the end"
    assert client.hlen(KEYS.requests) == 0, "stored requests left at the end"
    assert client.llen(KEYS.dead) == 0, "dead letters at the end"


def report(record_property, **values: object) -> None:
    for key, value in values.items():
        record_property(key, value)
    print("\n[kill] " + " ".join(f"{k}={v}" for k, v in values.items()), flush=True)


# -- a) random kill -9 and restart of one of three nodes, at least three times -----------


@pytest.mark.parametrize("feed", FEED_PARAMS)
def test_random_kills_of_three_nodes_lose_nothing(feed, crawl, make_shop, redis_url, record_property):
    seed = int(os.environ.get("CRAWLPLUG_KILL_SEED") or random.SystemRandom().randrange(2**32))
    rng = random.Random(seed)
    report(record_property, seed=seed, feed=feed)
    shop = make_shop(items=2000, delay=round(rng.uniform(0.01, 0.03), 3))
    pages = len(shop.shop.paths())
    assert pages >= 2000
    client = redis.Redis.from_url(redis_url)
    settings = _settings(redis_url, feed)

    def start():
        return crawl(args={"base_url": shop.url}, settings=settings)

    slots = start_joined(start, shop, 3)
    every = list(slots)
    # kill at random moments of the crawl: once a random share of the site was fetched,
    # plus a random fraction of a second, a random node among those crawling (holding
    # leases: its death leaves work behind; a node just restarted may still be starting)
    marks = sorted(int(pages * rng.uniform(0.05, 0.5)) for _ in range(rng.randint(3, 4)))
    deaths: list[dict[str, object]] = []
    for mark in marks:
        wait_until(lambda: fetched(shop) >= mark, 90, f"{mark} fetches", slots)
        time.sleep(rng.uniform(0, 0.4))
        crawling: list[int] = []

        def some_crawl() -> bool:
            crawling[:] = [i for i in range(3) if held_by(client, slots[i].proc.pid)]
            return bool(crawling)

        wait_until(some_crawl, 30, "a node holding leases", slots)
        slot = rng.choice(crawling)
        victim = slots[slot]
        before = len(held_by(client, victim.proc.pid))
        victim.kill()  # SIGKILL, then wait for the process to be gone
        # The leases of a dead node stay in Redis until they expire (2.5 s from now at
        # the earliest), so this is exactly what it held when it died; it may have
        # leased more since `before` was read.
        at_death = len(held_by(client, victim.proc.pid))
        deaths.append(
            {
                "slot": slot,
                "pid": victim.proc.pid,
                "fetched": fetched(shop),
                "held_before": before,
                "held_at_death": at_death,
            }
        )
        print(
            f"[kill] SIGKILL node {slot} (pid {victim.proc.pid}) after {deaths[-1]['fetched']} "
            f"fetches: {before} leases read just before, {at_death} held at death",
            flush=True,
        )
        time.sleep(rng.uniform(0, 1.0))
        # the shop held until it is in the run: else the others may end it first, and it begins another
        slots[slot] = start_each_joined([start], shop)[0]
        every.append(slots[slot])
    assert fetched(shop) < pages, "the crawl ended before the last kill; slow the site down"

    finish(slots)
    hits = assert_everything_fetched(shop)
    held = sum(int(d["held_at_death"]) for d in deaths)
    extra = sum(hits.values()) - pages
    _, partial = read_items(every)
    report(
        record_property,
        kills=len(deaths),
        pages=pages,
        fetches=sum(hits.values()),
        extra_fetches=extra,
        pages_fetched_twice=sum(1 for n in hits.values() if n > 1),
        held_at_deaths=held,
        held_before_kills=sum(int(d["held_before"]) for d in deaths),
        items=len({json.loads(x)["url"] for x in _lines(every)}),
        partial_feed_lines=partial,
        deaths=json.dumps(deaths),
    )
    assert len(deaths) >= 3
    assert extra <= held, f"{extra} extra fetches, but the killed nodes held only {held} leases"
    assert_redis_drained(client)
    client.close()
    assert_every_item(shop, every)


# -- b) every node killed at once, then all restarted --------------------------------------


@pytest.mark.parametrize("feed", FEED_PARAMS)
def test_all_nodes_killed_at_once_then_restarted(feed, crawl, make_shop, redis_url, record_property):
    shop = make_shop(items=2000, delay=0.02)
    pages = len(shop.shop.paths())
    client = redis.Redis.from_url(redis_url)
    settings = _settings(redis_url, feed)
    first = [crawl(args={"base_url": shop.url}, settings=settings) for _ in range(3)]
    wait_until(
        lambda: fetched(shop) >= pages // 3 and all(held_by(client, n.proc.pid) for n in first),
        90,
        "a third of the site, every node crawling",
        first,
    )
    for node in first:
        node.signal(signal.SIGKILL)
    for node in first:
        node.proc.wait(30)
    held = sum(len(held_by(client, n.proc.pid)) for n in first)
    at_kill = fetched(shop)
    assert at_kill < pages
    assert client.zcard(KEYS.queue) > 0 and client.zcard(KEYS.leases) == held > 0

    second = start_joined(lambda: crawl(args={"base_url": shop.url}, settings=settings), shop, 3)
    finish(second)
    hits = assert_everything_fetched(shop)
    extra = sum(hits.values()) - pages
    report(
        record_property,
        feed=feed,
        pages=pages,
        fetched_at_kill=at_kill,
        held_at_death=held,
        extra_fetches=extra,
        fetches=sum(hits.values()),
        items=len({json.loads(x)["url"] for x in _lines(first + second)}),
    )
    assert extra <= held, f"{extra} extra fetches, but the killed nodes held only {held} leases"
    assert max(hits.values()) <= 2
    assert_redis_drained(client)
    client.close()
    assert_every_item(shop, first + second)


# -- c) a node frozen past its lease timeout, then thawed ---------------------------------


def test_frozen_node_loses_its_leases_and_nothing_else(crawl, make_shop, redis_url, record_property):
    shop = make_shop(items=2000, delay=0.02)
    pages = len(shop.shop.paths())
    client = redis.Redis.from_url(redis_url)
    settings = _settings(redis_url)
    frozen, runner = (crawl(args={"base_url": shop.url}, settings=settings) for _ in range(2))
    both = [frozen, runner]
    # freeze once the crawl is well under way and the node holds leases
    wait_until(lambda: fetched(shop) >= pages // 5 and held_by(client, frozen.proc.pid), 90, "the node to crawl", both)
    frozen.signal(signal.SIGSTOP)
    try:
        time.sleep(0.2)  # SIGSTOP is asynchronous; from now on the frozen node changes nothing
        held = list(held_by(client, frozen.proc.pid))
        assert held
        hits_at_freeze = fetched(shop)
        # past the lease timeout (3 s) plus a heartbeat of the other node, they are reaped
        wait_until(lambda: not held_by(client, frozen.proc.pid), 15, "the frozen node's leases to be reaped", [runner])
        # ... and the other node does that work: it leases, fetches and acks every one
        wait_until(
            lambda: not any(client.hmget(KEYS.requests, held)),
            20,
            "the other node to finish the reaped requests",
            [runner],
        )
        assert fetched(shop) > hits_at_freeze, "the other node went on crawling"
    finally:
        frozen.signal(signal.SIGCONT)
    finish(both)

    hits = assert_everything_fetched(shop)
    stats = final_stats(frozen)
    lost = int(stats.get("crawlplug/lost_leases", 0))
    extra = sum(hits.values()) - pages
    report(
        record_property,
        pages=pages,
        held_at_freeze=len(held),
        lost_leases=lost,
        extra_fetches=extra,
        fetches=sum(hits.values()),
        max_fetches_per_page=max(hits.values()),
        stale_acks=stats.get("crawlplug/stale_acks"),
        runner_reaped=final_stats(runner).get("crawlplug/reaped"),
    )
    assert WARNING in frozen.text(), frozen.text()[-3000:]
    assert lost > 0, stats
    assert max(hits.values()) <= 2, {p: n for p, n in hits.items() if n > 2}
    assert extra <= len(held)
    assert_redis_drained(client)
    client.close()
    assert_every_item(shop, both)
