"""crawlplug's dupefilters on their own, as plain Scrapy dupefilters, on a real Redis.

Each of the three (set, Bloom, expiring) is opened as Scrapy's scheduler opens a
dupefilter (``open()``, then ``request_seen`` / ``log`` / ``close``) and must agree with
crawlplug's admission script on the same crawl, in both directions, in one script
call per ``request_seen``; a sharded crawl finds a fingerprint in the shard the
Scheduler's admission routes it to. The real crawls (Scrapy's own scheduler on two
nodes; a crawlplug node and a stock one on one crawl) are in
tests/test_dupefilters_crawl.py.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import redis
from scrapy import Request
from scrapy.utils.test import get_crawler

from crawlplug.dupefilters import ExpiringDupeFilter, RedisBloomDupeFilter, RedisSetDupeFilter
from crawlplug.frontier import open_frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.layout import shard_of

from .support.fingerprints import exact_store_exists, recorded
from .support.monitor import monitored
from .support.scriptcalls import SENT

CRAWL = "solo"
K = CrawlKeys(CRAWL)
KINDS = {
    "set": (RedisSetDupeFilter, {}),
    "bloom": (RedisBloomDupeFilter, {"CRAWLPLUG_BLOOM_CAPACITY": 1000, "CRAWLPLUG_BLOOM_ERROR_RATE": 0.001}),
    "expiring": (ExpiringDupeFilter, {"CRAWLPLUG_DEDUP_TTL": 3600}),
}


def crawler_for(redis_url: str, **settings: Any) -> Any:
    """A crawler whose spider is running, as Scrapy's engine has it when a scheduler opens."""
    crawler = get_crawler(settings_dict={"REDIS_URL": redis_url, "CRAWLPLUG_CRAWL_ID": CRAWL, **settings})
    crawler.spider = crawler._create_spider("default")
    return crawler


def opened(kind: str, redis_url: str, **settings: Any) -> RedisSetDupeFilter:
    cls, own = KINDS[kind]
    df = cls.from_crawler(crawler_for(redis_url, **{**own, **settings}))
    assert df.open() is None
    return df


def scheduler_frontier(kind: str, redis_url: str, **settings: Any) -> Any:
    """The crawl's frontier with a dupefilter bound as crawlplug's Scheduler binds it."""
    cls, own = KINDS[kind]
    df = cls.from_crawler(crawler_for(redis_url, **{**own, **settings}))
    client = redis.Redis.from_url(redis_url)
    shards = int(settings.get("CRAWLPLUG_SHARDS", 1))
    frontier = open_frontier(client, K, shards=shards, node_id="sched", dedup_factory=df.make_strategy)
    df.bind(frontier)
    return df, frontier


def commands_sent(r: redis.Redis, action: Any) -> list[str]:
    """The commands clients sent while ``action`` ran (MONITOR; a script's own commands left out)."""
    return [words[0].upper() for lua, words in monitored(r, action) if not lua]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_on_its_own_each_dupefilter_records_once_and_other_nodes_agree(kind, redis_url):
    a, b = opened(kind, redis_url), opened(kind, redis_url)
    page = Request("http://shop.test/a")
    assert a.request_seen(page) is False
    assert a.request_seen(page) is True
    assert b.request_seen(page) is True, "a second node sees the first one's fingerprint"
    assert b.request_seen(Request("http://shop.test/b")) is False
    assert a.request_seen(Request("http://shop.test/b")) is True
    a.close("finished")
    b.close("finished")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_on_its_own_and_under_crawlplugs_scheduler_share_one_dedup_state(kind, redis_url):
    """A fingerprint recorded by request_seen is a duplicate for admit.lua, and back."""
    solo = opened(kind, redis_url)
    df, frontier = scheduler_frontier(kind, redis_url)
    seen_first, admitted_first = Request("http://shop.test/seen-first"), Request("http://shop.test/admitted-first")
    assert solo.request_seen(seen_first) is False
    assert frontier.admit([(df.argument(seen_first), 0.0, b"payload")]).flags == "0"
    assert frontier.admit([(df.argument(admitted_first), 0.0, b"payload")]).flags == "1"
    assert solo.request_seen(admitted_first) is True
    assert len(frontier) == 1, "only the request admitted first was stored"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_request_seen_is_one_script_call(kind, redis_url, r):
    df = opened(kind, redis_url)
    df.request_seen(Request("http://shop.test/warm"))  # a Bloom filter creates its first layer
    results: list[bool] = []
    sent = commands_sent(
        r, lambda: results.extend(df.request_seen(Request(f"http://shop.test/{i % 40}")) for i in range(100))
    )
    assert results.count(False) == 40
    (how,) = set(sent)  # FCALL of the library's function on Redis 7, else EVALSHA of the script
    assert how in SENT and len(sent) == 100, f"one script call per request_seen and nothing else: {sorted(set(sent))}"


def test_a_sharded_crawl_finds_the_fingerprint_in_the_shard_admission_uses(redis_url, r):
    solo = opened("set", redis_url, CRAWLPLUG_SHARDS=3)
    df, frontier = scheduler_frontier("set", redis_url, CRAWLPLUG_SHARDS=3)
    hosts = [f"site{i}.test" for i in range(12)]
    assert len({shard_of(h, 3) for h in hosts}) == 3, "the hosts spread over every shard"
    for host in hosts:
        assert solo.request_seen(Request(f"http://{host}/p")) is False
    items = [(df.argument(Request(f"http://{h}/p")), 0.0, b"x", "", h) for h in hosts]
    items += [(df.argument(Request(f"http://{h}/q")), 0.0, b"x", "", h) for h in hosts]
    assert frontier.admit(items).flags == "0" * 12 + "1" * 12
    for host in hosts:
        shard = K.shard_keys(shard_of(host, 3), 3)
        assert df.fingerprint(Request(f"http://{host}/p")) in recorded(r, shard)
        assert solo.request_seen(Request(f"http://{host}/q")) is True
    assert not exact_store_exists(r, K), "nothing in the unsharded store"


def test_a_standalone_node_of_another_shard_count_is_refused(redis_url):
    opened("set", redis_url, CRAWLPLUG_SHARDS=2)
    cls, _ = KINDS["set"]
    df = cls.from_crawler(crawler_for(redis_url, CRAWLPLUG_SHARDS=3))
    with pytest.raises(Exception, match="split into 2 shards"):
        df.open()


def test_a_bloom_filter_sized_differently_is_refused_on_its_own_too(redis_url):
    opened("bloom", redis_url)
    df = RedisBloomDupeFilter.from_crawler(crawler_for(redis_url, CRAWLPLUG_BLOOM_CAPACITY=5000))
    with pytest.raises(Exception, match="CRAWLPLUG_BLOOM"):
        df.open()


def test_request_seen_before_open_says_what_to_do(redis_url):
    df = RedisSetDupeFilter.from_crawler(crawler_for(redis_url))
    with pytest.raises(RuntimeError, match=r"not open: the scheduler opens it"):
        df.request_seen(Request("http://shop.test/"))


def test_open_without_a_running_spider_is_a_clear_error(redis_url):
    df = RedisSetDupeFilter.from_crawler(get_crawler(settings_dict={"REDIS_URL": redis_url}))
    with pytest.raises(Exception, match="needs the crawler of a running spider"):
        df.open()


def test_open_does_nothing_when_crawlplugs_scheduler_bound_it(redis_url, r):
    df, frontier = scheduler_frontier("set", redis_url)
    df.open()
    assert df.frontier is frontier and df._conn is None
    df.close("finished")
    assert df.frontier is frontier, "the Scheduler's frontier stays bound: it closes its own connection"


def test_close_deletes_nothing_and_the_next_node_still_sees_it(redis_url, r):
    df = opened("set", redis_url)
    df.request_seen(Request("http://shop.test/kept"))
    before = sorted(r.keys())
    df.close("finished")
    assert sorted(r.keys()) == before
    assert opened("set", redis_url).request_seen(Request("http://shop.test/kept")) is True


def test_the_crawl_is_registered_so_the_tools_find_it(redis_url, r):
    from crawlplug.crawl import registry

    assert not registry.exists(r, K)
    opened("set", redis_url)
    assert registry.exists(r, K)


def test_log_counts_and_debug_logs_each_duplicate(redis_url, caplog):
    df = opened("set", redis_url, DUPEFILTER_DEBUG=True)
    caplog.set_level(logging.DEBUG, logger="crawlplug.dupefilters")
    for i in range(3):
        df.log(Request(f"http://shop.test/{i}"), df.crawler.spider)
    assert df.crawler.stats.get_value("dupefilter/filtered") == 3
    assert len([x for x in caplog.records if x.name == "crawlplug.dupefilters" and "Filtered" in x.message]) == 3


def test_redis_gone_lets_requests_through_said_once_and_counted(fresh_redis, caplog):
    df = opened("set", fresh_redis.url, CRAWLPLUG_REDIS_TIMEOUT=1)
    assert df.request_seen(Request("http://shop.test/1")) is False
    fresh_redis.stop()
    caplog.set_level(logging.INFO, logger="crawlplug.dupefilters")
    assert [df.request_seen(Request(f"http://shop.test/{i}")) for i in range(3)] == [False] * 3
    errors = [x for x in caplog.records if x.levelno == logging.ERROR]
    assert len(errors) == 1 and "letting requests through unchecked" in errors[0].getMessage()
    assert df.crawler.stats.get_value("dupefilter/redis_errors") == 3
    fresh_redis.start()
    assert df.request_seen(Request("http://shop.test/1")) in (True, False)  # answered again: no error
    assert df.crawler.stats.get_value("dupefilter/redis_errors") == 3
    assert any("answers again" in x.getMessage() for x in caplog.records)


def test_bloom_on_its_own_costs_about_two_bytes_per_fingerprint(redis_url, r):
    """Memory of the whole filter (every key, as Redis counts it) per fingerprint recorded,
    against the exact set holding the same fingerprints. Recorded through seen.lua in
    batches (the script request_seen sends, one fingerprint at a time), then checked back."""
    capacity = 10_000
    bloom = opened("bloom", redis_url, CRAWLPLUG_BLOOM_CAPACITY=capacity, CRAWLPLUG_CRAWL_ID="b")
    exact = opened("set", redis_url, CRAWLPLUG_CRAWL_ID="s")
    requests = [Request(f"http://shop.test/item/{i}") for i in range(capacity)]
    flags = ""
    for i in range(0, capacity, 1000):
        flags += bloom.frontier.record_seen([(bloom.argument(q), "") for q in requests[i : i + 1000]])
    new = flags.count("1")
    assert new >= capacity * 0.998, "false positives stay near the 0.1 % rate"
    assert all(bloom.request_seen(q) for q in requests[::50]), "no false negatives"
    exact.frontier.record_seen([(exact.argument(q), "") for q in requests])
    bloom_bytes = sum(int(r.memory_usage(k) or 0) for k in r.scan_iter("crawlplug:{b}:bloom*"))
    set_bytes = sum(int(r.memory_usage(k, samples=0) or 0) for k in r.scan_iter("crawlplug:{s}:fph*"))
    per_fp = bloom_bytes / new
    assert 1.8 <= per_fp <= 2.3, f"{per_fp:.2f} bytes per fingerprint"
    assert set_bytes / capacity > 10 * per_fp, f"the exact store costs {set_bytes / capacity:.0f} bytes per fingerprint"
    info = bloom.info()
    assert info["added"] == new and len(info["layers"]) == 1


def test_the_servers_own_bloom_filter_on_its_own_agrees_with_admission(bloom_redis):
    """CRAWLPLUG_BLOOM_NATIVE: seen.lua's BF.ADD, the filter admit.lua uses."""
    native = {"CRAWLPLUG_BLOOM_NATIVE": True}
    solo = opened("bloom", bloom_redis.url, **native)
    assert solo.strategy.mode == "bf"
    df, frontier = scheduler_frontier("bloom", bloom_redis.url, **native)
    first, second = Request("http://shop.test/1"), Request("http://shop.test/2")
    assert solo.request_seen(first) is False and solo.request_seen(first) is True
    assert frontier.admit([(df.argument(first), 0.0, b"x"), (df.argument(second), 0.0, b"y")]).flags == "01"
    assert solo.request_seen(second) is True
    assert redis.Redis.from_url(bloom_redis.url).type(K.key("bf")) == b"MBbloom--"
