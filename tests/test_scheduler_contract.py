"""crawlplug's Scheduler on its own, over a real Redis, driven as Scrapy's engine drives it
(tests/support/engine.py): what its calls to Redis carry, and what its methods answer."""

from __future__ import annotations

from typing import Any

import pytest
import scrapy

from crawlplug.frontier.keys import CrawlKeys

from .support.engine import open_scheduler

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
