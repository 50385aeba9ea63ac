"""RedisBloomDupeFilter and ExpiringDupeFilter on a real Redis.

Bloom: sizing against pybloom-live, the Lua bit positions against
crawlplug.frontier.bloom.positions, exact chunk allocation, no false negatives
(hypothesis), scaling (layer counts never above capacity), a node that does
not know the grown layers (STALE), concurrent admission from several
processes, bad configuration, introspection, and a real two-node crawl.
Expiring: forgetting after the TTL, per-request TTL, cleanup by the admission
script, bad configuration, and a real re-crawl.

False-positive rates are measured on a snapshot of the filter's bits (one GET
per chunk) with ``crawlplug.frontier.bloom.positions``, which
``test_lua_bit_positions_equal_python_positions_and_chunks_are_exact`` proves
identical to what the script does. Querying through the admission script
instead would *add* every fresh fingerprint, so the filter measured would keep
changing (and scaling) under the measurement; the snapshot answers exactly
what admission would answer for each fresh fingerprint, on a fixed state.
"""

from __future__ import annotations

import math
import multiprocessing
import random
import time
from collections.abc import Callable
from typing import Any

import pybloom_live
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scrapy import Request
from scrapy.utils.test import get_crawler

from crawlplug.dupefilters import (
    TTL_META,
    ExpiringDupeFilter,
    RedisBloomDupeFilter,
    bloom_info,
)
from crawlplug.errors import ConfigError
from crawlplug.frontier.bloom import (
    CHUNK_BITS,
    RATIO,
    SCALE,
    BloomSpec,
    Layer,
    positions,
    slices_and_bits,
)
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.dedup import BloomDedup, TtlDedup
from crawlplug.frontier.keys import CrawlKeys

from .support.fuzz import examples
from .support.nodes import start_joined
from .support.scriptspy import AdmitSpy

K = CrawlKeys("bloomy")
BLOOM = "crawlplug.dupefilters.RedisBloomDupeFilter"
EXPIRING = "crawlplug.dupefilters.ExpiringDupeFilter"
FAST = {"CRAWLPLUG_IDLE_CLOSE": 1, "CRAWLPLUG_HEARTBEAT": 0.5, "CRAWLPLUG_LEASE_TIMEOUT": 5}


# -- helpers ---------------------------------------------------------------------
def fingerprints(n: int, seed: int) -> list[bytes]:
    """``n`` distinct random 20-byte fingerprints (like Scrapy's SHA-1 digests)."""
    rng = random.Random(seed)
    # dict, not set: insertion order, so the same seed gives the same list in every process
    out = list(dict.fromkeys(rng.randbytes(20) for _ in range(n + 10)))[:n]
    rng.shuffle(out)
    assert len(out) == n
    return out


def bloom_frontier(r: redis.Redis, spec: BloomSpec, keys: CrawlKeys = K, node: str = "n1") -> Frontier:
    return Frontier(r, keys, dedup=BloomDedup(spec), node_id=node)


def admit(frontier: Frontier, fps: list[bytes], batch: int, payload: Callable[[bytes], bytes] | None = None) -> str:
    """Admit ``fps`` in batches of ``batch`` (dedup only unless ``payload``); the flags, in order."""
    flags = []
    for i in range(0, len(fps), batch):
        items = [(frontier.dedup.argument(fp), 0.0, payload(fp) if payload else b"") for fp in fps[i : i + batch]]
        flags.append(frontier.admit(items).flags)
    return "".join(flags)


def chunk_key(keys: CrawlKeys, layer: Layer, chunk: int) -> str:
    return keys.key(f"bloom:{layer.index + 1}:{chunk}")


def layer_counts(frontier: Frontier, spec: BloomSpec) -> list[tuple[int, int]]:
    """(capacity, added) of every layer, from the introspection API."""
    return [(x["capacity"], x["added"]) for x in bloom_info(frontier, spec)["layers"]]


class Snapshot:
    """The filter's bits read once, for read-only membership checks and fill ratios."""

    def __init__(self, r: redis.Redis, keys: CrawlKeys, spec: BloomSpec, frontier: Frontier) -> None:
        self.layers = spec.layers(len(bloom_info(frontier, spec)["layers"]))
        self.data: list[tuple[Layer, int, int]] = []
        for layer in self.layers:
            raw = b"".join(r.get(chunk_key(keys, layer, c)) or b"" for c in range(layer.chunks))
            assert len(raw) == -(-layer.bits // 8)
            self.data.append((layer, int.from_bytes(raw, "big"), len(raw) * 8))

    @staticmethod
    def _bit(big: int, total: int, pos: int) -> int:
        return (big >> (total - 1 - pos)) & 1  # Redis bit order: bit 0 is the first byte's high bit

    def contains(self, fp: bytes) -> bool:
        for layer, big, total in reversed(self.data):
            if all(self._bit(big, total, pos) for pos in positions(layer, fp)):
                return True
        return False

    def set_bits(self, layer_index: int) -> set[int]:
        layer, big, total = self.data[layer_index]
        return {pos for pos in range(layer.bits) if self._bit(big, total, pos)}

    def theory(self) -> float:
        """False-positive rate of this exact state: per layer, the product of its slices' fill ratios."""
        miss = 1.0
        for layer, big, total in self.data:
            m = layer.bits_per_slice
            p = 1.0
            for j in range(layer.slices):
                bits = (big >> (total - (j + 1) * m)) & ((1 << m) - 1)
                p *= bits.bit_count() / m
            miss *= 1 - p
        return 1 - miss

    def fp_rate(self, fresh: list[bytes]) -> float:
        return sum(self.contains(fp) for fp in fresh) / len(fresh)


# -- (a) sizing ------------------------------------------------------------------
@pytest.mark.parametrize("capacity", [1, 2, 7, 50, 100, 999, 12_345, 100_000])
@pytest.mark.parametrize("error_rate", [0.5, 0.1, 0.05, 0.01, 0.001, 0.0005, 1e-4, 1e-6])
def test_slices_and_bits_equal_pybloom_live(capacity, error_rate):
    reference = pybloom_live.BloomFilter(capacity, error_rate)
    assert slices_and_bits(capacity, error_rate) == (reference.num_slices, reference.bits_per_slice)


@pytest.mark.parametrize(("capacity", "error_rate"), [(1000, 0.001), (7, 0.1), (10_000_000, 1e-5)])
def test_layers_follow_scale_and_ratio_and_their_errors_sum_below_the_rate(capacity, error_rate):
    spec = BloomSpec(capacity, error_rate)
    layers = spec.layers(30)
    for i, layer in enumerate(layers):
        assert layer.index == i
        assert layer.capacity == capacity * SCALE**i
        assert layer.error_rate == pytest.approx(error_rate * (1 - RATIO) * RATIO**i, rel=1e-12)
        k, m = slices_and_bits(layer.capacity, layer.error_rate)
        assert layer.slices == k
        assert layer.bits_per_slice >= m  # pybloom-live's size (or more)
        assert layer.bits == layer.slices * layer.bits_per_slice
        if layer.chunks < 100:
            assert sum(layer.chunk_bytes(c) for c in range(layer.chunks)) == -(-layer.bits // 8)
    # the compound rate: nominal, and the real rate of each layer holding its capacity. pybloom-live's
    # formula is a little optimistic: it rounds k up but sizes m as for the optimal k (+0.6 % at
    # p = 5e-6), and uses exp(-n/m) for (1 - 1/m)^n (a few % for m = 9 bits per slice, capacity 7).
    assert sum(layer.error_rate for layer in layers) <= error_rate
    at_capacity = [(1 - (1 - 1 / x.bits_per_slice) ** x.capacity) ** x.slices for x in layers]
    compound = 1 - math.prod(1 - p for p in at_capacity)
    assert compound <= error_rate * (1.1 if capacity < 100 else 1.01)
    # every node computes the same chain
    assert BloomSpec(capacity, error_rate).layers(5) == spec.layers(5)


# -- (b) bit positions and chunks -----------------------------------------------
def test_lua_bit_positions_equal_python_positions_and_chunks_are_exact(r):
    spec = BloomSpec(200, 0.01, chunk_bits=1024)
    frontier = bloom_frontier(r, spec)
    fps = fingerprints(500, seed=1)
    flags = admit(frontier, fps, batch=64)
    admitted = [fp for fp, flag in zip(fps, flags) if flag == "1"]
    assert len(admitted) >= 495  # a few false positives at most
    counts = layer_counts(frontier, spec)
    assert len(counts) == 2 and counts[0] == (200, 200)
    per_layer = [admitted[:200], admitted[200:]]
    snap = Snapshot(r, K, spec, frontier)
    for layer, fps_in in zip(spec.layers(2), per_layer):
        assert layer.chunks >= 3, "the test needs layers spread over several chunks"
        for chunk in range(layer.chunks):
            assert r.strlen(chunk_key(K, layer, chunk)) == layer.chunk_bytes(chunk), "exact allocation"
        expected = {pos for fp in fps_in for pos in positions(layer, fp)}
        assert snap.set_bits(layer.index) == expected, "the script sets exactly the Python positions"
        for fp in fps_in[:25]:  # and the same bits read one by one with GETBIT
            for pos in positions(layer, fp):
                chunk, offset = divmod(pos, layer.chunk_bits)
                assert r.getbit(chunk_key(K, layer, chunk), offset) == 1
    # the spare third layer is only created when needed
    third = spec.layer(2)
    assert r.exists(*[chunk_key(K, third, c) for c in range(third.chunks)]) == 0


def test_positions_are_one_per_slice_and_spread_evenly():
    layer = BloomSpec(1000, 0.001).layer(0)
    m = layer.bits_per_slice
    hits = [0] * layer.bits
    for fp in fingerprints(20_000, seed=2):
        pos = positions(layer, fp)
        assert [p // m for p in pos] == list(range(layer.slices))
        for p in pos:
            hits[p] += 1
    # 20,000 positions per slice over m bits: each bit ~ Poisson(20000/m); a chi-square-like check per slice
    mean = 20_000 / m
    for j in range(layer.slices):
        counts = hits[j * m : (j + 1) * m]
        chi2 = sum((c - mean) ** 2 / mean for c in counts)
        assert abs(chi2 - m) < 6 * math.sqrt(2 * m), (j, chi2, m)


# -- (c) no false negatives, ever -------------------------------------------------
@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_false_negatives_across_batches_and_layer_growth(r, data):
    r.flushdb()
    capacity = data.draw(st.integers(1, 20), label="capacity")  # small: most examples grow layers
    error_rate = data.draw(st.sampled_from([0.3, 0.05, 0.001, 1e-6]), label="error_rate")
    chunk_bits = data.draw(st.sampled_from([64, 1024, CHUNK_BITS]), label="chunk_bits")
    spec = BloomSpec(capacity, error_rate, chunk_bits=chunk_bits)
    pool = data.draw(st.lists(st.binary(min_size=20, max_size=20), min_size=1, max_size=120, unique=True))
    sequence = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=400), label="sequence")
    frontier = bloom_frontier(r, spec)
    admitted: set[bytes] = set()
    i = 0
    while i < len(sequence):
        size = data.draw(st.integers(1, 150), label="batch")
        batch = sequence[i : i + size]
        flags = admit(frontier, batch, batch=len(batch))
        assert len(flags) == len(batch)
        for fp, flag in zip(batch, flags):
            if fp in admitted:
                assert flag == "0", "a fingerprint admitted before was admitted again"
            if flag == "1":
                admitted.add(fp)
        i += size
    # re-admitting everything that was admitted, in another random order and batching
    again = data.draw(st.permutations(sorted(admitted)), label="order")
    assert admit(frontier, again, batch=data.draw(st.integers(1, 200), label="batch2")) == "0" * len(again)
    # a fresh frontier (another node, knowing no layer) answers the same
    assert admit(bloom_frontier(r, spec, node="n2"), again, batch=37) == "0" * len(again)
    for cap, added in layer_counts(frontier, spec):
        assert added <= cap


# -- (d) scaling ------------------------------------------------------------------
def test_scaling_layers_never_hold_more_than_their_capacity(r):
    p = 0.01
    spec = BloomSpec(100, p)
    frontier = bloom_frontier(r, spec)
    fps = fingerprints(2000, seed=3)
    flags = admit(frontier, fps, batch=200)  # batches bigger than a layer: PARTIAL replies
    counts = layer_counts(frontier, spec)
    assert len(counts) >= 5, counts  # 100 + 200 + 400 + 800 < 2000
    for i, (cap, added) in enumerate(counts):
        assert cap == 100 * SCALE**i
        assert added <= cap
        if i < len(counts) - 1:
            assert added == cap, "a layer is only chained once the previous one is full"
    assert sum(added for _, added in counts) == flags.count("1")
    assert flags.count("0") <= 0.02 * len(fps)
    # the false-positive rate of the grown filter, over 20,000 fingerprints never added:
    # expected about p * (1/2 + 1/4 + 1/8 + 1/16) ~ 0.94 p (each full layer is at its own error rate,
    # the partly filled last layer adds little). 20,000 draws at ~0.01 give ~190 +- 14 hits, so 1.5 p
    # (300 hits) is > 7 standard deviations away: no flakiness, but a real excess would show.
    snap = Snapshot(r, K, spec, frontier)
    assert snap.theory() <= p
    rate = snap.fp_rate(fingerprints(20_000, seed=4))
    assert rate <= 1.5 * p, (rate, snap.theory())


def test_false_positive_rate_after_scaling_twice_at_a_larger_capacity(r):
    p = 0.01
    spec = BloomSpec(5000, p)
    frontier = bloom_frontier(r, spec)
    admit(frontier, fingerprints(20_000, seed=5), batch=2000)
    assert [cap for cap, _ in layer_counts(frontier, spec)] == [5000, 10_000, 20_000]  # scaled twice
    snap = Snapshot(r, K, spec, frontier)
    rate = snap.fp_rate(fingerprints(20_000, seed=6))
    # ~0.0075 expected (p/2 + p/4 + a little): ~150 hits of 20,000, 1.2 p = 240 is 7 sd away
    assert rate <= 1.2 * p, (rate, snap.theory())
    assert rate == pytest.approx(snap.theory(), rel=0.3)


def test_small_capacity_filter_keeps_its_false_positive_rate(r):
    p = 0.001
    spec = BloomSpec(500, p)
    frontier = bloom_frontier(r, spec)
    admit(frontier, fingerprints(5000, seed=7), batch=500)  # 4 layers: 500, 1000, 2000, 4000
    snap = Snapshot(r, K, spec, frontier)
    fresh = fingerprints(150_000, seed=8)
    rate = snap.fp_rate(fresh)
    # expected <= p: <= 150 hits; 1.2 p = 180 hits. Seeded, so deterministic. A composite
    # bits_per_slice measured 1.5-1.6 p on such small layers; with it prime, 0.8-1.0 p over six
    # seeds in a simulation (capacity 50 varies more, up to 1.2 p: too few bits to average out).
    assert rate <= 1.2 * p, f"measured {rate:.5f} = {rate / p:.2f} p; the bits' fill predicts {snap.theory():.5f}"


# -- (e) a node that does not know the grown layers ---------------------------------
def bloom_node(r: redis.Redis, node: str, **settings: Any) -> tuple[RedisBloomDupeFilter, Frontier]:
    crawler = get_crawler(
        settings_dict={"CRAWLPLUG_BLOOM_CAPACITY": 50, "CRAWLPLUG_BLOOM_ERROR_RATE": 0.01, **settings}
    )
    df = RedisBloomDupeFilter.from_crawler(crawler)
    frontier = Frontier(r, K, dedup=df.strategy, node_id=node)
    df.bind(frontier)
    return df, frontier


def test_a_node_unaware_of_grown_layers_still_dedups(r):
    df_a, a = bloom_node(r, "a")
    df_b, b = bloom_node(r, "b")  # bound while the filter had no layer: B knows none
    fps = fingerprints(700, seed=9)
    flags_a = admit(a, fps, batch=100)
    assert len(layer_counts(a, df_a.spec)) == 4  # 50 + 100 + 200 + 400 >= 700 - false positives
    seen_by_a = [fp for fp, f in zip(fps, flags_a) if f == "1"]
    spy = AdmitSpy(b.scripts)
    b.scripts = spy
    filtered_before = int(r.hget(K.stats, "filtered") or 0)
    assert admit(b, seen_by_a, batch=len(seen_by_a)) == "0" * len(seen_by_a)
    assert spy.replies[0][0] == b"STALE", "B's first call must be refused, changing nothing"
    # the refused call counted nothing: each fingerprint was counted as filtered exactly once
    assert int(r.hget(K.stats, "filtered")) - filtered_before == len(seen_by_a)
    # B now knows the layers: new fingerprints go to A's current layer, not a new chain
    new = fingerprints(300, seed=10)
    flags_b = admit(b, new, batch=300)
    assert flags_b.count("1") >= 290
    counts = layer_counts(b, df_b.spec)
    assert all(added <= cap for cap, added in counts)
    assert [cap for cap, _ in counts][:4] == [50, 100, 200, 400]
    # and A, stale in its turn, sees what B added
    assert admit(a, [fp for fp, f in zip(new, flags_b) if f == "1"], batch=500) == "0" * flags_b.count("1")


# -- (f) concurrent admission from several processes ----------------------------------
def _admit_worker(url: str, fps: list[bytes], seed: int, capacity: int, p: float, barrier: Any, out: Any) -> None:
    client = redis.Redis.from_url(url)
    frontier = Frontier(client, K, dedup=BloomDedup(BloomSpec(capacity, p)), node_id=f"w{seed}")
    rng = random.Random(seed)
    order = fps[:]
    rng.shuffle(order)
    barrier.wait()
    flags = []
    i = 0
    while i < len(order):
        size = rng.randint(20, 400)
        batch = order[i : i + size]
        flags.append(frontier.admit([(frontier.dedup.argument(fp), 0.0, fp) for fp in batch]).flags)
        i += size
    out.put((seed, [fp for fp, f in zip(order, "".join(flags)) if f == "1"], len("".join(flags))))
    client.close()


@pytest.mark.integration  # starts processes of its own
def test_concurrent_admission_from_four_processes_admits_each_fingerprint_at_most_once(r, redis_url):
    n, capacity, p = 5000, 1000, 0.001  # layers of 1000, 2000, 4000: growth races between processes
    fps = fingerprints(n, seed=11)
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_admit_worker, args=(redis_url, fps, s, capacity, p, barrier, out)) for s in range(4)]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(30)
        assert proc.exitcode == 0
    assert all(total == n for _, _, total in results), "every process got one flag per request"
    admitted = [fp for _, fps_in, _ in results for fp in fps_in]
    assert len(admitted) == len(set(admitted)), "a fingerprint was admitted by two processes"
    # none lost: every fingerprint was admitted once, but for false positives (expected ~3; 25 = 0.5 %)
    assert n - 25 <= len(admitted) <= n
    assert all(len(fps_in) > 0 for _, fps_in, _ in results)
    assert r.zcard(K.queue) == len(admitted) == r.hlen(K.requests)
    assert {r.hget(K.requests, x) for x in r.zrange(K.queue, 0, -1)} == set(admitted)
    spec = BloomSpec(capacity, p)
    counts = layer_counts(Frontier(r, K, dedup=BloomDedup(spec)), spec)
    assert [cap for cap, _ in counts] == [1000, 2000, 4000]
    assert all(added <= cap for cap, added in counts)
    assert sum(added for _, added in counts) == len(admitted)


# -- (g) bad configuration ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("capacity", "error_rate", "setting"),
    [
        (0, 0.001, "CRAWLPLUG_BLOOM_CAPACITY"),
        (-5, 0.001, "CRAWLPLUG_BLOOM_CAPACITY"),
        ("abc", 0.001, "CRAWLPLUG_BLOOM_CAPACITY"),
        (1000, 0, "CRAWLPLUG_BLOOM_ERROR_RATE"),
        (1000, 1, "CRAWLPLUG_BLOOM_ERROR_RATE"),
        (1000, 1.5, "CRAWLPLUG_BLOOM_ERROR_RATE"),
        (1000, -0.1, "CRAWLPLUG_BLOOM_ERROR_RATE"),
        (1000, float("nan"), "CRAWLPLUG_BLOOM_ERROR_RATE"),
    ],
)
def test_bad_bloom_config_is_a_config_error_naming_the_setting(capacity, error_rate, setting):
    with pytest.raises(ConfigError, match=setting):
        BloomSpec(capacity, error_rate)
    crawler = get_crawler(
        settings_dict={"CRAWLPLUG_BLOOM_CAPACITY": capacity, "CRAWLPLUG_BLOOM_ERROR_RATE": error_rate}
    )
    with pytest.raises(ConfigError, match=setting):
        RedisBloomDupeFilter.from_crawler(crawler)


@pytest.mark.parametrize("other", [{"CRAWLPLUG_BLOOM_CAPACITY": 2000}, {"CRAWLPLUG_BLOOM_ERROR_RATE": 0.0001}])
def test_nodes_sized_differently_refuse_to_share_a_filter(r, other):
    bloom_node(r, "a", CRAWLPLUG_BLOOM_CAPACITY=1000, CRAWLPLUG_BLOOM_ERROR_RATE=0.001)
    bloom_node(r, "b", CRAWLPLUG_BLOOM_CAPACITY=1000, CRAWLPLUG_BLOOM_ERROR_RATE=0.001)  # same sizing: fine
    settings = {"CRAWLPLUG_BLOOM_CAPACITY": 1000, "CRAWLPLUG_BLOOM_ERROR_RATE": 0.001, **other}
    df = RedisBloomDupeFilter.from_crawler(get_crawler(settings_dict=settings))
    with pytest.raises(ConfigError, match="CRAWLPLUG_BLOOM"):
        df.bind(Frontier(r, K, dedup=df.strategy, node_id="c"))


# -- (h) introspection -------------------------------------------------------------------
def test_info_reports_fill_count_rate_and_memory(r):
    df, frontier = bloom_node(r, "a", CRAWLPLUG_BLOOM_CAPACITY=10_000, CRAWLPLUG_BLOOM_ERROR_RATE=0.001)
    flags = admit(frontier, fingerprints(10_000, seed=12), batch=1000)
    added = flags.count("1")
    info = df.info()
    assert info["capacity"] == 10_000 and info["error_rate"] == 0.001
    assert info["added"] == added
    (layer,) = info["layers"]
    spec_layer = df.spec.layer(0)
    assert 0 < layer["fill_ratio"] < 1
    assert layer["estimated_count"] == pytest.approx(added, rel=0.05)
    assert info["estimated_count"] == pytest.approx(added, rel=0.05)
    m, k = spec_layer.bits_per_slice, spec_layer.slices
    theory = (1 - (1 - 1 / m) ** added) ** k
    assert layer["false_positive_rate"] == pytest.approx(theory, rel=0.15)
    assert info["false_positive_rate"] == pytest.approx(theory, rel=0.15)
    assert info["false_positive_rate"] <= 0.001
    assert info["memory_bytes"] >= spec_layer.bits // 8 > 0
    # and the filter's own estimate agrees with a measurement
    measured = Snapshot(r, K, df.spec, frontier).fp_rate(fingerprints(20_000, seed=13))
    assert measured <= 3 * info["false_positive_rate"] + 0.0005


# -- (j) ExpiringDupeFilter ----------------------------------------------------------------
def expiring_node(r: redis.Redis, ttl: Any = 1.0) -> tuple[ExpiringDupeFilter, Frontier]:
    df = ExpiringDupeFilter.from_crawler(get_crawler(settings_dict={"CRAWLPLUG_DEDUP_TTL": ttl}))
    frontier = Frontier(r, K, dedup=df.strategy, node_id="t")
    df.bind(frontier)
    return df, frontier


def test_ttl_dedup_forgets_after_the_ttl(r):
    frontier = Frontier(r, K, dedup=TtlDedup(1.0))
    fp = fingerprints(1, seed=14)[0]
    assert admit(frontier, [fp], 1) == "1"
    time.sleep(0.5)
    assert admit(frontier, [fp, fp], 2) == "00"  # alive: filtered (and a duplicate in one batch too)
    time.sleep(0.7)  # 1.2 s after admission
    assert admit(frontier, [fp, fp], 2) == "10"  # forgotten: admitted again, once


def test_per_request_ttl_expires_sooner_and_expired_entries_are_removed_by_the_next_admission(r):
    df, frontier = expiring_node(r, ttl=1.0)
    key = K.key("seen_ttl")
    short = Request("http://shop.test/news", meta={TTL_META: 0.3})
    long = Request("http://shop.test/archive")
    other = Request("http://shop.test/other")

    def run(*requests: Request) -> str:
        return frontier.admit([(df.argument(q), 0.0, b"x") for q in requests]).flags

    assert run(short, long) == "11"
    fp_short, fp_long = df.fingerprint(short), df.fingerprint(long)
    assert r.zscore(key, fp_long) - r.zscore(key, fp_short) == pytest.approx(700, abs=50)
    time.sleep(0.45)
    assert run(short, long) == "10", "the short TTL expired, the default one did not"
    time.sleep(1.2)  # both expired now, and still in the zset: nothing scans in the background
    assert r.zcard(key) == 2
    assert run(other) == "1"
    assert r.zscore(key, fp_short) is None and r.zscore(key, fp_long) is None
    assert r.zcard(key) == 1
    # request_seen uses the same script and the same TTLs
    assert df.request_seen(short) is False
    assert df.request_seen(short) is True


@pytest.mark.parametrize(
    "ttl",
    [
        0,
        -1,
        "0",
        "abc",
        "nan",
        "inf",
    ],
)
def test_bad_ttl_config_is_a_config_error(ttl):
    with pytest.raises(ConfigError, match="CRAWLPLUG_DEDUP_TTL"):
        ExpiringDupeFilter.from_crawler(get_crawler(settings_dict={"CRAWLPLUG_DEDUP_TTL": ttl}))


@pytest.mark.parametrize(
    "meta_ttl",
    [
        "abc",
        None,
        [],
        float("inf"),
        -5,
    ],
)
def test_bad_per_request_ttl_is_a_config_error(r, meta_ttl):
    df, _ = expiring_node(r)
    request = Request("http://shop.test/x", meta={TTL_META: meta_ttl})
    if meta_ttl is None:  # None means "the default"
        assert df.argument(request).startswith(b":")
        return
    with pytest.raises(ConfigError, match=TTL_META):
        df.argument(request)


# -- (i), (k) real crawls -------------------------------------------------------------------
def test_two_real_nodes_with_a_scaling_bloom_filter_fetch_every_page_once(crawl, make_shop, redis_url):
    shop = make_shop(items=600)  # 631 pages: the 500-URL first layer fills and a second one is chained
    settings = {
        "REDIS_URL": redis_url,
        "DUPEFILTER_CLASS": BLOOM,
        "CRAWLPLUG_BLOOM_CAPACITY": 500,
        # 1e-8, not 1e-5: at 1e-5 up to one run in 160 may meet a false positive (a page never
        # fetched, rightly: the filter's rate), which this test could not tell from a page lost
        "CRAWLPLUG_BLOOM_ERROR_RATE": 1e-8,
        **FAST,
    }
    nodes = start_joined(lambda: crawl(args={"base_url": shop.url}, settings=settings), shop)
    for node in nodes:
        assert node.wait(180) == 0, node.text()[-3000:]
        assert "'finish_reason': 'finished'" in node.text()
    hits = shop.hits
    twice = {path: n for path, n in hits.items() if n > 1}
    assert not twice, f"pages fetched twice: {twice}"
    missing = shop.shop.paths() - set(hits)
    assert not missing, f"{len(missing)} pages never fetched (false positives?): {sorted(missing)[:10]}"
    assert all(node.item_lines() for node in nodes), "both nodes worked"
    spec = BloomSpec(500, 1e-8)
    counts = layer_counts(Frontier(redis.Redis.from_url(redis_url), CrawlKeys("shop"), dedup=BloomDedup(spec)), spec)
    assert counts == [(500, 500), (1000, len(shop.shop.paths()) - 500)]
    assert not redis.Redis.from_url(redis_url).exists(CrawlKeys("shop").seen), "no exact set on the side"


def test_expiring_dupefilter_recrawls_after_the_ttl_and_not_before(crawl, make_shop, redis_url):
    shops = {"short": make_shop(items=20), "long": make_shop(items=20)}  # 31 pages each
    ttls = {"short": 2, "long": 3600}

    def run() -> None:
        nodes = [
            crawl(
                args={"base_url": shops[name].url},
                settings={
                    "REDIS_URL": redis_url,
                    "DUPEFILTER_CLASS": EXPIRING,
                    "CRAWLPLUG_DEDUP_TTL": ttls[name],
                    "CRAWLPLUG_CRAWL_ID": f"ttl_{name}",
                    **FAST,
                },
            )
            for name in shops
        ]
        for node in nodes:
            assert node.wait(120) == 0, node.text()[-3000:]

    run()
    first = {name: shop.hits for name, shop in shops.items()}
    for name, shop in shops.items():
        assert set(first[name]) == shop.shop.paths()
    time.sleep(2.2)  # the short TTL (2 s) has passed since the last admission of the first crawls
    run()
    for name, shop in shops.items():
        second = shop.hits - first[name]
        if name == "short":
            assert set(second) == shop.shop.paths(), "every page fetched again once its fingerprint expired"
        else:
            assert not second, f"re-fetched within the TTL: {dict(second)}"
