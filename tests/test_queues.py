"""Queue orders (crawlplug.queues) through a real Frontier on a real Redis."""

from __future__ import annotations

import pytest
import redis
from scrapy import Request

from crawlplug.errors import ConfigError
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.queues import (
    BaseQueue,
    FifoQueue,
    LifoQueue,
    PriorityQueue,
    load_queue_class,
)

KEYS = CrawlKeys("queues")


def expected_order(cls: type[BaseQueue], pushed: list[tuple[str, int]]) -> list[str]:
    """The order ``cls`` promises for (name, priority) pairs pushed in this order."""
    if cls is PriorityQueue:
        # stable sort: among equal priorities, push order is kept (FIFO)
        return [name for name, _ in sorted(pushed, key=lambda p: -p[1])]
    if cls is FifoQueue:
        return [name for name, _ in pushed]
    if cls is LifoQueue:
        return [name for name, _ in reversed(pushed)]
    raise AssertionError(cls)


PUSHED = [("a", 0), ("b", 5), ("c", -3), ("d", 5), ("e", 0), ("f", 10), ("g", -3), ("h", 0)]


def items_for(cls: type[BaseQueue], pushed, *, fingerprint=lambda name: name.encode().ljust(20, b"\0")):
    out = []
    for name, prio in pushed:
        req = Request(f"http://example.com/{name}", priority=prio)
        out.append((fingerprint(name), cls.score(req), name.encode()))
    return out


def drain(frontier: Frontier, n: int = 1) -> list[str]:
    got: list[str] = []
    while True:
        batch = frontier.pop(n)
        if not batch:
            return got
        got += [leased.payload.decode() for leased in batch]


@pytest.mark.parametrize("cls", [PriorityQueue, FifoQueue, LifoQueue], ids=lambda c: c.__name__)
class TestQueueOrder:
    def test_order_one_at_a_time(self, r, cls):
        f = Frontier(r, KEYS, queue=cls)
        assert f.push(items_for(cls, PUSHED)).admitted == len(PUSHED)
        assert drain(f, 1) == expected_order(cls, PUSHED)

    def test_order_in_batches(self, r, cls):
        f = Frontier(r, KEYS, queue=cls)
        f.push(items_for(cls, PUSHED))
        assert drain(f, 3) == expected_order(cls, PUSHED)

    def test_order_across_separate_pushes(self, r, cls):
        f = Frontier(r, KEYS, queue=cls)
        for item in items_for(cls, PUSHED):
            f.push([item])
        assert drain(f, 2) == expected_order(cls, PUSHED)

    def test_identical_requests_never_collapse(self, r, cls):
        f = Frontier(r, KEYS, queue=cls)
        req = Request("http://example.com/same", dont_filter=True)
        item = (b"", cls.score(req), b"same-payload")
        assert f.push([item, item]).admitted == 2
        assert f.push([item]).admitted == 1
        assert len(f) == 3
        assert r.hlen(KEYS.requests) == 3
        popped = f.pop(10)
        assert [p.payload for p in popped] == [b"same-payload"] * 3
        assert len({p.id for p in popped}) == 3
        assert len(f) == 0

    def test_len_follows_pushes_and_pops(self, r, cls):
        f = Frontier(r, KEYS, queue=cls)
        assert len(f) == 0
        f.push(items_for(cls, PUSHED[:5]))
        assert len(f) == 5
        f.pop(2)
        assert len(f) == 3
        f.push(items_for(cls, PUSHED[5:]))
        assert len(f) == 6
        f.pop(100)
        assert len(f) == 0

    def test_persists_across_clients(self, redis_url, cls):
        first_client = redis.Redis.from_url(redis_url)
        first = Frontier(first_client, KEYS, queue=cls, node_id="writer")
        first.push(items_for(cls, PUSHED))
        first_client.close()
        del first

        second_client = redis.Redis.from_url(redis_url)
        try:
            second = Frontier(second_client, KEYS, queue=cls, node_id="reader")
            assert len(second) == len(PUSHED)
            assert drain(second, 2) == expected_order(cls, PUSHED)
        finally:
            second_client.close()


def test_scores_use_priority_only_in_the_priority_queue():
    hi, lo = Request("http://x/", priority=9), Request("http://x/", priority=-9)
    assert PriorityQueue.score(hi) < PriorityQueue.score(lo)
    assert FifoQueue.score(hi) == FifoQueue.score(lo)
    assert LifoQueue.score(hi) == LifoQueue.score(lo)


@pytest.mark.parametrize(
    ("path", "cls"),
    [
        ("scrapy_redis.queue.PriorityQueue", PriorityQueue),
        ("scrapy_redis.queue.FifoQueue", FifoQueue),
        ("scrapy_redis.queue.LifoQueue", LifoQueue),
        ("scrapy_redis.queue.SpiderPriorityQueue", PriorityQueue),
        ("scrapy_redis.queue.SpiderQueue", FifoQueue),
        ("scrapy_redis.queue.SpiderStack", LifoQueue),
        ("crawlplug.queues.LifoQueue", LifoQueue),
        ("crawlplug.queues.FifoQueue", FifoQueue),
        (PriorityQueue, PriorityQueue),
    ],
)
def test_load_queue_class_maps_paths(path, cls):
    assert load_queue_class(path) is cls


@pytest.mark.parametrize(
    "path",
    ["collections.deque", "scrapy.Request", "crawlplug.queues.load_queue_class", dict, "no.such.Queue", "nodots"],
)
def test_load_queue_class_rejects_non_queues(path):
    with pytest.raises(ConfigError, match="CRAWLPLUG_QUEUE_CLASS"):
        load_queue_class(path)
