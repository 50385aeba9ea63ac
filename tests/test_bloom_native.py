"""The native Bloom path (BF.* of RedisBloom / Redis 8) against a real server with the module."""

from __future__ import annotations

import hashlib

import pytest
import redis
from scrapy import Request
from scrapy.utils.test import get_crawler

from crawlplug.dupefilters import RedisBloomDupeFilter
from crawlplug.errors import ConfigError
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.dedup import BloomDedup, NativeBloomDedup
from crawlplug.frontier.keys import CrawlKeys


def _filter(**settings: object) -> RedisBloomDupeFilter:
    crawler = get_crawler(settings_dict={"CRAWLPLUG_BLOOM_CAPACITY": 1000, **settings})
    return RedisBloomDupeFilter.from_crawler(crawler)


def _fps(n: int, salt: str = "") -> list[bytes]:
    return [hashlib.sha1(f"{salt}{i}".encode()).digest() for i in range(n)]


def test_native_filter_dedups_atomically_and_scales(bloom_redis):
    client = redis.Redis.from_url(bloom_redis.url)
    df = _filter(CRAWLPLUG_BLOOM_NATIVE=True)
    frontier = Frontier(client, CrawlKeys("native"), dedup=df.strategy)
    df.bind(frontier)
    assert isinstance(frontier.dedup, NativeBloomDedup)
    fps = _fps(5000)
    first = frontier.admit([(frontier.dedup.argument(fp), 0.0, b"p") for fp in fps])
    assert first.admitted >= 4990  # a handful of false positives at most
    again = frontier.admit([(frontier.dedup.argument(fp), 0.0, b"p") for fp in fps])
    assert again.admitted == 0, "no false negatives"
    assert client.zcard(CrawlKeys("native").queue) == first.admitted
    info = df.info()
    assert info["native"] is True and info["filters"] >= 3, info  # 1000 -> 2000 -> 4000: scaled
    fresh = _fps(20000, "fresh")
    fp_rate = frontier.admit([(frontier.dedup.argument(fp), 0.0, b"") for fp in fresh]).filtered / 20000
    assert fp_rate <= 0.001 * 1.5


def test_auto_uses_native_when_the_server_has_it_and_the_crawl_keeps_its_format(bloom_redis, redis_url):
    native_client = redis.Redis.from_url(bloom_redis.url)
    df = _filter(CRAWLPLUG_BLOOM_NATIVE="auto")
    frontier = Frontier(native_client, CrawlKeys("auto"), dedup=df.strategy)
    df.bind(frontier)
    assert frontier.dedup.mode == "bf"
    # a crawl that started with the Lua filter stays Lua even when native is asked for
    df_lua = _filter()
    lua_frontier = Frontier(native_client, CrawlKeys("lua"), dedup=df_lua.strategy)
    df_lua.bind(lua_frontier)
    assert lua_frontier.dedup.mode == "bloom"
    df_native = _filter(CRAWLPLUG_BLOOM_NATIVE=True)
    again = Frontier(native_client, CrawlKeys("lua"), dedup=df_native.strategy)
    df_native.bind(again)
    assert isinstance(again.dedup, BloomDedup)
    # on a server without the module, "auto" falls back and True is a clear error
    plain = redis.Redis.from_url(redis_url)
    df_auto = _filter(CRAWLPLUG_BLOOM_NATIVE="auto")
    fallback = Frontier(plain, CrawlKeys("auto2"), dedup=df_auto.strategy)
    df_auto.bind(fallback)
    assert fallback.dedup.mode == "bloom"
    df_true = _filter(CRAWLPLUG_BLOOM_NATIVE=True)
    with pytest.raises(ConfigError, match="no BF"):
        df_true.bind(Frontier(plain, CrawlKeys("auto3"), dedup=df_true.strategy))


def test_request_seen_works_on_native(bloom_redis):
    client = redis.Redis.from_url(bloom_redis.url)
    df = _filter(CRAWLPLUG_BLOOM_NATIVE=True)
    df.bind(Frontier(client, CrawlKeys("seen"), dedup=df.strategy))
    assert df.request_seen(Request("http://example.com/a")) is False
    assert df.request_seen(Request("http://example.com/a")) is True
    assert df.request_seen(Request("http://example.com/b")) is False
