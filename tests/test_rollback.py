"""Redis going back in time loses no page (issue 31): a restart from a snapshot older than
its last writes, a failover to a replica that had not received them, a restored backup.

A page's links are admitted while its callback runs; its own ack goes in a later call. If
Redis loses the call that stored the links and keeps the page's lease (leased before the
snapshot), the ack would delete the page and nothing would hold its links. Each node's
call record (lua/record.lua) tells that Redis went back; the call is refused, writing
nothing, and the node gives back every lease it holds (those pages are fetched again, and
produce their links again). Driven here against the frontier itself, on a real Redis put
back to an earlier state key by key (tests/support/rollback.py).
"""

from __future__ import annotations

import hashlib
import json
import logging

import pytest
import redis
import scrapy

from crawlplug.errors import AdmissionIncomplete, RolledBack
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.layout import shard_of
from crawlplug.queues import FifoQueue

from .support.engine import open_scheduler
from .support.rollback import restore, snapshot

K = CrawlKeys("rollback")


def fp(name: str) -> bytes:
    return hashlib.sha1(name.encode()).digest()


def payloads(r: redis.Redis, keys: CrawlKeys = K) -> dict[bytes, str]:
    """Every stored request by payload, and where it is: "queued" or "leased"."""
    queued = set(r.zrange(keys.queue, 0, -1))
    out = {}
    for rid, payload in r.hgetall(keys.requests).items():
        out[payload] = "queued" if rid in queued else "leased" if r.zscore(keys.leases, rid) is not None else "?"
    return out


@pytest.fixture
def node(r: redis.Redis) -> Frontier:
    return Frontier(r, K, node_id="node-a")


def test_an_ack_after_redis_went_back_never_deletes_a_page_whose_links_it_lost(r, node):
    """The issue's sequence: lease a parent, snapshot, admit its links, restore, ack the
    parent. Before the record, the ack deleted the parent and nothing held its links."""
    node.admit([(fp("parent"), 0.0, b"parent")])
    [parent] = node.pop(1)
    before = snapshot(r)
    assert node.admit([(fp("a"), 0.0, b"link a"), (fp("b"), 0.0, b"link b")]).flags == "11"
    restore(r, before)  # Redis went back: the links' requests and fingerprints are gone, the lease is back
    with pytest.raises(RolledBack) as refused:
        node.admit([], [parent.id])
    assert refused.value.given_back == [parent.id], "the lease the node held is given back"
    # the ack was not made: the parent is back in the queue, to be fetched again (its links with it)
    assert payloads(r) == {b"parent": "queued"}
    assert int(r.hget(K.stats, "acked") or 0) == 0
    # the node sends its links again (Batch keeps them until a call goes through): they are new again
    assert node.admit([(fp("a"), 0.0, b"link a"), (fp("b"), 0.0, b"link b")]).flags == "11"
    assert payloads(r) == {b"parent": "queued", b"link a": "queued", b"link b": "queued"}


def test_a_page_whose_links_survived_keeps_them_and_is_fetched_again(r, node):
    """Redis went back to a moment after the links were stored: nothing of the node's is
    lost, and nothing is refused either (its record is as new as its last call)."""
    node.admit([(fp("parent"), 0.0, b"parent")])
    [parent] = node.pop(1)
    node.admit([(fp("a"), 0.0, b"link a")])
    after_links = snapshot(r)
    restore(r, after_links)
    assert node.admit([], [parent.id]).acked == 1
    assert payloads(r) == {b"link a": "queued"}


def test_a_start_request_redis_lost_is_sent_again_and_a_link_is_left_to_its_page(r, node, caplog):
    """No lease stands behind a spider's start request (Admission's sixth element): if Redis
    goes back past its admission, no restored lease makes it again, and without the node's
    resend log the whole crawl under it was lost (CI: a snapshot taken before the demo shop's
    start page was admitted, 10 of 321 pages never fetched). A link is not logged: its page's
    restored lease makes it again."""
    node.admit([(fp("earlier"), 0.0, b"earlier")])
    before = snapshot(r)
    start = (fp("start"), 0.0, b"start", "", "http://shop.test/", True)
    link = (fp("link"), 0.0, b"link", "", "http://shop.test/item/1/")
    assert node.admit([start, link]).flags == "11"
    restore(r, before)
    assert payloads(r) == {b"earlier": "queued"}
    with caplog.at_level(logging.WARNING, "crawlplug.frontier"), pytest.raises(RolledBack):
        node.heartbeat([])
    assert payloads(r) == {b"earlier": "queued", b"start": "queued"}
    assert "sent 1 start requests again to Redis, which went back in time (1 of them were missing there)" in caplog.text
    # its fingerprint is back too: the start request met again is a duplicate, and a second
    # refusal (the record is now as new as the resend) sends nothing again
    assert node.admit([start]).flags == "0"
    assert node.heartbeat([]) == []


def test_a_start_request_redis_still_has_is_not_sent_again(r, node):
    """Only what was admitted after the last call Redis still has is sent again: a start
    request without a fingerprint (dont_filter) would otherwise be fetched twice."""
    unfiltered = (b"", 0.0, b"start", "", "http://shop.test/", True)
    node.admit([unfiltered])
    before = snapshot(r)
    node.admit([(fp("link"), 0.0, b"link")])
    restore(r, before)
    with pytest.raises(RolledBack):
        node.heartbeat([])
    assert r.zcard(K.queue) == 1 and payloads(r) == {b"start": "queued"}


def test_redis_gone_back_further_than_the_start_request_log_says_so(r, caplog):
    node = Frontier(r, K, node_id="node-a", resend_window=0)  # no log kept
    node.admit([(fp("earlier"), 0.0, b"earlier")])
    before = snapshot(r)
    node.admit([(fp("start"), 0.0, b"start", "", "http://shop.test/", True)])
    restore(r, before)
    with caplog.at_level(logging.ERROR, "crawlplug.frontier"), pytest.raises(RolledBack):
        node.heartbeat([])
    assert "Redis of crawl 'rollback' went back further than this node's resend log reaches" in caplog.text
    assert "start requests it admitted there before then may be lost" in caplog.text


def test_request_ids_never_repeat_across_a_rollback_and_keep_their_order(r):
    """After Redis went back, seq is back too; the ids handed out since must not be handed
    out again (a node holding one would ack or release another request), and ids still
    increase, so requests of one priority keep their FIFO order."""
    a, b = Frontier(r, K, node_id="node-a", queue=FifoQueue), Frontier(r, K, node_id="node-b", queue=FifoQueue)
    a.admit([(fp("first"), 0.0, b"first")])
    before = snapshot(r)
    a.admit([(fp(f"lost {i}"), 0.0, f"lost {i}".encode()) for i in range(3)])
    held = {x.id for x in b.pop(4) if x.payload.startswith(b"lost")}  # node b holds the lost requests' ids
    restore(r, before)
    new = [(fp(f"new {i}"), 0.0, f"new {i}".encode()) for i in range(3)]
    with pytest.raises(RolledBack):  # b's pop was recorded after the snapshot: it finds Redis went back
        b.admit(new)
    b.admit(new)  # the node sends its requests again, checked against what Redis has now
    new_ids = [x.decode() for x in r.zrange(K.queue, 0, -1)]
    assert len(new_ids) == 4 and not held & set(new_ids), (held, new_ids)
    assert [r.hget(K.requests, i) for i in sorted(new_ids)] == [b"first", b"new 0", b"new 1", b"new 2"]
    assert {len(i) for i in new_ids} == {16}, "ids keep their width (bench/payload_bench.py: bytes per request)"


def test_a_heartbeat_finds_the_rollback_first_and_gives_back_what_the_node_holds(r, node):
    node.admit([(fp(f"page {i}"), 0.0, f"page {i}".encode()) for i in range(3)])
    held = node.pop(3)
    before = snapshot(r)
    node.admit([(fp("link"), 0.0, b"link")])
    restore(r, before)
    with pytest.raises(RolledBack) as refused:
        node.heartbeat([x.id for x in held])
    assert sorted(refused.value.given_back) == sorted(x.id for x in held)
    assert set(payloads(r).values()) == {"queued"}
    # the heartbeat after that goes through: the record is checked against what Redis has now
    assert node.heartbeat([]) == []


def test_an_admit_and_pop_after_a_rollback_leases_nothing_and_writes_nothing(r, node):
    node.admit([(fp("parent"), 0.0, b"parent"), (fp("other"), 0.0, b"other")])
    [parent] = node.pop(1)
    before = snapshot(r)
    node.admit([(fp("link"), 0.0, b"link")])
    restore(r, before)
    with pytest.raises(RolledBack) as refused:
        node.admit_and_pop([(fp("link 2"), 0.0, b"link 2")], [parent.id], 4)
    assert refused.value.given_back == [parent.id]
    # the one change is the parent's release; nothing admitted, nothing leased
    assert payloads(r) == {b"parent": "queued", b"other": "queued"}
    assert r.smembers(K.seen) == {fp("parent"), fp("other")}
    assert int(r.hget(K.stats, "enqueued")) == 2 and int(r.hget(K.stats, "leased")) == 1


def test_a_pop_alone_after_a_rollback_names_the_leases_it_gave_back(r, node):
    """admit_and_pop with nothing to admit is a pop: the refusal it meets is settled once,
    naming the leases given back (a second settling named none, and the caller kept them)."""
    node.admit([(fp("parent"), 0.0, b"parent"), (fp("other"), 0.0, b"other")])
    [parent] = node.pop(1)
    before = snapshot(r)
    node.admit([(fp("link"), 0.0, b"link")])
    restore(r, before)
    with pytest.raises(RolledBack) as refused:
        node.admit_and_pop([], [], 4)
    assert refused.value.given_back == [parent.id]
    assert payloads(r) == {b"parent": "queued", b"other": "queued"}


def test_a_call_sent_again_after_its_reply_was_lost_is_no_rollback(r, node):
    """An admission whose reply was lost was recorded by Redis: sent again (Frontier's
    uncertain call), it is answered with its stored reply, not refused."""
    node.admit([(fp("parent"), 0.0, b"parent")])
    [parent] = node.pop(1)
    call = node.base.admit_call([(fp("a"), 0.0, b"a")], [parent.id])
    raw = node.scripts.admit(keys=call[1], args=call[2])  # the script ran; the node never read the reply
    assert raw[0] == b"1"
    node.base.uncertain = (call[2][3], call[1], call[2], 1, 1, 0)
    result = node.admit([(fp("a"), 0.0, b"a")], [parent.id])
    assert (result.flags, result.acked) == ("1", 1), "the stored reply, once"
    assert payloads(r) == {b"a": "queued"}


def test_the_record_lives_as_long_as_the_node_beats(r, node):
    """A record that expired under a live node would read as a rollback: each heartbeat
    keeps it alive, and a node that stopped is forgotten 15 minutes after."""
    node.admit([(fp("x"), 0.0, b"x")])
    r.pexpire(K.reply("node-a"), 50)
    node.heartbeat([])
    assert r.pttl(K.reply("node-a")) > 800_000
    assert node.admit([(fp("y"), 0.0, b"y")]).flags == "1"


def test_a_new_run_is_no_rollback(r, node):
    """A frontier given another epoch (the node joined a new run) checks no record of the old
    state, and holds none of its leases."""
    node.admit([(fp("x"), 0.0, b"x")])
    node.pop(1)
    r.delete(K.reply("node-a"))  # a new run clears the crawl's keys
    node.epoch = ""  # (what Liveness.rejoin does with the new run's epoch)
    node.epoch = "e2"
    r.set(K.epoch, "e2")
    assert node.admit([(fp("y"), 0.0, b"y")]).flags == "1"
    assert node.base.record.held == {}


# -- a sharded crawl: one shard goes back alone (a Redis Cluster primary) ----------------------

SHARDS = 2
HOSTS = {shard_of(h, SHARDS): h for h in (f"h{i}.test" for i in range(20))}


def sharded(r: redis.Redis, window: float = 300.0) -> Frontier:
    return Frontier(r, K, shards=SHARDS, node_id="node-a", resend_window=window)


def _parent_in_0_links_in_1(r: redis.Redis, f: Frontier):
    """A parent leased from shard 0, then its links admitted to shard 1 with its ack (the
    ack waits for shard 1 to store them, then goes to shard 0): a snapshot of shard 1 first."""
    f.admit([(fp("parent"), 0.0, b"parent", "", HOSTS[0])])
    [parent] = f.pop(1)
    shard1 = snapshot(r, K.shard_keys(1, SHARDS).pattern())
    links = [(fp(f"link {i}"), 0.0, f"link {i}".encode(), "", HOSTS[1]) for i in range(3)]
    result = f.admit(links, [parent.id])
    assert (result.flags, result.acked) == ("111", 1)
    return shard1


def test_a_shard_that_went_back_alone_gets_again_what_the_node_admitted_to_it(r, caplog):
    f = sharded(r)
    shard1 = _parent_in_0_links_in_1(r, f)
    restore(r, shard1)  # shard 1 went back; shard 0 kept the parent's ack: only the node has the links now
    assert payloads(r, K.shard_keys(1, SHARDS)) == {}
    with caplog.at_level(logging.WARNING, "crawlplug.frontier"), pytest.raises(RolledBack):
        f.heartbeat([])  # the heartbeat checks each shard's record of this node
    assert payloads(r, K.shard_keys(1, SHARDS)) == {b"link 0": "queued", b"link 1": "queued", b"link 2": "queued"}
    assert "sent 3 requests again to shard 1" in caplog.text
    assert f.heartbeat([]) == []


def test_an_admission_to_a_shard_that_went_back_finds_it_too(r):
    f = sharded(r)
    shard1 = _parent_in_0_links_in_1(r, f)
    restore(r, shard1)
    with pytest.raises((RolledBack, AdmissionIncomplete)):
        f.admit([(fp("more"), 0.0, b"more", "", HOSTS[1])])
    assert set(payloads(r, K.shard_keys(1, SHARDS))) == {b"link 0", b"link 1", b"link 2"}


def test_a_shard_that_went_back_further_than_the_resend_log_says_what_may_be_lost(r, caplog):
    f = sharded(r, window=0)  # no log kept
    shard1 = _parent_in_0_links_in_1(r, f)
    restore(r, shard1)
    with caplog.at_level(logging.ERROR, "crawlplug.frontier"), pytest.raises(RolledBack):
        f.heartbeat([])
    assert "went back further than this node's resend log reaches (CRAWLPLUG_RESEND_WINDOW=0s)" in caplog.text


# -- a node: its Scheduler marks the requests no lease stands behind -------------------------------


@pytest.mark.parametrize("calls", ["off", "on"], ids=["reactor-calls", "async-calls"])
def test_a_spiders_start_request_redis_lost_is_crawled_after_all_by_the_node(redis_url, r, caplog, calls):
    """The node's side of the start requests' resend log: Scrapy's start requests (meta
    is_start_request) are logged, a page's links are not; Redis going back past the start
    request's admission gets it queued again by the node's next call, made on the reactor
    or (CRAWLPLUG_ASYNC_CALLS on) by the worker thread and landed before anything is read."""
    with open_scheduler(redis_url, CRAWLPLUG_ASYNC_CALLS=calls) as (scheduler, _):
        keys = scheduler.frontier.keys
        scheduler.enqueue_request(scrapy.Request("http://site.test/earlier"))
        scheduler.batch.flush()
        before = snapshot(r)
        scheduler.enqueue_request(
            scrapy.Request("http://site.test/", meta={"is_start_request": True}, dont_filter=True)
        )
        scheduler.enqueue_request(scrapy.Request("http://site.test/link"))
        scheduler.batch.flush()
        restore(r, before)
        with caplog.at_level(logging.WARNING, "crawlplug"):
            scheduler.next_request()  # its next call finds Redis went back, sends the start request again
            scheduler.batch.settle()  # (on: the call made by the worker thread lands)
        urls = [json.loads(p)["u"] for p in r.hvals(keys.requests)]
        assert sorted(urls) == ["http://site.test/", "http://site.test/earlier"], urls
        assert "sent 1 start requests again to Redis" in caplog.text
