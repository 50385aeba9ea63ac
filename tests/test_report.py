"""Reports per node (crawlplug.probes.domainstats, crawlplug.reports.report, `crawlplug report`): node x
domain, node x site definition and per field, for the current run and the ended ones; and, in
the last test, two real runs of a crawl of the demo shop, reported and charted."""

from __future__ import annotations

import csv
import io
import json
import urllib.parse

from click.testing import CliRunner
from scrapy import Request, Spider, signals
from scrapy.exceptions import IgnoreRequest
from scrapy.http import HtmlResponse
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.test import get_crawler
from starlette.testclient import TestClient
from twisted.internet.error import TimeoutError as TwistedTimeout
from twisted.python.failure import Failure

from crawlplug.cli import main
from crawlplug.crawl import runs
from crawlplug.failures import FAILED
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.history import series as history
from crawlplug.probes.domainstats import OTHER, DomainStatsMiddleware
from crawlplug.probes.errorsamples import ErrorSamplesMiddleware
from crawlplug.reports import report
from crawlplug.reports import store as runstats
from crawlplug.stats import RedisStatsCollector
from crawlplug.web import create_app

from .support.nodes import start_joined

K = CrawlKeys("rep")


def cli(redis_url: str, *args: str):
    return CliRunner().invoke(main, ["--redis-url", redis_url, *args], env={"REDIS_URL": None, "CRAWLPLUG_CRAWL": None})


def page(url: str, status: int = 200, latency: float | None = 0.02) -> tuple[Request, HtmlResponse]:
    request = Request(url, meta={} if latency is None else {"download_latency": latency})
    return request, HtmlResponse(url, status=status, body=b"<html></html>", request=request)


# -- what a node counts --------------------------------------------------------------------------


def test_a_node_counts_pages_items_errors_and_time_per_host():
    crawler = get_crawler(Spider, settings_dict={"CRAWLPLUG_REPORT_DOMAINS": 2})
    mw = DomainStatsMiddleware.from_crawler(crawler)
    spider = Spider("x")
    for url, status, latency in (
        ("http://a.test/1", 200, 0.010),
        ("http://a.test/2", 404, 0.030),
        ("http://A.test:8080/3", 301, None),
        ("http://b.test/", 503, 0.5),
    ):
        request, response = page(url, status, latency)
        assert mw.process_response(request, response, spider) is response
    mw.process_exception(Request("http://b.test/x"), TwistedTimeout(), spider)
    mw.process_exception(Request("http://b.test/robots"), IgnoreRequest(), spider)  # filtered: not an error
    # robots.txt as RobotsTxtMiddleware fetches it: no page, its 404 (a site without one) no error
    robots = Request("http://a.test/robots.txt", meta={"dont_obey_robotstxt": True}, callback=NO_CALLBACK)
    mw.process_response(robots, HtmlResponse(robots.url, status=404, request=robots), spider)
    mw.process_exception(robots, TwistedTimeout(), spider)
    _, response = page("http://a.test/1")
    crawler.signals.send_catch_log(signals.item_scraped, item={}, response=response, spider=spider)
    crawler.signals.send_catch_log(signals.item_scraped, item={}, response=response, spider=spider)
    crawler.signals.send_catch_log(
        signals.spider_error, failure=Failure(KeyError("x")), response=response, spider=spider
    )
    request, response = page("http://c.test/")  # a third host, past CRAWLPLUG_REPORT_DOMAINS=2
    mw.process_response(request, response, spider)
    stats = {k: v for k, v in crawler.stats.get_stats().items() if k.startswith("domain/")}
    assert stats == {
        "domain/a.test/pages": 3,
        "domain/a.test/ok": 2,
        "domain/a.test/latency_ms": 40,
        "domain/a.test/error/http/404": 1,
        "domain/a.test/items": 2,
        "domain/a.test/error/spider/KeyError": 1,
        "domain/b.test/pages": 1,
        "domain/b.test/latency_ms": 500,
        "domain/b.test/error/http/503": 1,
        "domain/b.test/error/download/TimeoutError": 1,
        f"domain/{OTHER}/pages": 1,
        f"domain/{OTHER}/ok": 1,
        f"domain/{OTHER}/latency_ms": 20,
    }
    # every failure once more, the count the run's errors sum (crawlplug.failures)
    assert crawler.stats.get_value(FAILED) == 4, "404, 503, the timeout and the callback that raised"
    # the errors page's middleware counts the same failures by the same definition
    samples = ErrorSamplesMiddleware.from_crawler(crawler)
    samples.process_response(robots, HtmlResponse(robots.url, status=404, request=robots), spider)
    samples.process_exception(Request("http://b.test/robots"), IgnoreRequest(), spider)
    samples.process_response(*page("http://a.test/2", 404), spider)
    samples.process_exception(Request("http://b.test/x"), TwistedTimeout(), spider)
    assert dict(samples.counts) == {"http/404": 1, "download/TimeoutError": 1}


def test_a_page_is_counted_without_parsing_its_url_again(monkeypatch):
    """Counting a page runs for every page: it reads the host of the request's URL, which the
    downloader's middlewares have parsed already, not a parse of the response's of its own."""
    crawler = get_crawler(Spider, settings_dict={"CRAWLPLUG_REPORT_DOMAINS": 5})
    mw = DomainStatsMiddleware.from_crawler(crawler)
    pages = [page(f"http://shop.test/item/{i}", 200, 0.01) for i in range(3)] + [page("http://B.test:81/", 200, 0.02)]
    for request, _ in pages:
        urlparse_cached(request)  # as Scrapy's offsite, proxy and cookies middlewares do before
    parsed: list[str] = []
    real = urllib.parse.urlsplit

    def counting(url: str, *args: object, **kwargs: object) -> urllib.parse.SplitResult:
        parsed.append(url)
        return real(url, *args, **kwargs)

    monkeypatch.setattr(urllib.parse, "urlsplit", counting)
    for request, response in pages:
        mw.process_response(request, response)
        crawler.signals.send_catch_log(signals.item_scraped, item={}, response=response, spider=None)
    assert parsed == []
    stats = {k: v for k, v in crawler.stats.get_stats().items() if k.startswith("domain/")}
    assert stats == {
        "domain/shop.test/pages": 3,
        "domain/shop.test/ok": 3,
        "domain/shop.test/latency_ms": 30,
        "domain/shop.test/items": 3,
        "domain/b.test/pages": 1,
        "domain/b.test/ok": 1,
        "domain/b.test/latency_ms": 20,
        "domain/b.test/items": 1,
    }


def test_errors_found_last_reach_redis_at_close(r):
    """The errors page's middleware sends what it counted since its last flush when the spider
    closes, though the engine has let go of its scheduler by then (a crawl's last errors,
    the 404s of start entries taken at its end, were lost)."""
    from types import SimpleNamespace

    from crawlplug.probes import errorsamples

    keys = CrawlKeys("closing")
    crawler = get_crawler(Spider)
    crawler.engine = SimpleNamespace(scheduler=SimpleNamespace(frontier=SimpleNamespace(client=r, keys=keys)))
    samples = ErrorSamplesMiddleware.from_crawler(crawler)
    samples.spider_opened(Spider("x"))
    samples.process_response(*page("http://a.test/gone", 404), Spider("x"))
    crawler.engine = SimpleNamespace(scheduler=None)  # the engine closed its slot before spider_closed
    samples.spider_closed(Spider("x"))
    assert [(e["kind"], e["count"], e["samples"]) for e in errorsamples.read(r, keys)] == [
        ("http/404", 1, ["http://a.test/gone"])
    ]


# -- the report, from the stats nodes wrote to Redis ------------------------------------------------


def node(r, name: str, stats: dict[str, int]) -> RedisStatsCollector:
    collector = RedisStatsCollector(get_crawler(settings_dict={"STATS_DUMP": False}))
    collector.bind(r, K, name)
    for key, value in stats.items():
        collector.inc_value(key, value)
    assert collector.flush()
    return collector


NODE_A = {
    "domain/a.test/pages": 10,
    "domain/a.test/ok": 9,
    "domain/a.test/latency_ms": 250,
    "domain/a.test/items": 8,
    "domain/a.test/error/http/404": 1,
    "domain/a.test/error/download/DNSLookupError": 2,
    "domain/b.test/pages": 4,
    "domain/b.test/ok": 4,
    "domain/b.test/latency_ms": 40,
    "site/shop/step/list/pages": 3,
    "site/shop/step/item/pages": 7,
    "site/shop/step/item/failed": 1,
    "site/shop/items/ok": 6,
    "site/shop/items/incomplete": 1,
    "site/shop/version/abc123": 1,
    "site/shop/field/name/filled": 7,
    "site/shop/field/sku/filled": 6,
    "site/shop/field/sku/missing": 1,
    "site/shop/field/price/filled": 6,
    "site/shop/field/price/invalid": 1,
    "site/shop/field/price/missing": 1,
    "site/shop/field/category/default": 2,
    "site/shop/field/category/filled": 5,
}
NODE_B = {
    "domain/a.test/pages": 6,
    "domain/a.test/ok": 6,
    "domain/a.test/latency_ms": 30,
    "domain/a.test/items": 6,
    "site/shop/step/item/pages": 5,
    "site/shop/items/ok": 5,
    "site/shop/version/abc123": 1,
    "site/shop/field/name/filled": 5,
}


def test_node_by_domain_site_and_field_tables(r, redis_url):
    runs.join(r, K, node_id="a", ttl_ms=10_000)
    node(r, "node-a", NODE_A)
    node(r, "node-b", NODE_B)
    rep = report.report(r, K)
    assert rep["run"] == {"id": 1, "state": "running", "source": "live"} and rep["nodes"] == ["node-a", "node-b"]
    rows = {(row["node"], row["domain"]): row for row in rep["domains"]}
    assert rows["node-a", "a.test"] == {
        "node": "node-a",
        "domain": "a.test",
        "pages": 10,
        "items": 8,
        "errors": 3,
        "errors_by_kind": {"download/DNSLookupError": 2, "http/404": 1},
        "success_rate": round(9 / 12, 4),
        "mean_response_ms": 25.0,
    }
    assert rows[report.ALL, "a.test"]["pages"] == 16 and rows[report.ALL, "a.test"]["success_rate"] == round(15 / 18, 4)
    assert rows[report.ALL, "a.test"]["mean_response_ms"] == round(280 / 16, 1)
    assert [(row["node"], row["domain"]) for row in rep["domains"]] == [
        ("node-a", "a.test"),
        ("node-a", "b.test"),
        ("node-b", "a.test"),
        (report.ALL, "a.test"),
        (report.ALL, "b.test"),
    ], "each node's busiest domain first, then every node's"

    sites = {row["node"]: row for row in rep["sites"]}
    assert sites["node-a"] == {
        "node": "node-a",
        "site": "shop",
        "versions": {"abc123": 1},
        "pages": 10,
        "items_ok": 6,
        "items_incomplete": 1,
        "errors": 1,
        "success_rate": round(6 / 7, 4),
    }
    assert sites[report.ALL]["items_ok"] == 11 and sites[report.ALL]["versions"] == {"abc123": 2}
    fields = {(row["node"], row["field"]): row for row in rep["fields"]}
    assert fields["node-a", "price"] == {
        "node": "node-a",
        "site": "shop",
        "field": "price",
        "filled": 6,
        "missing": 1,
        "invalid": 1,
        "defaulted": 0,
    }
    assert fields["node-a", "category"]["defaulted"] == 2 and fields[report.ALL, "name"]["filled"] == 12

    # the command: text, JSON, CSV
    res = cli(redis_url, "report", "rep")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == "report of crawl 'rep', run 1 (running), from its nodes' stats in Redis: 2 nodes"
    a_row = next(line for line in lines if line.startswith("  node-a") and "a.test" in line)
    assert a_row.split()[:7] == ["node-a", "a.test", "10", "8", "3", "75.0%", "25"], a_row
    assert "download/DNSLookupError 2, http/404 1" in a_row
    assert any(line.split()[:4] == ["node-a", "shop", "price", "6"] for line in lines)
    assert json.loads(cli(redis_url, "report", "rep", "--json").output)["domains"] == rep["domains"]
    table = list(csv.DictReader(io.StringIO(cli(redis_url, "report", "--crawl", "rep", "--csv").output)))
    assert table[0] == {
        "node": "node-a",
        "domain": "a.test",
        "pages": "10",
        "items": "8",
        "errors": "3",
        "errors_by_kind": "download/DNSLookupError=2;http/404=1",
        "success_rate": "0.75",
        "mean_response_ms": "25.0",
    }
    fields_csv = cli(redis_url, "report", "rep", "--csv", "--table", "fields").output.splitlines()
    assert fields_csv[0] == "node,site,field,filled,missing,invalid,defaulted"
    assert "node-a,shop,price,6,1,1,0" in fields_csv


def test_an_ended_run_keeps_its_report_and_a_worker_counts_its_share(r, redis_url):
    runs.join(r, K, node_id="a", ttl_ms=10_000)
    a = node(r, "node-a", NODE_A)
    runstats.keep(r, K, 1)  # what runs.begin does for run 1 when run 2 begins
    r.hset(K.runs, "1", json.dumps({"id": 1, "state": "finished", "started": 1, "ended": 2}))
    r.hset(K.run, mapping={"id": 2, "state": "running"})
    r.delete(K.node_stats("node-a"), K.statnodes)  # the node records go with the old run
    a.inc_value("domain/a.test/pages", 5)  # a worker: counts on; its flush sends all again
    a.inc_value("domain/a.test/ok", 5)
    assert a.flush()

    now = report.report(r, K)
    assert now["run"]["id"] == 2
    assert [(row["domain"], row["pages"], row["errors"]) for row in now["domains"]] == [("a.test", 5, 0)], (
        "the 10 pages it counted in run 1 are run 1's"
    )
    before = report.report(r, K, run=1)
    assert before["run"] == {"id": 1, "state": "finished", "source": "kept"}
    assert before["domains"][0]["pages"] == 10 and before["sites"][0]["items_ok"] == 6
    app = TestClient(create_app(r, K), base_url="http://127.0.0.1")
    assert app.get("/api/report").json()["domains"] == now["domains"]
    assert app.get("/api/report?run=1").json()["domains"] == before["domains"]
    assert app.get("/api/runs").json()["kept"] == [1]
    for query in ("run=7", "run=x"):
        assert app.get(f"/api/report?{query}").status_code == 400
    res = cli(redis_url, "report", "rep", "--run", "1")
    assert res.exit_code == 0 and "run 1 (finished), from the node stats kept when it ended" in res.output
    missing = cli(redis_url, "report", "rep", "--run", "7")
    assert missing.exit_code == 1
    assert (
        "no report kept of run 7 of crawl 'rep' (the node stats of ended runs are kept for the last 20: "
        "runs 1, and the current run 2)" in missing.output
    )
    assert cli(redis_url, "report", "rep", "--json", "--csv").exit_code == 1


def test_the_last_twenty_runs_keep_their_report(r):
    r.zadd(K.statnodes, {"n": 1})
    r.hset(K.node_stats("n"), "domain/a.test/pages", 3)
    for run in range(1, 25):
        runstats.keep(r, K, run)
    assert runstats.kept(r, K) == list(range(5, 25))


def test_a_report_without_stats_says_why(r, redis_url):
    runs.join(r, K, node_id="a", ttl_ms=10_000)
    res = cli(redis_url, "report", "rep")
    assert res.exit_code == 0
    assert (
        "no node stats for this run: the crawl's nodes keep their Scrapy stats in Redis only with "
        "STATS_CLASS = 'crawlplug.stats.RedisStatsCollector'" in res.output
    )
    assert cli(redis_url, "report", "nosuchcrawl").exit_code == 1


# -- two real runs ---------------------------------------------------------------------------------------


def test_two_real_runs_are_reported_and_charted(crawl, shop, r, redis_url):
    """Two nodes crawl the demo shop, then one node crawls it again (run 2): each run's report
    and history count its own pages, and run 1's stay readable once run 2 began."""
    shop_keys = CrawlKeys("shop")
    settings = {
        "REDIS_URL": redis_url,
        "CRAWLPLUG_IDLE_CLOSE": 1,
        "CRAWLPLUG_HEARTBEAT": 0.5,
        "CRAWLPLUG_LEASE_TIMEOUT": 5,
        "STATS_CLASS": "crawlplug.stats.RedisStatsCollector",
        "CRAWLPLUG_STATS_INTERVAL": 0.5,
    }
    pages, items = len(shop.shop.paths()), len(shop.shop.item_paths())
    first = start_joined(lambda: crawl(args={"base_url": shop.url}, settings=settings), shop, 2)
    for n in first:
        assert n.wait(120) == 0, n.text()[-3000:]

    one = json.loads(cli(redis_url, "report", "shop", "--json").output)
    assert one["run"]["id"] == 1 and len(one["nodes"]) == 2
    per_node = [row for row in one["domains"] if row["node"] != report.ALL]
    assert {row["domain"] for row in per_node} == {"127.0.0.1"}
    assert sum(row["pages"] for row in per_node) == pages and sum(row["items"] for row in per_node) == items
    total = next(row for row in one["domains"] if row["node"] == report.ALL)
    assert (total["pages"], total["items"], total["errors"], total["success_rate"]) == (pages, items, 0, 1.0)
    assert total["mean_response_ms"] is not None and total["mean_response_ms"] >= 0

    since = json.loads(cli(redis_url, "status", "--crawl", "shop", "--since", "10m", "--json").output)["since"]
    assert since["step"] == "minute"
    assert (since["totals"]["done"], since["totals"]["items"]) == (pages, items), since["totals"]

    second = crawl(args={"base_url": shop.url}, settings=settings)
    assert second.wait(120) == 0, second.text()[-3000:]
    assert sum(shop.hits.values()) == 2 * pages, "run 2 crawled the shop again"
    two = report.report(r, shop_keys)
    assert two["run"]["id"] == 2 and len(two["nodes"]) == 1
    assert [(row["pages"], row["items"]) for row in two["domains"]] == [(pages, items)]
    kept = json.loads(cli(redis_url, "report", "shop", "--run", "1", "--json").output)
    assert kept["run"]["source"] == "kept" and kept["domains"] == one["domains"]
    for run in (1, 2):
        got = history.history(r, shop_keys, run=run)
        assert (got["totals"]["done"], got["totals"]["items"]) == (pages, items), (run, got["totals"])
