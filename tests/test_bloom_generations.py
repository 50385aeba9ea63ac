"""Bloom dedup that forgets: rotating generations, on a real Redis clock."""

from __future__ import annotations

import hashlib
import time

import pytest
from scrapy.utils.test import get_crawler

from crawlplug.dupefilters import RedisBloomDupeFilter
from crawlplug.errors import ConfigError
from crawlplug.frontier.bloom import BloomSpec
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.dedup import BloomDedup
from crawlplug.frontier.keys import CrawlKeys


def _admit(frontier: Frontier, fps: list[bytes]) -> str:
    return frontier.admit([(frontier.dedup.argument(fp), 0.0, b"") for fp in fps]).flags


def test_a_url_is_seen_for_at_least_ttl_and_at_most_ttl_plus_one_window(r):
    ttl, n = 1.2, 3  # windows of 0.4 s
    dedup = BloomDedup(BloomSpec(1000, 0.0001), ttl=ttl, generations=n)
    frontier = Frontier(r, CrawlKeys("gen"), dedup=dedup)
    fps = [hashlib.sha1(str(i).encode()).digest() for i in range(200)]
    assert _admit(frontier, fps) == "1" * 200
    admitted_at = time.monotonic()
    # until ttl has passed, every one of them is a duplicate (checked every 0.1 s)
    while time.monotonic() - admitted_at < ttl - 0.15:
        assert "1" not in _admit(frontier, fps[:20]), f"forgotten after {time.monotonic() - admitted_at:.2f}s"
        time.sleep(0.1)
    # and by ttl * (1 + 1/n) they are all new again
    time.sleep(max(0.0, ttl * (1 + 1 / n) + 0.15 - (time.monotonic() - admitted_at)))
    assert _admit(frontier, fps) == "1" * 200
    # keys of generations older than the window expired on their own (no scan, no sweeper)
    time.sleep(0.4 * (n + 2) + 0.3)
    _admit(frontier, fps[:1])
    generations = {k.decode().split(":g", 1)[1].split(":")[0] for k in r.scan_iter(match="crawlplug:{gen}:bloom:g*")}
    assert len(generations) <= n + 2, generations


def test_two_nodes_share_the_generations(r):
    spec = BloomSpec(50, 1e-7)  # false positives negligible: the assertions below are exact
    a = Frontier(r, CrawlKeys("gen2"), dedup=BloomDedup(spec, ttl=60, generations=2), node_id="a")
    b = Frontier(r, CrawlKeys("gen2"), dedup=BloomDedup(spec, ttl=60, generations=2), node_id="b")
    fps = [hashlib.sha1(str(i).encode()).digest() for i in range(500)]
    assert _admit(a, fps) == "1" * 500  # grows several layers in node a
    assert _admit(b, fps) == "0" * 500  # node b learns the generation and the layers (STALE)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"CRAWLPLUG_BLOOM_GENERATIONS": 3, "CRAWLPLUG_BLOOM_NATIVE": True}, "needs the Lua Bloom filter"),
        ({"CRAWLPLUG_BLOOM_GENERATIONS": 3, "CRAWLPLUG_DEDUP_TTL": 0}, "CRAWLPLUG_DEDUP_TTL must be a positive"),
        ({"CRAWLPLUG_BLOOM_GENERATIONS": -1}, "0 or more"),
        ({"CRAWLPLUG_BLOOM_NATIVE": "maybe"}, "True, False or 'auto'"),
    ],
)
def test_bad_generation_settings_are_refused_at_start(settings, message):
    with pytest.raises(ConfigError, match=message):
        RedisBloomDupeFilter.from_crawler(get_crawler(settings_dict=settings))
