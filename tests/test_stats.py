"""RedisStatsCollector: per-node and crawl-wide Scrapy stats in a real Redis, and a real 2-node crawl."""

from __future__ import annotations

import json
import logging
import sys
import time
import warnings
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from redis.backoff import NoBackoff
from redis.retry import Retry
from scrapy.exceptions import ScrapyDeprecationWarning
from scrapy.utils.test import get_crawler

from crawlplug.cli import main
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.stats import (
    RedisStatsCollector,
    crawl_stats,
    decode,
    encode,
    node_stats,
    stats_nodes,
)

from .support.nodes import start_joined
from .support.servers import RedisServer
from .test_integration import FAST

KEYS = CrawlKeys("statstest")
T0 = datetime(2025, 6, 1, 12, 0, 0, tzinfo=timezone.utc)


def collector(client: redis.Redis, node: str, keys: CrawlKeys = KEYS) -> RedisStatsCollector:
    stats = RedisStatsCollector(get_crawler(settings_dict={"STATS_DUMP": False}))
    stats.bind(client, keys, node)
    return stats


def short_client(server: RedisServer) -> redis.Redis:
    # no retries inside redis-py (its default retries a refused connection for ~5 s)
    return redis.Redis(port=server.port, socket_connect_timeout=1, socket_timeout=2, retry=Retry(NoBackoff(), 0))


def test_two_nodes_add_up(r):
    a, b = collector(r, "node-a"), collector(r, "node-b")
    a.set_value("start_time", T0 + timedelta(seconds=10))
    b.set_value("start_time", T0)
    for stats, pages, got in ((a, 3, 0.5), (b, 4, 1.25)):
        for _ in range(pages):
            stats.inc_value("response_received_count")
        stats.inc_value("downloader/seconds", got)
    a.max_value("memusage/max", 100)
    b.max_value("memusage/max", 300)
    a.min_value("fastest_ms", 7)
    b.min_value("fastest_ms", 3)
    a.set_value("finish_time", T0 + timedelta(seconds=50))
    b.set_value("finish_time", T0 + timedelta(seconds=40))
    a.set_value("finish_reason", "finished")
    a.set_value("elapsed_time_seconds", 40.0)
    b.set_value("elapsed_time_seconds", 40.5)
    assert a.flush() and b.flush()

    crawl = crawl_stats(r, KEYS)
    assert crawl["response_received_count"] == 7
    assert crawl["downloader/seconds"] == pytest.approx(1.75)
    assert crawl["start_time"] == encode(T0) == "2025-06-01T12:00:00.000000+00:00"
    assert crawl["finish_time"] == encode(T0 + timedelta(seconds=50))
    assert crawl["memusage/max"] == 300 and crawl["fastest_ms"] == 3
    assert crawl["elapsed_time_seconds"] == 40.5  # the longest node run, not a sum
    assert crawl["finish_reason"] == "finished"

    nodes = node_stats(r, KEYS)
    assert set(nodes) == {"node-a", "node-b"} == set(stats_nodes(r, KEYS))
    assert nodes["node-a"]["response_received_count"] == 3
    assert nodes["node-b"]["response_received_count"] == 4
    assert nodes["node-a"]["start_time"] == encode(T0 + timedelta(seconds=10))
    assert datetime.fromisoformat(nodes["node-b"]["start_time"]) == T0

    # later flushes send only what changed, and the sums follow
    a.inc_value("response_received_count", 2)
    assert a.flush()
    assert crawl_stats(r, KEYS)["response_received_count"] == 9
    assert a.flush()  # nothing changed: nothing sent
    assert crawl_stats(r, KEYS)["response_received_count"] == 9


def test_a_repeated_flush_counts_once(r):
    """A flush whose reply was lost is sent again: the node's absolute values make it harmless."""
    a = collector(r, "node-a")
    a.inc_value("item_scraped_count", 5)
    a.inc_value("bytes", 2.5)
    assert a.flush()
    a._dirty.update(["item_scraped_count", "bytes"])  # as if the reply had been lost
    assert a.flush()
    assert crawl_stats(r, KEYS)["item_scraped_count"] == 5
    assert crawl_stats(r, KEYS)["bytes"] == 2.5


def test_site_outcomes_are_counted_per_minute_once_over_every_node(r):
    """The site spiders' outcomes also land in the minute they were flushed in, summed over
    the nodes; a flush sent again (its reply lost) adds nothing; other stats stay out."""
    from crawlplug.sites import minutes

    a, b = collector(r, "node-a"), collector(r, "node-b")
    for stats, missing in ((a, 3), (b, 2)):
        stats.inc_value("site/shop/step/item/pages", 10)
        stats.inc_value("site/shop/items/ok", 10 - missing)
        stats.inc_value("site/shop/items/incomplete", missing)
        stats.inc_value("site/shop/field/price/filled", 10 - missing)
        stats.inc_value("site/shop/field/price/missing", missing)
        stats.inc_value("site/shop/v/abc/field/price/missing", missing)  # per version: the run's stats only
        stats.inc_value("response_received_count", 10)
    assert a.flush() and b.flush()
    a._dirty.add("site/shop/field/price/missing")  # as if the reply had been lost
    assert a.flush()
    now = int(r.time()[0]) * 1000
    got = minutes.series(r, KEYS, "shop", now - 120_000, now)
    assert sum(got.pages) == 20 and sum(got.items_ok) == 15 and sum(got.items_incomplete) == 5
    assert sum(got.fields["price"]["missing"]) == 5 and sum(got.fields["price"]["filled"]) == 15
    assert minutes.null_rate(r, KEYS, "shop", "price", 600_000, now) == 0.25
    assert got.window_rates(now, 600_000) == {"price": 0.25}  # what the console shows: the rule's rate
    assert minutes.null_rate(r, KEYS, "shop", "name", 600_000, now) is None  # no such field counted
    assert minutes.null_rate(r, KEYS, "other", "price", 600_000, now) is None
    (key,) = r.keys(KEYS.key("sitem:*"))
    fields = {k.decode() for k in r.hgetall(key)}
    assert all(f.startswith("shop/") for f in fields) and not any("/v/" in f for f in fields)
    assert 0 < r.pttl(key) <= 86_460_000  # kept a day after its last count
    # ten minutes later the window no longer sees them (whole minutes: the one now and the ten before)
    assert minutes.null_rate(r, KEYS, "shop", "price", 600_000, now + 11 * 60_000 + 60_000) is None


def test_a_flush_without_site_outcomes_names_no_minute_key(r):
    a = collector(r, "node-a")
    a.inc_value("response_received_count", 3)
    assert a.flush()
    assert r.keys(KEYS.key("sitem:*")) == []


def test_removed_stats_leave_the_sums(r):
    a, b = collector(r, "node-a"), collector(r, "node-b")
    a.inc_value("pages", 3)
    a.set_value("finish_reason", "shutdown")
    b.inc_value("pages", 4)
    assert a.flush() and b.flush()
    a.clear_stats()
    assert a.flush()
    assert crawl_stats(r, KEYS)["pages"] == 4
    assert node_stats(r, KEYS)["node-a"] == {}
    b.set_stats({"pages": 10, "other": 1})
    assert b.flush()
    assert crawl_stats(r, KEYS)["pages"] == 10 and crawl_stats(r, KEYS)["other"] == 1


def _python_calls(call: Any, *args: Any) -> list[str]:
    """The Python functions that running ``call(*args)`` enters (the profiler's "call" events)."""
    seen: list[str] = []

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            seen.append(frame.f_code.co_qualname)

    sys.setprofile(hook)
    try:
        call(*args)
    finally:
        sys.setprofile(None)
    return seen


def test_a_stats_call_is_one_python_call():
    """A stats call runs many times a page: it enters its method and nothing else, not Scrapy's
    StatsCollector.__getattribute__ (once per attribute read) nor its ``spider``-argument shim."""
    stats = RedisStatsCollector(get_crawler(settings_dict={"STATS_DUMP": False}))
    stats.inc_value("warm")
    assert _python_calls(stats.inc_value, "pages") == ["RedisStatsCollector.inc_value"]
    assert _python_calls(stats.max_value, "depth", 3) == ["RedisStatsCollector.max_value"]
    assert _python_calls(stats.get_value, "pages") == ["RedisStatsCollector.get_value"]
    assert stats.get_stats() == {"warm": 1, "pages": 1, "depth": 3}


def test_a_spider_argument_still_warns():
    stats = RedisStatsCollector(get_crawler(settings_dict={"STATS_DUMP": False}))
    spider = object()
    for call in (
        lambda: stats.inc_value("pages", spider=spider),
        lambda: stats.set_value("x", 1, spider),
        lambda: stats.max_value("m", 2, spider=spider),
        lambda: stats.get_value("x", None, spider),
    ):
        with pytest.warns(ScrapyDeprecationWarning, match="'spider' argument to RedisStatsCollector"):
            call()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stats.inc_value("pages")  # without one: no warning
    assert stats.get_value("pages") == 2 and stats.get_value("x") == 1 and stats.get_value("m") == 2


def test_values_as_text_and_back():
    assert decode(encode(12)) == 12 and decode(encode(-3)) == -3
    assert decode(encode(0.25)) == 0.25 and decode(encode(1e-7)) == 1e-7
    assert decode(encode(True)) is True and decode(encode(None)) is None
    assert decode(encode({"a": [1, 2]})) == {"a": [1, 2]}
    assert decode(encode("finished")) == "finished"
    aware = datetime(2025, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=2)))
    assert encode(aware) == "2025-01-02T01:04:05.000006+00:00"
    assert datetime.fromisoformat(decode(encode(aware))) == aware
    # text order is time order, also across whole seconds
    assert encode(T0) < encode(T0 + timedelta(microseconds=1)) < encode(T0 + timedelta(seconds=1))


def test_strange_values_are_stored_as_text(r):
    a = collector(r, "node-a")
    a.set_value("ratio", float("nan"))
    a.set_value("flags", ["x", "y"])
    a.set_value("ok", True)
    a.inc_value("pages")
    assert a.flush()
    node = node_stats(r, KEYS)["node-a"]
    assert node["ratio"] == "nan" and node["flags"] == ["x", "y"] and node["ok"] is True
    assert crawl_stats(r, KEYS)["pages"] == 1


def test_purge_deletes_the_stats(r):
    a = collector(r, "node-a")
    a.inc_value("pages")
    assert a.flush()
    assert r.exists(KEYS.crawlstats, KEYS.statnodes, KEYS.node_stats("node-a")) == 3
    Frontier(r, KEYS).purge()
    assert r.exists(KEYS.crawlstats, KEYS.statnodes, KEYS.node_stats("node-a")) == 0


def test_redis_outage_keeps_the_deltas(fresh_redis, caplog):
    client = short_client(fresh_redis)
    a = collector(client, "node-a")
    a.inc_value("pages", 5)
    assert a.flush()
    client.shutdown(save=True)  # keeps its data in dump.rdb for the restart
    fresh_redis.proc.wait(10)
    a.inc_value("pages", 2)
    with caplog.at_level(logging.WARNING, logger="crawlplug.stats"):
        assert a.flush() is False  # no exception: the crawl goes on
        a.inc_value("pages", 1)
        assert a.flush() is False
    assert sum("could not write stats to Redis" in m for m in caplog.messages) == 1  # logged once
    fresh_redis.start()
    assert a.flush()
    assert crawl_stats(client, KEYS)["pages"] == 8
    assert node_stats(client, KEYS)["node-a"]["pages"] == 8


def test_redis_restarted_empty_gets_everything_again(fresh_redis):
    client = short_client(fresh_redis)
    a = collector(client, "node-a")
    a.inc_value("pages", 5)
    a.set_value("start_time", T0)
    assert a.flush()
    fresh_redis.stop()  # no save: the restarted server is empty
    fresh_redis.start()
    a.inc_value("pages")
    assert a.flush()
    crawl = crawl_stats(client, KEYS)
    assert crawl["pages"] == 6 and crawl["start_time"] == encode(T0)


def test_close_never_raises(fresh_redis, caplog):
    client = short_client(fresh_redis)
    a = collector(client, "node-a")
    a.inc_value("pages")
    fresh_redis.stop()
    with caplog.at_level(logging.ERROR, logger="crawlplug.stats"):
        a.close_spider(reason="finished")
    assert any("final stats could not be written" in m for m in caplog.messages)
    # never bound to a Redis (open_spider found none): closes quietly too
    RedisStatsCollector(get_crawler(settings_dict={"STATS_DUMP": False})).close_spider(reason="finished")


# -- a real crawl --------------------------------------------------------------------------


def _export(redis_url: str, crawl: str, out: Path) -> list[dict]:
    env = {"REDIS_URL": None, "CRAWLPLUG_CRAWL": None}
    res = CliRunner().invoke(
        main, ["items", "export", "--redis-url", redis_url, "--crawl", crawl, "-o", str(out)], env=env
    )
    assert res.exit_code == 0, res.output
    lines = out.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]  # every line is one JSON object


def test_two_node_crawl_stats_and_items(crawl, shop, redis_url, tmp_path):
    client = redis.Redis.from_url(redis_url)
    keys = CrawlKeys("shop")
    settings = {
        "REDIS_URL": redis_url,
        **FAST,
        "STATS_CLASS": "crawlplug.stats.RedisStatsCollector",
        "CRAWLPLUG_STATS_INTERVAL": 0.5,
        "ITEM_PIPELINES": json.dumps({"crawlplug.pipelines.RedisItemPipeline": 300}),
    }
    nodes = start_joined(lambda: crawl(args={"base_url": shop.url}, settings=settings), shop)
    seen_running = 0  # crawl-wide pages read while a node still ran
    deadline = time.monotonic() + 120
    while any(n.proc.poll() is None for n in nodes):
        assert time.monotonic() < deadline, "the crawl did not end"
        seen_running = max(seen_running, crawl_stats(client, keys).get("response_received_count", 0))
        time.sleep(0.1)
    for node in nodes:
        assert node.wait(10) == 0, node.text()[-3000:]
        text = node.text()
        assert "'finish_reason': 'finished'" in text
        # scrapy-redis's collector fails here on Scrapy 2.19: "Error caught on signal handler:
        # <LogStats.spider_closed> ... ValueError: invalid literal for int()" (its start_time)
        assert " ERROR: " not in text and "Traceback" not in text, text[-3000:]
    assert seen_running > 0, "crawl-wide stats are readable while the crawl runs"

    pages = len(shop.shop.paths())
    assert sum(shop.hits.values()) == pages  # every page fetched once
    per_node = node_stats(client, keys)
    assert len(per_node) == 2
    total = crawl_stats(client, keys)
    assert total["response_received_count"] == pages
    assert sum(s["response_received_count"] for s in per_node.values()) == pages
    assert all(s["response_received_count"] > 0 for s in per_node.values()), "both nodes crawled"
    for name in ("item_scraped_count", "crawlplug/items_stored", "log_count/INFO"):
        assert total[name] == sum(s.get(name, 0) for s in per_node.values()), name
    assert total["item_scraped_count"] == len(shop.shop.item_paths())
    assert total["start_time"] == min(s["start_time"] for s in per_node.values())
    assert total["finish_time"] == max(s["finish_time"] for s in per_node.values())
    assert total["finish_reason"] == "finished"
    assert all(s["finish_reason"] == "finished" for s in per_node.values())

    items = _export(redis_url, "shop", tmp_path / "items.jsonl")
    truth = shop.shop.truth()
    assert len(items) == len(shop.shop.item_paths())
    assert {item["url"].split(shop.url, 1)[1] for item in items} == shop.shop.item_paths()
    for item in items:
        expected = {k: v for k, v in truth[item["url"].split(shop.url, 1)[1]].items() if k != "url_path"}
        assert {k: item[k] for k in expected} == expected
