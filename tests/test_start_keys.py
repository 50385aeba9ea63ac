"""Several priority-ordered start-entry keys for one crawl (scrapy-redis #310), on a real Redis.

The crawl's own lanes (``CRAWLPLUG_START_KEYS``, ``crawlplug push --key``) and
scrapy-redis's ``redis_key`` as a list: a node takes every entry of a key before any of
the next, a batch fills from the next key only once the earlier ones are empty, the
crawl's ``start_urls`` (where entries a node could not finish return) is read first
unless listed, names are checked. The last test is a real RedisSpider crawl that fetches
what was pushed in lane order.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from crawlplug.cli import main
from crawlplug.config import SchedulerConfig, start_keys
from crawlplug.crawl import Crawl
from crawlplug.errors import ConfigError, CorruptKey
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.spiders import legacy_keys

K = CrawlKeys("lanes")
LANES = ("start_urls:high", "start_urls", "start_urls:low")


def frontier(r: redis.Redis, node: str = "n") -> Frontier:
    return Frontier(r, K, node_id=node, lease_timeout=30, heartbeat=1)


def taken(f: Frontier, n: int, legacy: Any = None, lanes: Any = LANES) -> list[str]:
    return [raw.decode() for _, raw in f.take_starts(n, legacy, lanes)]


def test_entries_come_from_the_first_non_empty_key_and_a_batch_fills_from_the_next(r):
    f = frontier(r)
    Crawl.of(f).push_starts(["low1", "low2"], "start_urls:low")
    Crawl.of(f).push_starts(["mid1"])
    Crawl.of(f).push_starts(["high1", "high2", "high3"], "start_urls:high")
    assert taken(f, 2) == ["high1", "high2"], "only the first key while it has entries"
    assert taken(f, 3) == ["high3", "mid1", "low1"], "then the next ones, in order, to fill the batch"
    Crawl.of(f).push_starts(["high4"], "start_urls:high")
    assert taken(f, 5) == ["high4", "low2"], "a new high entry goes before the rest of low"
    assert taken(f, 5) == []
    assert int(r.hget(K.stats, "start_taken")) == 7


def test_without_lanes_only_start_urls_is_read(r):
    f = frontier(r)
    Crawl.of(f).push_starts(["a"])
    Crawl.of(f).push_starts(["h"], "start_urls:high")
    assert taken(f, 5, lanes=()) == ["a"]
    assert r.llen(K.key("start_urls:high")) == 1, "a lane no node lists waits"


def test_an_entry_given_back_returns_to_its_lane(r):
    """release.lua / reap.lua put an entry a node could not finish back at the head of the list
    it came from (issue 32: a lane's went to start_urls), for the lanes the caller reads."""
    f = frontier(r)
    f.lanes = ("start_urls:high", "start_urls:low")
    Crawl.of(f).push_starts(["h1", "h2"], "start_urls:high")
    Crawl.of(f).push_starts(["l1"], "start_urls:low")
    (lease, raw), _ = f.take_starts(2, None, LANES)
    assert f.release([lease], unstarted=True) == 1
    assert r.lrange(K.key("start_urls:high"), 0, -1) == [raw] and r.llen(K.start_urls) == 0
    # reaped from a node that stopped: back in its lane too
    stalled = Frontier(r, K, node_id="gone", lease_timeout=0.05, heartbeat=0.01)
    [(gone, _)] = stalled.take_starts(1, None, ("start_urls:low",))
    import time

    time.sleep(0.1)
    assert f.reap() == (1, 0)
    assert r.lrange(K.key("start_urls:low"), 0, -1) == [b"l1"]


def test_an_entry_of_a_lane_the_caller_does_not_read_returns_through_start_urls(r):
    f = frontier(r)  # reads no lane
    Crawl.of(f).push_starts(["h1"], "start_urls:high")
    ((lease, raw),) = f.take_starts(1, None, LANES)
    assert f.release([lease], unstarted=True) == 1
    assert r.lrange(K.start_urls, 0, -1) == [raw]
    assert taken(f, 1, lanes=start_keys(["start_urls:high"])) == ["h1"], "start_urls is read first when unlisted"


def test_lanes_are_counted_by_status_peek_crawls_and_the_end_of_a_run(r):
    """Entries waiting in a lane are start entries: a run does not finish under them, and
    every reader counts them (issue 32: none did)."""
    from crawlplug.crawl import runs, views

    joined = runs.join(r, K, node_id="n", ttl_ms=10_000)
    f = Frontier(r, K, node_id="n", epoch=joined.epoch)
    f.lanes = ("start_urls:low",)
    f.heartbeat([])  # no longer reading its start requests
    Crawl.of(f).push_starts(["l1", "l2"], "start_urls:low")
    assert Crawl.of(f).status()["start_urls"] == 2
    idle = f.idle_state()
    assert idle[0] == 2 and idle.start_entries == 2
    assert Crawl.of(f).finish_run(joined.run, node_id=f.node_id, epoch=f.epoch, lanes=f.lanes)[0] == "busy", (
        "the run does not finish under entries waiting in a lane"
    )
    assert views.head(r, K, 5).entries == ["l1", "l2"] and views.head(r, K, 5).entries_waiting == 2
    [row] = [x for x in runs.crawl_rows(r, names=[K.crawl])]
    assert row["start_entries"] == 2


def test_scrapy_redis_keys_in_priority_order_each_read_by_its_type(r):
    f = frontier(r)
    r.rpush("spider:urgent", "u1")
    r.sadd("spider:normal", "n1", "n2")
    r.zadd("spider:later", {"z-low": 1, "z-high": 9})
    Crawl.of(f).push_starts(["own"], "start_urls:high")
    got = taken(f, 10, legacy=["spider:urgent", "spider:normal", "spider:later"])
    assert got[:2] == ["own", "u1"], "the crawl's own keys first, then scrapy-redis's in order"
    assert sorted(got[2:4]) == ["n1", "n2"] and got[4:] == ["z-high", "z-low"]
    assert not r.exists("spider:urgent", "spider:normal", "spider:later")


def test_a_corrupt_lane_refuses_the_take_and_changes_nothing(r):
    f = frontier(r)
    Crawl.of(f).push_starts(["a"])
    r.set(K.key("start_urls:low"), "not a list")
    with pytest.raises(CorruptKey, match="start_urls:low"):
        f.take_starts(5, None, LANES)
    assert r.lrange(K.start_urls, 0, -1) == [b"a"]


def test_purge_deletes_the_lanes(r):
    f = frontier(r)
    Crawl.of(f).push_starts(["x"], "start_urls:high")
    f.purge()
    assert not r.exists(K.key("start_urls:high"))


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (None, ("start_urls",)),
        ([], ("start_urls",)),
        (["start_urls:high", "start_urls:low"], ("start_urls", "start_urls:high", "start_urls:low")),
        (["start_urls:high", "start_urls", "start_urls:low"], ("start_urls:high", "start_urls", "start_urls:low")),
    ],
)
def test_start_keys_setting(value, want):
    assert start_keys(value) == want


@pytest.mark.parametrize(
    "bad", [["queue"], ["start_urls:"], ["start_urls:a b"], ["high"], ["start_urls", "start_urls"], [3]]
)
def test_start_keys_that_are_not_a_crawls_start_lists_are_refused(bad):
    with pytest.raises(ConfigError, match="start-entry key|twice"):
        start_keys(bad)


def test_the_setting_reaches_the_scheduler_config():
    from scrapy.settings import Settings

    config = SchedulerConfig.from_settings(Settings({"CRAWLPLUG_START_KEYS": "start_urls:high,start_urls:low"}))
    assert config.start_keys == ("start_urls", "start_urls:high", "start_urls:low")


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("%(name)s:start_urls", ["shop:start_urls"]),
        (["%(name)s:high", "%(name)s:low", "%(name)s:high"], ["shop:high", "shop:low"]),
        (("plain",), ["plain"]),
    ],
)
def test_redis_key_may_be_a_list_in_priority_order(value, want):
    assert legacy_keys(value, "shop") == want


@pytest.mark.parametrize("bad", [[], [""], [None], 3, ["%(spider)s:x"]])
def test_a_bad_redis_key_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="redis_key"):
        legacy_keys(bad, "shop")


def push(redis_url: str, *args: str, crawl: str = K.crawl) -> Any:
    return CliRunner().invoke(
        main,
        ["--redis-url", redis_url, "--crawl", crawl, "push", *args],
        env={"REDIS_URL": None, "CRAWLPLUG_CRAWL": None},
    )


def test_push_to_a_lane(redis_url, r):
    result = push(redis_url, "--key", "start_urls:high", "http://shop.test/1", "http://shop.test/2")
    assert result.exit_code == 0, result.output
    assert "pushed 2 start entries to crawl 'lanes' start_urls:high (2 waiting there)" in result.output
    assert "CRAWLPLUG_START_KEYS" in result.output
    assert r.lrange(K.key("start_urls:high"), 0, -1) == [b"http://shop.test/1", b"http://shop.test/2"]
    assert not r.exists(K.start_urls)
    plain = push(redis_url, "http://shop.test/3")
    assert "pushed 1 start entries to crawl 'lanes' (1 waiting)" in plain.output


def test_push_to_a_key_that_is_no_start_list_is_refused_and_writes_nothing(redis_url, r):
    result = push(redis_url, "--key", "queue", "http://shop.test/1")
    assert result.exit_code == 1
    assert "--key: 'queue' is not a start-entry key" in result.output
    assert r.dbsize() == 0


def test_a_redisspider_takes_pushed_entries_in_lane_order(crawl, make_shop, redis_url):
    shop = make_shop(items=9)
    pages = [f"{shop.url}/item/{i}/" for i in range(1, 10)]
    for key, urls in (("start_urls:low", pages[6:]), ("start_urls", pages[3:6]), ("start_urls:high", pages[:3])):
        assert push(redis_url, "--key", key, *urls, crawl="slowstart").exit_code == 0
    node = crawl(
        "slowstart",
        settings={
            "REDIS_URL": redis_url,
            "CRAWLPLUG_START_KEYS": ",".join(LANES),
            "CRAWLPLUG_IDLE_CLOSE": 1,
            "CRAWLPLUG_HEARTBEAT": 0.5,
            "CRAWLPLUG_LEASE_TIMEOUT": 5,
            "CONCURRENT_REQUESTS": 1,
            "CRAWLPLUG_START_BATCH": 2,
        },
    )
    assert node.wait(60) == 0, node.text()[-3000:]
    fetched = [json.loads(line)["url"] for line in node.item_lines()]
    assert fetched == pages, "high, then start_urls, then low; each key in push order"
