"""Real `scrapy crawl` processes sharing one crawl of the demo shop."""

from __future__ import annotations

import json
import signal

import redis

from crawlplug.crawl import Crawl
from crawlplug.frontier.keys import CrawlKeys
from tests.support.nodes import start_joined, wait_for_fetches

FAST = {"CRAWLPLUG_IDLE_CLOSE": 2, "CRAWLPLUG_HEARTBEAT": 1, "CRAWLPLUG_LEASE_TIMEOUT": 10}


def _items(nodes) -> list[dict]:
    return [json.loads(line) for node in nodes for line in node.item_lines()]


def _assert_complete(shop, nodes) -> None:
    hits = shop.hits
    site = shop.shop
    assert set(hits) == site.paths(), "the union of fetched URLs is the site's page set"
    twice = {path: n for path, n in hits.items() if n > 1}
    assert not twice, f"pages fetched twice: {twice}"
    items = _items(nodes)
    assert len(items) == len(site.item_paths())
    truth = site.truth()
    for item in items:
        path = item["url"].split(shop.url, 1)[1]
        expected = {k: v for k, v in truth[path].items() if k != "url_path"}
        assert {k: item[k] for k in expected} == expected


def test_two_nodes_share_one_crawl(crawl, shop, redis_url):
    settings = {"REDIS_URL": redis_url, **FAST}
    nodes = start_joined(lambda: crawl(args={"base_url": shop.url}, settings=settings), shop)
    for node in nodes:
        assert node.wait(180) == 0, node.text()[-3000:]
    _assert_complete(shop, nodes)
    for node in nodes:
        assert "'finish_reason': 'finished'" in node.text()
    # both nodes did real work: the crawl was shared, not done by one of them
    assert all(node.item_lines() for node in nodes), [len(n.item_lines()) for n in nodes]
    status = Crawl(redis.Redis.from_url(redis_url), CrawlKeys("shop")).status()
    assert status["queued"] == 0 and status["in_flight"] == 0
    assert status["seen"] == len(shop.shop.paths())


def test_resume_after_sigterm(crawl, make_shop, redis_url):
    shop = make_shop(items=600, delay=0.02)
    settings = {"REDIS_URL": redis_url, "CONCURRENT_REQUESTS": 4, **FAST}
    first = crawl(args={"base_url": shop.url}, settings=settings)
    wait_for_fetches(shop, first, 150)
    first.signal(signal.SIGTERM)
    assert first.wait(60) == 0
    assert "'finish_reason': 'shutdown'" in first.text()
    fetched = sum(shop.hits.values())
    assert fetched < len(shop.shop.paths())
    client = redis.Redis.from_url(redis_url)
    status = Crawl(client, CrawlKeys("shop")).status()
    assert status["in_flight"] == 0, "a graceful stop gives its leases back"
    assert status["queued"] > 0
    second = crawl(args={"base_url": shop.url}, settings=settings)
    assert second.wait(180) == 0, second.text()[-3000:]
    _assert_complete(shop, [first, second])
