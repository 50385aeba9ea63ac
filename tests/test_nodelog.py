"""Each node's WARNING-and-above log records kept in Redis (crawlplug.nodelog): a real
node's, read back by `crawlplug logs` (the console's route is in tests/test_console_api.py),
and the store's bounds and bad values."""

from __future__ import annotations

import json
import re

import pytest
import redis
from click.testing import CliRunner

from crawlplug.cli import main
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.nodelog import store

KEYS = CrawlKeys("shop")


@pytest.mark.integration
def test_a_nodes_warning_reaches_crawlplug_logs_with_its_node_and_counts(crawl, make_shop, redis_url, r):
    shop = make_shop(items=5)
    # a misspelt setting: the node warns about it while it opens, before its spider does
    node = crawl(args={"base_url": shop.url}, settings={"REDIS_URL": redis_url, "CRAWLPLUG_LEASE_TIMOUT": 5})
    assert node.wait(120) == 0, node.text()[-3000:]
    node_id = re.search(r"crawlplug: node (\S+) starting run", node.text()).group(1)
    res = CliRunner().invoke(main, ["logs", "--redis-url", redis_url, "--crawl", "shop"])
    assert res.exit_code == 0, res.output
    assert (
        f"{node_id} [crawlplug.config.read] WARNING: crawlplug: CRAWLPLUG_LEASE_TIMOUT is not a crawlplug setting"
        in res.output
    )
    assert "by level: WARNING 1" in res.output, res.output
    assert "'crawlplug/node_log_sent': 1" in node.text()
    as_json = json.loads(
        CliRunner().invoke(main, ["logs", "--redis-url", redis_url, "--crawl", "shop", "--json"]).output
    )
    assert [r["node"] for r in as_json["records"]] == [node_id]
    assert as_json["summary"]["loggers"] == {"crawlplug.config.read": 1}
    # what matches nothing says so; a node named that keeps no log is an error naming those that do
    res = CliRunner().invoke(main, ["logs", "--redis-url", redis_url, "--crawl", "shop", "--level", "error"])
    assert res.exit_code == 0 and "no log records kept for crawl 'shop' that match" in res.output
    res = CliRunner().invoke(main, ["logs", "--redis-url", redis_url, "--crawl", "shop", "--node", "bogus"])
    assert (
        res.exit_code == 1 and f"no log kept for node bogus in crawl 'shop' (nodes with one: {node_id})" in res.output
    )


def _record(i: int, level: str = "WARNING", logger: str = "x") -> store.Record:
    return store.Record(n=i, t=1_000 + i, level=level, logger=logger, text=f"record {i}")


def test_a_nodes_log_keeps_its_last_records_and_expires(r: redis.Redis):
    store.append(r, KEYS, "n1", [_record(i) for i in range(5)], keep=3)
    store.append(r, KEYS, "n1", [_record(5, "ERROR", "y")], keep=3)
    got = store.read(r, KEYS, ["n1"])
    assert [g["text"] for g in got] == ["record 3", "record 4", "record 5"]
    assert 0 < r.pttl(store.key(KEYS, "n1")) <= store.KEEP_MS
    assert [g["text"] for g in store.read(r, KEYS, ["n1"], level="error")] == ["record 5"]
    assert [g["text"] for g in store.read(r, KEYS, ["n1"], search="Y")] == ["record 5"], "the logger matches too"
    assert store.summary(got) == {"levels": {"WARNING": 2, "ERROR": 1}, "loggers": {"x": 2, "y": 1}}


def test_two_nodes_logs_read_in_time_order_and_bad_values_are_left_out(r: redis.Redis):
    store.append(r, KEYS, "n1", [_record(1), _record(3)], keep=10)
    store.append(r, KEYS, "n2", [_record(2)], keep=10)
    r.rpush(store.key(KEYS, "n2"), "not json", json.dumps(["a list"]), json.dumps({"t": "soon"}))
    r.set(store.key(KEYS, "n3"), "a string written by hand")
    got = store.read(r, KEYS, ["n1", "n2", "n3"])
    assert [(g["node"], g["text"]) for g in got] == [("n1", "record 1"), ("n2", "record 2"), ("n1", "record 3")]
    assert [g["text"] for g in store.read(r, KEYS, ["n1", "n2"], limit=1)] == ["record 3"]


def test_a_batch_sent_again_after_its_reply_was_lost_is_read_once(r: redis.Redis):
    batch = [_record(1), _record(2, "ERROR")]
    store.append(r, KEYS, "n1", batch, keep=10)
    store.append(r, KEYS, "n1", batch, keep=10)  # the node did not hear the first, and sent it again
    assert r.llen(store.key(KEYS, "n1")) == 4
    got = store.read(r, KEYS, ["n1"])
    assert [g["text"] for g in got] == ["record 1", "record 2"]
    assert store.summary(got)["levels"] == {"WARNING": 1, "ERROR": 1}
    assert store.kept(r, KEYS) == ["n1"]
