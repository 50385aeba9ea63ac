"""crawlplug's dupefilters under real ``scrapy crawl`` nodes that do not all run crawlplug's Scheduler.

* Two nodes with Scrapy's own scheduler (``SCHEDULER = "scrapy.core.scheduler.Scheduler"``)
  and the Bloom dupefilter, started at the same moment from two pages of one shop:
  each keeps its own queue in memory, the fingerprints are shared in Redis, so no
  page is fetched twice and together they fetch every page.
* One crawlplug node (the add-on) and one node with Scrapy's scheduler and the set
  dupefilter on one crawl: they agree on the fingerprints the same way.

Without shared fingerprints each node would walk the whole shop on its own (every
page is linked from every list page): a page fetched twice is what these tests catch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import redis

from crawlplug.frontier.keys import CrawlKeys
from tests.support.nodes import run_together

from .support.fingerprints import recorded

STOCK = "scrapy.core.scheduler.Scheduler"
BLOOM = "crawlplug.dupefilters.RedisBloomDupeFilter"
SET = "crawlplug.dupefilters.RedisSetDupeFilter"
FAST = {"CRAWLPLUG_IDLE_CLOSE": 1, "CRAWLPLUG_HEARTBEAT": 0.5, "CRAWLPLUG_LEASE_TIMEOUT": 5}


def start_two(crawl: Any, tmp_path: Path, shop: Any, settings: list[dict[str, Any]]) -> list[Any]:
    """Two multisite nodes of crawl "multisite", one from the shop's home and one from a list
    page, started together (go file), run to the end."""
    go = tmp_path / "go"
    starts = [shop.url + "/", shop.url + "/category/2/"]
    nodes = [
        crawl("multisite", args={"start_urls": url, "go_file": str(go)}, settings=s) for url, s in zip(starts, settings)
    ]
    return run_together(nodes, go, "multisite", 120)


def assert_every_page_once(shop: Any, nodes: list[Any]) -> None:
    hits = shop.hits
    twice = {path: n for path, n in hits.items() if n > 1}
    assert not twice, f"pages fetched twice: {twice}"
    missing = shop.shop.paths() - set(hits)
    assert not missing, f"{len(missing)} pages never fetched: {sorted(missing)[:10]}"
    urls = [json.loads(line)["url"] for node in nodes for line in node.item_lines()]
    assert len(urls) == len(set(urls)) == len(shop.shop.paths()), "one item per page, from one node or the other"


def test_two_nodes_with_scrapys_own_scheduler_share_a_bloom_filter(crawl, make_shop, redis_url, tmp_path):
    shop = make_shop(items=40)
    settings = {
        "REDIS_URL": redis_url,
        "SCHEDULER": STOCK,
        "DUPEFILTER_CLASS": BLOOM,
        "CRAWLPLUG_BLOOM_CAPACITY": 1000,
        "CRAWLPLUG_BLOOM_ERROR_RATE": 0.00001,
    }
    nodes = start_two(crawl, tmp_path, shop, [settings, settings])
    assert_every_page_once(shop, nodes)
    for node in nodes:
        log = node.text()
        assert "a dupefilter on its own, under scrapy.core.scheduler.Scheduler" in log, log[-2000:]
        assert "crawlplug: node" not in log, "no crawlplug Scheduler ran"
    client = redis.Redis.from_url(redis_url)
    keys = CrawlKeys("multisite")
    assert int(client.hget(keys.key("bloom:meta"), "count:1")) == len(shop.shop.paths())
    assert not client.exists(keys.queue), "the requests stayed in the nodes' own queues"


def test_a_crawlplug_node_and_a_stock_scheduler_node_agree_on_one_crawl(crawl, make_shop, redis_url, tmp_path):
    shop = make_shop(items=40)
    crawlplug_node = {"REDIS_URL": redis_url, **FAST}
    stock_node = {"REDIS_URL": redis_url, "SCHEDULER": STOCK, "DUPEFILTER_CLASS": SET}
    nodes = start_two(crawl, tmp_path, shop, [crawlplug_node, stock_node])
    assert_every_page_once(shop, nodes)
    assert "crawlplug: node" in nodes[0].text() and "a dupefilter on its own" in nodes[1].text()
    client = redis.Redis.from_url(redis_url)
    assert len(recorded(client, CrawlKeys("multisite"))) == len(shop.shop.paths())
