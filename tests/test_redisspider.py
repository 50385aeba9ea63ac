"""RedisSpider and pushed start entries in real `scrapy crawl` processes.

a) two `redisshop` nodes share a crawl fed by one pushed URL: every page once;
b) an idle worker picks a pushed URL up quickly (the latency is printed);
c) a node SIGKILLed while it holds start leases loses no start entry;
d) a plain (non-Redis) spider in worker mode crawls pushed entries too;
plus scrapy-redis's ``<spider>:start_urls`` key read by a real node.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import redis

from crawlplug.crawl import Crawl
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.serializers import describe_payload

from .support.nodes import start_joined
from .support.patience import patient

CRAWLPLUG = str(Path(sys.executable).with_name("crawlplug"))


def wait_until(cond: Callable[[], bool], timeout: float, what: str, nodes=()) -> None:
    deadline = time.monotonic() + patient(timeout)
    while not cond():
        for node in nodes:
            rc = node.proc.poll()
            assert rc is None, f"a node exited ({rc}) while waiting for {what}:\n{node.text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.01)


def node_registered(client: redis.Redis, keys: CrawlKeys, pid: int) -> bool:
    return any(f":{pid}:" in n.decode() for n in client.zrange(keys.nodes, 0, -1))


def items_of(nodes) -> list[dict]:
    return [json.loads(line) for node in nodes for line in node.item_lines() if line.endswith("}")]


def push(redis_url: str, crawl: str, *entries: str) -> subprocess.CompletedProcess:
    cmd = [CRAWLPLUG, "--redis-url", redis_url, "--crawl", crawl, "push", *entries]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    assert res.returncode == 0, res.stderr
    return res


# -- a) two RedisSpider nodes, one pushed URL ----------------------------------------------


def test_two_redisshop_nodes_crawl_a_pushed_site_once(crawl, make_shop, redis_url):
    shop = make_shop(items=300, delay=0.02)
    settings = {
        "REDIS_URL": redis_url,
        "CRAWLPLUG_IDLE_CLOSE": 2,
        "CRAWLPLUG_HEARTBEAT": 0.5,
        "CRAWLPLUG_LEASE_TIMEOUT": 5,
        "CONCURRENT_REQUESTS": 8,
    }
    nodes = start_joined(lambda: crawl("redisshop", settings=settings), shop, 2)
    pushed = push(redis_url, "redisshop", shop.url + "/")
    assert "pushed 1 start entries" in pushed.stdout
    for node in nodes:
        assert node.wait(40) == 0, node.text()[-3000:]
        assert "'finish_reason': 'finished'" in node.text(), node.text()[-3000:]
    hits = shop.hits
    site = shop.shop
    assert set(hits) == site.paths(), f"missing {sorted(site.paths() - set(hits))[:10]}"
    twice = {p: n for p, n in hits.items() if n != 1}
    assert not twice, f"fetched more than once: {twice}"
    items = items_of(nodes)
    assert len(items) == len(site.item_paths())
    print(f"\n[redisshop] {len(hits)} pages; items per node: {[len(n.item_lines()) for n in nodes]}")
    client = redis.Redis.from_url(redis_url)
    status = Crawl(client, CrawlKeys("redisshop")).status()
    assert (status["queued"], status["in_flight"], status["start_urls"]) == (0, 0, 0)
    assert status["stats"]["start_taken"] == 1
    client.close()


# -- b) an idle worker picks a pushed URL up quickly -----------------------------------------


def test_idle_worker_picks_up_a_pushed_url_quickly(crawl, make_shop, redis_url, record_property):
    shop = make_shop(items=10)
    client = redis.Redis.from_url(redis_url)
    keys = CrawlKeys("redisshop")
    frontier = Frontier(client, keys)
    # default settings: a RedisSpider is a worker (CRAWLPLUG_IDLE_CLOSE 0 for it)
    node = crawl("redisshop", settings={"REDIS_URL": redis_url})
    wait_until(lambda: node_registered(client, keys, node.proc.pid), 30, "the node to register", [node])
    time.sleep(2.0)  # well idle: start() polls for entries
    latencies = []
    for i in range(3):
        path = f"/probe/{i}"  # a 404: fetched, and nothing follows from it
        t0 = time.monotonic()
        Crawl.of(frontier).push_starts([shop.url + path])
        wait_until(lambda p=path: p in shop.hits, 10, f"the fetch of {path}", [node])
        first_hit = next(t for t, p in shop.hit_log if p == path)
        latencies.append(first_hit - t0)
        time.sleep(1.0)
    print(f"\n[idle pickup] push -> first hit: {', '.join(f'{x * 1000:.0f} ms' for x in latencies)}")
    record_property("idle_pickup_ms", json.dumps([round(x * 1000) for x in latencies]))
    assert max(latencies) < 3.0, latencies
    assert node.proc.poll() is None, "a worker does not close when idle"
    node.signal(signal.SIGTERM)
    assert node.wait(30) == 0, node.text()[-3000:]
    assert "'finish_reason': 'shutdown'" in node.text()
    assert not node_registered(client, keys, node.proc.pid), "a graceful stop unregisters"
    client.close()


# -- c) SIGKILL while holding start leases: no start entry lost ------------------------------


def test_kill_9_while_holding_start_leases_loses_no_entry(crawl, make_shop, redis_url):
    shop = make_shop(items=20)
    client = redis.Redis.from_url(redis_url)
    keys = CrawlKeys("slowstart")
    settings = {
        "REDIS_URL": redis_url,
        "CRAWLPLUG_LEASE_TIMEOUT": 4,
        "CRAWLPLUG_HEARTBEAT": 1,
        "CRAWLPLUG_IDLE_CLOSE": 2,
        "REDIS_START_URLS_BATCH_SIZE": 4,
    }
    urls = [f"{shop.url}/item/{i}/" for i in range(1, 11)]
    paths = {f"/item/{i}/" for i in range(1, 11)}
    Crawl.of(Frontier(client, keys)).push_starts(urls)

    first = crawl("slowstart", args={"sleep": 5}, settings=settings)

    def start_leases() -> list[str]:
        marker = f":{first.proc.pid}:"
        return [
            rid.decode()
            for rid, info in client.hgetall(keys.leased).items()
            if marker in info.decode() and "|start|" in info.decode()
        ]

    wait_until(lambda: len(start_leases()) > 0, 30, "the first node to lease start entries", [first])
    held = start_leases()
    first.kill()  # SIGKILL, in the middle of make_request_from_data
    assert len(held) == 4, held
    assert client.llen(keys.start_urls) == 6
    assert not shop.hits, "the killed node fetched nothing"
    assert client.zcard(keys.leases) == 4, "its leases stay until they expire"

    second = crawl("slowstart", settings=settings)
    assert second.wait(40) == 0, second.text()[-3000:]
    hits = shop.hits
    assert set(hits) == paths, f"lost: {sorted(paths - set(hits))}"
    # the killed node fetched nothing, so each entry was crawled once, by the second node
    assert all(n == 1 for n in hits.values()), f"{hits}\n{second.text()[-2500:]}"
    assert {item["url"] for item in items_of([second])} == set(urls)
    status = Crawl.of(Frontier(client, keys)).status()
    assert (status["queued"], status["in_flight"], status["start_urls"]) == (0, 0, 0)
    assert status["stats"]["start_returned"] == 4, status["stats"]
    assert client.hlen(keys.requests) == 0 and client.llen(keys.dead) == 0
    client.close()


def test_sigterm_while_holding_start_leases_gives_them_back_at_once(crawl, make_shop, redis_url):
    """A graceful stop releases its start leases to the head of start_urls right away
    (the lease timeout is long: nothing waits for it), and nothing is lost."""
    shop = make_shop(items=20)
    client = redis.Redis.from_url(redis_url)
    keys = CrawlKeys("slowstart")
    settings = {
        "REDIS_URL": redis_url,
        "CRAWLPLUG_LEASE_TIMEOUT": 60,
        "CRAWLPLUG_HEARTBEAT": 1,
        "CRAWLPLUG_IDLE_CLOSE": 2,
        "REDIS_START_URLS_BATCH_SIZE": 4,
    }
    urls = [f"{shop.url}/item/{i}/" for i in range(1, 7)]
    Crawl.of(Frontier(client, keys)).push_starts(urls)
    first = crawl("slowstart", args={"sleep": 1.5}, settings=settings)
    wait_until(lambda: client.zcard(keys.leases) > 0, 30, "the node to lease start entries", [first])
    first.signal(signal.SIGTERM)
    assert first.wait(30) == 0, first.text()[-3000:]
    assert client.zcard(keys.leases) == 0 and client.hlen(keys.leased) == 0, "every lease given back"
    waiting = [x.decode() for x in client.lrange(keys.start_urls, 0, -1)]
    queued = [describe_payload(client.hget(keys.requests, rid))["url"] for rid in client.zrange(keys.queue, 0, -1)]
    fetched = [f"{shop.url}{p}" for p in shop.hits]
    print(f"\n[sigterm] after the stop: fetched {fetched}, queued {queued}, start_urls {waiting}")
    assert set(waiting + queued + fetched) == set(urls), "no start entry lost"
    assert set(waiting[-2:]) == set(urls[4:]), "the released entries went back in front of the untaken ones"

    second = crawl("slowstart", settings=settings)
    assert second.wait(40) == 0, second.text()[-3000:]
    assert {f"{shop.url}{p}" for p in shop.hits} == set(urls), "every pushed URL fetched"
    client.close()
    # an entry whose request the first node had enqueued (and even fetched) must not be
    # handed back as if untouched: it would be crawled twice
    assert not set(fetched) & set(waiting), f"fetched and also given back to start_urls: {set(fetched) & set(waiting)}"
    assert all(n == 1 for n in shop.hits.values()), shop.hits


# -- d) a plain spider gets pushed entries too -------------------------------------------------


def test_plain_spider_worker_crawls_pushed_entries(crawl, make_shop, redis_url):
    shop = make_shop(items=30)
    node = crawl(
        "shop",
        args={"base_url": shop.url},
        settings={
            "REDIS_URL": redis_url,
            "CRAWLPLUG_IDLE_CLOSE": 0,
            "CRAWLPLUG_HEARTBEAT": 1,
            "CRAWLPLUG_LEASE_TIMEOUT": 5,
        },
    )
    pages = shop.shop.paths()
    wait_until(lambda: set(shop.hits) == pages, 30, "the first crawl", [node])
    time.sleep(1.0)
    assert all(n == 1 for n in shop.hits.values())
    t0 = time.monotonic()
    push(
        redis_url,
        "shop",
        json.dumps({"url": shop.url + "/item/3/?extra=1", "callback": "parse_item"}),
        json.dumps({"url": shop.url + "/", "callback": "parse_list"}),
    )
    wait_until(
        lambda: shop.hits["/item/3/?extra=1"] == 1 and shop.hits["/"] == 2,
        10,
        "the pushed entries to be fetched",
        [node],
    )
    print(f"\n[plain spider] pushed entries fetched {time.monotonic() - t0:.2f} s after `crawlplug push` started")
    time.sleep(1.0)
    hits = shop.hits
    # the home page again (seen, but a start entry bypasses dedup); its links were all seen
    again = {p: n for p, n in hits.items() if n > 1}
    assert again == {"/": 2}, again
    node.signal(signal.SIGTERM)
    assert node.wait(30) == 0, node.text()[-3000:]
    urls = [item["url"] for item in items_of([node])]
    assert urls.count(shop.url + "/item/3/?extra=1") == 1


# -- scrapy-redis's own key, read by a real node ----------------------------------------------


def test_redisshop_reads_scrapy_redis_start_urls_key(crawl, make_shop, redis_url):
    shop = make_shop(items=30)
    client = redis.Redis.from_url(redis_url)
    client.sadd("redisshop:start_urls", shop.url + "/")  # as scrapy-redis users push (REDIS_START_URLS_AS_SET)
    node = crawl(
        "redisshop",
        settings={
            "REDIS_URL": redis_url,
            "CRAWLPLUG_IDLE_CLOSE": 2,
            "CRAWLPLUG_HEARTBEAT": 0.5,
            "CRAWLPLUG_LEASE_TIMEOUT": 5,
        },
    )
    assert node.wait(40) == 0, node.text()[-3000:]
    assert set(shop.hits) == shop.shop.paths()
    assert all(n == 1 for n in shop.hits.values())
    assert not client.exists("redisshop:start_urls")
    client.close()


# -- RedisCrawlSpider: CrawlSpider rules, start URLs from Redis ----------------------------


def test_redis_crawl_spider_follows_its_rules_from_a_pushed_url(crawl, make_shop, redis_url):
    shop = make_shop(items=120)
    settings = {
        "REDIS_URL": redis_url,
        "CRAWLPLUG_IDLE_CLOSE": 2,
        "CRAWLPLUG_HEARTBEAT": 0.5,
        "CRAWLPLUG_LEASE_TIMEOUT": 10,
    }
    node = crawl("redisrules", settings=settings)
    push(redis_url, "redisrules", shop.url + "/")
    assert node.wait(60) == 0, node.text()[-3000:]
    assert "'finish_reason': 'finished'" in node.text()
    items = items_of([node])
    assert sorted(i["url"].split(shop.url, 1)[1] for i in items) == sorted(shop.shop.item_paths())
    assert not {p: n for p, n in shop.hits.items() if n > 1}
