"""Payloads an older crawlplug wrote, read by this one: a queue filled before an upgrade, an
export file, and the compact format that replaced them.

tests/data/payloads_d7f69e2.json holds payloads captured from the encoder of d7f69e2 (the
commit before the compact format; tests/support/oldpayloads.py says how), each with a
description of the request it was made from: today's reader must build each request back
exactly, and today's long-key writer (CRAWLPLUG_PAYLOAD_FORMAT = 1) must still write the
same bytes, so the property tests that encode with it (tests/test_serializer_properties.py)
speak for d7f69e2's encoder too. The last test crawls a queue that a node writing the old
format filled, with a node writing the new one.
"""

from __future__ import annotations

import io
import json
import signal
from pathlib import Path

import pytest
import redis
from scrapy.utils.request import fingerprint

from crawlplug.crawl.transfer import export_crawl, import_crawl
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.serializers import COMPACT_VERSION, FORMAT_VERSION, JsonSerializer, describe_payload
from spiders.shop import ShopSpider
from tests.support.nodes import wait_for_fetches, wait_until
from tests.support.oldpayloads import _requests, describe

DATA = json.loads((Path(__file__).parent / "data" / "payloads_d7f69e2.json").read_text(encoding="utf-8"))
CASES = DATA["cases"]
SPIDER = ShopSpider()
READER = JsonSerializer()
V1_WRITER = JsonSerializer(payload_format=FORMAT_VERSION)
REQUESTS = _requests(SPIDER)


def described(request) -> dict:
    return json.loads(json.dumps(describe(request)))  # tuples as lists, as the data file holds them


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_payload_d7f69e2_wrote_is_read_as_the_request_it_was(name):
    back = READER.loads(CASES[name]["payload"].encode("utf-8"), SPIDER)
    assert described(back) == CASES[name]["request"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_long_key_writer_still_writes_what_d7f69e2_wrote_byte_for_byte(name):
    request = REQUESTS[name]()
    assert described(request) == CASES[name]["request"], "the data file describes the same request"
    assert V1_WRITER.dumps(request, SPIDER).decode("utf-8") == CASES[name]["payload"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_compact_payload_of_each_is_read_back_and_no_bigger(name):
    request = REQUESTS[name]()
    data = READER.dumps(request, SPIDER)
    assert json.loads(data)["v"] == COMPACT_VERSION
    assert described(READER.loads(data, SPIDER)) == CASES[name]["request"]
    assert len(data) <= len(CASES[name]["payload"].encode("utf-8"))
    assert describe_payload(data) == describe_payload(CASES[name]["payload"].encode("utf-8"))


def test_a_shop_link_costs_three_fifths_of_its_old_payload():
    """The demo shop's item link, as its spider yields it (depth and Referer from Scrapy's
    middlewares): the Referer relative to the URL, short keys, nothing in base64."""
    data = READER.dumps(REQUESTS["shop-item"](), SPIDER)
    assert data == (
        b'{"v":3,"u":"http://127.0.0.1:8000/item/464/","r":"/category/4/page/3/","m":{"depth":4},"c":"parse_item"}'
    )
    old = CASES["shop-item"]["payload"].encode("utf-8")
    assert len(data) <= 0.6 * len(old), (len(data), len(old))


def test_an_export_file_of_old_payloads_is_imported_and_crawlable(r, fresh_redis):
    """An export made while the queue held d7f69e2's payloads (the file carries payloads as
    they are) is imported, popped and read by this version."""
    keys = CrawlKeys("upgrade")
    Frontier(r, keys).admit(
        [
            (fingerprint(REQUESTS[name]()), float(i), CASES[name]["payload"].encode("utf-8"))
            for i, name in enumerate(sorted(CASES))
        ]
    )
    out = io.StringIO()
    export_crawl(r, keys, out)
    target = redis.Redis.from_url(fresh_redis.url)
    try:
        assert import_crawl(target, keys, io.StringIO(out.getvalue()))["requests"] == len(CASES)
        leased = Frontier(target, keys).pop(len(CASES) + 1)
    finally:
        target.close()
    assert [json.loads(x.payload)["v"] for x in leased] == [json.loads(CASES[n]["payload"])["v"] for n in sorted(CASES)]
    assert [described(READER.loads(x.payload, SPIDER)) for x in leased] == [CASES[n]["request"] for n in sorted(CASES)]


@pytest.mark.e2e
def test_a_queue_an_old_format_node_filled_is_crawled_by_a_new_one(crawl, make_shop, redis_url):
    """A node writing the old format (the long-key writer, byte for byte d7f69e2's) stops half
    way; a node writing the compact one finishes the crawl from that queue: every page
    fetched, nothing dead-lettered, and the queue held both formats at once."""
    shop = make_shop(items=400)  # 2 list pages a category: list pages are left for the new node
    client = redis.Redis.from_url(redis_url)
    keys = CrawlKeys("shop")
    settings = {"REDIS_URL": redis_url, "CRAWLPLUG_IDLE_CLOSE": 1, "CRAWLPLUG_HEARTBEAT": 1}
    old = crawl(
        args={"base_url": shop.url}, settings={**settings, "CRAWLPLUG_PAYLOAD_FORMAT": 1, "CONCURRENT_REQUESTS": 1}
    )
    wait_for_fetches(shop, old, 4)
    old.signal(signal.SIGTERM)  # a graceful stop: its leases go back to the queue
    assert old.wait(60) == 0, old.text()[-3000:]
    left = [json.loads(p) for p in client.hvals(keys.requests)]
    assert left and {d["v"] for d in left} == {FORMAT_VERSION}, "the first node left old payloads queued"
    fetched_before = dict(shop.hits)
    versions: set[int] = set()

    def both_formats_seen() -> bool:
        versions.update(json.loads(p)["v"] for p in client.hvals(keys.requests))
        return versions == {FORMAT_VERSION, COMPACT_VERSION}

    new = crawl(args={"base_url": shop.url}, settings={**settings, "CONCURRENT_REQUESTS": 4})
    wait_until(both_formats_seen, "old and new payloads queued together", 60, [new])
    assert new.wait(90) == 0, new.text()[-3000:]
    assert set(shop.hits) >= shop.shop.paths(), "every page fetched"
    assert all(
        shop.hits[d["url"].split(shop.url, 1)[1]] > fetched_before.get(d["url"].split(shop.url, 1)[1], 0) for d in left
    ), "the new node fetched every request the old one left"
    items = [json.loads(line) for node in (old, new) for line in node.item_lines()]
    assert {item["url"].split(shop.url, 1)[1] for item in items} == shop.shop.item_paths()
    assert client.llen(keys.dead) == 0 and client.hlen(keys.requests) == 0
    client.close()
