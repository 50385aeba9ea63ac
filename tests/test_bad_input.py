"""Bad input gets a clear error and loses nothing (real Redis, real crawls)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from scrapy import Request

from crawlplug.crawl import Crawl
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.serializers import JsonSerializer

from .support.fingerprints import recorded
from .support.nodes import ROOT, SCRAPY

FAST = {"CRAWLPLUG_IDLE_CLOSE": 1, "CRAWLPLUG_HEARTBEAT": 0.5, "CRAWLPLUG_LEASE_TIMEOUT": 5}


def _run(args: list[str], cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("REDIS_URL", None)
    return subprocess.run([SCRAPY, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.integration  # starts processes of its own
def test_unreachable_redis_is_one_clear_line_and_nonzero_exit():
    proc = _run(["crawl", "shop", "-s", "REDIS_URL=redis://:s3cret@127.0.0.1:1/0"])
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if " ERROR: " in line]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert "cannot reach Redis at redis://:***@127.0.0.1:1/0" in errors[0]
    assert "Connection refused" in errors[0]
    assert "Traceback" not in proc.stderr
    assert "s3cret" not in proc.stderr
    assert "finish_reason': 'redis_unavailable'" in proc.stderr


@pytest.mark.integration  # starts processes of its own
def test_malformed_redis_url_is_a_config_error():
    proc = _run(["crawl", "shop", "-s", "REDIS_URL=http://example.com"])
    assert proc.returncode != 0
    assert "malformed REDIS_URL 'http://example.com'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_corrupt_queue_entries_go_to_dead_letters_and_the_crawl_goes_on(crawl, shop, redis_url):
    client = redis.Redis.from_url(redis_url)
    frontier = Frontier(client, CrawlKeys("shop"))
    # edited from a long-key payload (CRAWLPLUG_PAYLOAD_FORMAT = 1), which every node reads;
    # corrupt compact payloads are tests/test_serializers.py's
    good = JsonSerializer(payload_format=1).dumps(Request(shop.url + "/item/1/"), None)
    unknown_cb = json.loads(good)
    unknown_cb["callback"] = "no_such_method"
    evil_class = json.loads(good)
    evil_class["_class"] = "os.system"
    ftp = json.loads(good)
    ftp["url"] = "ftp://127.0.0.1/x"
    entries = [
        b"\x80\x04garbage\xff",  # e.g. a pickle, or noise
        b'{"v": 1, "url": 5}',
        json.dumps(unknown_cb).encode(),
        json.dumps(evil_class).encode(),
        json.dumps(ftp).encode(),
    ]
    # highest priority so they are popped first, mixed with the real crawl
    frontier.admit([(b"", -100.0, payload) for payload in entries])
    node = crawl(args={"base_url": shop.url}, settings={"REDIS_URL": redis_url, **FAST})
    assert node.wait(120) == 0, node.text()[-3000:]
    assert set(shop.hits) == shop.shop.paths()
    text = node.text()
    assert "'finish_reason': 'finished'" in text
    assert "'crawlplug/undecodable': 5" in text
    dead = Crawl.of(frontier).dead_letters()
    assert len(dead) == 5
    reasons = " | ".join(d.header["reason"] for d in dead)
    assert "not JSON" in reasons
    assert "no valid url" in reasons
    assert "no method 'no_such_method'" in reasons
    assert "allow-list" in reasons
    assert "not crawlable" in reasons
    assert sorted(d.payload for d in dead) == sorted(entries)
    status = Crawl.of(frontier).status()
    assert status["queued"] == 0 and status["in_flight"] == 0
    assert status["stats"]["dead"] == 5


BAD_SPIDER = """
import scrapy


class BadMetaSpider(scrapy.Spider):
    name = "badmeta"

    async def start(self):
        base = self.settings.get("DEMO_SHOP_URL")
        yield scrapy.Request(base + "/item/1/", meta={"handle": object()}, callback=self.parse)
        yield scrapy.Request(base + "/item/2/", callback=lambda r: None)
        yield scrapy.Request(base + "/item/3/", callback=self.parse)

    def parse(self, response):
        yield {"url": response.url}
"""


def test_unserializable_requests_are_refused_and_their_fingerprint_not_recorded(project_copy, shop, redis_url):
    (project_copy / "spiders" / "badmeta.py").write_text(BAD_SPIDER)
    proc = _run(
        [
            "crawl",
            "badmeta",
            "-s",
            f"REDIS_URL={redis_url}",
            "-s",
            f"DEMO_SHOP_URL={shop.url}",
            "-s",
            "CRAWLPLUG_IDLE_CLOSE=1",
        ],
        cwd=project_copy,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "meta['handle'] cannot be stored as JSON" in proc.stderr
    assert "callback/errback must be a spider method" in proc.stderr
    assert "'crawlplug/unserializable': 2" in proc.stderr
    assert shop.hits == {"/item/3/": 1}
    client = redis.Redis.from_url(redis_url)
    seen = recorded(client, CrawlKeys("badmeta"))
    assert len(seen) == 1 and all(len(fp) == 20 for fp in seen)


def test_python_is_not_executed_from_a_payload(crawl, shop, redis_url, tmp_path):
    """A pickle that would create a marker file, written into the queue, is never run."""
    marker = tmp_path / "pwned"
    payload = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."  # protocol-0 pickle calling os.system
    client = redis.Redis.from_url(redis_url)
    Frontier(client, CrawlKeys("shop")).admit([(b"", -100.0, payload)])
    node = crawl(args={"base_url": shop.url}, settings={"REDIS_URL": redis_url, **FAST})
    assert node.wait(120) == 0
    assert not marker.exists()
    assert "'crawlplug/undecodable': 1" in node.text()


def test_sys_executable_has_scrapy():
    # the suite runs `scrapy crawl` from the same environment as pytest
    assert Path(SCRAPY).exists(), f"no scrapy next to {sys.executable}"


def test_a_node_with_another_bloom_sizing_refuses_to_join(shop, redis_url):
    bloom = [
        "-s",
        "DUPEFILTER_CLASS=crawlplug.dupefilters.RedisBloomDupeFilter",
        "-s",
        f"REDIS_URL={redis_url}",
        "-a",
        f"base_url={shop.url}",
        "-s",
        "CRAWLPLUG_IDLE_CLOSE=0.5",
        # the next run keeps the filter (a new run of a crawl that is not incremental starts
        # with none, and may size it afresh)
        "-s",
        "CRAWLPLUG_INCREMENTAL=True",
    ]
    first = _run(["crawl", "shop", *bloom, "-s", "CRAWLPLUG_BLOOM_CAPACITY=1000"])
    assert first.returncode == 0, first.stderr[-2000:]
    second = _run(["crawl", "shop", *bloom, "-s", "CRAWLPLUG_BLOOM_CAPACITY=2000"])
    assert second.returncode != 0
    errors = [line for line in second.stderr.splitlines() if " ERROR: " in line]
    assert len(errors) == 1 and "already has a Bloom filter sized 1000" in errors[0], second.stderr[-2000:]
    assert "Traceback" not in second.stderr
    assert "'finish_reason': 'config_error'" in second.stderr


@pytest.mark.integration  # starts processes of its own
def test_an_invalid_crawl_id_is_a_config_error(redis_url):
    proc = _run(["crawl", "shop", "-s", "CRAWLPLUG_CRAWL_ID=my crawl*", "-s", f"REDIS_URL={redis_url}"])
    assert proc.returncode != 0
    assert "invalid crawl name 'my crawl*'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_node_dead_letters_a_start_entry_with_a_misspelt_key(crawl, shop, redis_url, r):
    """Entries can be pushed by anything (RPUSH here): a node refuses the near miss
    "callbak" (a dead letter naming the key meant) instead of crawling
    ?callbak=parse_item with the default callback, and still takes a real form field."""
    keys = CrawlKeys("shop")
    r.rpush(
        keys.start_urls,
        json.dumps({"url": f"{shop.url}/item/7/", "callbak": "parse_item"}),
        json.dumps({"url": f"{shop.url}/search/", "q": "lamp"}),
    )
    node = crawl(args={"base_url": shop.url}, settings={"REDIS_URL": redis_url, **FAST})
    assert node.wait(120) == 0, node.text()[-3000:]
    assert not [t for t in shop.hits if "callbak" in t], "the misspelt key never reaches the site"
    assert shop.hits["/search/?q=lamp"] == 1, "a genuine extra key is a form field, as in scrapy-redis"
    [letter] = Crawl.of(Frontier(r, keys)).dead_letters()
    assert letter.header["reason"].startswith("invalid start entry: unknown key 'callbak': did you mean 'callback'?"), (
        letter.header
    )
    assert json.loads(letter.payload)["callbak"] == "parse_item", "the entry is kept as it was pushed"
    assert "'crawlplug/start_entries_invalid': 1" in node.text()
