"""RedisSetDupeFilter on a real Redis, with crawlers built by scrapy.utils.test."""

from __future__ import annotations

import hashlib
import logging

import pytest
from scrapy import Request
from scrapy.utils import request as scrapy_request
from scrapy.utils.test import get_crawler

from crawlplug import dupefilters
from crawlplug.dupefilters import RedisSetDupeFilter
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys

from .support.fingerprints import recorded

K = CrawlKeys("dupes")


class PathOnlyFingerprinter:
    """Ignores the query string: /a?x=1 and /a?x=2 are the same page."""

    calls = 0

    @classmethod
    def from_crawler(cls, crawler):
        return cls()

    def fingerprint(self, request: Request) -> bytes:
        type(self).calls += 1
        return hashlib.sha1(request.url.split("?", 1)[0].encode()).digest()


def make_df(r, **settings) -> RedisSetDupeFilter:
    crawler = get_crawler(settings_dict=settings)
    df = RedisSetDupeFilter.from_crawler(crawler)
    df.bind(Frontier(r, K, node_id="n"))
    return df


def test_uses_the_crawlers_request_fingerprinter(r):
    crawler = get_crawler(settings_dict={})
    df = RedisSetDupeFilter.from_crawler(crawler)
    assert df.fingerprinter is crawler.request_fingerprinter
    req = Request("http://example.com/a?x=1")
    assert df.fingerprint(req) == crawler.request_fingerprinter.fingerprint(req)
    assert df.fingerprint(req) != df.fingerprint(Request("http://example.com/a?x=2"))


def test_custom_fingerprinter_class_is_honoured(r):
    path = f"{PathOnlyFingerprinter.__module__}.{PathOnlyFingerprinter.__qualname__}"
    df = make_df(r, REQUEST_FINGERPRINTER_CLASS=path)
    assert isinstance(df.fingerprinter, PathOnlyFingerprinter)
    PathOnlyFingerprinter.calls = 0
    assert df.request_seen(Request("http://example.com/a?x=1")) is False
    assert df.request_seen(Request("http://example.com/a?x=2")) is True
    assert df.request_seen(Request("http://example.com/b?x=1")) is False
    assert PathOnlyFingerprinter.calls == 3
    assert recorded(r, K) == {
        hashlib.sha1(b"http://example.com/a").digest(),
        hashlib.sha1(b"http://example.com/b").digest(),
    }


def test_default_fingerprinter_distinguishes_queries(r):
    df = make_df(r)
    assert df.request_seen(Request("http://example.com/a?x=1")) is False
    assert df.request_seen(Request("http://example.com/a?x=2")) is False
    assert df.request_seen(Request("http://example.com/a?x=1")) is True


def test_a_link_met_again_is_not_fingerprinted_again_and_gets_the_same_fingerprint():
    crawler = get_crawler(settings_dict={})
    df = RedisSetDupeFilter.from_crawler(crawler)
    first = df.fingerprint(Request("http://example.com/a?x=1"))
    again = Request("http://example.com/a?x=1")
    assert df.fingerprint(again) == first == crawler.request_fingerprinter.fingerprint(Request(again.url))
    # Scrapy's fingerprint() caches each request it hashes: this one it never saw
    assert again not in scrapy_request._fingerprint_cache
    # what the default fingerprint depends on besides the URL still tells requests apart
    other = [
        Request(again.url, method="POST"),
        Request(again.url, body=b"q=1"),
        Request(again.url, meta={"verbatim_url": True}),
        Request("http://example.com/a?x=1#top"),
    ]
    assert [df.fingerprint(req) for req in other] == [crawler.request_fingerprinter.fingerprint(req) for req in other]


def test_the_url_cache_keeps_the_latest_used_urls_only(monkeypatch):
    monkeypatch.setattr(dupefilters, "URL_FP_CACHE", 2)
    df = RedisSetDupeFilter.from_crawler(get_crawler(settings_dict={}))
    for url in ("http://example.com/1", "http://example.com/2", "http://example.com/1", "http://example.com/3"):
        df.fingerprint(Request(url))
    assert [url for _, url, _ in df._by_url] == ["http://example.com/1", "http://example.com/3"]


def test_a_custom_fingerprinter_is_asked_for_every_request(r):
    path = f"{PathOnlyFingerprinter.__module__}.{PathOnlyFingerprinter.__qualname__}"
    df = make_df(r, REQUEST_FINGERPRINTER_CLASS=path)
    PathOnlyFingerprinter.calls = 0
    for _ in range(3):
        df.fingerprint(Request("http://example.com/a"))
    assert PathOnlyFingerprinter.calls == 3


@pytest.mark.parametrize("store", ["hash", "set"])
def test_stores_raw_20_byte_digests(r, store):
    df = make_df(r, CRAWLPLUG_DEDUP_STORE=store)
    reqs = [Request(f"http://example.com/{i}") for i in range(5)]
    for req in reqs:
        df.request_seen(req)
    members = recorded(r, K)  # the compact store's, whole again (tests/support/fingerprints.py)
    assert members == {df.fingerprint(req) for req in reqs}
    assert all(isinstance(m, bytes) and len(m) == 20 for m in members)
    assert all(m != df.fingerprint(req).hex().encode() for m in members for req in reqs)
    assert r.exists(K.seen if store == "set" else K.key("fph"))


def test_request_seen_needs_opening_or_binding():
    df = RedisSetDupeFilter.from_crawler(get_crawler(settings_dict={}))
    with pytest.raises(RuntimeError, match="not open"):
        df.request_seen(Request("http://example.com/"))


def test_request_seen_shares_the_set_with_admission(r):
    """A fingerprint recorded by request_seen is a duplicate for the admit script, and back."""
    df = make_df(r)
    frontier = df.frontier
    seen_first = Request("http://example.com/seen-first")
    admitted_first = Request("http://example.com/admitted-first")
    assert df.request_seen(seen_first) is False
    assert frontier.admit([(df.fingerprint(seen_first), 0, b"x")]).flags == "0"
    assert frontier.admit([(df.fingerprint(admitted_first), 0, b"y")]).flags == "1"
    assert df.request_seen(admitted_first) is True


def test_two_filters_share_one_crawl(r):
    a, b = make_df(r), make_df(r)
    req = Request("http://example.com/shared")
    assert a.request_seen(req) is False
    assert b.request_seen(req) is True


def test_close_deletes_nothing(r):
    df = make_df(r)
    df.request_seen(Request("http://example.com/1"))
    df.frontier.admit([(b"", 0, b"payload")])
    before = {k: r.type(k) for k in r.scan_iter()}
    assert K.key("fph").encode() in before
    df.close("finished")
    df.close("shutdown")
    assert {k: r.type(k) for k in r.scan_iter()} == before
    assert len(recorded(r, K)) == 1


def test_log_counts_filtered_in_stats(r, caplog):
    df = make_df(r)
    stats = df.crawler.stats
    assert stats.get_value("dupefilter/filtered") is None
    caplog.set_level(logging.DEBUG, logger="crawlplug.dupefilters")
    for i in range(3):
        df.log(Request(f"http://example.com/{i}"), None)
    assert stats.get_value("dupefilter/filtered") == 3
    messages = [rec.getMessage() for rec in caplog.records if rec.name == "crawlplug.dupefilters"]
    assert len(messages) == 1 and "no more duplicates will be shown" in messages[0]


def test_log_with_dupefilter_debug_logs_every_duplicate(r, caplog):
    df = make_df(r, DUPEFILTER_DEBUG=True)
    caplog.set_level(logging.DEBUG, logger="crawlplug.dupefilters")
    for i in range(3):
        df.log(Request(f"http://example.com/{i}"), None)
    messages = [rec.getMessage() for rec in caplog.records if rec.name == "crawlplug.dupefilters"]
    assert len(messages) == 3
    assert all("http://example.com/" in m for m in messages)
    assert df.crawler.stats.get_value("dupefilter/filtered") == 3


# -- start URLs once a run (crawlplug.scheduler.startonce) ---------------------------------------------


def test_the_default_starts_are_deduplicated_once_a_run_and_a_custom_start_keeps_its_own():
    import asyncio

    from scrapy import Spider

    from crawlplug.dupefilters import START_ONCE_META
    from crawlplug.scheduler.startonce import StartOnceMiddleware, default_start

    class Genspider(Spider):
        name = "gen"
        start_urls = ["http://example.com/", "http://example.com/b"]

    class Login(Spider):
        name = "login"

        async def start(self):
            yield Request("http://example.com/login", dont_filter=True)  # each node logs in
            yield Request("http://example.com/catalog", dont_filter=True, meta={START_ONCE_META: True})
            yield {"an": "item"}

    async def through(spidercls):
        crawler = get_crawler(spidercls)
        crawler.spider = spidercls.from_crawler(crawler)
        return [x async for x in StartOnceMiddleware.from_crawler(crawler).process_start(crawler.spider.start())]

    assert default_start(Genspider()) and not default_start(Login())
    gen = asyncio.run(through(Genspider))
    assert [(x.url, x.dont_filter, x.meta) for x in gen] == [
        (url, False, {START_ONCE_META: True, "allow_offsite": True}) for url in Genspider.start_urls
    ]
    login, catalog, item = asyncio.run(through(Login))
    assert login.dont_filter and START_ONCE_META not in login.meta, "a custom start's request: per node"
    assert not catalog.dont_filter and catalog.meta[START_ONCE_META] and item == {"an": "item"}


def test_a_start_request_once_a_run_is_admitted_once_in_each_run_of_an_incremental_crawl(r):
    """A crawl that keeps fingerprints (incremental) records a start request once a run under
    a fingerprint of its run: the copy of another node is a duplicate, the next run fetches it
    again; a crawl that clears them each run uses the request's own fingerprint."""
    from crawlplug.dupefilters import START_ONCE_META

    df = make_df(r)
    start = Request("http://example.com/", meta={START_ONCE_META: True})
    link = Request("http://example.com/")
    assert df.fingerprint(start) == df.fingerprint(link), "not incremental: its own fingerprint"
    df.per_run_starts = True
    df.frontier.run_id = 1
    assert df.request_seen(link) is False, "run 1 recorded the page (an incremental crawl keeps it)"
    assert df.request_seen(start) is False, "the start request of run 1: fetched once in it"
    assert df.request_seen(start) is True, "another node's copy"
    df.frontier.run_id = 2
    assert df.request_seen(start) is False and df.request_seen(start) is True, "run 2: once again"
    assert df.request_seen(link) is True, "a link to it is still a duplicate"
