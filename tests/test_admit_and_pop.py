"""Frontier.admit_and_pop as one admit.lua call that admits and then pops (its ARGV[5]),
on a real Redis: one script call, all or nothing over the checks of both halves, a call
sent again answering its admission's reply and popping afresh, a full Redis refusing the
whole call, a run's limits and stop, the epoch guard. The sharded frontier keeps the
pipelined admit.lua + pop.lua pair (tests/test_shards.py)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
import redis

from crawlplug.crawl import control, runs
from crawlplug.crawl.control import Limits
from crawlplug.errors import CorruptKey, StaleEpoch
from crawlplug.frontier.bloom import BloomSpec
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.dedup import BloomDedup
from crawlplug.frontier.fphash import HashDedup, HashSpec
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.queues import DomainQueue, FifoQueue

from .support.scriptcalls import script_calls
from .support.scriptspy import AdmitSpy

K = CrawlKeys("fused")


def fp(n: int | str) -> bytes:
    return hashlib.sha1(str(n).encode()).digest()


def payload(n: int | str) -> bytes:
    return json.dumps({"url": f"http://example.com/{n}"}).encode()


def stats(r: redis.Redis) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in r.hgetall(K.stats).items()}


def snapshot(r: redis.Redis, keys: CrawlKeys = K) -> dict[bytes, Any]:
    """What every key of the crawl holds (by content: a DUMP's order of a hash's fields may
    change when Redis rehashes it on a read), and whether it expires."""
    read = {
        b"string": r.get,
        b"hash": r.hgetall,
        b"set": r.smembers,
        b"list": lambda k: r.lrange(k, 0, -1),
        b"zset": lambda k: r.zrange(k, 0, -1, withscores=True),
    }
    return {k: (read[r.type(k)](k), r.pttl(k) > 0) for k in r.scan_iter(match=keys.pattern())}


def evalsha_calls(r: redis.Redis) -> int:
    return script_calls(r)


def test_one_script_call_admits_acks_and_pops(r):
    f = Frontier(r, K, node_id="node-a", queue=FifoQueue)
    f.admit([(fp("parent"), 0, payload("parent")), (fp("old"), 0, payload("old"))])
    (parent,) = f.pop(1)
    before = evalsha_calls(r)
    result, leased = f.admit_and_pop(
        [(fp("child"), 0, payload("child")), (fp("old"), 0, payload("old"))], [parent.id], 5
    )
    assert evalsha_calls(r) - before == 1, "one script call for the admission and the pop"
    assert (result.flags, result.acked, result.stale) == ("10", 1, 0)
    assert [x.payload for x in leased] == [payload("old"), payload("child")], "the pop sees what was admitted"
    assert all(x.deliveries == 1 for x in leased)
    assert stats(r) == {"enqueued": 3, "filtered": 1, "acked": 1, "leased": 3}
    assert r.hlen(K.requests) == 2 and r.zcard(K.leases) == 2 and r.zcard(K.queue) == 0


CORRUPT = {
    # the run hash: only the pop reads it (its state and limits)
    "run": (lambda k: k.run, "min", lambda r, key: r.set(key, "by hand"), "holds a string, not a hash"),
    # a per-domain key a domain pop takes from
    "dconf": (lambda k: k.dconf, "domain", lambda r, key: r.set(key, "by hand"), "holds a string, not a hash"),
    # a stats counter both halves write
    "stats": (lambda k: k.stats, "min", lambda r, key: r.hset(key, "leased", "many"), "field leased holds"),
    # a key only the admission writes: the pop must not go through either
    "seq": (lambda k: k.seq, "min", lambda r, key: r.set(key, "12abc"), "not an integer"),
}


@pytest.mark.parametrize("name", list(CORRUPT))
def test_a_corrupt_key_of_either_half_refuses_the_whole_call_having_written_nothing(r, name):
    key_of, order, spoil, words = CORRUPT[name]
    queue = DomainQueue if order == "domain" else FifoQueue
    f = Frontier(r, K, node_id="node-a", queue=queue)
    host = "a.example" if order == "domain" else ""
    f.admit([(fp(i), 0, payload(i), host) for i in range(3)])
    held = f.pop(1)
    assert len(held) == 1
    key = key_of(K)
    spoil(r, key)
    before = snapshot(r)
    with pytest.raises(CorruptKey, match=words) as refused:
        f.admit_and_pop([(fp("new"), 0, payload("new"), host)], [held[0].id], 2)
    assert refused.value.key == key
    assert snapshot(r) == before, "nothing written: no fingerprint, no request, no ack, no lease"


def test_a_call_sent_again_answers_its_admission_and_the_leases_it_gave(r):
    """redis-py's retry of a call whose reply was lost: the admission's reply and the same
    leases, not a second pop (whose first leases would stay with the node, unknown to it,
    until they expired: a delivery each)."""
    f = Frontier(r, K, node_id="node-a", queue=FifoQueue)
    f.admit([(fp(i), 0, payload(i)) for i in range(3)])
    (parent,) = f.pop(1)
    spy = AdmitSpy(f.scripts, sends=2)
    f.scripts = spy
    result, leased = f.admit_and_pop([(fp("child"), 0, payload("child"))], [parent.id], 1)
    first, second = spy.replies
    assert first == second, "the second call answers the first's reply, leases included"
    assert (result.flags, result.acked, result.stale) == ("1", 1, 0)
    assert [x.payload for x in leased] == [payload(1)], "the lost reply's lease"
    assert stats(r) == {"enqueued": 4, "acked": 1, "leased": 2}, "admitted, acked and leased once"
    assert r.zcard(K.queue) == 2 and r.zcard(K.leases) == 1


def test_a_pop_sent_again_answers_the_leases_it_gave(r):
    f = Frontier(r, K, node_id="node-a", queue=FifoQueue)
    f.admit([(fp(i), 0, payload(i)) for i in range(4)])
    keys, args = f.base._pop_keys, f.base._pop_args(2)
    lost = f.scripts.pop(keys=keys, args=args)  # ran; its reply never reached the node
    f.base._uncertain_pop = (keys, args)
    leased = f.pop(2)
    assert [x.id for x in leased] == [x.decode() for x in lost[:-1][0::3]], "the same leases"
    assert stats(r)["leased"] == 2 and r.zcard(K.queue) == 2
    assert [x.payload for x in f.pop(2)] == [payload(2), payload(3)], "then a pop of its own"


def test_a_full_redis_refuses_the_whole_call_and_leases_nothing(fresh_redis):
    """Over maxmemory (noeviction) the call is refused at its first write (the admission's):
    today's pipelined pop went through and its leases had to be given back."""
    client = redis.Redis.from_url(fresh_redis.url)
    client.config_set("maxmemory-policy", "noeviction")
    f = Frontier(client, K, node_id="node-a", queue=FifoQueue, lease_timeout=30)
    f.admit([(fp(i), 0, b"x" * 100) for i in range(10)])
    (parent,) = f.pop(1)
    client.set("filler", "1" * 2_000_000)
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) // 2)
    before = snapshot(client)
    with pytest.raises(redis.ResponseError, match="maxmemory"):
        f.admit_and_pop([(fp("new"), 0, b"new")], [parent.id], 5)
    assert snapshot(client) == before, "nothing leased, admitted or acked"
    # the next call (Redis has room again) sends the refused admission again, then pops
    client.config_set("maxmemory", 0)
    result, leased = f.admit_and_pop([(fp("new"), 0, b"new")], [parent.id], 5)
    assert (result.flags, result.acked, result.stale) == ("1", 1, 0)
    assert len(leased) == 5 and stats(client) == {"enqueued": 11, "acked": 1, "leased": 6}
    client.close()


def test_a_run_limit_counts_the_acks_of_the_same_call_and_a_stopped_run_leases_nothing(r):
    keys = CrawlKeys("fused-limited")
    joined = runs.join(r, keys, node_id="n1", ttl_ms=10_000)
    f = Frontier(r, keys, node_id="n1", epoch=joined.epoch, queue=FifoQueue)
    control.apply(r, keys, joined.run, Limits(pages=4), by="n1")
    f.admit([(fp(i), 0, payload(i)) for i in range(10)])
    first = f.pop(3)
    _, more = f.admit_and_pop([(fp("a"), 0, payload("a"))], [x.id for x in first], 10)
    assert len(more) == 1, "4 pages: 3 done in this very call, room for 1"
    control.stop(r, keys, by="test")
    result, none = f.admit_and_pop([(fp("b"), 0, payload("b"))], [x.id for x in more], 10)
    assert none == [] and (result.flags, result.acked) == ("1", 1), "admitted and acked, nothing leased"


def test_an_old_epochs_call_is_refused_whole(r):
    r.set(K.epoch, "aaaa")
    f = Frontier(r, K, node_id="node-a", epoch="aaaa")
    f.admit([(fp(1), 0.0, payload(1)), (fp(2), 0.0, payload(2))])
    (held,) = f.pop(1)
    r.set(K.epoch, "bbbb")
    before = snapshot(r)
    with pytest.raises(StaleEpoch):
        f.admit_and_pop([(fp(3), 0.0, payload(3))], [held.id], 5)
    assert snapshot(r) == before


def test_a_domain_pop_in_the_call_reports_its_events_and_next_ready_time(r):
    r.hset(K.dconf, "s:*", "60000 0")  # every domain waits a minute between requests
    f = Frontier(r, K, node_id="node-a", queue=DomainQueue)
    f.admit([(fp(1), 0, payload(1), "a.example"), (fp(2), 0, payload(2), "a.example")])
    (first,) = f.pop(5)
    assert first.report == "sr"
    result, leased = f.admit_and_pop([(fp(3), 0, payload(3), "b.example")], [], 5, events=[(first.id, "s")])
    assert result.flags == "1"
    assert [(x.payload, x.report) for x in leased] == [(payload(3), "sr")], "a.example waits on its delay"
    assert 0 < leased.next_ready_ms <= 60000


def _fresh(f: Frontier, n: int, salt: str) -> list[tuple[bytes, float, bytes]]:
    return [(f.dedup.argument(fp(f"{salt}{i}")), 0.0, payload(f"{salt}{i}")) for i in range(n)]


@pytest.mark.parametrize("store", ["bloom", "hash"])
def test_an_admission_told_to_call_again_admits_the_rest_and_then_pops(r, store):
    """A node that does not know the Bloom filter's layers or the compact store's
    generations another node grew: the call answers STALE having changed nothing and
    leased nothing; the Frontier admits the batch again, then pops."""

    def node(name: str) -> Frontier:
        dedup = BloomDedup(BloomSpec(50, 0.01)) if store == "bloom" else HashDedup(HashSpec(bits=1))
        return Frontier(r, K, node_id=name, dedup=dedup, queue=FifoQueue)

    a, b = node("a"), node("b")  # b bound before anything grew
    for i in range(0, 700, 100):
        a.admit(_fresh(a, 100, f"a{i}-"))
    (parent,) = b.pop(1)
    spy = AdmitSpy(b.scripts)
    b.scripts = spy
    enqueued = stats(r)["enqueued"]
    result, leased = b.admit_and_pop(_fresh(b, 3, "b") + _fresh(b, 1, "a0-"), [parent.id], 4)
    assert spy.replies[0][0][0] == b"STALE" and len(spy.replies[0]) == 1, "told to call again, nothing leased"
    assert (result.flags, result.acked, result.stale) == ("1110", 1, 0)
    assert len(leased) == 4 and stats(r)["enqueued"] == enqueued + 3 and stats(r)["acked"] == 1
    assert stats(r)["leased"] == 5, "the parent, and the pop after the batch was admitted"


def test_a_bloom_batch_that_needs_two_new_layers_is_finished_and_then_pops(r):
    """PARTIAL: the first call stores the requests its flags cover and no ack; the rest
    of the batch goes with the acks, then the pop."""
    f = Frontier(r, K, node_id="a", dedup=BloomDedup(BloomSpec(50, 0.01)), queue=FifoQueue)
    f.admit(_fresh(f, 1, "parent"))
    (parent,) = f.pop(1)
    spy = AdmitSpy(f.scripts)
    f.scripts = spy
    result, leased = f.admit_and_pop(_fresh(f, 400, "batch"), [parent.id], 10)
    assert spy.replies[0][0][0] == b"PARTIAL" and len(spy.replies[0]) == 1
    assert len(result.flags) == 400 and result.flags.count("1") >= 390 and result.acked == 1
    assert stats(r)["enqueued"] == 1 + result.flags.count("1") and stats(r)["acked"] == 1
    assert len(leased) == 10 and stats(r)["leased"] == 11
