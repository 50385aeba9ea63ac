"""Crawl runs (crawlplug.crawl.runs): a finished crawl started again is crawled again, a
reset reaches every live node, and every crawl in a Redis can be listed.

Real `scrapy crawl` nodes of the demo project against the demo shop on loopback;
what is asserted is what a user sees: the nodes' log lines, the pages each run
fetched, the CLI's output.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections import Counter

import pytest
import redis
from click.testing import CliRunner

from crawlplug.cli import main
from crawlplug.crawl import Crawl, registry, runs
from crawlplug.errors import CorruptKey, RunOver, StaleEpoch
from crawlplug.frontier import open_frontier
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.layout import claim_shards

from .support.nodes import SCRAPY, start_each_joined, start_joined
from .support.nodes import wait_until as _wait_for
from .support.patience import patient

FAST = {"CRAWLPLUG_IDLE_CLOSE": 1.5, "CRAWLPLUG_HEARTBEAT": 0.5, "CRAWLPLUG_LEASE_TIMEOUT": 4}
SHOP = CrawlKeys("shop")


def cli(redis_url: str, *args: str, input: str | None = None):
    return CliRunner().invoke(
        main, ["--redis-url", redis_url, *args], input=input, env={"REDIS_URL": None, "CRAWLPLUG_CRAWL": None}
    )


def _wait_ok(*nodes, timeout: float = 180) -> None:
    for node in nodes:
        assert node.wait(timeout) == 0, node.text()[-4000:]


def _fetched_since(shop, before: Counter) -> Counter:
    return Counter({p: n for p, n in (shop.hits - before).items() if n})


def _run_line(node) -> str:
    lines = [line for line in node.text().splitlines() if re.search(r"(joining|resuming|starting) run", line)]
    assert len(lines) == 1, node.text()[-3000:]
    return lines[0]


# -- a finished crawl started again is crawled again ----------------------------------------

DEDUPS = {
    "set": {},
    "bloom": {"DUPEFILTER_CLASS": "crawlplug.dupefilters.RedisBloomDupeFilter", "CRAWLPLUG_BLOOM_CAPACITY": 100_000},
    "sharded": {"CRAWLPLUG_SHARDS": 3},
    "domainqueue": {"CRAWLPLUG_QUEUE_CLASS": "crawlplug.queues.DomainQueue"},
}


@pytest.mark.parametrize("variant", list(DEDUPS))
def test_a_finished_crawl_started_again_is_crawled_again(crawl, make_shop, redis_url, variant):
    shop = make_shop(items=60)
    pages = shop.shop.paths()
    settings = {"REDIS_URL": redis_url, **FAST, **DEDUPS[variant]}
    first = crawl(args={"base_url": shop.url}, settings=settings)
    _wait_ok(first)
    assert set(shop.hits) == pages and max(shop.hits.values()) == 1
    assert "starting run 1 of crawl 'shop' (its first run)" in _run_line(first)
    assert "run 1 of crawl 'shop' is finished" in first.text()
    before = Counter(shop.hits)
    second = crawl(args={"base_url": shop.url}, settings=settings)
    _wait_ok(second)
    line = _run_line(second)
    assert re.search(r"starting run 2 of crawl 'shop' \(run 1 finished at \d\d:\d\d, fingerprints cleared\)", line), (
        line
    )
    again = _fetched_since(shop, before)
    assert set(again) == pages and max(again.values()) == 1, "the second run fetched every page, once"
    assert "'finish_reason': 'finished'" in second.text()
    # the runs, as an operator lists them
    res = cli(redis_url, "crawls", "show", "shop", "--json")
    assert res.exit_code == 0, res.output
    shown = json.loads(res.output)
    assert [(r["id"], r["state"], r["pages"]) for r in shown["runs"]] == [
        (1, "finished", len(pages)),
        (2, "finished", len(pages)),
    ]
    assert all(r["items"] == len(shop.shop.item_paths()) for r in shown["runs"]), shown["runs"]
    assert shown["runs"][0]["ended"] <= shown["runs"][1]["started"]
    text = cli(redis_url, "crawls", "show", "shop").output
    assert re.search(rf"run 1  finished  started .*  ended .*  pages {len(pages)}  items 60", text), text


def test_a_node_started_for_a_run_that_finished_begins_no_other(crawl, make_shop, redis_url, r):
    """A Scrapyd job `crawlplug start` made for run 1 that its daemon starts only after run 1
    finished (a busy daemon, a slow machine) exits with nothing done, instead of beginning
    run 2 and crawling everything again; one started for run 2 begins it."""
    shop = make_shop(items=30)
    settings = {"REDIS_URL": redis_url, **FAST}
    _wait_ok(crawl(args={"base_url": shop.url}, settings=settings))
    before = Counter(shop.hits)
    state = {k: r.dump(k) for k in (SHOP.run, SHOP.runs, SHOP.epoch, SHOP.nodes, SHOP.producers)}
    late = crawl(args={"base_url": shop.url}, settings={**settings, "CRAWLPLUG_FOR_RUN": 1})
    _wait_ok(late)  # exit 0: nothing to do is no failure
    text = late.text()
    assert "run 1, which this node was started for, has finished and no later run is running" in text, text[-3000:]
    assert "'finish_reason': 'finished'" in text
    assert not _fetched_since(shop, before), "the late node fetched pages"
    assert {k: r.dump(k) for k in state} == state, "the late node wrote to the crawl's runs"
    # the same through the join itself; a node started for a run joins a later one running
    with pytest.raises(RunOver):
        runs.join(r, SHOP, node_id="late", ttl_ms=10_000, for_run=1)
    third = runs.join(r, SHOP, node_id="now", ttl_ms=10_000, for_run=2)
    assert (third.action, third.run) == ("new", 2)
    assert (runs.join(r, SHOP, node_id="late", ttl_ms=10_000, for_run=1).action, runs.view(r, SHOP).id) == ("join", 2)
    # told to begin a new run (CRAWLPLUG_FLUSH_ON_START in a job's settings), a node started for
    # the run now running joins it, and one started for an ended run begins none
    assert runs.join(r, SHOP, node_id="flush", ttl_ms=10_000, want="new", for_run=2).action == "join"
    assert runs.view(r, SHOP).id == 2
    r.hset(SHOP.run, "state", "finished")
    state = {k: r.dump(k) for k in (SHOP.run, SHOP.runs, SHOP.epoch)}
    with pytest.raises(RunOver):
        runs.join(r, SHOP, node_id="flush", ttl_ms=10_000, want="new", for_run=2)
    assert {k: r.dump(k) for k in state} == state, "a node started for an ended run wrote to the runs"


@pytest.mark.parametrize("how", ["CRAWLPLUG_INCREMENTAL", "SCHEDULER_PERSIST"])
def test_an_incremental_crawl_keeps_its_fingerprints_across_runs(crawl, make_shop, redis_url, how):
    shop = make_shop(items=40)
    settings = {"REDIS_URL": redis_url, **FAST, how: True}
    _wait_ok(crawl(args={"base_url": shop.url}, settings=settings))
    before = Counter(shop.hits)
    second = crawl(args={"base_url": shop.url}, settings=settings)
    _wait_ok(second)
    assert "starting run 2 of crawl 'shop' (run 1 finished at" in _run_line(second)
    assert "fingerprints kept" in _run_line(second)
    again = _fetched_since(shop, before)
    # the shop spider's start request may be filtered like any other (no dont_filter): nothing is new
    assert not again, f"a page of run 1 fetched again: {dict(again)}"
    assert "'finish_reason': 'finished'" in second.text()


def test_a_node_started_during_the_idle_grace_joins_that_run_and_finishes_with_it(crawl, make_shop, redis_url):
    shop = make_shop(items=40)
    # the late node must be up and registered before the first one's grace ends: a node takes
    # 3-5 s to start on a loaded 2-core machine (a grace of 6 s failed under a load of 7)
    settings = {"REDIS_URL": redis_url, **FAST, "CRAWLPLUG_IDLE_CLOSE": round(patient(14))}
    first = crawl(args={"base_url": shop.url}, settings=settings)
    _wait_for(lambda: set(shop.hits) == shop.shop.paths(), "the first node to fetch every page", nodes=[first])
    _wait_for(
        lambda: runs.totals(redis.Redis.from_url(redis_url), [SHOP])["pages"] == len(shop.shop.paths()),
        "every page acknowledged",
        nodes=[first],
    )
    time.sleep(1)  # well into the 14 s idle grace
    late = crawl(args={"base_url": shop.url}, settings=settings)
    _wait_ok(first, late)
    assert "joining run 1 of crawl 'shop'" in _run_line(late)
    assert "starting run" not in late.text()
    for node in (first, late):
        assert "'finish_reason': 'finished'" in node.text()
    history = runs.history(redis.Redis.from_url(redis_url), SHOP)
    assert [(r["id"], r["state"]) for r in history] == [(1, "finished")], history
    assert max(shop.hits.values()) == 1, "the late node fetched nothing: every URL was already seen in this run"


def test_nodes_started_at_once_agree_on_one_run(crawl, make_shop, redis_url):
    shop = make_shop(items=60)
    settings = {"REDIS_URL": redis_url, **FAST}
    nodes = start_joined(lambda: crawl(args={"base_url": shop.url}, settings=settings), shop, 3)
    _wait_ok(*nodes)
    lines = [_run_line(n) for n in nodes]
    assert all(" run 1 of crawl 'shop'" in line for line in lines), lines
    assert sum("starting run 1" in line for line in lines) == 1, lines
    assert max(shop.hits.values()) == 1 and set(shop.hits) == shop.shop.paths()
    # and again: the three of them, at once, begin run 2 together
    before = Counter(shop.hits)
    nodes = start_joined(lambda: crawl(args={"base_url": shop.url}, settings=settings), shop, 3)
    _wait_ok(*nodes)
    lines = [_run_line(n) for n in nodes]
    assert all(" run 2 of crawl 'shop'" in line for line in lines), lines
    assert sum("starting run 2" in line for line in lines) == 1, lines
    again = _fetched_since(shop, before)
    assert set(again) == shop.shop.paths() and max(again.values()) <= 3, dict(again)  # start page: once per node
    assert sum(again.values()) <= len(shop.shop.paths()) + 2


def test_a_killed_crawl_is_interrupted_and_resumed(crawl, make_shop, redis_url):
    shop = make_shop(items=300, delay=0.01)
    settings = {"REDIS_URL": redis_url, **FAST, "CONCURRENT_REQUESTS": 4}
    node = crawl(args={"base_url": shop.url}, settings=settings)
    _wait_for(lambda: sum(shop.hits.values()) > 60, "some pages", nodes=[node])
    node.kill()
    client = redis.Redis.from_url(redis_url)
    _wait_for(lambda: runs.view(client, SHOP).state == "interrupted", "the run to read as interrupted", timeout=15)
    res = cli(redis_url, "crawls")
    assert re.search(r"shop\s+1\s+interrupted\s+\d+", res.output), res.output
    again = crawl(args={"base_url": shop.url}, settings=settings)
    _wait_ok(again)
    assert re.search(
        r"resuming run 1 of crawl 'shop' \(\d+ queued, \d+ in flight; no node was running\)", _run_line(again)
    ), _run_line(again)
    assert set(shop.hits) == shop.shop.paths(), "nothing lost"
    assert runs.view(client, SHOP).state == "finished"


def test_a_node_stopped_during_the_idle_grace_records_the_end(crawl, make_shop, redis_url):
    shop = make_shop(items=30)
    settings = {"REDIS_URL": redis_url, **FAST, "CRAWLPLUG_IDLE_CLOSE": 30}
    node = crawl(args={"base_url": shop.url}, settings=settings)
    client = redis.Redis.from_url(redis_url)
    _wait_for(lambda: runs.totals(client, [SHOP])["pages"] == len(shop.shop.paths()), "every page", nodes=[node])
    _wait_for(
        lambda: "nothing queued or in flight in crawl 'shop'; closing in 30 s" in node.text(),
        "the node to wait out its idle grace",
        nodes=[node],
    )
    node.signal(signal.SIGTERM)
    assert node.wait(30) == 0
    assert "run 1 of crawl 'shop' is finished (this node stopped while the whole crawl was done" in node.text()
    again = crawl(args={"base_url": shop.url}, settings={**settings, "CRAWLPLUG_IDLE_CLOSE": 1.5})
    _wait_ok(again)
    assert "starting run 2" in _run_line(again), "not a resumed run that ends after one page"


# -- worker mode, start entries --------------------------------------------------------------


def test_a_redisspider_crawl_that_got_no_start_entry_is_not_finished(crawl, redis_url):
    node = crawl("redisshop", settings={"REDIS_URL": redis_url, **FAST, "CRAWLPLUG_IDLE_CLOSE": 1})
    assert node.wait(60) == 0, node.text()[-3000:]
    text = node.text()
    assert "'finish_reason': 'nothing_pushed'" in text
    assert "nothing was pushed to crawl 'redisshop'" in text and "crawlplug push --crawl redisshop URL" in text
    view = runs.view(redis.Redis.from_url(redis_url), CrawlKeys("redisshop"))
    assert view.state == "running" and view.ended is None, "the run is not recorded as finished"


@pytest.mark.parametrize("shards", [1, 3])
def test_a_purge_under_live_workers_reaches_every_node(crawl, make_shop, redis_url, shards):
    """Sharded, a node that rejoined used to find no shard count (purged with the rest):
    the new run had no epoch in any shard, every call to a shard was refused again."""
    shop = make_shop(items=80)
    client = redis.Redis.from_url(redis_url)
    keys = CrawlKeys("redisshop")
    settings = {"REDIS_URL": redis_url, **FAST, "CRAWLPLUG_IDLE_CLOSE": 0, "CRAWLPLUG_SHARDS": shards}  # workers
    nodes = [crawl("redisshop", settings=settings) for _ in range(2)]
    _wait_for(lambda: client.zcard(keys.nodes) == 2, "two live workers", nodes=nodes)
    assert cli(redis_url, "push", "--crawl", "redisshop", shop.url + "/").exit_code == 0
    _wait_for(lambda: set(shop.hits) == shop.shop.paths(), "the first crawl", nodes=nodes)
    _wait_for(
        lambda: runs.totals(client, runs.part_keys(client, keys))["pages"] == len(shop.shop.paths()),
        "every page acked",
        nodes=nodes,
    )
    assert runs.view(client, keys).state == "running", "a worker crawl does not finish by itself"
    res = cli(redis_url, "purge", "--crawl", "redisshop", "--yes")
    assert res.exit_code == 0, res.output
    assert "2 nodes are live: each drops what it holds of this crawl" in res.output, res.output
    assert "Deleted" in res.output
    before = Counter(shop.hits)
    assert cli(redis_url, "push", "--crawl", "redisshop", shop.url + "/").exit_code == 0
    _wait_for(
        lambda: set(_fetched_since(shop, before)) == shop.shop.paths(),
        "the crawl after the purge",
        nodes=nodes,
        timeout=90,
    )
    for node in nodes:
        node.signal(signal.SIGTERM)
    _wait_ok(*nodes, timeout=60)
    for node in nodes:
        assert "the crawl was reset or began a new run (`crawlplug purge`" in node.text(), node.text()[-3000:]
    again = _fetched_since(shop, before)
    assert max(again.values()) == 1, f"every page once after the purge: {dict(again)}"


def test_flush_on_start_under_a_live_node(crawl, make_shop, redis_url):
    shop = make_shop(items=300, delay=0.02)
    client = redis.Redis.from_url(redis_url)
    settings = {"REDIS_URL": redis_url, **FAST, "CONCURRENT_REQUESTS": 2}
    first = crawl(args={"base_url": shop.url}, settings=settings)
    _wait_for(lambda: sum(shop.hits.values()) > 40, "the first node under way", nodes=[first])
    # the shop held until the flusher has begun run 2: else the first node may end run 1 before
    (flusher,) = start_each_joined(
        [lambda: crawl(args={"base_url": shop.url}, settings={**settings, "CRAWLPLUG_FLUSH_ON_START": True})], shop
    )
    _wait_ok(first, flusher, timeout=240)
    assert (
        "starting run 2 of crawl 'shop' (run 1 reset by CRAWLPLUG_FLUSH_ON_START, fingerprints cleared)"
        in _run_line(flusher)
    )
    assert "the crawl was reset or began a new run (`crawlplug purge`" in first.text()
    assert "now in run 2" in first.text()
    history = runs.history(client, SHOP)
    assert [(r["id"], r["state"]) for r in history] == [(1, "reset"), (2, "finished")], history
    assert history[1]["pages"] == len(shop.shop.paths()), "run 2 crawled the whole shop, each page once"


# -- resets are refused inside the scripts ---------------------------------------------------


def test_calls_of_an_old_epoch_are_refused_whole(r):
    from crawlplug.queues import PriorityQueue

    keys = CrawlKeys("epochs")
    r.set(keys.epoch, "aaaa")
    node = Frontier(r, keys, queue=PriorityQueue, epoch="aaaa")
    node.admit([(b"f" * 20, 0.0, b'{"url": "http://e.com/1"}'), (b"g" * 20, 0.0, b'{"url": "http://e.com/2"}')])
    leased = node.pop(1)
    assert len(leased) == 1
    r.set(keys.epoch, "bbbb")  # the crawl was reset (a purge, another node's flush)
    snapshot = {k: r.dump(k) for k in r.scan_iter(match=keys.pattern())}
    calls = {
        "admit (with an ack)": lambda: node.admit([(b"h" * 20, 0.0, b"{}")], acks=[leased[0].id]),
        "pop": lambda: node.pop(5),
        "heartbeat": lambda: node.heartbeat([leased[0].id]),
        "renew": lambda: node.scripts.renew(
            keys=node.base.renew_call([leased[0].id])[1], args=node.base.renew_call([leased[0].id])[2]
        ),
        "release": lambda: node.release([leased[0].id], unstarted=True),
        "dead letter": lambda: node.dead_letter(leased[0].id, "why"),
        "start entries": lambda: node.take_starts(5),
    }
    for what, call in calls.items():
        with pytest.raises(StaleEpoch) as err:
            call()
        assert err.value.stored == "bbbb", what
        assert {k: r.dump(k) for k in r.scan_iter(match=keys.pattern())} == snapshot, f"{what} wrote something"
    # an operator's tool (no epoch) is not refused
    assert Frontier(r, keys, queue=PriorityQueue).pop(5)


def test_a_rejoin_meeting_a_corrupt_key_is_refused_naming_it(r):
    """The node stays of the old epoch, is refused at its next call and tries again then:
    a corrupt control or run refuses before anything is written (the loss is not marked:
    a run record of the wrong type cannot tell a deleted epoch from a loss)."""
    keys = CrawlKeys("rejoin")
    joined = runs.join(r, keys, node_id="n1", ttl_ms=10_000)
    r.flushall()  # Redis lost the crawl's data

    def rejoin() -> tuple[runs.Joined, bool]:
        return runs.rejoin(r, keys, StaleEpoch("STALE_EPOCH 0 x"), joined, node_id="n1", ttl_ms=10_000)

    r.set(keys.control, "junk")
    with pytest.raises(CorruptKey, match=rf"{re.escape(keys.control)} holds a string.*repair or delete") as err:
        rejoin()
    assert err.value.key == keys.control
    assert sorted(r.scan_iter(match=keys.pattern())) == [keys.control.encode()], "nothing written"
    r.delete(keys.control)  # the repair
    r.set(keys.run, "junk")
    with pytest.raises(CorruptKey, match=rf"{re.escape(keys.run)} holds a string.*repair or delete"):
        rejoin()
    assert sorted(r.scan_iter(match=keys.pattern())) == [keys.run.encode()], "nothing written: no run begun"
    r.delete(keys.run)
    again, lost = rejoin()
    assert lost and again.epoch and r.get(keys.epoch) == again.epoch.encode() and r.hexists(keys.control, "lost")


# -- every crawl in a Redis ------------------------------------------------------------------


def test_crawls_lists_every_crawl_and_show_its_runs(crawl, make_shop, redis_url):
    shop = make_shop(items=20)
    client = redis.Redis.from_url(redis_url)
    _wait_ok(crawl(args={"base_url": shop.url}, settings={"REDIS_URL": redis_url, **FAST}))
    # a crawl made before the registry existed: keys, no registry entry, no run record
    Crawl(client, CrawlKeys("legacy")).push_starts(["http://example.com/"])
    res = cli(redis_url, "crawls")
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0].startswith("2 crawls on redis://")
    assert re.search(
        r"shop\s+1\s+finished\s+0\s+0\s+" + str(len(shop.shop.paths())) + r"\s+0\s+\d+s ago", res.output
    ), res.output
    assert re.search(r"legacy\s+-\s+none\s+1\s+0\s+0\s+0", res.output), res.output
    rows = json.loads(cli(redis_url, "crawls", "--json").output)["crawls"]
    assert {r["crawl"]: r["state"] for r in rows} == {"legacy": "none", "shop": "finished"}
    res = cli(redis_url, "crawls", "show", "nosuch")
    assert res.exit_code == 1 and "no crawl 'nosuch' on this Redis; known crawls: 'legacy', 'shop'" in res.output
    res = cli(redis_url, "status", "--crawl", "shop")
    assert re.search(r"run 1: finished, started .*, ended .* \(finished\)", res.output), res.output


def test_dead_letters_of_an_earlier_run_are_kept_under_it(crawl, make_shop, redis_url):
    shop = make_shop(items=20)
    client = redis.Redis.from_url(redis_url)
    settings = {"REDIS_URL": redis_url, **FAST}
    Crawl.of(Frontier(client, SHOP)).push_starts(["ftp://not-crawlable.example/"])  # dead-lettered by the node
    registry.register(client, SHOP)
    _wait_ok(crawl(args={"base_url": shop.url}, settings=settings))
    assert cli(redis_url, "dead", "list", "--crawl", "shop").output.startswith("1 dead letters in crawl 'shop'")
    _wait_ok(crawl(args={"base_url": shop.url}, settings=settings))
    res = cli(redis_url, "dead", "list", "--crawl", "shop")
    assert res.output.startswith("0 dead letters in crawl 'shop'"), res.output
    res = cli(redis_url, "dead", "list", "--crawl", "shop", "--run", "1")
    assert res.output.startswith("1 dead letters left by run 1 in crawl 'shop'"), res.output
    assert "ftp://not-crawlable.example/" in res.output


def test_a_crawl_from_before_runs_existed(crawl, make_shop, redis_url):
    """A crawl stored by an older crawlplug: finished (fingerprints, no work) begins a new run;
    with work left it is resumed as it is."""
    shop = make_shop(items=20)
    client = redis.Redis.from_url(redis_url)
    settings = {"REDIS_URL": redis_url, **FAST}
    _wait_ok(crawl(args={"base_url": shop.url}, settings=settings))
    client.delete(SHOP.run, SHOP.runs, SHOP.epoch, registry.registry_key())  # as an older version left it
    before = Counter(shop.hits)
    node = crawl(args={"base_url": shop.url}, settings=settings)
    _wait_ok(node)
    assert "(the crawl finished before runs were recorded, fingerprints cleared)" in _run_line(node)
    assert set(_fetched_since(shop, before)) == shop.shop.paths()


@pytest.mark.parametrize("cmd", ["purge"])
def test_purge_prompt_says_what_happens_to_live_nodes(redis_url, r, cmd):
    keys = CrawlKeys("prompted")
    registry.register(r, keys)
    r.zadd(keys.nodes, {"host:1:abc": 10**15})  # a live node (deadline far ahead)
    res = cli(redis_url, cmd, "--crawl", "prompted", input="n\n")
    assert res.exit_code == 1 and "Nothing deleted" in res.output
    assert "1 node is live: each drops what it holds of this crawl" in res.output
    assert registry.exists(r, keys)


def test_the_crawl_cli_says_nothing_false_when_redis_lacks_the_crawl(redis_url):
    res = cli(redis_url, "crawls")
    assert res.exit_code == 0 and "0 crawls on" in res.output and "(none yet" in res.output


def test_scrapy_crawl_twice_with_the_embedded_default(project_copy, make_shop):
    """The reported case, as a new user runs it: the same command twice, no REDIS_URL."""
    shop = make_shop(items=20)
    cmd = [SCRAPY, "crawl", "shop", "-a", f"base_url={shop.url}", "-s", "LOG_LEVEL=INFO"]
    for name, value in FAST.items():
        cmd += ["-s", f"{name}={value}"]
    try:
        outputs = []
        for _ in range(2):
            before = Counter(shop.hits)
            proc = subprocess.run(cmd, cwd=project_copy, capture_output=True, text=True, timeout=180, check=False)
            assert proc.returncode == 0, proc.stderr[-3000:]
            assert set(_fetched_since(shop, before)) == shop.shop.paths(), proc.stderr[-3000:]
            outputs.append(proc.stderr)
        assert "starting run 1 of crawl 'shop' (its first run)" in outputs[0]
        assert "starting run 2 of crawl 'shop' (run 1 finished at" in outputs[1]
    finally:
        from crawlplug.server import embedded

        embedded.stop(project_copy / ".crawlplug")


def test_runs_on_a_redis_cluster(crawl, make_shop, cluster_url, cluster_client):
    """Two runs of a crawl sharded over the cluster's primaries, and `crawlplug crawls` over
    every primary (the scan for crawls from before the registry included)."""
    shop = make_shop(items=30)
    settings = {"REDIS_URL": cluster_url, **FAST, "CRAWLPLUG_SHARDS": 3}
    _wait_ok(crawl(args={"base_url": shop.url}, settings=settings))
    before = Counter(shop.hits)
    second = crawl(args={"base_url": shop.url}, settings=settings)
    _wait_ok(second)
    assert "starting run 2 of crawl 'shop' (run 1 finished at" in _run_line(second)
    assert set(_fetched_since(shop, before)) == shop.shop.paths()
    for name in ("legacy-a", "legacy-b", "legacy-c"):  # their keys land on different primaries
        Crawl(cluster_client, CrawlKeys(name)).push_starts(["http://example.com/"])
    res = cli(cluster_url, "crawls", "--json")
    assert res.exit_code == 0, res.output
    rows = {r["crawl"]: r for r in json.loads(res.output)["crawls"]}
    assert set(rows) == {"shop", "legacy-a", "legacy-b", "legacy-c"}, rows
    assert rows["shop"]["run"] == 2 and rows["shop"]["state"] == "finished"
    assert rows["shop"]["done"] == len(shop.shop.paths()), "counted over every shard"


@pytest.mark.parametrize("shards", [1, 3])
def test_a_redis_that_lost_its_data_is_not_taken_for_a_reset(crawl, make_shop, fresh_redis, shards):
    """Redis restarted empty under a live node: not a purge. The node says Redis lost the
    crawl's data and does not finish the crawl until an operator accepts the loss (sharded,
    the rejoin used to fail on Frontier.data_lost, a read-only property)."""
    shop = make_shop(items=300, delay=0.01)
    settings = {"REDIS_URL": fresh_redis.url, **FAST, "CONCURRENT_REQUESTS": 2, "CRAWLPLUG_SHARDS": shards}
    node = crawl(args={"base_url": shop.url}, settings=settings)
    _wait_for(lambda: sum(shop.hits.values()) > 30, "the crawl under way", nodes=[node])
    fresh_redis.proc.send_signal(signal.SIGKILL)  # no persistence: it comes back empty
    fresh_redis.proc.wait(10)
    fresh_redis.start()
    _wait_for(lambda: "Redis lost the crawl's data" in node.text(), "the node to see the loss", nodes=[node])
    client = redis.Redis.from_url(fresh_redis.url)
    assert client.hexists(SHOP.control, "lost")
    time.sleep(4 * FAST["CRAWLPLUG_IDLE_CLOSE"])  # well past the idle grace: the crawl is empty now
    assert node.proc.poll() is None, "a crawl whose data Redis lost is not 'finished'"
    res = cli(fresh_redis.url, "resume", "--crawl", "shop")
    assert res.exit_code == 0 and "the loss of its data is accepted" in res.output, res.output
    assert node.wait(60) == 0
    assert "'finish_reason': 'finished'" in node.text()


@pytest.mark.parametrize("shards", [1, 2])
def test_an_epoch_key_deleted_by_hand_is_put_back_not_taken_for_a_loss(r, shards):
    """DEL is the documented repair of a corrupt key; for the epoch it looked like Redis had
    lost the crawl (the crawl then never finished until `crawlplug resume`). With the run
    recorded under the node's epoch, nothing was lost: the epoch is put back."""
    keys = CrawlKeys("deleted-epoch")
    claim_shards(r, keys, shards)
    joined = runs.join(r, keys, node_id="n1", ttl_ms=10_000)
    node = open_frontier(r, keys, node_id="n1", epoch=joined.epoch)
    node.admit([(b"f" * 20, 0.0, b"{}", "", "e.com")])  # the plain queue; routed by its host
    parts = runs.part_keys(r, keys)
    r.delete(parts[-1].epoch)  # the crawl's own epoch, or a shard's
    with pytest.raises(StaleEpoch) as refusal:
        node.pop(5) if shards > 1 else node.heartbeat([])
    again, lost = runs.rejoin(r, keys, refusal.value, joined, shards=shards, node_id="n1", ttl_ms=10_000)
    assert not lost and not r.hexists(keys.control, "lost"), "not taken for a loss"
    assert (again.run, again.epoch) == (joined.run, joined.epoch), "the same run goes on"
    assert all(r.get(p.epoch) == joined.epoch.encode() for p in parts), "put back in every part"
    assert len(node.pop(5)) == 1, "the node carries on with what was queued"


def test_a_run_whose_epoch_token_reads_as_an_infinite_number_is_recorded_when_it_finishes(r):
    """An epoch is 16 random hex digits; one such as "4e12345678901234" is a number to Lua,
    an infinite one, which cjson refuses to encode: the run was marked finished, its summary
    never written and the finishing node met an error (seen in CI: the next run then said
    it was the crawl's first). The summary keeps the token as text, and is encoded before
    anything is written."""
    keys = CrawlKeys("epoch-inf")
    joined = runs.join(r, keys, node_id="n1", ttl_ms=10_000)
    token = "4e12345678901234"
    r.set(keys.epoch, token)
    r.hset(keys.run, "epoch", token)
    try:
        state, ended = runs.finish(r, keys, node_id="n1", run_id=joined.run, epoch=token)
        assert state == "finished" and ended
        summary = json.loads(r.hget(keys.runs, str(joined.run)))
        assert summary["epoch"] == token and summary["state"] == "finished"
        again = runs.join(r, keys, node_id="n1", ttl_ms=10_000)
        assert (again.run, (again.previous or {}).get("id")) == (joined.run + 1, joined.run)
    finally:
        runs.purge(r, keys)
