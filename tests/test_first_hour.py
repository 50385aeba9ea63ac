"""A Scrapy user's first hour with crawlplug, as real ``scrapy crawl`` nodes of the demo
project meet it (issue 34): a trial run with a limit does not block the next crawl typed
at a terminal, while a supervisor's restart and any start after an operator's stop keep
the run's end; a node that exits at once touches no feed file; a node's first lines say
what it does, at INFO, with no WARNING for features not in use; one definition of a
failed request everywhere, reports and alerts with the add-on line alone; a plain
spider's start URLs fetched once in a run, however many nodes start.

Each test reuses its crawl for several assertions: nodes are the expensive part of the
suite (tests/conftest.py, the ``crawl`` fixture; ``terminal=True`` gives a node a pty as
its standard input and error).
"""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from crawlplug.alerts.evaluator import Evaluator
from crawlplug.cli import main
from crawlplug.crawl import Crawl, runs
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.probes import errorsamples

from .support.nodes import start_each_joined, wait_until

FAST = {"CRAWLPLUG_IDLE_CLOSE": 1, "CRAWLPLUG_HEARTBEAT": 0.5, "CRAWLPLUG_LEASE_TIMEOUT": 4}
SHOP = CrawlKeys("shop")


def cli(redis_url: str, *args: str):
    return CliRunner().invoke(main, ["--redis-url", redis_url, *args], env={"REDIS_URL": None, "CRAWLPLUG_CRAWL": None})


def _reason(node) -> str:
    found = re.findall(r"'finish_reason': '([a-z_]+)'", node.text())
    assert found, node.text()[-3000:]
    return found[-1]


def _first_lines(node) -> list[str]:
    """The node's log lines up to its first word on the run (joining, resuming, starting)."""
    lines = []
    for line in node.text().splitlines():
        lines.append(line)
        if re.search(r"crawlplug: node \S+ (joining|resuming|starting)", line):
            break
    return lines


def test_a_limit_ends_a_trial_run_and_a_crawl_typed_at_a_terminal_begins_the_next(
    crawl, make_shop, redis_url, r, tmp_path
):
    shop = make_shop(items=40)
    base = {"REDIS_URL": redis_url, **FAST}
    # a trial run: 5 pages, then the run has ended by its limit
    trial = crawl(args={"base_url": shop.url}, settings={**base, "CLOSESPIDER_PAGECOUNT": 5})
    assert trial.wait(90) == 0, trial.text()[-3000:]
    assert _reason(trial) == "closespider_pagecount"
    assert runs.record(r, SHOP)["state"] == "limit"
    # its first lines: what it does, at INFO; no WARNING for the Scrapyd job, node metrics or
    # alerts from settings it does not use; the add-on by its name, not as a raw object
    first = _first_lines(trial)
    assert [line for line in first if " WARNING: " in line or " ERROR: " in line] == [], "\n".join(first)
    assert "[crawlplug.Addon]" in trial.text() and "Addon object at" not in trial.text()
    assert sum("crawlplug: node " in line and "starting run 1 of crawl 'shop'" in line for line in first) == 1
    fetched = sum(shop.hits.values())

    # a node restarted by a supervisor (standard input not a terminal) keeps the end: it
    # exits 1 at once, says why and how to go on, and leaves the feed of the last run alone
    feed = tmp_path / "items.jsonl"
    feed.write_text('{"from": "the last run"}\n')
    restarted = crawl(args={"base_url": shop.url}, settings=base, overwrite=True, items=feed)
    assert restarted.wait(60) == 1, restarted.text()[-3000:]
    said = restarted.text()
    assert "run 1 of crawl 'shop' was ended by a limit (closespider_pagecount: 5 pages) at " in said, said[-3000:]
    assert (
        "a node begins one itself when started at a terminal, or with -s CRAWLPLUG_NEW_RUN_AFTER_LIMIT=True "
        "(this one: its standard input is not a terminal): this node exits"
    ) in said, said[-3000:]
    assert feed.read_text() == '{"from": "the last run"}\n'
    assert sum(shop.hits.values()) == fetched and runs.record(r, SHOP)["id"] == "1"

    # the same `scrapy crawl` typed at a terminal is a crawl: it begins run 2. Held paused
    # (the control hash outlives runs) until the operator stops that run
    Crawl.of(Frontier(r, SHOP)).pause(by="the test")
    typed = crawl(args={"base_url": shop.url}, settings=base, overwrite=True, items=feed, terminal=True)
    wait_until(lambda: "starting run 2" in typed.text(), "the typed node to begin run 2", nodes=[typed])
    assert re.search(
        r"crawlplug: node \S+ starting run 2 of crawl 'shop' \(run 1 ended by a limit at \d\d:\d\d, "
        r"fingerprints cleared\), as this node was started at a terminal "
        r"\(CRAWLPLUG_NEW_RUN_AFTER_LIMIT unset\); what run 1 left queued is dropped",
        typed.text(),
    )
    res = cli(redis_url, "stop", "shop")
    assert res.exit_code == 0, res.output
    assert typed.wait(60) == 0, typed.text()[-3000:]
    assert runs.record(r, SHOP)["state"] == "stopped"

    # after an operator's stop, neither a terminal nor the setting begins a run
    again = crawl(
        args={"base_url": shop.url},
        settings={**base, "CRAWLPLUG_NEW_RUN_AFTER_LIMIT": True},
        overwrite=True,
        items=feed,
        terminal=True,
    )
    assert again.wait(60) == 1, again.text()[-3000:]
    said = again.text()
    assert "run 2 of crawl 'shop' was stopped by crawlplug stop" in said and "this node exits" in said, said[-3000:]
    assert "CRAWLPLUG_NEW_RUN_AFTER_LIMIT" not in said
    assert runs.record(r, SHOP)["id"] == "2" and sum(shop.hits.values()) == fetched


def test_one_definition_of_a_failure_and_reports_and_alerts_with_the_add_on_alone(crawl, make_shop, redis_url, r):
    """The demo project turns crawlplug on with the add-on line only (no STATS_CLASS). A crawl
    of the shop, which has no robots.txt, with one start entry of a page it does not have:
    one failed request, counted as one by every view; robots.txt neither a page nor a
    failure; the report has its node; the alert rules are evaluated, or shown as not."""
    shop = make_shop(items=20)
    pages = len(shop.shop.paths())
    missing = f"{shop.url}/no-such-page"
    res = cli(redis_url, "push", "--crawl", "shop", missing)
    assert res.exit_code == 0, res.output
    node = crawl(
        args={"base_url": shop.url},
        settings={"REDIS_URL": redis_url, **FAST, "ROBOTSTXT_OBEY": True, "CRAWLPLUG_STATS_INTERVAL": 0.5},
    )
    assert node.wait(90) == 0, node.text()[-3000:]
    assert shop.hits["/robots.txt"] == 1, "fetched: the node obeys robots.txt"

    status = json.loads(cli(redis_url, "status", "--crawl", "shop", "--json").output)
    assert (status["done"], status["failed"]) == (pages + 1, 1)
    since = json.loads(cli(redis_url, "status", "--crawl", "shop", "--since", "1h", "--json").output)["since"]
    assert since["totals"]["errors"] == 1 and since["totals"]["done"] == pages + 1
    text = cli(redis_url, "status", "--crawl", "shop", "--since", "1h").output
    rows = text.split("history, since the crawl began", 1)[1].splitlines()[2:-1]
    assert 1 <= len(rows) <= 2 and rows[0].split()[1] != "-", text  # no row of dashes before it began
    assert [(e["kind"], e["count"], e["samples"]) for e in errorsamples.read(r, SHOP)] == [("http/404", 1, [missing])]

    # `crawlplug report` with the add-on's stats collector: the node, its pages (not robots.txt)
    got = json.loads(cli(redis_url, "report", "shop", "--json").output)
    assert len(got["nodes"]) == 1, got
    [total] = got["domains"]  # one node, one host: no total row
    assert (total["pages"], total["errors"], total["errors_by_kind"]) == (pages + 1, 1, {"http/404": 1})
    assert total["success_rate"] == round(pages / (pages + 1), 4)

    # alert rules: error_rate from the run's counters; a null_rate of no item counted: unknown, said so
    assert cli(redis_url, "alerts", "add", "shop", "--name", "errors", "--when", "error_rate > 0.01").exit_code == 0
    assert (
        cli(redis_url, "alerts", "add", "shop", "--name", "prices", "--when", "null_rate(shop.price) > 0.1").exit_code
        == 0
    )
    evaluator = Evaluator(r, "test")
    evaluator.tick()
    evaluator.release()
    listed = cli(redis_url, "alerts", "list", "shop").output
    assert f"shop/errors  error_rate > 0.01  firing, value {round(1 / (pages + 1), 4):g}" in listed, listed
    assert (
        "shop/prices  null_rate(shop.price) > 0.1  unknown (no item of site 'shop' counted for field 'price' "
        "yet (is 'shop.price' right?))"
    ) in listed, listed


def test_start_urls_of_the_default_start_are_fetched_once_in_a_run(crawl, make_shop, redis_url, r):
    """A spider as `scrapy genspider` writes one (start_urls, Scrapy's default start()): a
    second node that joins the run yields the start URL again, and it is not fetched again;
    links back to it are duplicates too: done == seen == the site's pages."""
    shop = make_shop(items=20, delay=0.05)
    pages = len(shop.shop.paths())
    settings = {"REDIS_URL": redis_url, **FAST, "CONCURRENT_REQUESTS": 2}
    # the shop answers once both are in run 1: each yields the start URL, the second a join
    first, second = start_each_joined(
        [lambda: crawl("plain", args={"start_urls": f"{shop.url}/"}, settings=settings)] * 2, shop
    )
    assert sum("joining run 1 of crawl 'plain'" in node.text() for node in (first, second)) == 1
    for node in (first, second):
        assert node.wait(90) == 0, node.text()[-3000:]
    assert shop.hits["/"] == 1, "the start URL, yielded by both nodes, fetched once"
    assert set(shop.hits) == shop.shop.paths() and max(shop.hits.values()) == 1
    status = json.loads(cli(redis_url, "status", "--crawl", "plain", "--json").output)
    assert (status["done"], status["seen"]) == (pages, pages)
