"""`crawlplug migrate from-scrapy-redis`: state written by scrapy-redis's own classes,
carried over through crawlplug's API, against the real test Redis.

The scrapy-redis queues and fingerprints here are made by scrapy_redis.queue and
scrapy_redis.dupefilter themselves; the whole path through real crawls is
tests/test_migrate_e2e.py.
"""

from __future__ import annotations

import json
import os
import pickle
import pty
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
import scrapy
from click.testing import CliRunner
from scrapy.utils.test import get_crawler
from scrapy_redis.dupefilter import RFPDupeFilter
from scrapy_redis.queue import FifoQueue as SrFifo
from scrapy_redis.queue import PriorityQueue as SrPriority

from crawlplug.cli import main
from crawlplug.compat import legacy
from crawlplug.compat.legacy import (
    ScrapyRedisDupeFilter,
    scrapy_redis_fingerprint,
    scrapy_request_fingerprint,
)
from crawlplug.compat.migrate import MigrationError
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.queues import PriorityQueue
from crawlplug.serializers import JsonSerializer, describe_payload
from crawlplug.serializers.safepickle import RefusedGlobal, restricted_loads
from spiders.shop import ShopSpider

from .support.fingerprints import recorded
from .support.nodes import ROOT

CRAWLPLUG = str(Path(sys.executable).with_name("crawlplug"))
KEYS = CrawlKeys("shop")
SHOP = ShopSpider()
BASE = "http://shop.test"


def run(*args: str, input: str | None = None):
    base = {"REDIS_URL": None, "CRAWLPLUG_CRAWL": None}
    return CliRunner().invoke(main, list(args), input=input, env=base)


def migrate(redis_url: str, *args: str):
    return run("--redis-url", redis_url, "migrate", "from-scrapy-redis", "shop", *args)


def scrapy_redis_crawl(
    r: redis.Redis, requests: list[scrapy.Request], *, seen: list[scrapy.Request] = (), queue_cls=SrPriority
) -> None:
    """What scrapy-redis leaves in Redis: queued requests (and their fingerprints), plus
    the fingerprints of requests it already fetched."""
    queue = queue_cls(r, SHOP, "%(spider)s:requests")
    df = RFPDupeFilter(r, "shop:dupefilter")
    for request in seen:
        assert not df.request_seen(request)
    for request in requests:
        if not request.dont_filter:
            assert not df.request_seen(request)
        queue.push(request)


def item(i: int, **kwargs) -> scrapy.Request:
    return scrapy.Request(f"{BASE}/item/{i}/", callback=SHOP.parse_item, **kwargs)


def queued_urls(r: redis.Redis) -> list[str]:
    """The crawl's queue, in pop order."""
    return [describe_payload(r.hget(KEYS.requests, rid))["url"] for rid in r.zrange(KEYS.queue, 0, -1)]


def snapshot(r: redis.Redis) -> dict[bytes, bytes]:
    return {key: r.dump(key) for key in sorted(r.keys("*"))}


# -- the restricted unpickler ---------------------------------------------------------------


class Evil:
    """A pickle that runs a shell command when it is loaded by pickle.loads."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class EvalEvil:
    def __reduce__(self):
        return (eval, ("__import__('os').system('touch /nonexistent-should-not-run')",))


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_restricted_unpickler_reads_what_scrapy_redis_writes(protocol):
    request = scrapy.FormRequest(
        f"{BASE}/search",
        formdata={"q": "lamp"},
        callback=SHOP.parse_list,
        meta={"depth": 2, "tags": {"a", "b"}},
        priority=5,
        headers={"X-A": "1"},
    )
    d = request.to_dict(spider=SHOP)
    assert restricted_loads(pickle.dumps(d, protocol=protocol)) == d


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_restricted_unpickler_refuses_a_crafted_pickle(tmp_path, protocol):
    marker = tmp_path / "pwned"
    data = pickle.dumps({"url": f"{BASE}/", "meta": {"x": Evil(marker)}}, protocol=protocol)
    with pytest.raises(RefusedGlobal) as info:
        restricted_loads(data)
    assert info.value.path in ("posix.system", "os.system")
    assert not marker.exists()
    for evil, path in ((EvalEvil(), "builtins.eval"),):
        with pytest.raises(RefusedGlobal, match=path):
            restricted_loads(pickle.dumps(evil, protocol=protocol))
    assert pickle.loads(data) == {"url": f"{BASE}/", "meta": {"x": 0}} and marker.exists(), (
        "the same bytes do run a command through pickle.loads: the test's pickle is real"
    )


def test_restricted_unpickler_refuses_size_bombs_and_other_codecs():
    bomb = b"\x80\x02c__builtin__\nbytes\nJ\x00\x00\x00\x40\x85R."  # bytes(2**30)
    with pytest.raises(pickle.UnpicklingError, match="not allowed"):
        restricted_loads(bomb)
    rot = b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00aX\x05\x00\x00\x00rot13\x86R."
    with pytest.raises(pickle.UnpicklingError, match="rot13"):
        restricted_loads(rot)


# -- scrapy-redis's fingerprints ----------------------------------------------------------


@pytest.mark.parametrize(
    "request_",
    [
        scrapy.Request(f"{BASE}/item/1/"),
        scrapy.Request(f"{BASE}/list?b=2&a=1#frag", headers={"Cookie": "x=1"}),
        scrapy.Request(f"{BASE}/post", method="POST", body=b"a=1&b=\xff"),
        scrapy.FormRequest(f"{BASE}/form", formdata={"q": "caf\u00e9"}),
    ],
)
def test_fingerprint_functions_are_scrapy_redis_ones(request_):
    assert scrapy_redis_fingerprint(request_) == RFPDupeFilter.request_fingerprint(None, request_)
    # scrapy-redis <= 0.7 used Scrapy's request_fingerprint(): sha1(method + canonical url + body)
    import hashlib

    from w3lib.url import canonicalize_url

    old = hashlib.sha1(request_.method.encode() + canonicalize_url(request_.url).encode() + request_.body)
    assert scrapy_request_fingerprint(request_) == old.hexdigest()


def test_packed_fingerprints_round_trip():
    hexes = [hashlib_hex(i) for i in range(2000)]
    packed = legacy.pack(legacy.prefix(h) for h in hexes + hexes[:10])
    assert len(packed) == 2000 * legacy.PREFIX_BYTES, "distinct values only"
    fps = legacy.ScrapyRedisFingerprints(legacy.unpack(packed))
    assert all(h in fps for h in hexes)
    assert hashlib_hex(99999) not in fps
    assert list(fps.values) == sorted(fps.values)
    with pytest.raises(ValueError, match="40-digit"):
        legacy.prefix("abc")


def hashlib_hex(i: int) -> str:
    import hashlib

    return hashlib.sha1(str(i).encode()).hexdigest()


# -- the command ---------------------------------------------------------------------------


def test_migrates_queue_fingerprints_and_start_urls(redis_url, r):
    queued = [
        item(3, priority=1),
        item(1, priority=5),
        item(2, priority=5),
        scrapy.FormRequest(f"{BASE}/search", formdata={"q": "lamp"}, callback=SHOP.parse_list),
        item(4, dont_filter=True, meta={"depth": 2}, cb_kwargs={"k": 1}),
    ]
    fetched = [scrapy.Request(f"{BASE}/"), item(9)]
    scrapy_redis_crawl(r, queued, seen=fetched)
    r.rpush("shop:start_urls", f"{BASE}/category/1/", json.dumps({"url": f"{BASE}/category/2/"}))
    res = migrate(redis_url, "--yes")
    assert res.exit_code == 0, res.output
    assert "requests: 5 read, 5 admitted, 0 already in the crawl, 0 skipped" in res.output
    assert "fingerprints: 6 copied, function 'json' (4 of 4 queued requests found in shop:dupefilter)" in res.output
    assert "start entries: 2" in res.output
    assert "WARNING: scrapy-redis stores requests as pickles" in res.output
    # scrapy-redis's pop order (priority, then sorted set order) kept; priorities as crawlplug scores
    urls = queued_urls(r)
    assert set(urls[:2]) == {f"{BASE}/item/1/", f"{BASE}/item/2/"} and urls[2] == f"{BASE}/item/3/"
    assert set(urls[3:]) == {f"{BASE}/search", f"{BASE}/item/4/"}
    assert sorted(score for _, score in r.zrange(KEYS.queue, 0, -1, withscores=True)) == [-5, -5, -1, 0, 0]
    serializer = JsonSerializer()
    requests = {}
    for rid in r.zrange(KEYS.queue, 0, -1):
        req = serializer.loads(r.hget(KEYS.requests, rid), SHOP)
        requests[req.url] = req
    assert requests[f"{BASE}/item/1/"].callback == SHOP.parse_item
    form = requests[f"{BASE}/search"]
    assert type(form) is scrapy.FormRequest and form.body == b"q=lamp" and form.callback == SHOP.parse_list
    four = requests[f"{BASE}/item/4/"]
    assert four.dont_filter and four.meta == {"depth": 2} and four.cb_kwargs == {"k": 1}
    # re-fingerprinted with Scrapy's fingerprinter: the crawl's seen set holds the new ones
    fingerprinter = get_crawler().request_fingerprinter
    assert fingerprinter.fingerprint(item(1)) in recorded(r, KEYS)
    assert len(recorded(r, KEYS)) == 4, "dont_filter requests record no fingerprint"
    # the old set, packed in the crawl's own key, and the scrapy-redis keys kept as backups
    old = legacy.load(r, KEYS)
    assert len(old) == 6 and old.seen(scrapy.Request(f"{BASE}/")) and old.seen(item(3))
    assert not old.seen(item(77))
    assert [x.decode() for x in r.lrange(KEYS.start_urls, 0, -1)] == [
        f"{BASE}/category/1/",
        json.dumps({"url": f"{BASE}/category/2/"}),
    ]
    assert not r.exists("shop:requests") and not r.exists("shop:start_urls")
    assert r.zcard("shop:requests:migrated") == 5 and r.llen("shop:start_urls:migrated") == 2
    assert r.scard("shop:dupefilter") == 6, "the fingerprint set is left as it was"

    # again: nothing is admitted or pushed twice, the old set is merged, not doubled
    again = migrate(redis_url, "--yes")
    assert again.exit_code == 0, again.output
    assert "requests: 0 read" in again.output and "start entries: 0" in again.output
    assert len(legacy.load(r, KEYS)) == 6 and r.zcard(KEYS.queue) == 5


def test_list_queue_order_and_old_fingerprint_function(redis_url, r):
    """scrapy-redis's FifoQueue (a list) pops its oldest first; a crawl written by scrapy-redis
    <= 0.7 (Scrapy's request_fingerprint) is recognised from its queued requests."""
    queue = SrFifo(r, SHOP, "%(spider)s:requests")
    for i in (5, 6, 7):
        queue.push(item(i))
        r.sadd("shop:dupefilter", scrapy_request_fingerprint(item(i)))
    r.sadd("shop:dupefilter", scrapy_request_fingerprint(item(1)), "not-a-fingerprint")
    res = migrate(redis_url, "--yes")
    assert res.exit_code == 0, res.output
    assert "function 'concat' (3 of 3 queued requests found" in res.output
    assert "1 not hex SHA-1s (ignored)" in res.output
    assert queued_urls(r) == [f"{BASE}/item/{i}/" for i in (5, 6, 7)]
    old = legacy.load(r, KEYS)
    assert old.function == "concat" and old.seen(item(1)) and not old.seen(item(2))


def test_entries_that_cannot_be_carried_over_are_skipped_and_reported(redis_url, r, tmp_path):
    marker = tmp_path / "pwned"
    scrapy_redis_crawl(r, [item(1), item(2)])
    evil = pickle.dumps({"url": f"{BASE}/item/3/", "meta": {"x": Evil(marker)}}, protocol=4)
    no_callback = pickle.dumps({"url": f"{BASE}/item/4/", "callback": "parse_nothing"}, protocol=4)
    machinery = pickle.dumps({"url": f"{BASE}/item/5/", "callback": "start"}, protocol=4)
    not_json = pickle.dumps({"url": f"{BASE}/item/6/", "meta": {"s": {1, 2}}}, protocol=4)
    foreign = pickle.dumps({"url": f"{BASE}/item/7/", "_class": "myproject.http.SpecialRequest"}, protocol=4)
    r.zadd("shop:requests", {evil: 0, no_callback: 0, machinery: 0, not_json: 0, foreign: 0, b"garbage": 0})
    res = migrate(redis_url, "--yes")
    assert res.exit_code == 0, res.output
    assert not marker.exists(), "the crafted pickle ran"
    assert "requests: 8 read, 2 admitted, 0 already in the crawl, 6 skipped" in res.output
    for reason in (
        "refused global posix.system",
        "spider 'shop' has no method 'parse_nothing'",
        "'start' is a method of scrapy.Spider itself",
        "cannot be stored as JSON",
        "'myproject.http.SpecialRequest' is not allowed",
        "not a pickle crawlplug can read",
    ):
        assert reason in res.output, reason
    assert "1 entries named globals outside the allow-list (posix.system); nothing of them was run" in res.output
    assert "(the skipped entries are there)" in res.output
    assert r.zcard("shop:requests:migrated") == 8, "the backup keeps every entry, skipped ones included"
    assert sorted(queued_urls(r)) == [f"{BASE}/item/1/", f"{BASE}/item/2/"]


def test_dry_run_writes_nothing(redis_url, r, tmp_path):
    marker = tmp_path / "pwned"
    scrapy_redis_crawl(r, [item(1), item(2)], seen=[item(3)])
    r.zadd("shop:requests", {pickle.dumps({"url": "x", "m": Evil(marker)}): 0})
    r.sadd("shop:start_urls", f"{BASE}/")
    before = snapshot(r)
    res = migrate(redis_url, "--yes", "--dry-run")
    assert res.exit_code == 0, res.output
    assert "dry run, nothing written; would migrate" in res.output
    assert "requests: 3 read, 2 to admit, 1 skipped" in res.output
    assert "fingerprints: 3 copied" in res.output and "start entries: 1" in res.output
    assert snapshot(r) == before
    assert not marker.exists()


@pytest.mark.integration  # starts processes of its own
def test_refuses_to_unpickle_without_yes_when_not_interactive(redis_url, r):
    scrapy_redis_crawl(r, [item(1)])
    before = snapshot(r)
    res = migrate(redis_url)  # CliRunner's input is not a terminal
    assert res.exit_code == 1
    assert "not run in a terminal: nothing is unpickled without a confirmation; pass --yes" in res.output
    assert snapshot(r) == before
    # the installed command, its standard input not a terminal
    proc = subprocess.run(
        [CRAWLPLUG, "--redis-url", redis_url, "migrate", "from-scrapy-redis", "shop"],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "pass --yes" in proc.stderr
    assert snapshot(r) == before


@pytest.mark.integration  # starts processes of its own
@pytest.mark.parametrize(("answer", "code"), [(b"n\n", 1), (b"y\n", 0)])
def test_asks_in_a_terminal(redis_url, r, answer, code):
    scrapy_redis_crawl(r, [item(1)])
    before = snapshot(r)
    primary, secondary = pty.openpty()  # a terminal for its standard input
    try:
        proc = subprocess.Popen(
            [CRAWLPLUG, "--redis-url", redis_url, "migrate", "from-scrapy-redis", "shop"],
            cwd=ROOT,
            stdin=secondary,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        os.write(primary, answer)
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(primary)
        os.close(secondary)
    assert proc.returncode == code, out.decode() + err.decode()
    assert b"Migrate: unpickle 1 requests from shop:requests? [y/N]" in out
    if code:
        assert b"Nothing migrated." in err
        assert snapshot(r) == before
    else:
        assert b"1 admitted" in out and r.zcard(KEYS.queue) == 1


def test_nothing_to_migrate_and_other_key_templates(redis_url, r):
    res = migrate(redis_url, "--yes")
    assert res.exit_code == 1 and "nothing to migrate" in res.output
    queue = SrPriority(r, SHOP, "proj:%(spider)s:q")
    queue.push(item(1))
    RFPDupeFilter(r, "proj:shop:df").request_seen(item(1))
    res = migrate(
        redis_url,
        "--yes",
        "--queue-key",
        "proj:%(spider)s:q",
        "--dupefilter-key",
        "proj:%(spider)s:df",
        "--crawl",
        "proj-shop",
    )
    assert res.exit_code == 0, res.output
    assert "into crawl 'proj-shop'" in res.output and "1 admitted" in res.output
    assert r.zcard(CrawlKeys("proj-shop").queue) == 1
    res = migrate(redis_url, "--yes", "--queue-key", "%(nope)s")
    assert res.exit_code == 1 and "only %(spider)s / %(name)s may be filled in" in res.output


def test_source_on_another_redis(redis_url, r, fresh_redis):
    source = redis.Redis(port=fresh_redis.port)
    scrapy_redis_crawl(source, [item(1), item(2)], seen=[item(3)])
    res = migrate(redis_url, "--yes", "--source-url", fresh_redis.url)
    assert res.exit_code == 0, res.output
    assert "2 admitted" in res.output and r.zcard(KEYS.queue) == 2
    assert len(legacy.load(r, KEYS)) == 3
    assert source.exists("shop:requests:migrated") and not r.exists("shop:requests:migrated")
    source.close()


# -- the dupefilter that consults the old set -------------------------------------------------


def test_scrapy_redis_dupefilter_filters_what_scrapy_redis_had_seen(redis_url, r):
    scrapy_redis_crawl(r, [item(1)], seen=[scrapy.Request(f"{BASE}/"), item(2)])
    assert migrate(redis_url, "--yes").exit_code == 0
    crawler = get_crawler(settings_dict={})
    df = ScrapyRedisDupeFilter.from_crawler(crawler)
    frontier = Frontier(r, KEYS, dedup=df.strategy)
    df.bind(frontier)
    assert legacy.SENTINEL in recorded(r, KEYS), "the marker is recorded at bind"
    requests = [scrapy.Request(f"{BASE}/"), item(2), item(1), item(10), item(10)]
    result = frontier.admit([(df.argument(req), 0.0, JsonSerializer().dumps(req, SHOP)) for req in requests])
    # the two scrapy-redis had fetched, the queued one (migrated) and the second item 10: filtered
    assert result.flags == "00010"
    assert crawler.stats.get_value(legacy.STAT) == 3
    assert df.request_seen(item(2)) and df.request_seen(item(10)) and not df.request_seen(item(11))


def test_scrapy_redis_dupefilter_without_migrated_fingerprints_is_the_set_dupefilter(r):
    df = ScrapyRedisDupeFilter.from_crawler(get_crawler(settings_dict={}))
    frontier = Frontier(r, KEYS, dedup=df.strategy)
    df.bind(frontier)
    assert df.legacy is None and not r.exists(KEYS.seen)
    assert df.argument(item(1)) == df.fingerprint(item(1))


# -- the library, without the command ----------------------------------------------------------


def test_migration_into_the_per_domain_queue(r):
    from crawlplug.compat.migrate import ScrapyRedisMigration, SourceKeys
    from crawlplug.queues import DomainQueue

    other = scrapy.Request("http://other.test/page/", callback=SHOP.parse_list, priority=3)
    scrapy_redis_crawl(r, [item(1), item(2), other])
    crawler = get_crawler(ShopSpider, settings_dict={})
    queue = DomainQueue()
    frontier = Frontier(r, KEYS, queue=queue)
    migration = ScrapyRedisMigration(
        r,
        SourceKeys.from_templates("shop", "%(spider)s:requests", "%(spider)s:dupefilter", "%(name)s:start_urls"),
        frontier,
        spider_name="shop",
        fingerprinter=crawler.request_fingerprinter,
        serializer=JsonSerializer(),
        queue=queue,
        spidercls=ShopSpider,
    )
    assert migration.check().queued == 3
    report = migration.run()
    assert (report.admitted, report.skipped_total, report.fingerprints_copied) == (3, 0, 3)
    assert r.zcard(KEYS.queue) == 0 and r.zcard(KEYS.dq) == 3
    assert {d.decode() for d in r.zrange(KEYS.domains, 0, -1)} == {"shop.test", "other.test"}
    urls = [JsonSerializer().loads(payload, SHOP).url for payload in r.hvals(KEYS.requests)]
    leased = frontier.pop(10)  # the per-domain queue hands them out: one per domain at first
    assert {urlsplit(JsonSerializer().loads(x.payload, SHOP).url).hostname for x in leased} == {
        "shop.test",
        "other.test",
    }
    assert sorted(urls) == sorted([f"{BASE}/item/1/", f"{BASE}/item/2/", "http://other.test/page/"])
    # a plain-queue migration into this crawl would split it: refused
    plain = ScrapyRedisMigration(
        r,
        migration.source,
        Frontier(r, KEYS),
        spider_name="shop",
        fingerprinter=crawler.request_fingerprinter,
        serializer=JsonSerializer(),
        queue=PriorityQueue(),
    )
    frontier.release([x.id for x in leased], unstarted=True)
    with pytest.raises(MigrationError, match="another queue kind"):
        plain.check()
