"""Corrupt crawl keys under real crawls: real `scrapy crawl shop` nodes, the suite's Redis.

A corrupt key (one that holds what crawlplug never writes there) is not an outage:
each node says so once, naming the key and what to do, and goes on with everything
that does not need the key; the crawl still finishes; once the operator repairs the
key the way docs/faults.md says, what waited goes through, and nothing is lost or
fetched twice.

- ``start_urls`` holding a set (``SADD``, scrapy-redis's REDIS_START_URLS_AS_SET
  habit), there before the nodes start, or planted mid-crawl and then repaired;
- ``seq`` holding no integer: every admission refuses (so every ack, which rides
  in an admission), while heartbeats go through, for longer than the lease timeout:
  the pages finished meanwhile stay leased to their node (the heartbeat renews acks
  waiting to be sent) and are not fetched again once the key is deleted.
"""

from __future__ import annotations

import json
import re
import time

from click.testing import CliRunner

from crawlplug.cli import main
from crawlplug.frontier.keys import CrawlKeys

from .support.nodes import start_joined, wait_until

KEYS = CrawlKeys("shop")
FAST = {"CRAWLPLUG_IDLE_CLOSE": 2, "CRAWLPLUG_HEARTBEAT": 0.5, "CONCURRENT_REQUESTS": 2}


def _errors(text: str) -> list[str]:
    return [line for line in text.splitlines() if " ERROR: " in line]


def _assert_crawled_once(shop) -> None:
    hits = shop.hits
    assert set(hits) == shop.shop.paths(), f"never fetched: {sorted(shop.shop.paths() - set(hits))[:5]}"
    assert not [p for p, n in hits.items() if n > 1], f"fetched twice: {[p for p, n in hits.items() if n > 1][:5]}"


def _assert_finished_with_one_error_about(texts: list[str], key: str, *words: str) -> None:
    for text in texts:
        assert "'finish_reason': 'finished'" in text and "Traceback" not in text, text[-3000:]
        errors = _errors(text)
        assert len(errors) == 1, errors
        assert key in errors[0] and all(w in errors[0] for w in words), errors[0]


def test_a_start_urls_set_at_start_is_one_error_and_the_crawl_finishes(crawl, make_shop, r, redis_url):
    """defect 3, at start: the node used to die in join.lua (LLEN on a set)."""
    shop = make_shop(items=100)
    entry = f"{shop.url}/item/1/"
    r.sadd(KEYS.start_urls, entry)
    nodes = start_joined(lambda: crawl(args={"base_url": shop.url}, settings={"REDIS_URL": redis_url, **FAST}), shop, 2)
    for node in nodes:
        assert node.wait(120) == 0, node.text()[-3000:]
    _assert_finished_with_one_error_about(
        [n.text() for n in nodes], KEYS.start_urls, "holds a set, not a list", "crawlplug push", "delete the key"
    )
    _assert_crawled_once(shop)
    assert r.smembers(KEYS.start_urls) == {entry.encode()}, "its entries are left alone, not lost"


def test_a_start_urls_set_planted_mid_crawl_then_repaired(crawl, make_shop, r, redis_url):
    """defect 3, mid-crawl: idle.lua and starts.lua used to fail, taken for an outage
    forever. The entry waits in the set; the operator's repair (docs/faults.md: move the
    entries with `crawlplug push`, delete the key) gets it crawled."""
    shop = make_shop(items=300, delay=0.1)
    other = make_shop(items=1)  # reached only through the planted entry
    nodes = start_joined(lambda: crawl(args={"base_url": shop.url}, settings={"REDIS_URL": redis_url, **FAST}), shop, 2)
    wait_until(lambda: sum(shop.hits.values()) >= 30, "30 pages fetched", nodes=nodes)
    entry = json.dumps({"url": f"{other.url}/", "callback": "parse_list"})  # the shop spider has no parse()
    r.sadd(KEYS.start_urls, entry)
    wait_until(lambda: all(KEYS.start_urls in n.text() for n in nodes), "every node to name the key", nodes=nodes)
    assert not other.hits, "nothing read from the set"
    entries = [x.decode() for x in r.smembers(KEYS.start_urls)]
    r.delete(KEYS.start_urls)
    res = CliRunner().invoke(main, ["push", "--redis-url", redis_url, "--crawl", "shop", *entries])
    assert res.exit_code == 0, res.output
    for node in nodes:
        assert node.wait(120) == 0, node.text()[-3000:]
    _assert_finished_with_one_error_about(
        [n.text() for n in nodes], KEYS.start_urls, "holds a set, not a list", "crawlplug push"
    )
    _assert_crawled_once(shop)
    _assert_crawled_once(other)  # the repaired entry was crawled, and the site behind it


def test_admissions_refused_longer_than_the_lease_timeout_refetch_nothing(crawl, make_shop, r, redis_url):
    """defect 5: `seq` holding no integer refuses every admission, and so every ack,
    while heartbeats go through; for 3 lease timeouts. Pages finished meanwhile were
    reaped and fetched again (and could end as dead letters) when the heartbeat did not
    renew acks waiting to be sent. The documented repair: delete `seq`."""
    lease = 2
    shop = make_shop(items=200, delay=0.05)
    settings = {"REDIS_URL": redis_url, **FAST, "CRAWLPLUG_LEASE_TIMEOUT": lease, "CRAWLPLUG_MAX_DELIVERIES": 2}
    nodes = [crawl(args={"base_url": shop.url}, settings=settings) for _ in range(2)]
    wait_until(lambda: sum(shop.hits.values()) >= 20, "20 pages fetched", nodes=nodes)
    r.set(KEYS.seq, "12abc")
    refused_at = time.monotonic()
    wait_until(lambda: all(KEYS.seq in n.text() for n in nodes), "every node to meet the corrupt seq", nodes=nodes)
    acked = int(r.hget(KEYS.stats, "acked") or 0)
    time.sleep(max(0.0, refused_at + 3 * lease - time.monotonic()))
    assert int(r.hget(KEYS.stats, "acked") or 0) == acked, "no ack went through while seq was corrupt"
    fetched_meanwhile = sum(shop.hits.values())
    r.delete(KEYS.seq)
    for node in nodes:
        assert node.wait(120) == 0, node.text()[-3000:]
    texts = [n.text() for n in nodes]
    _assert_finished_with_one_error_about(texts, KEYS.seq, "not an integer", "repair or delete the key")
    for text in texts:
        assert "leases of this node expired" not in text, "no lease lost: acks waiting were renewed"
        reaped = re.search(r"'crawlplug/reaped': (\d+)", text)
        assert reaped is None, f"{reaped.group(0)}: nothing reaped"
    _assert_crawled_once(shop)
    assert r.llen(KEYS.dead) == 0, "nothing dead-lettered"
    assert fetched_meanwhile < len(shop.shop.paths()), "the crawl was held while admissions were refused"
