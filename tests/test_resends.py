"""Calls a node sends again count nothing twice (issue 32): a heartbeat whose reply was lost
(redis-py's retry), a heartbeat sent again because the reap in the same pipeline was
refused; and a heartbeat never half-written by a counter of the wrong kind. Against a real
Redis, through the frontier."""

from __future__ import annotations

import pytest
import redis

from crawlplug.crawl import runs
from crawlplug.errors import CorruptKey
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys

K = CrawlKeys("resends")


class Twice:
    """``frontier.scripts`` with every heartbeat sent twice (the first reply dropped): what
    redis-py's retry does after a connection reset that followed the script's run."""

    def __init__(self, scripts):
        self._scripts = scripts

    def __getattr__(self, name):
        target = getattr(self._scripts, name)
        if name != "heartbeat":
            return target

        def twice(*args, **kwargs):
            target(*args, **kwargs)
            return target(*args, **kwargs)

        return twice


def _node(r: redis.Redis) -> Frontier:
    joined = runs.join(r, K, node_id="n1", ttl_ms=10_000)
    return Frontier(r, K, node_id="n1", epoch=joined.epoch)


def _counter(r: redis.Redis, name: str) -> int:
    return int(r.hget(K.stats, name) or 0)


def test_a_heartbeat_sent_twice_counts_once(r):
    node = _node(r)
    node.scripts = Twice(node.scripts)
    node.heartbeat([], totals={"items": 10, "errors": 2})
    assert (_counter(r, "items"), _counter(r, "errors")) == (10, 2)
    node.heartbeat([], totals={"items": 30, "errors": 2})
    assert (_counter(r, "items"), _counter(r, "errors")) == (30, 2), "what is new, once"


def test_a_beat_sent_again_after_its_reap_was_refused_counts_once(r):
    """The heartbeat and the reap go in one pipeline; with the reap refused (a corrupt key)
    the node takes the beat as failed and sends the same totals again at the next one."""
    node = _node(r)
    r.set(K.dead, "not a list")  # reap.lua refuses this; the heartbeat does not touch it
    for _ in range(4):
        with pytest.raises(CorruptKey):
            node.heartbeat_and_reap([], totals={"items": 10})
    assert _counter(r, "items") == 10, "seen 10, 30, 60, 100 before: each beat added the totals again"
    r.delete(K.dead)
    node.heartbeat_and_reap([], totals={"items": 12})
    assert _counter(r, "items") == 12


def test_two_nodes_are_counted_apart(r):
    a, b = _node(r), Frontier(r, K, node_id="n2", epoch=runs.join(r, K, node_id="n2", ttl_ms=10_000).epoch)
    a.heartbeat([], totals={"items": 5})
    b.heartbeat([], totals={"items": 7})
    a.heartbeat([], totals={"items": 6})
    assert _counter(r, "items") == 13


@pytest.mark.parametrize("value", ["1.5x", "9223372036854775800"], ids=["not-an-integer", "overflowing"])
@pytest.mark.parametrize("name", ["items", "errors", "spider_errors", "shard_acked"])
def test_a_counter_of_the_wrong_kind_refuses_the_heartbeat_whole(r, name, value):
    """Before, heartbeat.lua renewed the node and its leases' neighbours, then failed on the
    HINCRBY half-way: the node showed alive while its leases were never renewed."""
    node = _node(r)
    node.admit([(b"x" * 20, 0.0, b"payload")])
    [held] = node.pop(1)
    deadline = r.zscore(K.leases, held.id)
    r.hset(K.stats, name, value)
    before = {key: r.dump(key) for key in r.scan_iter(match=K.pattern())}
    with pytest.raises(CorruptKey) as refused:
        node.heartbeat([held.id], totals={name: 1})
    assert K.stats in str(refused.value) and name in str(refused.value)
    assert {key: r.dump(key) for key in r.scan_iter(match=K.pattern())} == before, "nothing written"
    r.hdel(K.stats, name)
    node.heartbeat([held.id], totals={name: 1})
    assert r.zscore(K.leases, held.id) >= deadline and _counter(r, name) == 1


def test_an_admission_over_65536_buckets_of_the_compact_store_is_sent_in_parts(redis_url, r):
    """Each call names a bucket by two bytes: a bigger batch raised OverflowError (packed
    before it was checked); the frontier now splits it, acks with the last part."""
    import hashlib

    from crawlplug.frontier.fphash import HashDedup, HashSpec

    # a part of 65,536 requests is seconds of Redis on a loaded machine: more than redis-py's
    # default 5 s socket timeout (a node's batches are far smaller: CRAWLPLUG_BATCH_SIZE)
    slow = redis.Redis.from_url(redis_url, socket_timeout=120)
    node = Frontier(slow, K, node_id="n1", dedup=HashDedup(HashSpec(bits=20, fill=4)))
    node.admit([(b"p" * 20, 0.0, b"parent")])
    [parent] = node.pop(1)
    items = [(hashlib.sha1(b"%d" % i).digest(), 0.0, b"x%d" % i) for i in range(70_000)]
    result = node.admit(items, [parent.id])
    assert result.flags == "1" * 70_000 and result.acked == 1
    assert r.zcard(K.queue) == 70_000
    assert (
        node.record_seen([(hashlib.sha1(b"%d" % i).digest(), "") for i in range(69_990, 70_010)]) == "0" * 10 + "1" * 10
    )
