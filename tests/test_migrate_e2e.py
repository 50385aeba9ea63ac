"""A crawl started by scrapy-redis, stopped half-way, migrated, finished by crawlplug.

Real `scrapy crawl` processes of the demo project on the local demo shop: the
first runs scrapy-redis 0.9.1 itself (its Scheduler, RFPDupeFilter and queue,
SCHEDULER_PERSIST=True, crawlplug's add-on off) and is stopped gracefully;
`crawlplug migrate from-scrapy-redis shop` carries its queue, fingerprints and
start URLs over; a crawlplug node with crawlplug.legacy.ScrapyRedisDupeFilter
finishes the crawl. Over both halves every page is fetched, and none twice.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crawlplug.crawl import Crawl
from crawlplug.frontier.core import open_frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.layout import claim_shards

from .support.nodes import ROOT

CRAWLPLUG = str(Path(sys.executable).with_name("crawlplug"))
SCRAPY_REDIS = {
    "ADDONS": "{}",
    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "SCHEDULER_PERSIST": True,
}
CRAWLPLUG_NODE = {
    "DUPEFILTER_CLASS": "crawlplug.legacy.ScrapyRedisDupeFilter",
    "CRAWLPLUG_IDLE_CLOSE": 2,
    "CRAWLPLUG_HEARTBEAT": 1,
    "CRAWLPLUG_LEASE_TIMEOUT": 10,
}


def migrate(redis_url: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [CRAWLPLUG, "--redis-url", redis_url, "migrate", "from-scrapy-redis", "shop", "--yes", *args]
    res = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return res


def items(nodes) -> list[dict]:
    return [json.loads(line) for node in nodes for line in node.item_lines() if line.endswith("}")]


def finish_with_crawlplug(crawl, shop, redis_url, first, client, shards: int = 1):
    """Migrate, crawl the rest with crawlplug; check the union of both halves."""
    fetched_by_scrapy_redis = shop.hits
    queued = {"zset": client.zcard, "list": client.llen}[client.type("shop:requests").decode()]("shop:requests")
    fingerprints = client.scard("shop:dupefilter")
    assert queued > 0 and fingerprints > len(fetched_by_scrapy_redis)

    res = migrate(redis_url)
    print(f"\n[migrate]\n{res.stdout}")
    assert f"requests: {queued} read, {queued} admitted, 0 already in the crawl, 0 skipped" in res.stdout
    assert f"fingerprints: {fingerprints} copied" in res.stdout
    assert "function 'json'" in res.stdout
    assert not client.exists("shop:requests"), "the scrapy-redis queue is renamed, a backup"
    assert client.exists("shop:requests:migrated")
    keys = CrawlKeys("shop")
    frontier = open_frontier(client, keys)
    assert frontier.sharded == (shards > 1) and len(frontier.parts()) == (shards + 1 if shards > 1 else 1)
    status = Crawl.of(frontier).status()
    assert status["queued"] == queued

    second = crawl(
        args={"base_url": shop.url}, settings={"REDIS_URL": redis_url, **CRAWLPLUG_NODE, "CRAWLPLUG_SHARDS": shards}
    )
    assert second.wait(180) == 0, second.text()[-3000:]
    log = second.text()
    assert "'finish_reason': 'finished'" in log, log[-3000:]
    assert f"{fingerprints} fingerprints of scrapy-redis (json function) are consulted" in log

    hits = shop.hits
    site = shop.shop
    assert set(hits) == site.paths(), f"never fetched: {sorted(site.paths() - set(hits))[:10]}"
    twice = {path: n for path, n in hits.items() if n > 1}
    # a graceful stop of scrapy-redis finishes the requests it had in flight: none is fetched again
    assert not twice, f"fetched twice: {twice}"
    assert sum(hits.values()) == len(site.paths())
    all_items = items([first, second])
    assert len(all_items) == len(site.item_paths())
    assert len({item["url"] for item in all_items}) == len(all_items)
    assert fetched_by_scrapy_redis and set(fetched_by_scrapy_redis) < site.paths()
    # the home page (the spider's start request, seen by scrapy-redis) was filtered by the old set
    assert "'crawlplug/scrapy_redis_seen':" in log
    status = Crawl.of(open_frontier(client, keys)).status()
    assert (status["queued"], status["in_flight"], status["dead"]) == (0, 0, 0)
    return hits


@pytest.mark.parametrize("shards", [1, 4], ids=["unsharded", "4-shards"])
def test_scrapy_redis_crawl_stopped_by_sigterm_is_finished_by_crawlplug(crawl, make_shop, redis_url, r, shards):
    shop = make_shop(items=400, delay=0.02)
    first = crawl(
        args={"base_url": shop.url}, settings={"REDIS_URL": redis_url, "CONCURRENT_REQUESTS": 4, **SCRAPY_REDIS}
    )
    deadline = time.monotonic() + 90
    while sum(shop.hits.values()) < 150:
        assert first.proc.poll() is None, first.text()[-3000:]
        assert time.monotonic() < deadline, "scrapy-redis did not get going"
        time.sleep(0.05)
    first.signal(signal.SIGTERM)
    assert first.wait(60) == 0, first.text()[-3000:]
    assert "'finish_reason': 'shutdown'" in first.text()
    assert r.type("shop:requests") == b"zset", "scrapy-redis's PriorityQueue: a sorted set of pickles"
    if shards > 1:  # a crawl sharded beforehand (its project sets CRAWLPLUG_SHARDS): migrate into its shards
        claim_shards(r, CrawlKeys("shop"), shards)
    finish_with_crawlplug(crawl, shop, redis_url, first, r, shards)


@pytest.mark.parametrize("queue_class", ["scrapy_redis.queue.FifoQueue", "scrapy_redis.queue.LifoQueue"])
def test_scrapy_redis_list_queue_stopped_by_closespider_is_finished_by_crawlplug(
    crawl, make_shop, redis_url, r, queue_class
):
    shop = make_shop(items=300)
    settings = {
        "REDIS_URL": redis_url,
        "CONCURRENT_REQUESTS": 4,
        "CLOSESPIDER_PAGECOUNT": 120,
        "SCHEDULER_QUEUE_CLASS": queue_class,
        **SCRAPY_REDIS,
    }
    first = crawl(args={"base_url": shop.url}, settings=settings)
    assert first.wait(120) == 0, first.text()[-3000:]
    assert "'finish_reason': 'closespider_pagecount'" in first.text()
    assert r.type("shop:requests") == b"list"
    finish_with_crawlplug(crawl, shop, redis_url, first, r)
