"""crawlplug's Scheduler on its own, over a real Redis, driven as Scrapy's engine drives it
(tests/support/engine.py): what its calls to Redis carry, and what its methods answer."""

from __future__ import annotations

import time
from typing import Any

import pytest
import scrapy

from crawlplug.frontier.keys import CrawlKeys

from .support.engine import open_scheduler
from .support.scriptcalls import script_calls

K = CrawlKeys("contract")


class CallLog:
    """Every admission the node's frontier sends: (requests in it, lease ids it acks)."""

    def __init__(self, frontier: Any) -> None:
        self.calls: list[tuple[int, list[str]]] = []
        for name in ("admit", "admit_and_pop"):
            original = getattr(frontier, name)

            def logged(items: Any, acks: Any = (), *args: Any, _original: Any = original, **kwargs: Any) -> Any:
                self.calls.append((len(items), list(acks)))
                return _original(items, acks, *args, **kwargs)

            setattr(frontier, name, logged)


@pytest.mark.integration  # in process, but 50,000 requests serialized: kept out of `make test-fast`
def test_a_page_with_50000_links_is_sent_in_bounded_calls_its_ack_in_the_last(redis_url, r):
    """A page's links are stored as its callback yields them, a batch at a time; its ack
    goes with the first call after the engine is done with it: never before one of them."""
    with open_scheduler(redis_url, CRAWLPLUG_BATCH_SIZE=500) as (scheduler, engine):
        scheduler.enqueue_request(scrapy.Request("http://site.test/"))
        parent = scheduler.next_request()
        assert parent is not None
        log = CallLog(scheduler.frontier)
        for i in range(50_000):
            assert scheduler.enqueue_request(scrapy.Request(f"http://site.test/item/{i}"))
        engine.done(parent)
        scheduler.next_request()  # the engine asks for more: the rest and the ack go out
        sizes = [n for n, _ in log.calls]
        acked_in = [i for i, (_, acks) in enumerate(log.calls) if acks]
        assert sum(sizes) == 50_000 and max(sizes) <= 500, sizes[-5:]
        assert acked_in == [len(log.calls) - 1], "the parent's ack rides in the last call, after every link"
        payloads = set(r.hvals(K.requests))
        assert len(payloads) == 50_000 and not any(b'"http://site.test/"' in p for p in payloads), "the parent acked"


# -- Scrapy's Scheduler contract (issue 32 item 8) -----------------------------------------------


def test_a_node_that_opens_a_crawl_redis_holds_work_for_has_pending_requests(redis_url, r):
    """Scrapy asks has_pending_requests() before it calls the spider idle: after one node
    closed and another opened the crawl, Redis holds the requests, the new node none yet."""
    with open_scheduler(redis_url) as (first, _):
        for i in range(3):
            first.enqueue_request(scrapy.Request(f"http://site.test/{i}"))
        first.batch.flush()
    assert r.zcard(K.queue) == 3
    with open_scheduler(redis_url) as (second, _):
        assert second.has_pending_requests(), "Redis holds 3 requests for it"
        assert len(second) == 3
        got = [second.next_request() for _ in range(3)]
        assert all(got) and len(second) == 0


def test_the_last_request_taken_leaves_nothing_pending(redis_url, r):
    """What keeps a node closing at the end of a crawl: the pop that empties the queue says so."""
    with open_scheduler(redis_url) as (scheduler, engine):
        scheduler.enqueue_request(scrapy.Request("http://site.test/only"))
        request = scheduler.next_request()
        assert request is not None and scheduler.has_pending_requests() is False and len(scheduler) == 0
        engine.done(request)
        assert scheduler.has_pending_requests(), "its ack is still to send"
        scheduler.batch.flush()
        assert not scheduler.has_pending_requests()


def test_a_request_enqueued_twice_is_one_request(redis_url, r):
    with open_scheduler(redis_url) as (scheduler, _):
        stats = scheduler.crawler.stats
        assert scheduler.enqueue_request(scrapy.Request("http://site.test/a")) is True
        assert scheduler.enqueue_request(scrapy.Request("http://site.test/a")) is False, "a duplicate, known here"
        assert len(scheduler) == 1
        assert stats.get_value("scheduler/enqueued") is None, "nothing stored yet"
        scheduler.batch.flush()
        assert stats.get_value("scheduler/enqueued") == 1 and stats.get_value("dupefilter/filtered") == 1
        assert r.zcard(K.queue) == 1


def test_a_request_redis_filters_is_dropped_and_not_counted_enqueued(redis_url, r):
    """A node learns only from the admission's reply that another node stored the request:
    then Scrapy's request_dropped fires for it, and scheduler/enqueued does not count it."""
    from scrapy import signals

    with open_scheduler(redis_url) as (other, _):
        other.enqueue_request(scrapy.Request("http://site.test/known"))
        other.batch.flush()
    with open_scheduler(redis_url) as (scheduler, _):
        dropped: list[str] = []
        scheduler.crawler.signals.connect(
            lambda request, spider: dropped.append(request.url), signal=signals.request_dropped, weak=False
        )
        assert scheduler.enqueue_request(scrapy.Request("http://site.test/known")) is True  # unknown here
        assert scheduler.enqueue_request(scrapy.Request("http://site.test/new")) is True
        scheduler.batch.flush()
        stats = scheduler.crawler.stats
        assert dropped == ["http://site.test/known"]
        assert stats.get_value("scheduler/enqueued") == 1 and stats.get_value("dupefilter/filtered") == 1


def test_enqueue_request_makes_no_call_of_its_own(redis_url, r):
    """Buffered, a batch at a time: enqueue_request() answers from what the node knows."""
    with open_scheduler(redis_url, CRAWLPLUG_BATCH_SIZE=100) as (scheduler, _):
        calls: list[str] = []
        scripts = scheduler.frontier.scripts
        original = scripts.__class__.__getattr__

        class Counting:
            def __getattr__(self, name: str) -> Any:
                calls.append(name)
                return original(scripts, name)

        scheduler.frontier.scripts = Counting()
        try:
            for i in range(50):
                scheduler.enqueue_request(scrapy.Request(f"http://site.test/{i}"))
            assert scheduler.enqueue_request(scrapy.Request("http://site.test/3")) is False
            scheduler.batch.drain(True)
            assert scheduler.enqueue_request(scrapy.Request("http://site.test/x")) is False, "a draining run"
            assert len(scheduler) == 50 and scheduler.has_pending_requests()
        finally:
            scheduler.frontier.scripts = scripts
        assert calls == [], calls


def test_leases_redis_lost_are_not_called_expired(redis_url, r, caplog):
    """After a Redis restart that lost the pop of a lease this node renewed in time, the node
    says so, not that it stalled past the lease timeout and other nodes took them."""
    import logging

    with open_scheduler(redis_url) as (scheduler, _):
        scheduler.enqueue_request(scrapy.Request("http://site.test/a"))
        assert scheduler.next_request() is not None
        [lease_id] = [x.decode() for x in r.zrange(K.leases, 0, -1)]
        # what a Redis that lost the pop holds: the request queued again, no lease
        score = float(r.hget(K.leased, lease_id).split(b"|")[1])
        r.zrem(K.leases, lease_id)
        r.hdel(K.leased, lease_id)
        r.zadd(K.queue, {lease_id: score})
        with caplog.at_level(logging.WARNING, "crawlplug.scheduler"):
            scheduler.liveness.heartbeat()
        assert (
            "Redis no longer holds 1 leases of this node, though it renewed them in time (within 30.0s)" in caplog.text
        )
        assert "stalled longer than" not in caplog.text


def test_a_busy_downloader_with_a_slot_free_waits_and_then_leases_for_several(redis_url, r):
    """Coalescing (issue 37): while most of the downloader is busy, a slot or two freed make no
    call to Redis; once a quarter of a pop's worth is free, one call leases for all of them
    (and carries what finished meanwhile). A downloader with little in flight is never kept
    waiting, and a freed slot waits PopPacing.WAIT at most."""
    with open_scheduler(redis_url, CONCURRENT_REQUESTS=32) as (scheduler, engine):
        for i in range(80):
            scheduler.enqueue_request(scrapy.Request(f"http://site.test/{i}"))
        scheduler.batch.flush()
        assert scheduler.batch.pacing.least == 8
        engine.downloader.total_concurrency = 32
        engine.downloader.active = {f"busy{i}" for i in range(30)}  # 2 free
        r.config_resetstat()
        assert scheduler.next_request() is None, "2 slots free of 32, 30 busy: no call yet"
        assert script_calls(r) == 0, "nothing sent to Redis"
        assert r.zcard(K.queue) == 80, "the work is still there"
        engine.downloader.active = {f"busy{i}" for i in range(20)}  # 12 free
        got = [scheduler.next_request() for _ in range(12)]
        assert all(got), "12 requests for the 12 free slots"
        assert script_calls(r) == 1, "leased in one call"
        engine.downloader.active = {"busy0", "busy1"}  # 30 free, 2 busy: no waiting
        assert scheduler.next_request() is not None
        engine.downloader.active = {f"busy{i}" for i in range(7)}  # 25 free
        engine.downloader.active |= {f"more{i}" for i in range(24)}  # 1 free, 31 busy
        scheduler.batch.prefetched.clear()
        assert scheduler.next_request() is None, "1 free, 31 busy: waits"
        time.sleep(scheduler.batch.pacing.WAIT * 3)  # past the most a slot waits
        assert scheduler.next_request() is not None, "then leases for the one slot"
