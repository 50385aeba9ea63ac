"""Run control (crawlplug.crawl.control, crawlplug.scheduler.runcontrol): Scrapy's
CLOSESPIDER_* limits mean the whole run, a per-domain page cap, and an operator's stop,
drain, continue and new run.

The scripts are checked directly against a real Redis (what pop.lua leases under a
limit, when heartbeat.lua ends a run, what runctl.lua refuses); the behaviour as a user
meets it with real ``scrapy crawl`` nodes of the demo project on the demo shop served
here: their log lines, their finish reasons and exit codes, the pages the shop served,
the CLI's output.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter

import pytest
import redis
from click.testing import CliRunner
from scrapy.settings import Settings

from crawlplug.cli import main
from crawlplug.crawl import Crawl, control, runs
from crawlplug.crawl.control import Limits
from crawlplug.errors import ConfigError, CorruptKey, RunEnded
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.queues import DomainQueue
from crawlplug.scheduler.politeness import choose

from .support.fingerprints import recorded
from .support.nodes import start_joined
from .support.patience import patient

FAST = {"CRAWLPLUG_IDLE_CLOSE": 1.5, "CRAWLPLUG_HEARTBEAT": 0.5, "CRAWLPLUG_LEASE_TIMEOUT": 4}
SHOP = CrawlKeys("shop")


def cli(redis_url: str, *args: str):
    return CliRunner().invoke(main, ["--redis-url", redis_url, *args], env={"REDIS_URL": None, "CRAWLPLUG_CRAWL": None})


def _payload(i: int) -> bytes:
    return json.dumps({"url": f"http://example.com/{i}"}).encode()


def _node(r: redis.Redis, keys: CrawlKeys, name: str = "n1", **kwargs) -> tuple[Frontier, runs.Joined]:
    joined = runs.join(r, keys, node_id=name, ttl_ms=10_000)
    return Frontier(r, keys, node_id=name, epoch=joined.epoch, **kwargs), joined


def _live_nodes(r: redis.Redis, keys: CrawlKeys = SHOP) -> int:
    """The nodes whose registration has not run out (the crawl's ``nodes`` sorted set, by Redis's clock)."""
    seconds, micros = r.time()
    return int(r.zcount(keys.nodes, f"({seconds * 1000 + micros // 1000}", "+inf"))


def _wait_for(predicate, what: str, timeout: float = 60.0, nodes=()) -> None:
    deadline = time.monotonic() + patient(timeout)
    while not predicate():
        for node in nodes:
            assert node.proc.poll() is None, f"a node exited while waiting for {what}:\n{node.text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# -- the scripts ------------------------------------------------------------------------------


def test_a_page_limit_leases_no_more_than_it_leaves_room_for(r):
    keys = CrawlKeys("limited")
    node, joined = _node(r, keys)
    assert control.apply(r, keys, joined.run, Limits(pages=5), by="n1").limits == Limits(pages=5)
    # a second node's settings do not replace the limit the run has
    assert control.apply(r, keys, joined.run, Limits(pages=50, items=7), by="n2").limits == Limits(pages=5, items=7)
    node.admit([(bytes([i]) * 20, 0.0, _payload(i)) for i in range(20)])
    first = node.pop(3)
    assert len(first) == 3
    second = node.pop(10)
    assert len(second) == 2, "5 pages: 3 leased, room for 2"
    assert node.pop(10) == [], "the leases held count against the limit"
    node.admit([], [x.id for x in first])  # 3 done, 2 held: still no room
    assert node.pop(10) == []
    beat = node.beat([x.id for x in second])
    assert beat.lost == [] and beat.run_state == "running", "3 of 5 done: it goes on"
    node.admit([], [x.id for x in second])
    assert node.beat([]).run_state == "limit"
    record = runs.record(r, keys)
    assert (record["reason"], record["by"]) == ("closespider_pagecount", "n1")
    # ended: nothing more is leased, whatever the queue holds
    assert node.pop(10) == [] and r.zcard(keys.queue) == 15
    # continue is refused while the limit stays reached, and changes nothing
    out = control.continue_run(r, keys, by="op")
    assert (out.outcome, out.reached, runs.record(r, keys)["state"]) == ("reached", "closespider_pagecount", "limit")
    out = control.continue_run(r, keys, by="op", changes={"pages": 8})
    assert out.ok and out.state == "running" and out.limits.pages == 8
    assert len(node.pop(10)) == 3, "8 pages: 5 done, room for 3"
    assert node.pop(10) == []


def test_items_errors_and_time_end_the_run_at_a_heartbeat(r):
    for limit, counts, reason in (
        (Limits(items=10), {"items": 10}, "closespider_itemcount"),
        (Limits(errors=2), {"spider_errors": 2}, "closespider_errorcount"),
        (Limits(timeout=0.001), {}, "closespider_timeout"),
    ):
        keys = CrawlKeys(f"by-{reason}")
        node, joined = _node(r, keys)
        control.apply(r, keys, joined.run, limit, by="n1")
        node.admit([(bytes([i]) * 20, 0.0, _payload(i)) for i in range(4)])
        if counts:
            assert node.beat([], totals={name: value - 1 for name, value in counts.items()}).run_state == "running", (
                reason
            )
            assert len(node.pop(1)) == 1
            beat = node.beat([], totals=counts)  # the node's totals: the last one is new
        else:
            time.sleep(0.01)  # past a deadline of 1 ms: the script compares Redis times, nothing here is timed
            beat = node.beat([])
        assert beat.run_state == "limit", reason
        assert runs.record(r, keys)["reason"] == reason
        assert node.pop(5) == [], reason


def test_a_sharded_crawl_counts_its_pages_through_the_heartbeat(r):
    """The shards' own counters are not in the crawl's keys: nodes add their acks with each
    heartbeat (shard_acked), and the page limit ends the run there."""
    from crawlplug.frontier.core import Frontier
    from crawlplug.frontier.layout import claim_shards

    keys = CrawlKeys("sharded-limit")
    claim_shards(r, keys, 2)
    joined = runs.join(r, keys, node_id="n1", ttl_ms=10_000)
    node = Frontier(r, keys, shards=2, node_id="n1", epoch=joined.epoch)
    control.apply(r, keys, joined.run, Limits(pages=10), by="n1")
    assert node.beat([], totals={"shard_acked": 9}).run_state == "running"
    assert node.beat([], totals={"shard_acked": 10}).run_state == "limit"
    assert runs.record(r, keys)["reason"] == "closespider_pagecount"


def test_stop_is_sticky_until_the_run_is_continued_or_a_new_one_asked_for(r):
    keys = CrawlKeys("stoppable")
    node, joined = _node(r, keys)
    node.admit([(bytes([i]) * 20, 0.0, _payload(i)) for i in range(6)])
    held = node.pop(2)
    out = control.stop(r, keys, by="crawlplug stop (alice@web1)")
    assert out.ok and out.state == "stopped"
    assert node.pop(5) == [], "a stopped run leases nothing"
    assert node.beat([x.id for x in held]).run_state == "stopped"
    summary = json.loads(r.hget(keys.runs, "1"))
    assert (summary["state"], summary["reason"], summary["by"]) == ("stopped", "stopped", "crawlplug stop (alice@web1)")
    assert control.stop(r, keys, by="again").outcome == "state", "stopping twice changes nothing"
    with pytest.raises(RunEnded) as ended:
        runs.join(r, keys, node_id="late", ttl_ms=10_000)
    assert ended.value.state == "stopped"
    message = str(ended.value)
    assert "was stopped by crawlplug stop (alice@web1) at " in message, message
    assert "`crawlplug continue stoppable`" in message and "`crawlplug new-run stoppable`" in message
    # continued: the same run, its queue as it was
    assert control.continue_run(r, keys, by="op").ok
    assert runs.join(r, keys, node_id="late", ttl_ms=10_000).run == 1
    assert not r.hexists(keys.runs, "1"), "a continued run is no longer listed as ended"
    # stopped again, then a new run: the next node begins run 2
    assert control.stop(r, keys, by="op").ok
    assert control.new_run(r, keys, by="op").ok
    again = runs.join(r, keys, node_id="next", ttl_ms=10_000)
    assert (again.action, again.run, again.previous["state"]) == ("new", 2, "stopped")
    assert r.zcard(keys.queue) == 0, "the new run starts without the old queue"
    assert control.new_run(r, keys, by="op").outcome == "state", "a running run is not replaced"
    # CRAWLPLUG_FLUSH_ON_START is an operator's reset: it begins a new run after a stop too
    assert control.stop(r, keys, by="op").ok
    assert runs.join(r, keys, node_id="flusher", ttl_ms=10_000, want="new").run == 3


def test_a_node_that_may_begin_after_a_limit_does_so_but_never_after_a_stop(r):
    """want="after-limit" (a node started at a terminal, CRAWLPLUG_NEW_RUN_AFTER_LIMIT):
    after a limit it begins the next run, recording the ended one's summary with its totals
    when no node closed it; after a stop it exits as any node does."""
    keys = CrawlKeys("trial")
    node, joined = _node(r, keys)
    control.apply(r, keys, joined.run, Limits(pages=2), by="n1")
    node.admit([(bytes([i]) * 20, 0.0, _payload(i)) for i in range(5)])
    node.admit([], [x.id for x in node.pop(2)])
    assert node.beat([]).run_state == "limit" and not r.hexists(keys.runs, "1"), "killed: no node closed it"
    with pytest.raises(RunEnded) as ended:
        runs.join(r, keys, node_id="restarted", ttl_ms=10_000)
    assert (ended.value.state, ended.value.run_state) == ("closespider_pagecount", "limit")
    typed = runs.join(r, keys, node_id="typed", ttl_ms=10_000, want="after-limit")
    assert (typed.action, typed.run, typed.previous["state"], typed.previous["reason"]) == (
        "new",
        2,
        "limit",
        "closespider_pagecount",
    )
    summary = json.loads(r.hget(keys.runs, "1"))
    assert (summary["state"], summary["pages"], summary["enqueued"]) == ("limit", 2, 5)
    assert r.zcard(keys.queue) == 0, "what run 1 left queued is dropped"
    assert runs.join(r, keys, node_id="other", ttl_ms=10_000, want="after-limit").action == "join"
    # an operator's stop stays: no node undoes it
    assert control.stop(r, keys, by="crawlplug stop (op)").ok
    with pytest.raises(RunEnded) as stopped:
        runs.join(r, keys, node_id="typed-again", ttl_ms=10_000, want="after-limit")
    assert stopped.value.run_state == "stopped" and runs.record(r, keys)["id"] == "2"


def test_whether_a_node_begins_a_new_run_after_a_limit(monkeypatch):
    """CRAWLPLUG_NEW_RUN_AFTER_LIMIT as set; unset, only a node whose standard input and error
    are terminals and that is no Scrapyd job."""
    import os
    import sys

    from scrapy.utils.test import get_crawler

    from crawlplug.scheduler.joining import new_run_after_limit

    def decide(**settings):
        found = new_run_after_limit(get_crawler(settings_dict=settings))
        return found.begins, found.why

    assert decide(CRAWLPLUG_NEW_RUN_AFTER_LIMIT=True) == (True, "CRAWLPLUG_NEW_RUN_AFTER_LIMIT=True")
    assert decide(CRAWLPLUG_NEW_RUN_AFTER_LIMIT="False")[0] is False
    assert decide() == (False, "its standard input is not a terminal"), "pytest's standard input is no terminal"
    primary, secondary = os.openpty()
    try:
        with open(secondary, "r", closefd=False) as tty_in, open(secondary, "w", closefd=False) as tty_err:
            monkeypatch.setattr(sys, "stdin", tty_in)
            monkeypatch.setattr(sys, "stderr", tty_err)
            assert decide() == (True, "started at a terminal")
            assert decide(CRAWLPLUG_SCRAPYD_JOB="shop-1") == (False, "it is a Scrapyd job")
            monkeypatch.setenv("SCRAPY_JOB", "abc")
            assert decide()[0] is False
            assert decide(CRAWLPLUG_NEW_RUN_AFTER_LIMIT=True)[0], "the setting wins"
            monkeypatch.delenv("SCRAPY_JOB")
            with open(os.devnull, "w") as null:
                monkeypatch.setattr(sys, "stderr", null)
                assert decide() == (False, "its standard error is not a terminal")
    finally:
        os.close(primary)
        os.close(secondary)


def test_a_drained_run_ends_stopped_when_its_queue_has_run_out(r):
    keys = CrawlKeys("drainable")
    node, joined = _node(r, keys)
    node.admit([(bytes([i]) * 20, 0.0, _payload(i)) for i in range(2)])
    r.rpush(keys.start_urls, "http://example.com/entry")  # waits: no node takes entries while draining
    r.zrem(keys.producers, "n1")
    assert control.stop(r, keys, by="op --drain", drain=True).ok
    with pytest.raises(RunEnded, match="being stopped"):
        runs.join(r, keys, node_id="late", ttl_ms=10_000)
    leased = node.pop(5)
    assert len(leased) == 2, "a draining run crawls what is queued"
    assert Crawl.of(node).finish_run(joined.run, node_id=node.node_id, epoch=node.epoch, lanes=node.lanes) == (
        "busy",
        None,
    )
    node.admit([], [x.id for x in leased])
    state, ended = Crawl.of(node).finish_run(joined.run, node_id=node.node_id, epoch=node.epoch, lanes=node.lanes)
    assert state == "stopped" and ended
    summary = json.loads(r.hget(keys.runs, "1"))
    assert (summary["state"], summary["reason"], summary["by"], summary["drained"]) == (
        "stopped",
        "stopped",
        "op --drain",
        True,
    )
    assert r.llen(keys.start_urls) == 1, "the start entry is kept"


def test_run_control_refuses_corrupt_keys_and_bad_limits_whole(r):
    keys = CrawlKeys("guarded")
    _node(r, keys)
    r.hset(keys.stats, "acked", "many")
    before = runs.record(r, keys)
    with pytest.raises(CorruptKey):
        control.stop(r, keys, by="op")
    assert runs.record(r, keys) == before and not r.exists(keys.runs)
    r.hset(keys.stats, "acked", 0)
    with pytest.raises(ConfigError):
        control.set_limits(r, keys, {"pages": -1}, by="op")
    with pytest.raises(ConfigError, match="unknown limit"):
        control.set_limits(r, keys, {"hours": 1}, by="op")
    with pytest.raises(redis.ResponseError, match="whole number"):
        control._call(r, keys, "limits", arg={"lim_pages": "ten"})
    assert runs.record(r, keys) == before


def test_a_domain_page_cap_admits_no_more_of_a_domain_and_records_no_fingerprint(r):
    keys = CrawlKeys("capped")
    node, _ = _node(r, keys, queue=DomainQueue())
    control_fields = {control.CAP_SETTINGS: "2"}
    from crawlplug.frontier import Domains

    Domains(r, keys).configure(control_fields)
    items = [(bytes([i]) * 20, 0.0, _payload(i), "a.example") for i in range(4)]
    items.append((b"b" * 20, 0.0, _payload(9), "b.example"))
    result = node.admit(items)
    assert (result.flags, result.admitted, result.capped) == ("11cc1", 3, 2)
    assert len(recorded(r, keys)) == 3, "a capped request's fingerprint is not recorded"
    assert int(r.hget(keys.stats, "capped")) == 2
    control.set_domain_pages(r, keys, 3)  # an operator's cap wins over the nodes'
    assert control.domain_pages(r, keys) == 3
    assert node.admit(items[2:4]).flags == "1c"


def test_politeness_and_limits_from_settings():
    def line(**values):
        return choose(Settings({"CONCURRENT_REQUESTS": 16, **values}))

    template = line(DOWNLOAD_DELAY=1, CONCURRENT_REQUESTS_PER_DOMAIN=1)  # what `scrapy startproject` writes
    assert template.crawl_wide and template.queue.order == "domain" and template.fallback is not None
    assert "crawl-wide: DOWNLOAD_DELAY=1s and CONCURRENT_REQUESTS_PER_DOMAIN=1 hold per domain" in template.line
    per_node = line(DOWNLOAD_DELAY=1, CRAWLPLUG_POLITENESS="node")
    assert not per_node.crawl_wide and per_node.queue.order != "domain" and "per node" in per_node.line
    assert not line(CONCURRENT_REQUESTS_PER_DOMAIN=16).crawl_wide, "not below CONCURRENT_REQUESTS: no limit"
    assert not line().crawl_wide and "sets no per-domain delay" in line().line
    named = line(DOWNLOAD_DELAY=1, CRAWLPLUG_QUEUE_CLASS="crawlplug.queues.FifoQueue")
    assert not named.crawl_wide and "is a plain queue" in named.line
    assert not line(DOWNLOAD_DELAY=1, AUTOTHROTTLE_ENABLED=True).crawl_wide
    assert line(CRAWLPLUG_DOMAIN_PAGES=50).crawl_wide
    with pytest.raises(ConfigError, match="CRAWLPLUG_DOMAIN_PAGES needs the per-domain queue"):
        line(CRAWLPLUG_DOMAIN_PAGES=50, CRAWLPLUG_QUEUE_CLASS="crawlplug.queues.FifoQueue")
    with pytest.raises(ConfigError, match="'crawl' or 'node'"):
        line(CRAWLPLUG_POLITENESS="cluster")
    assert control.from_settings(Settings({"CLOSESPIDER_PAGECOUNT": 300, "CLOSESPIDER_TIMEOUT": 1.5})) == Limits(
        pages=300, timeout=1.5
    )
    with pytest.raises(ConfigError, match="CLOSESPIDER_ITEMCOUNT"):
        control.from_settings(Settings({"CLOSESPIDER_ITEMCOUNT": -1}))


# -- real nodes ------------------------------------------------------------------------------


def _reason(node) -> str:
    found = re.findall(r"'finish_reason': '([a-z_]+)'", node.text())
    assert found, node.text()[-3000:]
    return found[-1]


def test_five_nodes_stop_at_a_crawl_wide_page_limit(crawl, make_shop, redis_url, r):
    """Five nodes, CLOSESPIDER_PAGECOUNT=300 each, a 2,001-page shop: 300 pages in all."""
    shop = make_shop(items=1900)
    assert len(shop.shop.paths()) == 2001
    Crawl.of(Frontier(r, SHOP)).pause(by="the test, until all five are up")  # so that they start together
    settings = {"REDIS_URL": redis_url, **FAST, "CLOSESPIDER_PAGECOUNT": 300}
    nodes = [crawl(args={"base_url": shop.url}, settings=settings) for _ in range(5)]
    _wait_for(lambda: r.zcard(SHOP.nodes) == 5, "five live nodes", nodes=nodes)
    Crawl.of(Frontier(r, SHOP)).resume()
    for node in nodes:
        assert node.wait(120) == 0, node.text()[-3000:]
    fetched = sum(shop.hits.values())
    in_flight_bound = 5 * 16  # CONCURRENT_REQUESTS of each node: what may be leased at once
    print(
        f"\n[limits] CLOSESPIDER_PAGECOUNT=300, 5 nodes: {fetched} pages fetched, overshoot {fetched - 300} "
        f"(bound: {in_flight_bound} in flight); pages per node "
        f"{[len(n.item_lines()) for n in nodes]} items"
    )
    assert 300 <= fetched <= 300 + in_flight_bound
    assert max(shop.hits.values()) == 1
    for node in nodes:
        text = node.text()
        assert "CLOSESPIDER_PAGECOUNT=300 means the whole run here, every node together" in text, text[-3000:]
        assert _reason(node) == "closespider_pagecount"
    assert sum("ended by a limit: closespider_pagecount" in n.text() for n in nodes) == 5
    record = runs.record(r, SHOP)
    assert (record["state"], record["reason"]) == ("limit", "closespider_pagecount")
    shown = json.loads(cli(redis_url, "crawls", "show", "shop", "--json").output)
    assert [(x["state"], x["reason"], x["pages"]) for x in shown["runs"]] == [
        ("limit", "closespider_pagecount", fetched)
    ]
    # a node started afterwards says so and exits
    late = crawl(args={"base_url": shop.url}, settings=settings)
    assert late.wait(60) == 1
    assert "run 1 of crawl 'shop' was ended by a limit (closespider_pagecount: 300 pages) at " in late.text()
    assert "this node exits" in late.text() and sum(shop.hits.values()) == fetched
    assert "-s CRAWLPLUG_NEW_RUN_AFTER_LIMIT=True (this one: its standard input is not a terminal)" in late.text()
    assert not late.items.exists(), "a node that exits at once touches no feed file"
    # the operator raises the limit and continues the run: 30 more pages
    res = cli(redis_url, "continue", "shop")
    assert res.exit_code == 1 and "still reached" in res.output, res.output
    res = cli(redis_url, "continue", "shop", "--pages", "330")
    assert res.exit_code == 0 and "continues (limits: 330 pages)" in res.output, res.output
    more = crawl(args={"base_url": shop.url}, settings=settings)
    assert more.wait(60) == 0, more.text()[-3000:]
    assert "joining run 1 of crawl 'shop'" in more.text() or "resuming run 1" in more.text()
    assert "run 1 keeps the limits it has (330 pages)" in more.text()
    assert _reason(more) == "closespider_pagecount"
    assert 330 <= sum(shop.hits.values()) <= 330 + 16 and max(shop.hits.values()) == 1


def test_stop_ends_the_run_on_every_node_and_stays_stopped(crawl, make_shop, redis_url, r):
    shop = make_shop(items=300, delay=0.05)
    settings = {"REDIS_URL": redis_url, **FAST, "CONCURRENT_REQUESTS": 4}
    # both nodes in the run (on a loaded machine the second may start after the first's 30 pages)
    nodes = start_joined(lambda: crawl(args={"base_url": shop.url}, settings=settings), shop, 2)
    _wait_for(lambda: sum(shop.hits.values()) >= 30 and _live_nodes(r) == 2, "both nodes crawling", nodes=nodes)
    res = cli(redis_url, "stop", "shop")
    assert res.exit_code == 0, res.output
    assert re.search(
        r"run 1 of crawl 'shop' stopped: (1 live node finishes what it|2 live nodes finish what they) "
        r"download",
        res.output,
    ), res.output
    for node in nodes:
        assert node.wait(30) == 0, node.text()[-3000:]
        assert _reason(node) == "stopped"
        assert "was stopped by crawlplug stop (" in node.text()
    st = Crawl.of(Frontier(r, SHOP)).status()
    assert st["in_flight"] == 0 and st["queued"] > 0, "unstarted leases given back, the rest still queued"
    stopped_at = Counter(shop.hits)
    assert max(stopped_at.values()) == 1
    assert cli(redis_url, "stop", "shop").output.startswith("run 1 of crawl 'shop' was already stopped by crawlplug")
    # sticky: a node started later says who stopped the run, and when, and exits
    late = crawl(args={"base_url": shop.url}, settings=settings)
    assert late.wait(60) == 1
    assert re.search(
        r"run 1 of crawl 'shop' was stopped by crawlplug stop \(.*\) at \d{4}-\d\d-\d\d "
        r"\d\d:\d\d:\d\d; .*`crawlplug continue shop`",
        late.text(),
    ), late.text()[-3000:]
    assert Counter(shop.hits) == stopped_at
    # continued: the run goes on where it stopped, and every page is fetched once
    res = cli(redis_url, "continue", "shop")
    assert res.exit_code == 0, res.output
    rest = crawl(args={"base_url": shop.url}, settings=settings)
    assert rest.wait(120) == 0, rest.text()[-3000:]
    assert _reason(rest) == "finished"
    assert set(shop.hits) == shop.shop.paths() and max(shop.hits.values()) == 1
    assert runs.record(r, SHOP)["state"] == "finished"


def test_a_drain_admits_nothing_new_and_crawls_what_is_queued(crawl, make_shop, redis_url, r):
    # one category, pages chained by "next" links: the shop is discovered while it is crawled
    shop = make_shop(items=150, categories=1, per_page=5, delay=0.05)
    settings = {"REDIS_URL": redis_url, **FAST, "CONCURRENT_REQUESTS": 4}
    node = crawl(args={"base_url": shop.url}, settings=settings)
    _wait_for(lambda: sum(shop.hits.values()) >= 15, "the crawl under way", nodes=[node])
    res = cli(redis_url, "stop", "shop", "--drain")
    assert res.exit_code == 0 and "is draining" in res.output, res.output
    assert node.wait(60) == 0, node.text()[-3000:]
    assert _reason(node) == "stopped"
    text = node.text()
    assert "is draining (by crawlplug stop --drain (" in text
    assert "'crawlplug/drained':" in text, "links found while draining were not admitted"
    st = Crawl.of(Frontier(r, SHOP)).status()
    assert (st["queued"], st["in_flight"]) == (0, 0), "the queue ran out"
    assert len(shop.hits) < len(shop.shop.paths()), "the rest of the shop was never admitted"
    assert sum(shop.hits.values()) == st["stats"]["acked"], "every page admitted was crawled, once"
    summary = runs.history(r, SHOP)[-1]
    assert (summary["state"], summary["reason"], summary.get("drained")) == ("stopped", "stopped", True)
