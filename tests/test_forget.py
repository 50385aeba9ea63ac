"""``crawlplug forget``: URLs' fingerprints removed from a crawl's dedup (scrapy-redis #302).

In the demo project (its fingerprinter and queue class), on a real Redis: the set, the
expiring set and a sharded crawl forget exactly what was asked and admit it again; a
Bloom filter refuses, saying why, and changes nothing; ``--roll`` forgets everything
(the one thing a Bloom filter can do); patterns select among URLs crawlplug can read
(given ones, dead letters); a dry run changes nothing. The last test is the issue's
case with real crawls: URLs pushed again are filtered, until two of them are forgotten.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from scrapy import Request
from scrapy.utils.test import get_crawler

from crawlplug.cli import main
from crawlplug.crawl import registry
from crawlplug.frontier import open_frontier
from crawlplug.frontier.bloom import BloomSpec
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.dedup import BloomDedup, TtlDedup
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.layout import claim_shards
from crawlplug.serializers import JsonSerializer

from .support.nodes import ROOT

K = CrawlKeys("shop")
CRAWLPLUG = str(Path(sys.executable).with_name("crawlplug"))
FP = get_crawler().request_fingerprinter  # the demo project sets no REQUEST_FINGERPRINTER_CLASS
URLS = [f"http://shop.test/item/{i}/" for i in range(6)]


def forget(redis_url: str, *args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(
        main,
        ["--redis-url", redis_url, "--crawl", K.crawl, "forget", *args],
        input=input,
        env={"REDIS_URL": None, "CRAWLPLUG_CRAWL": None},
    )


def admitted(frontier: Any, urls: list[str], route: bool = False) -> str:
    """Admit a request per URL as the Scheduler would: the flags ("1" new)."""
    items = [
        (frontier.dedup.argument(FP.fingerprint(Request(u))), 0.0, b"{}", "", Request(u).url.split("/")[2])
        if route
        else (frontier.dedup.argument(FP.fingerprint(Request(u))), 0.0, b"{}")
        for u in urls
    ]
    return frontier.admit(items).flags


@pytest.fixture
def crawl_in(r: redis.Redis) -> Any:
    def make(**kwargs: Any) -> Frontier:
        registry.register(r, K)
        return Frontier(r, K, node_id="n", **kwargs)

    return make


def test_forgotten_urls_are_admitted_again_and_the_others_stay_seen(redis_url, r, crawl_in):
    f = crawl_in()
    assert admitted(f, URLS) == "111111"
    result = forget(redis_url, URLS[1], URLS[4], "http://shop.test/never/")
    assert result.exit_code == 0, result.output
    assert "forgot 2 of 3 URLs (1 were not recorded)" in result.output
    assert "not recorded  GET http://shop.test/never/" in result.output and "CRAWLPLUG_FP_CACHE" in result.output
    assert admitted(f, URLS) == "010010"
    assert r.scard(K.seen) == 6


def test_the_expiring_set_forgets_too(redis_url, r, crawl_in):
    f = crawl_in(dedup=TtlDedup(3600))
    assert admitted(f, URLS[:3]) == "111"
    assert forget(redis_url, URLS[0]).exit_code == 0
    assert admitted(f, URLS[:3]) == "100"


def test_a_sharded_crawl_forgets_in_the_shard_admission_used(redis_url, r):
    claim_shards(r, K, 3)
    registry.register(r, K)
    f = open_frontier(r, K, node_id="n")
    hosts = [f"http://site{i}.test/p" for i in range(9)]
    assert admitted(f, hosts, route=True) == "1" * 9
    result = forget(redis_url, *hosts[:5])
    assert result.exit_code == 0 and "forgot 5 of 5 URLs" in result.output, result.output
    assert admitted(f, hosts, route=True) == "11111" + "0000"


def test_a_bloom_filter_cannot_forget_one_url_and_says_what_it_can(redis_url, r, crawl_in):
    f = crawl_in(dedup=BloomDedup(BloomSpec(1000, 0.001)))
    assert admitted(f, URLS) == "111111"
    before = {k: r.dump(k) for k in r.scan_iter("crawlplug:{shop}:bloom*")}
    result = forget(redis_url, URLS[0])
    assert result.exit_code == 1
    assert "Bloom filter (bloom), which cannot forget one URL" in result.output
    assert "Nothing was removed" in result.output and "crawlplug forget --roll" in result.output
    assert {k: r.dump(k) for k in r.scan_iter("crawlplug:{shop}:bloom*")} == before


def test_roll_forgets_every_fingerprint_of_a_bloom_filter(redis_url, r, crawl_in):
    f = crawl_in(dedup=BloomDedup(BloomSpec(1000, 0.001)))
    assert admitted(f, URLS) == "111111"
    assert forget(redis_url, "--roll", input="n\n").exit_code == 1, "asks first; no is no"
    assert admitted(f, URLS[:1]) == "0"
    result = forget(redis_url, "--roll", "--yes")
    assert result.exit_code == 0 and "forgot every fingerprint" in result.output, result.output
    assert not list(r.scan_iter("crawlplug:{shop}:bloom*"))
    f.forget_dedup_layers()
    assert admitted(f, URLS) == "111111", "every URL is new in the new generation"
    assert forget(redis_url, "--roll", "--yes").output.count("forgot every fingerprint") == 1


def test_a_pattern_selects_among_the_dead_letters(redis_url, r, crawl_in):
    f = crawl_in()
    assert admitted(f, URLS) == "111111"
    payloads = [JsonSerializer().dumps(Request(u), None) for u in URLS[:4]]
    for payload in payloads:
        r.rpush(K.dead, json.dumps({"reason": "http 500"}).encode() + b"\n" + payload)
    r.rpush(K.dead, b'{"reason": "garbage"}\nnot json')
    result = forget(redis_url, "--from-dead", "--pattern", "*/item/[02]/")
    assert result.exit_code == 0, result.output
    assert "forgot 2 of 2 URLs" in result.output and "1 dead letters are not JSON requests" in result.output
    assert admitted(f, URLS) == "101000"


def test_a_pattern_matching_nothing_and_a_dry_run_change_nothing(redis_url, r, crawl_in):
    f = crawl_in()
    admitted(f, URLS)
    none = forget(redis_url, URLS[0], "--pattern", "*/cart/*")
    assert none.exit_code == 1 and "none matching */cart/*" in none.output
    dry = forget(redis_url, URLS[0], "--dry-run")
    assert dry.exit_code == 0 and "would forget GET http://shop.test/item/0/" in dry.output
    assert admitted(f, URLS[:1]) == "0"


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ((), "nothing to forget"),
        (("--roll", URLS[0]), "give it alone"),
        (("not a url",), "argument 1"),
    ],
)
def test_bad_invocations_say_why(redis_url, crawl_in, args, why):
    crawl_in()
    result = forget(redis_url, *args)
    assert result.exit_code != 0 and why in result.output, result.output


def test_an_unknown_crawl_is_refused(redis_url):
    result = forget(redis_url, URLS[0])
    assert result.exit_code == 1 and "shop" in result.output


def test_forgotten_urls_pushed_again_are_crawled_again(crawl, make_shop, redis_url):
    """scrapy-redis #302: URLs pushed every run, filtered when seen; the failed ones are
    forgotten so the next push fetches them, and only them."""
    shop = make_shop(items=6)
    pages = [f"{shop.url}/item/{i}/" for i in range(1, 5)]
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "CRAWLPLUG_CRAWL")}
    settings = {
        "REDIS_URL": redis_url,
        "CRAWLPLUG_INCREMENTAL": True,
        "CRAWLPLUG_IDLE_CLOSE": 1,
        "CRAWLPLUG_HEARTBEAT": 0.5,
        "CRAWLPLUG_LEASE_TIMEOUT": 5,
    }

    def cli(*args: str) -> str:
        proc = subprocess.run(
            [CRAWLPLUG, "--redis-url", redis_url, "--crawl", "slowstart", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    def run() -> list[str]:
        cli("push", *[json.dumps({"url": u, "dont_filter": False}) for u in pages])
        node = crawl("slowstart", settings=settings)
        assert node.wait(60) == 0, node.text()[-3000:]
        return sorted(json.loads(line)["url"] for line in node.item_lines())

    assert run() == pages
    assert run() == [], "seen before: filtered"
    out = cli("forget", pages[1], pages[3])
    assert "forgot 2 of 2 URLs" in out
    assert run() == [pages[1], pages[3]]
