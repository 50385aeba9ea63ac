"""RedisItemPipeline and `crawlplug items`, against a real Redis (and a real crawl)."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import re
import time as clock
import uuid
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import PurePosixPath

import attrs
import pytest
import redis
import scrapy
from click.testing import CliRunner
from redis.backoff import NoBackoff
from redis.retry import Retry
from scrapy.utils.test import get_crawler

from crawlplug.cli import main
from crawlplug.crawl import registry
from crawlplug.errors import ConfigError, ItemError
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.pipelines import RedisItemPipeline, count_items, item_json, iter_items

from .support.faultproxy import FaultProxy
from .support.servers import RedisServer
from .test_integration import FAST

KEYS = CrawlKeys("itemtest")


class Product(scrapy.Item):
    name = scrapy.Field()
    price = scrapy.Field()
    maker = scrapy.Field()


@dataclasses.dataclass
class Offer:
    url: str
    price: Decimal


@attrs.define
class Review:
    stars: int
    text: str


class Colour(enum.Enum):
    RED = "red"


def pipeline(client: redis.Redis, key: str = KEYS.items, **kwargs) -> RedisItemPipeline:
    p = RedisItemPipeline(**kwargs)
    p.bind(client, key)
    return p


def stored(client: redis.Redis, key: str = KEYS.items) -> list[dict]:
    return [json.loads(raw) for raw in iter_items(client, key)]


def run(*args: str):
    return CliRunner().invoke(main, list(args), env={"REDIS_URL": None, "CRAWLPLUG_CRAWL": None})


# -- what goes in ----------------------------------------------------------------------------


def test_every_item_type_goes_in_as_json(r):
    p = pipeline(r)
    items = [
        {"url": "http://x/1", "n": 1},
        Product(name="Lamp", price=Decimal("19.90")),
        Offer("http://x/2", Decimal(5)),
        Review(5, "gréat"),
    ]
    for item in items:
        assert p.process_item(item) is item  # stored before process_item returns
    assert stored(r) == [
        {"url": "http://x/1", "n": 1},
        {"name": "Lamp", "price": "19.90"},
        {"url": "http://x/2", "price": "5"},
        {"stars": 5, "text": "gréat"},
    ]


def test_values_json_cannot_hold_are_converted():
    when = datetime(2025, 6, 1, 12, 30, tzinfo=timezone.utc)
    item = {
        "when": when,
        "naive": datetime(2025, 6, 1, 12, 30),
        "day": date(2025, 6, 1),
        "at": time(7, 5),
        "price": Decimal("0.10"),
        "text": b"caf\xc3\xa9",
        "blob": b"\xff\x00",
        "tags": {"b", "a"},
        "pair": (1, 2),
        "colour": Colour.RED,
        "id": uuid.UUID(int=1),
        "path": PurePosixPath("/a/b"),
        "took": timedelta(seconds=1.5),
        "nan": float("nan"),
        "inf": [float("inf"), 1.0],
        "maker": Product(name="ACME"),
        "offer": Offer("u", Decimal("1.5")),
    }
    assert json.loads(item_json(item)) == {
        "when": "2025-06-01T12:30:00+00:00",
        "naive": "2025-06-01T12:30:00",
        "day": "2025-06-01",
        "at": "07:05:00",
        "price": "0.10",
        "text": "café",
        "blob": {"$base64": "/wA="},
        "tags": ["a", "b"],
        "pair": [1, 2],
        "colour": "red",
        "id": str(uuid.UUID(int=1)),
        "path": "/a/b",
        "took": 1.5,
        "nan": None,
        "inf": [None, 1.0],
        "maker": {"name": "ACME"},
        "offer": {"url": "u", "price": "1.5"},
    }
    assert "\n" not in item_json({"text": "two\nlines"})  # one item, one line


def test_an_item_that_cannot_be_stored_raises(r):
    p = pipeline(r)
    with pytest.raises(ItemError, match="url http://x/1.*no JSON form"):
        p.process_item({"url": "http://x/1", "thing": object()})
    with pytest.raises(ItemError, match="not an item"):
        p.process_item(42)
    loop: dict = {"url": "http://x/2"}
    loop["self"] = loop
    with pytest.raises(ItemError, match="recursion"):
        p.process_item(loop)
    assert not r.exists(KEYS.items)
    assert issubclass(ItemError, TypeError)


def test_list_with_maxlen_keeps_the_newest(r):
    p = pipeline(r, maxlen=3)
    for n in range(10):
        p.process_item({"n": n})
    assert stored(r) == [{"n": 7}, {"n": 8}, {"n": 9}]


def test_stream_with_maxlen(r):
    p = pipeline(r, fmt="stream", maxlen=50)
    for n in range(400):
        p.process_item({"n": n})
    assert r.type(KEYS.items) == b"stream"
    kind, count = count_items(r, KEYS.items)
    assert kind == "stream" and 50 <= count < 400  # MAXLEN ~ trims whole stream nodes
    got = stored(r)
    assert got[-1] == {"n": 399} and [x["n"] for x in got] == list(range(400 - count, 400))


def test_settings(r):
    crawler = get_crawler(
        settings_dict={
            "CRAWLPLUG_ITEMS_FORMAT": "Stream",
            "CRAWLPLUG_ITEMS_MAXLEN": "100",
            "CRAWLPLUG_ITEMS_KEY": "out:%(crawl)s:%(spider)s",
            "CRAWLPLUG_ITEMS_RETRY": "0",
        }
    )
    p = RedisItemPipeline.from_crawler(crawler)
    assert (p.format, p.maxlen, p.retry) == ("stream", 100, 0.0)
    assert p.key_for(CrawlKeys("mycrawl"), "myspider") == "out:mycrawl:myspider"
    default = RedisItemPipeline.from_crawler(get_crawler())
    assert (default.format, default.maxlen) == ("list", 0)
    assert default.key_for(CrawlKeys("shop"), "shop") == "crawlplug:{shop}:items"
    legacy = RedisItemPipeline.from_crawler(get_crawler(settings_dict={"REDIS_ITEMS_KEY": "%(spider)s:items"}))
    assert legacy.key_for(CrawlKeys("c"), "shop") == "shop:items"
    with pytest.raises(ConfigError, match="'list', 'stream' or 'hash'"):
        RedisItemPipeline.from_crawler(get_crawler(settings_dict={"CRAWLPLUG_ITEMS_FORMAT": "set"}))
    by_key = RedisItemPipeline.from_crawler(get_crawler(settings_dict={"CRAWLPLUG_ITEMS_FORMAT": "hash"}))
    assert (by_key.format, by_key.item_key) == ("hash", ["url"])  # CRAWLPLUG_ITEM_KEY's default
    with pytest.raises(ConfigError, match="MAXLEN"):
        RedisItemPipeline(maxlen=-1)
    with pytest.raises(ConfigError, match="CRAWLPLUG_ITEMS_KEY"):
        RedisItemPipeline(key="items:%(nope)s").key_for(KEYS, "x")


# -- Redis errors ------------------------------------------------------------------------------


def _down(server: RedisServer) -> redis.Redis:
    # no retries inside redis-py (its default retries a refused connection for ~5 s)
    client = redis.Redis(port=server.port, socket_connect_timeout=1, socket_timeout=2, retry=Retry(NoBackoff(), 0))
    server.stop()
    return client


def test_a_redis_error_propagates(fresh_redis, r):
    p = pipeline(_down(fresh_redis), retry=0)
    with pytest.raises(redis.ConnectionError):
        p.process_item({"n": 1})
    # an error Redis answers is raised at once, whatever the retry setting
    r.hset(KEYS.items, "not", "a list")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        pipeline(r, retry=300).process_item({"n": 1})


def test_an_item_waits_for_redis_to_come_back(fresh_redis):
    client = _down(fresh_redis)
    p = pipeline(client, retry=300)
    waits: list[float] = []

    async def fake_sleep(seconds: float) -> None:  # a fake clock; Redis is real
        waits.append(seconds)
        if len(waits) == 3:
            fresh_redis.start()

    p.sleep = fake_sleep
    pending = p.process_item({"n": 1})
    assert asyncio.iscoroutine(pending)  # Scrapy awaits it; the request stays unacknowledged
    assert asyncio.run(pending) == {"n": 1}
    assert waits == [0.1, 0.2, 0.4]
    assert stored(client) == [{"n": 1}]


def test_an_item_gives_up_after_the_retry_time(fresh_redis):
    p = pipeline(_down(fresh_redis), retry=1.0)

    async def no_sleep(seconds: float) -> None:
        pass

    p.sleep = no_sleep
    with pytest.raises(redis.ConnectionError):
        asyncio.run(p.process_item({"n": 1}))  # backoff 0.1 + 0.2 + 0.4, then 0.8 would pass 1.0 s


@pytest.mark.parametrize(("fmt", "maxlen"), [("list", 0), ("list", 50), ("stream", 0)])
def test_an_item_whose_reply_was_lost_is_stored_once(fmt, maxlen, fresh_redis):
    """Redis runs the write, the connection is reset before the reply: the retry finds it."""
    proxy = FaultProxy.for_url(fresh_redis.url).start()
    try:
        client = redis.Redis.from_url(proxy.url, socket_timeout=2, retry=Retry(NoBackoff(), 0))
        p = pipeline(client, fmt=fmt, maxlen=maxlen)
        p.sleep = _no_sleep
        for n in range(3):
            assert p.process_item({"n": n}) == {"n": n}
        # the write of item 3 runs in Redis and its reply never arrives; then the first
        # retry's reply is lost too (the script ran: it appended nothing, found it)
        command = b"XADD" if fmt == "stream" else b"RPUSH"
        proxy.reset_reply(command)
        pending = p.process_item({"n": 3})
        assert asyncio.iscoroutine(pending)
        proxy.reset_reply(b"EVALSHA")
        assert asyncio.run(pending) == {"n": 3}
        # a write lost before Redis ran it is still stored, once
        proxy.cut()
        pending = p.process_item({"n": 4})
        proxy.restore()
        assert asyncio.run(pending) == {"n": 4}
        assert p.process_item({"n": 5}) == {"n": 5}
        assert stored(redis.Redis.from_url(fresh_redis.url)) == [{"n": n} for n in range(6)]
        assert proxy.resets >= 3  # both lost replies and the cut really happened
    finally:
        proxy.stop()


def test_a_retry_does_not_take_an_older_equal_item_for_its_own(fresh_redis):
    """The search covers only what was appended since this node's last confirmed write."""
    client = redis.Redis.from_url(fresh_redis.url, retry=Retry(NoBackoff(), 0))
    p = pipeline(client)
    p.process_item({"same": 1})
    p.process_item({"other": 2})
    assert p.store_again(json.dumps({"same": 1}, separators=(",", ":")), 2) is True
    assert p.store_again(json.dumps({"same": 1}, separators=(",", ":")), 2) is False  # the one just appended
    assert [item for item in stored(client)] == [{"same": 1}, {"other": 2}, {"same": 1}]


async def _no_sleep(seconds: float) -> None:
    pass


def test_a_hash_keeps_one_item_per_key_and_a_run_again_updates_it(r, redis_url):
    p = pipeline(r, fmt="hash", item_key=["sku"])
    for sku, price in (("a", 1.0), ("b", 2.0), ("a", 1.5)):  # "a" seen again, changed
        assert p.process_item({"sku": sku, "price": price}) == {"sku": sku, "price": price}
    assert sorted(stored(r), key=lambda i: i["sku"]) == [{"sku": "a", "price": 1.5}, {"sku": "b", "price": 2.0}]
    assert r.hget(KEYS.items, '["a"]') == b'{"sku":"a","price":1.5}'
    assert count_items(r, KEYS.items) == ("hash", 2)
    with pytest.raises(ItemError, match=r"by its key \['sku'\]: it has no sku"):
        p.process_item({"price": 3})
    with pytest.raises(ConfigError, match="a hash keeps one item per key"):
        RedisItemPipeline(fmt="hash", maxlen=10, item_key=["sku"])
    with pytest.raises(ConfigError, match="name it in CRAWLPLUG_ITEM_KEY"):
        RedisItemPipeline(fmt="hash", item_key=[])
    res = run("items", "export", "--redis-url", redis_url, "--crawl", KEYS.crawl)
    assert res.exit_code == 0, res.output
    exported = [json.loads(line) for line in res.output.splitlines() if line.startswith("{")]
    assert sorted(item["sku"] for item in exported) == ["a", "b"] and "2 in the hash" in res.output


# -- crawlplug items ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["list", "stream"])
def test_cli_count_and_export(fmt, r, redis_url, tmp_path):
    p = pipeline(r, fmt=fmt)
    for n in range(25):
        p.process_item({"n": n, "text": "é\nx"})
    res = run("items", "count", "--redis-url", redis_url, "--crawl", KEYS.crawl)
    assert res.exit_code == 0, res.output
    assert res.output.strip() == "25"

    out = tmp_path / "items.jsonl"
    res = run("items", "export", "--redis-url", redis_url, "--crawl", KEYS.crawl, "-o", str(out), "--chunk", "7")
    assert res.exit_code == 0, res.output
    assert f"exported 25 items from {KEYS.items} (25 in the {fmt}) to {out}" in res.output
    lines = out.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [{"n": n, "text": "é\nx"} for n in range(25)]

    res = run("--redis-url", redis_url, "items", "export", "--key", KEYS.items, "-n", "10", "--chunk", "4")
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert rows == [{"n": n, "text": "é\nx"} for n in range(10)]
    assert "exported 10 items" in res.stderr


def test_cli_without_items(r, redis_url):
    res = run("items", "count", "--redis-url", redis_url, "--crawl", KEYS.crawl)
    assert res.exit_code == 1 and f"no crawl {KEYS.crawl!r} on this Redis" in res.output, "unknown: said, not 0"
    registry.register(r, KEYS)  # the crawl exists (a node started it), with no items yet
    res = run("items", "count", "--redis-url", redis_url, "--crawl", KEYS.crawl)
    assert res.exit_code == 0 and res.output.strip() == "0"
    res = run("items", "export", "--redis-url", redis_url, "--crawl", KEYS.crawl)
    assert res.exit_code == 0 and res.stdout == ""
    assert "exported 0 items" in res.stderr and "no items key" in res.stderr
    r.sadd(KEYS.items, "a")
    res = run("items", "export", "--redis-url", redis_url, "--crawl", KEYS.crawl)
    assert res.exit_code == 1
    assert "is a Redis set, not a list, stream or hash of items" in res.output
    res = run("items", "count", "--redis-url", redis_url)
    assert res.exit_code == 1 and "which crawl?" in res.output


# -- a real crawl ----------------------------------------------------------------------------------


def test_crawl_into_a_capped_stream(crawl, shop, redis_url, tmp_path):
    client = redis.Redis.from_url(redis_url)
    keys = CrawlKeys("shop")
    node = crawl(
        args={"base_url": shop.url},
        settings={
            "REDIS_URL": redis_url,
            **FAST,
            "ITEM_PIPELINES": json.dumps({"crawlplug.pipelines.RedisItemPipeline": 300}),
            "CRAWLPLUG_ITEMS_FORMAT": "stream",
            "CRAWLPLUG_ITEMS_MAXLEN": 100,
        },
    )
    assert node.wait(120) == 0, node.text()[-3000:]
    text = node.text()
    assert "'finish_reason': 'finished'" in text
    total = len(shop.shop.item_paths())
    assert f"'crawlplug/items_stored': {total}" in text
    kind, count = count_items(client, keys.items)
    assert kind == "stream" and 100 <= count < total
    out = tmp_path / "items.jsonl"
    res = run("items", "export", "--redis-url", redis_url, "--crawl", "shop", "-o", str(out))
    assert res.exit_code == 0, res.output
    items = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(items) == count
    truth = shop.shop.truth()
    for item in items:
        path = item["url"].split(shop.url, 1)[1]
        assert {k: item[k] for k in ("sku", "name", "price")} == {k: truth[path][k] for k in ("sku", "name", "price")}


def test_redis_outage_mid_crawl_loses_no_item(crawl, make_shop, fresh_redis):
    """Redis goes away mid-crawl and comes back: items wait for it, and every item is stored once."""
    shop = make_shop(items=300, delay=0.02)
    client = redis.Redis.from_url(fresh_redis.url)
    keys = CrawlKeys("shop")
    node = crawl(
        args={"base_url": shop.url},
        settings={
            "REDIS_URL": fresh_redis.url,
            **FAST,
            "CONCURRENT_REQUESTS": 4,
            "ITEM_PIPELINES": json.dumps({"crawlplug.pipelines.RedisItemPipeline": 300}),
        },
    )
    while client.llen(keys.items) < 50:
        assert node.proc.poll() is None, node.text()[-3000:]
        clock.sleep(0.05)
    client.shutdown(save=True)  # its data survives in dump.rdb
    fresh_redis.proc.wait(10)
    clock.sleep(2)
    fresh_redis.start()
    assert node.wait(120) == 0, node.text()[-3000:]
    text = node.text()
    assert "cannot store items in Redis" in text and "items reach Redis again" in text
    urls = [json.loads(raw)["url"] for raw in iter_items(client, keys.items)]
    assert {u.split(shop.url, 1)[1] for u in urls} == shop.shop.item_paths()
    # at least once: a request leased by a pop whose reply the outage swallowed comes back
    # when its lease expires, and only a redelivered request may store its item twice
    redelivered = re.search(r"'crawlplug/redelivered': (\d+)", text)
    assert len(urls) - len(set(urls)) <= (int(redelivered.group(1)) if redelivered else 0)
