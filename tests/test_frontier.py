"""The Lua scripts through crawlplug.frontier.Frontier, on a real Redis."""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import random
import time

import pytest
import redis
from redis.crc import key_slot

from crawlplug.crawl import Crawl
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import NAMES, CrawlKeys
from crawlplug.frontier.luatext import source
from crawlplug.queues import FifoQueue

K = CrawlKeys("crawl")


def fp(n: int | str) -> bytes:
    """A raw 20-byte fingerprint, like Scrapy's."""
    return hashlib.sha1(str(n).encode()).digest()


def redis_ms(r: redis.Redis) -> int:
    sec, usec = r.time()
    return sec * 1000 + usec // 1000


def queued_ids(r: redis.Redis) -> list[str]:
    return [x.decode() for x in r.zrange(K.queue, 0, -1)]


def stats(r: redis.Redis) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in r.hgetall(K.stats).items()}


@pytest.fixture
def frontier(r) -> Frontier:
    return Frontier(r, K, node_id="node-a")


# -- admission -------------------------------------------------------------------------


def test_admit_records_fingerprint_and_request_together(r, frontier):
    result = frontier.admit([(fp(1), 7.0, b"payload-1")])
    assert result.flags == "1" and result.admitted == 1 and result.filtered == 0
    assert r.sismember(K.seen, fp(1))
    (rid,) = queued_ids(r)
    assert r.hget(K.requests, rid) == b"payload-1"
    assert r.zscore(K.queue, rid) == 7.0
    assert stats(r)["enqueued"] == 1
    # the fingerprint is stored raw (20 bytes), not as hex
    assert r.smembers(K.seen) == {fp(1)}


def test_duplicate_fingerprint_is_filtered_and_stores_nothing(r, frontier):
    frontier.admit([(fp(1), 0, b"first")])
    before = (r.zcard(K.queue), r.hlen(K.requests), r.get(K.seq), r.scard(K.seen))
    result = frontier.admit([(fp(1), 0, b"second")])
    assert result.flags == "0" and result.filtered == 1 and result.admitted == 0
    assert (r.zcard(K.queue), r.hlen(K.requests), r.get(K.seq), r.scard(K.seen)) == before
    assert b"second" not in r.hvals(K.requests)
    assert stats(r) == {"enqueued": 1, "filtered": 1}


def test_duplicates_inside_one_batch(r, frontier):
    result = frontier.admit([(fp(1), 0, b"a"), (fp(2), 0, b"b"), (fp(1), 0, b"c"), (b"", 0, b"d"), (b"", 0, b"d")])
    assert result.flags == "11011"
    assert sorted(r.hvals(K.requests)) == [b"a", b"b", b"d", b"d"]
    assert r.scard(K.seen) == 2


def test_dedup_mode_none_admits_duplicates(r):
    f = Frontier(r, K, dedup="none", node_id="n")
    result = f.admit([(fp(1), 0, b"x"), (fp(1), 0, b"x")])
    assert result.flags == "11"
    assert f.admit([(fp(1), 0, b"x")]).flags == "1"
    assert len(f) == 3
    assert not r.exists(K.seen)


def test_every_key_shares_the_crawl_hash_tag(r, frontier):
    other = Frontier(r, K, node_id="node-b", lease_timeout=0.05, max_deliveries=2)
    keys: set[str] = set()

    def seen_keys() -> None:
        keys.update(k.decode() for k in r.scan_iter(match="*", count=1000))

    frontier.admit([(fp(i), 0, b"p%d" % i) for i in range(6)])
    leased = frontier.pop(2)
    seen_keys()
    frontier.heartbeat([x.id for x in leased], producing=True, metrics={"rps": 3})
    frontier.admit([], acks=[leased[0].id])
    frontier.release([leased[1].id], unstarted=False)
    seen_keys()
    victim = frontier.pop(1)[0]
    frontier.dead_letter(victim.id, "test")
    other.heartbeat([])
    other.pop(1)
    time.sleep(0.1)
    assert other.reap() == (1, 0)
    seen_keys()
    other.pop(1)
    time.sleep(0.1)
    assert other.reap() == (0, 1)
    frontier.idle_state()
    seen_keys()
    # every key the scripts wrote is a documented name (or a node's hash or last reply), and the
    # frontier's own keys were all exercised
    assert keys <= {K.key(name) for name in NAMES} | {K.node(n) for n in ("node-a", "node-b")} | {
        K.reply(n) for n in ("node-a", "node-b")
    }
    core = (
        "queue",
        "requests",
        "seq",
        "leases",
        "leased",
        "deliveries",
        "seen",
        "dead",
        "stats",
        "nodes",
        "producers",
        "series",
    )
    assert {K.key(name) for name in core} <= keys
    for key in keys:
        assert key.startswith("crawlplug:{crawl}:"), key
    assert {key_slot(k.encode()) for k in keys} == {key_slot(b"{crawl}")}


# -- leasing ---------------------------------------------------------------------------


def test_pop_leases_with_deadline_on_the_redis_clock(r):
    f = Frontier(r, K, node_id="node-a", lease_timeout=30)
    f.admit([(fp(1), 5, b"one"), (fp(2), 6, b"two"), (fp(3), 7, b"three")])
    before = redis_ms(r)
    popped = f.pop(2)
    after = redis_ms(r)
    assert [p.payload for p in popped] == [b"one", b"two"]
    assert [p.deliveries for p in popped] == [1, 1]
    assert len(f) == 1
    for p, score in zip(popped, (5, 6)):
        assert r.zscore(K.queue, p.id) is None
        deadline = r.zscore(K.leases, p.id)
        assert before + 30_000 <= deadline <= after + 30_000
        assert r.hget(K.leased, p.id) == f"node-a|{score}|1".encode()
        assert r.hget(K.requests, p.id) is not None, "a leased request keeps its payload"
    assert stats(r)["leased"] == 2


def test_pop_on_empty_queue(frontier):
    assert frontier.pop(5) == []


def test_admit_and_pop_in_one_round_trip(r, frontier):
    frontier.admit([(fp(1), 0, b"parent")])
    (parent,) = frontier.pop(1)
    result, popped = frontier.admit_and_pop([(fp(2), 0, b"child")], [parent.id], 4)
    assert result.flags == "1" and result.acked == 1
    assert [p.payload for p in popped] == [b"child"]
    assert r.hget(K.requests, parent.id) is None


def test_ack_removes_lease_and_payload(r, frontier):
    frontier.admit([(fp(1), 0, b"one"), (fp(2), 0, b"two")])
    a, b = frontier.pop(2)
    result = frontier.admit([], acks=[a.id])
    assert (result.acked, result.stale) == (1, 0)
    assert r.zscore(K.leases, a.id) is None
    assert r.hget(K.leased, a.id) is None
    assert r.hget(K.requests, a.id) is None
    assert r.zscore(K.leases, b.id) is not None, "other leases untouched"
    assert r.sismember(K.seen, fp(1)), "the fingerprint outlives the request"
    assert stats(r)["acked"] == 1
    again = frontier.admit([], acks=[a.id])
    assert (again.acked, again.stale) == (0, 1)


def test_ack_from_another_node_is_stale_and_changes_nothing(r, frontier):
    frontier.admit([(fp(1), 0, b"one")])
    (lease,) = frontier.pop(1)
    snapshot = {
        "leases": r.zrange(K.leases, 0, -1, withscores=True),
        "leased": r.hgetall(K.leased),
        "requests": r.hgetall(K.requests),
        "queue": r.zrange(K.queue, 0, -1),
    }
    intruder = Frontier(r, K, node_id="node-b")
    result = intruder.admit([], acks=[lease.id])
    assert (result.acked, result.stale) == (0, 1)
    assert snapshot == {
        "leases": r.zrange(K.leases, 0, -1, withscores=True),
        "leased": r.hgetall(K.leased),
        "requests": r.hgetall(K.requests),
        "queue": r.zrange(K.queue, 0, -1),
    }
    assert stats(r).get("stale_acks") == 1


def test_node_id_prefix_is_not_ownership(r):
    """node "n1" must not be able to ack a lease of node "n1x"."""
    owner = Frontier(r, K, node_id="n1x")
    owner.admit([(fp(1), 0, b"one")])
    (lease,) = owner.pop(1)
    assert Frontier(r, K, node_id="n1").admit([], acks=[lease.id]).stale == 1
    assert r.hget(K.leased, lease.id) is not None


def test_ack_of_a_request_reaped_back_into_the_queue_finishes_it(r):
    f = Frontier(r, K, node_id="slow", lease_timeout=0.05)
    f.admit([(fp(1), 0, b"one")])
    (lease,) = f.pop(1)
    time.sleep(0.1)
    assert f.reap() == (1, 0)
    assert queued_ids(r) == [lease.id]
    result = f.admit([], acks=[lease.id])
    assert (result.acked, result.stale) == (1, 0)
    assert len(f) == 0 and r.hget(K.requests, lease.id) is None


def test_late_ack_after_redelivery_to_another_node_is_stale(r):
    slow = Frontier(r, K, node_id="slow", lease_timeout=0.05)
    fast = Frontier(r, K, node_id="fast", lease_timeout=30)
    slow.admit([(fp(1), 0, b"one")])
    (lease,) = slow.pop(1)
    time.sleep(0.1)
    assert fast.reap() == (1, 0)
    (again,) = fast.pop(1)
    assert (again.id, again.deliveries) == (lease.id, 2)
    assert slow.heartbeat([lease.id]) == [lease.id], "the slow node learns it lost the lease"
    assert slow.admit([], acks=[lease.id]).stale == 1
    assert r.hget(K.leased, lease.id) == b"fast|0|2"
    assert r.hget(K.requests, lease.id) == b"one"
    assert fast.admit([], acks=[lease.id]).acked == 1


@pytest.mark.parametrize(("unstarted", "next_delivery"), [(True, 1), (False, 2)])
def test_release_puts_back_in_queue(r, unstarted, next_delivery):
    f = Frontier(r, K, node_id="node-a", queue=FifoQueue)
    f.admit([(fp(1), 3, b"one"), (fp(2), 3, b"two")])
    first, second = f.pop(2)
    assert f.release([first.id, second.id], unstarted=unstarted) == 2
    assert r.zcard(K.leases) == 0 and r.hlen(K.leased) == 0
    assert r.zscore(K.queue, first.id) == 3.0
    again = f.pop(2)
    assert [p.id for p in again] == [first.id, second.id], "released requests keep their place"
    assert [p.deliveries for p in again] == [next_delivery] * 2
    assert stats(r)["released"] == 2


def test_release_ignores_leases_of_other_nodes(r, frontier):
    frontier.admit([(fp(1), 0, b"one")])
    (lease,) = frontier.pop(1)
    assert Frontier(r, K, node_id="node-b").release([lease.id], unstarted=True) == 0
    assert frontier.release([], unstarted=True) == 0
    assert r.zscore(K.leases, lease.id) is not None and len(frontier) == 0


def test_heartbeat_renews_and_reports_lost_leases(r):
    f = Frontier(r, K, node_id="node-a", lease_timeout=10, heartbeat=1)
    f.admit([(fp(i), 0, b"p") for i in range(3)])
    mine = f.pop(2)
    other = Frontier(r, K, node_id="node-b", lease_timeout=10)
    (theirs,) = other.pop(1)
    old = {p.id: r.zscore(K.leases, p.id) for p in mine}
    time.sleep(0.05)
    before = redis_ms(r)
    lost = f.heartbeat([p.id for p in mine] + [theirs.id, "9999999999999999"], metrics={"rps": 4.5})
    assert lost == [theirs.id, "9999999999999999"]
    for p in mine:
        new = r.zscore(K.leases, p.id)
        assert new > old[p.id]
        assert new >= before + 10_000
    assert r.zscore(K.leases, theirs.id) is not None, "another node's lease is not renewed"
    assert r.zscore(K.leases, theirs.id) < min(r.zscore(K.leases, p.id) for p in mine)
    # declared dead after 3 missed heartbeats (1 s each), not after its leases' 10 s
    assert before + 3_000 <= r.zscore(K.nodes, "node-a") < before + 10_000
    assert r.hget(K.node("node-a"), "rps") == b"4.5"
    assert r.pttl(K.node("node-a")) > 0


def test_heartbeat_and_reap_in_one_round_trip(r):
    """The scheduler's heartbeat: renew this node's leases, then reap expired ones (another
    node's, never these), in one pipeline."""
    a = Frontier(r, K, node_id="node-a", lease_timeout=0.2, heartbeat=0.1)
    b = Frontier(r, K, node_id="node-b", lease_timeout=0.2, heartbeat=0.1)
    a.admit([(fp(i), 0, b"p") for i in range(4)])
    mine, theirs = a.pop(2), b.pop(2)
    time.sleep(0.3)  # every lease expired
    lost, reaped = a.heartbeat_and_reap([p.id for p in mine], metrics={"rps": 1})
    assert lost == [] and reaped == (2, 0), "its own leases renewed before the reap"
    assert r.zcard(K.queue) == 2 and {p.id for p in theirs} == set(x.decode() for x in r.zrange(K.queue, 0, -1))
    assert r.hget(K.node("node-a"), "rps") == b"1"
    Crawl.of(a).pause()
    beat = b.heartbeat_and_reap([p.id for p in theirs])
    assert beat[0] == [p.id for p in theirs] and beat.paused


def test_heartbeat_producing_flag(r, frontier):
    frontier.heartbeat([], producing=True)
    assert r.zscore(K.producers, "node-a") is not None
    assert frontier.idle_state()[2] == 1
    frontier.heartbeat([], producing=False)
    assert r.zscore(K.producers, "node-a") is None
    assert frontier.idle_state()[2] == 0


def test_a_producer_that_stopped_heartbeating_is_not_counted(r, frontier):
    # node_ttl = max(lease_timeout, 3 * heartbeat) = 0.1 s
    silent = Frontier(r, K, node_id="silent", lease_timeout=0.1, heartbeat=0.01)
    silent.heartbeat([], producing=True)
    frontier.heartbeat([], producing=True)
    assert frontier.idle_state() == (0, 0, 2)
    time.sleep(0.2)
    frontier.heartbeat([], producing=True)
    assert frontier.idle_state() == (0, 0, 1), "the silent producer's entry has expired"
    assert r.zscore(K.producers, "silent") is not None, "idle.lua is read-only: only reap removes it"
    frontier.reap()
    assert r.zscore(K.producers, "silent") is None and r.zscore(K.nodes, "silent") is None
    assert r.zscore(K.nodes, "node-a") is not None


# -- reaping and dead letters ----------------------------------------------------------------


def test_reap_requeues_expired_leases_with_score_and_deliveries(r):
    f = Frontier(r, K, node_id="dying", lease_timeout=0.2, max_deliveries=5)
    f.admit([(fp(1), -4, b"one"), (fp(2), 2, b"two")])
    popped = f.pop(2)
    assert f.reap() == (0, 0), "nothing expired yet"
    assert r.zcard(K.leases) == 2
    time.sleep(0.3)
    assert f.reap() == (2, 0)
    assert f.reap() == (0, 0), "reaping is idempotent"
    assert r.zcard(K.leases) == 0 and r.hlen(K.leased) == 0
    for p, score in zip(popped, (-4.0, 2.0)):
        assert r.zscore(K.queue, p.id) == score
        assert r.hget(K.deliveries, p.id) == b"1"
        assert r.hget(K.requests, p.id) == p.payload
    survivor = Frontier(r, K, node_id="survivor")
    again = survivor.pop(2)
    assert [(p.id, p.deliveries) for p in again] == [(p.id, 2) for p in popped]
    assert stats(r)["reaped"] == 2


def test_reap_dead_letters_after_max_deliveries(r):
    f = Frontier(r, K, node_id="crashy", lease_timeout=0.2, max_deliveries=2)
    f.admit([(fp(1), 1, b"poison"), (fp(2), 1, b"fine")])
    first = f.pop(1)[0]
    assert first.payload == b"poison"
    time.sleep(0.3)
    assert f.reap() == (1, 0)
    second = f.pop(1)[0]
    assert (second.id, second.deliveries) == (first.id, 2)
    time.sleep(0.3)
    assert f.reap() == (0, 1)
    (letter,) = Crawl.of(f).dead_letters()
    assert letter.payload == b"poison"
    assert letter.header["id"] == first.id
    assert letter.header["deliveries"] == 2
    assert letter.header["node"] == "crashy"
    assert "2" in letter.header["reason"]
    assert r.hget(K.requests, first.id) is None
    assert r.hget(K.deliveries, first.id) is None
    assert r.zscore(K.queue, first.id) is None and r.zscore(K.leases, first.id) is None
    assert [p.payload for p in f.pop(5)] == [b"fine"], "other requests unaffected"
    assert Crawl.of(f).status()["dead"] == 1 and stats(r)["dead"] == 1


def test_dead_letter_moves_a_leased_request(r, frontier):
    frontier.admit([(fp(1), 0, b"undecodable")])
    (lease,) = frontier.pop(1)
    assert not Frontier(r, K, node_id="node-b").dead_letter(lease.id, "not mine")
    assert r.llen(K.dead) == 0 and r.zscore(K.leases, lease.id) is not None
    assert frontier.dead_letter(lease.id, "DecodeError: bad", error="boom")
    (letter,) = Crawl.of(frontier).dead_letters()
    assert letter.payload == b"undecodable"
    assert letter.header["reason"] == "DecodeError: bad"
    assert letter.header["error"] == "boom"
    assert letter.header["id"] == lease.id and letter.header["node"] == "node-a"
    assert r.zscore(K.leases, lease.id) is None
    assert r.hget(K.leased, lease.id) is None
    assert r.hget(K.requests, lease.id) is None
    assert not frontier.dead_letter(lease.id, "twice"), "a second move finds nothing"
    assert r.llen(K.dead) == 1


def test_unparseable_dead_letter_is_still_listed(r, frontier):
    r.rpush(K.dead, b"\xff\xfe not json")
    (letter,) = Crawl.of(frontier).dead_letters()
    assert letter.header["reason"] == "unparseable dead letter"
    assert letter.payload == b"\xff\xfe not json"


# -- views -------------------------------------------------------------------------


def test_idle_state_counts(r, frontier):
    assert frontier.idle_state() == (0, 0, 0)
    frontier.admit([(fp(i), 0, b"p") for i in range(3)])
    frontier.pop(1)
    frontier.heartbeat([], producing=True)
    assert frontier.idle_state() == (2, 1, 1)
    frontier.pop(5)
    frontier.heartbeat([], producing=False)
    assert frontier.idle_state() == (0, 3, 0)


def test_status(r, frontier):
    frontier.admit([(fp(i), 0, b"p") for i in range(4)] + [(fp(0), 0, b"dup")])
    a, b = frontier.pop(2)
    frontier.admit([], acks=[a.id])
    frontier.dead_letter(b.id, "x")
    frontier.heartbeat([])
    st = Crawl.of(frontier).status()
    assert st["queued"] == 2
    assert st["in_flight"] == 0
    assert st["seen"] == 4
    assert st["dead"] == 1
    assert st["stats"] == {"enqueued": 4, "filtered": 1, "leased": 2, "acked": 1, "dead": 1}
    assert list(st["nodes"]) == ["node-a"] and st["nodes"]["node-a"] > redis_ms(r)


def _populate(frontier: Frontier) -> None:
    frontier.admit([(fp(i), 0, b"p") for i in range(3)])
    lease = frontier.pop(1)[0]
    frontier.dead_letter(lease.id, "x")
    frontier.pop(1)
    frontier.heartbeat([], producing=True, metrics={"m": 1})


def test_purge_deletes_this_crawl_only(r):
    mine = Frontier(r, K, node_id="a")
    other_keys = CrawlKeys("crawl2")
    other = Frontier(r, other_keys, node_id="b")
    _populate(mine)
    _populate(other)
    r.set("unrelated", 1)
    theirs_before = {k: r.type(k) for k in r.scan_iter(match=other_keys.pattern())}
    mine_before = list(r.scan_iter(match=K.pattern()))
    assert len(mine_before) >= 10
    assert mine.purge() == len(mine_before)
    assert list(r.scan_iter(match=K.pattern())) == []
    assert {k: r.type(k) for k in r.scan_iter(match=other_keys.pattern())} == theirs_before
    assert r.get("unrelated") == b"1"
    assert len(other) == 1 and Crawl.of(other).status()["dead"] == 1
    assert mine.purge() == 0


@pytest.mark.parametrize("name", ["sh*", "s?op", "[s]hop", "a b", "x\\y"])
def test_crawl_names_with_glob_characters_are_refused(name):
    # a glob character in the tag would make purge()'s SCAN match other crawls' keys
    with pytest.raises(ValueError, match="glob"):
        CrawlKeys(name)


def test_all_names_are_known_to_purge(r):
    """Every key name a script writes is in keys.NAMES (what purge deletes), or a node's own."""
    f = Frontier(r, K, node_id="a", lease_timeout=0.05, max_deliveries=1)
    _populate(f)
    time.sleep(0.1)
    f.reap()
    names = {k.decode().split("}:", 1)[1] for k in r.scan_iter(match=K.pattern())}
    assert names - {"node:a", "reply:a"} <= set(NAMES)


# -- concurrency -----------------------------------------------------------------------


def _admit_worker(url: str, worker: int, barrier, out) -> None:
    client = redis.Redis.from_url(url)
    f = Frontier(client, K, node_id=f"w{worker}")
    order = list(range(0, 2000, 100))
    random.Random(worker).shuffle(order)  # each worker interleaves differently
    barrier.wait()
    admitted = filtered = 0
    for start in order:
        res = f.admit([(fp(i), 0, f"{i}:{worker}".encode()) for i in range(start, start + 100)])
        admitted += res.admitted
        filtered += res.filtered
    out.put((admitted, filtered))
    client.close()


@pytest.mark.integration  # starts processes of its own
def test_concurrent_admission_is_atomic(r, redis_url):
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_admit_worker, args=(redis_url, w, barrier, out)) for w in range(4)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert sum(a for a, _ in results) == 2000
    assert sum(f for _, f in results) == 6000
    assert r.zcard(K.queue) == 2000
    assert r.hlen(K.requests) == 2000
    assert r.scard(K.seen) == 2000
    # every fingerprint was stored exactly once, by exactly one worker
    payloads = [v.decode().split(":") for v in r.hvals(K.requests)]
    assert sorted(int(i) for i, _ in payloads) == list(range(2000))
    assert stats(r) == {"enqueued": 2000, "filtered": 6000}


def test_a_request_admitted_after_a_failover_never_gets_the_id_of_a_held_lease(r, frontier):
    """A failover that loses writes rolls seq back. Ids never go below Redis's clock in ms
    times 1000 (leases.lua's id_floor), so a request admitted afterwards gets a new id,
    above the old ones (FIFO order kept), never the id of a lease a node still holds; and
    acking that old lease touches nothing else."""
    frontier.admit([(fp("old"), 0, b"old")])
    [held] = frontier.pop(1)
    # what the new primary looks like: the lease and the old request are gone, seq is back
    r.delete(K.leases, K.leased, K.requests, K.deliveries)
    r.set(K.seq, int(held.id) - 1)
    frontier.admit([(fp("new"), 0, b"new")])
    [new_id] = [x.decode() for x in r.hkeys(K.requests)]
    assert new_id > held.id and len(new_id) == len(held.id), (new_id, held.id)
    result = frontier.admit([], acks=[held.id])
    assert (result.acked, result.stale) == (0, 1)
    assert r.hget(K.requests, new_id) == b"new" and r.zscore(K.queue, new_id) is not None


def test_leases_are_renewed_on_a_full_redis_and_admissions_refused_whole(fresh_redis):
    """Over maxmemory (noeviction) the heartbeat still renews every lease (allow-oom on
    Redis 7, a first write that frees memory before it); an admission is refused whole."""
    client = redis.Redis.from_url(fresh_redis.url)
    client.config_set("maxmemory-policy", "noeviction")
    f = Frontier(client, K, node_id="node-a", lease_timeout=2)
    f.admit([(fp(i), 0, b"x" * 100) for i in range(10)])
    held = f.pop(10)
    client.set("filler", "1" * 2_000_000)
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) // 2)
    before = dict(client.zrange(K.leases, 0, -1, withscores=True))
    time.sleep(0.05)
    assert f.heartbeat([x.id for x in held]) == []
    after = dict(client.zrange(K.leases, 0, -1, withscores=True))
    assert set(after) == set(before) and all(after[i] > before[i] for i in before), "every lease renewed"
    seen = client.scard(K.seen)
    with pytest.raises(redis.ResponseError, match="maxmemory"):
        f.admit([(fp("new"), 0, b"new")])
    assert client.scard(K.seen) == seen and client.hlen(K.requests) == 10, "nothing half-written"
    client.close()


@pytest.mark.parametrize("how", ["alone", "pipelined"])
def test_a_full_redis_that_lost_the_library_still_renews_leases_by_the_scripts(fresh_redis, caplog, how):
    """Redis 7 refuses FUNCTION LOAD over maxmemory (SCRIPT LOAD it lets through): a node
    whose server lost the library (FUNCTION FLUSH, a restore of a snapshot taken before it
    was loaded) and is full runs its calls by EVALSHA, so the heartbeat (one call alone, or
    pipelined with the reap and the history sample) still renews every lease; said once."""
    client = redis.Redis.from_url(fresh_redis.url)
    f = Frontier(client, K, node_id="node-a", lease_timeout=2)
    if f.scripts.functions is None:
        pytest.skip("Redis Functions need Redis 7 (this server is older)")
    client.config_set("maxmemory-policy", "noeviction")
    f.admit([(fp(i), 0, b"x" * 100) for i in range(10)])
    held = [x.id for x in f.pop(10)]
    client.function_flush()
    client.set("filler", "1" * 2_000_000)
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) // 2)
    before = dict(client.zrange(K.leases, 0, -1, withscores=True))
    time.sleep(0.05)
    with caplog.at_level(logging.WARNING, logger="crawlplug.frontier.scripts"):
        for _ in range(2):
            if how == "alone":
                assert f.heartbeat(held) == []
            else:
                assert f.heartbeat_and_reap(held).lost == []
    after = dict(client.zrange(K.leases, 0, -1, withscores=True))
    assert set(after) == set(before) and all(after[i] > before[i] for i in before), "every lease renewed"
    told = [x.getMessage() for x in caplog.records if "could not load crawlplug's Functions library" in x.getMessage()]
    assert len(told) == 1 and "maxmemory" in told[0], told
    assert f.scripts.functions is None and client.function_list() == [], "no library loaded, none half-made"
    with pytest.raises(redis.ResponseError, match="maxmemory"):  # the admission's own refusal
        f.admit([(fp("new"), 0, b"new")])
    client.config_set("maxmemory", 0)
    g = Frontier(client, K, node_id="node-b")  # a node made later tries the library again
    assert g.admit([(fp("new"), 0, b"new")]).admitted == 1 and g.scripts.functions is not None
    assert [lib[b"library_name"] for lib in map(_pairs, client.function_list())] == [g.scripts.functions.name.encode()]
    client.close()


def _pairs(flat: list[object]) -> dict[object, object]:
    return dict(zip(flat[::2], flat[1::2]))


def test_a_corrupt_key_refuses_the_whole_call_and_names_the_key(r, frontier):
    from crawlplug.errors import CorruptKey

    frontier.admit([(fp(1), 0, b"one")])
    r.set(K.seq, "12abc")  # a non-integer counter: INCR would fail after the fingerprint
    with pytest.raises(CorruptKey, match="seq holds .*not an integer.*repair or delete") as refused:
        frontier.admit([(fp(2), 0, b"two")])
    assert refused.value.key == K.seq
    assert not r.sismember(K.seen, fp(2)), "no fingerprint recorded without its request"
    r.delete(K.seq)  # the documented repair: new ids skip those still in use
    assert frontier.admit([(fp(2), 0, b"two")]).admitted == 1
    assert sorted(r.hvals(K.requests)) == [b"one", b"two"], "the new request overwrote nothing"


def test_an_admission_pipelined_with_a_pop_runs_once_when_the_server_lost_the_pop_script(r, frontier):
    """A server that holds some scripts and not others (restarted, SCRIPT FLUSH, another
    client loading one again): the pipelined admission ran, the pop met NOSCRIPT. Sending
    both again ran the admission twice: its request reported a duplicate of itself, its
    acks stale (found by the model test after an empty restart)."""
    frontier.admit([(fp("parent"), 0, b"parent")])
    (parent,) = frontier.pop(1)
    r.script_flush()
    r.script_load(source("admit"))  # the admission's script only
    result, leased = frontier.admit_and_pop([(fp("child"), 0, b"child")], [parent.id], 1)
    assert (result.flags, result.acked, result.stale) == ("1", 1, 0)
    assert [x.payload for x in leased] == [b"child"]
    assert stats(r)["enqueued"] == 2 and "filtered" not in stats(r) and "stale_acks" not in stats(r)


def test_reap_with_start_urls_of_the_wrong_type_reaps_and_writes_its_series(r):
    """start_urls holding a set (scrapy-redis's REDIS_START_URLS_AS_SET habit): reap.lua
    counted its entries with LLEN after reaping, failing half-way at every heartbeat."""
    f = Frontier(r, K, node_id="node-a", lease_timeout=0.05)
    f.admit([(fp(1), 0, b"one")])
    f.pop(1)
    r.sadd(K.start_urls, "http://example.com/")
    time.sleep(0.1)
    assert f.reap() == (1, 0)
    assert queued_ids(r) and any(k.startswith(b"r:") for k in r.hkeys(K.series)), "reaped, series sampled"


def test_statistics_of_the_wrong_type_are_started_again_refusing_nothing(r, frontier):
    """The per-10 s series, the graveyard and a node's metrics hold nothing a request needs:
    of the wrong type (written by hand) they used to refuse every admission, heartbeat or
    reap, stopping the crawl for a number on a dashboard."""
    node_key = K.node("node-a")
    r.set(K.series, "junk")
    r.rpush(node_key, "junk")
    r.set(K.graveyard, "junk")
    assert frontier.admit([(fp(1), 0, b"one")]).admitted == 1
    (leased,) = frontier.pop(1)
    assert frontier.heartbeat([leased.id]) == []
    assert frontier.reap() == (0, 0)
    assert frontier.admit([], acks=[leased.id]).acked == 1
    for key in (K.series, node_key):
        assert r.type(key) == b"hash", key
    assert r.type(K.graveyard) in (b"hash", b"none")
