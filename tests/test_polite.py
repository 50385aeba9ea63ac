"""Acceptance tests of the per-domain polite queue (crawlplug.queues.DomainQueue).

Real ``scrapy crawl multisite`` processes share one crawl through a real
Redis and crawl the loopback sites of :mod:`tests.politesite`, which record
when each request of each host started and ended on the server. From that
record the tests check what a site owner would see:

a. CRAWLPLUG_DOMAIN_DELAY is a crawl-wide minimum gap between two request
   starts of a host, however many nodes crawl it; with the default queue and
   only a node-local DOWNLOAD_DELAY, three nodes hit the host about three
   times as often;
b. CRAWLPLUG_DOMAIN_CONCURRENCY is a crawl-wide bound on a host's requests
   in flight (the default queue exceeds it);
c. a big host does not hold up small ones: each small host is done before
   the big host is (the PriorityQueue order is printed for comparison);
d. a robots.txt ``Crawl-delay`` acts as the host's delay (ROBOTSTXT_OBEY), and
   the delay still holds between request starts when every node first
   fetches robots.txt from a slow host (d2);
e. a node killed mid-download frees its host's slot once declared dead (3 missed
   heartbeats), before its lease expires.

The nodes of a crawl are started first and wait for a "go" file
(``-a go_file=...``) before they yield their start URLs, so the crawl starts
on all of them at the same moment however long each takes to boot. Each run
has its own CRAWLPLUG_CRAWL_ID. Timings are measured, not assumed: the only
timing assertions are the ones these properties are about (minimum gap, rate
ratio); the measured numbers are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from scrapy.exceptions import CloseSpider
from scrapy.http import HtmlResponse, Request

from spiders.multisite import MultiSiteSpider
from tests.support.nodes import run_together, wait_until
from tests.support.politesite import (
    HostSite,
    PoliteSite,
    Visit,
    last_end,
    loopback_hosts,
    max_in_flight,
    mean_in_flight,
    min_start_gap,
    start_rate,
)

DOMAIN_QUEUE = "crawlplug.queues.DomainQueue"
TOLERANCE = 0.05
"""Seconds a measured gap may fall short of the configured one (node-to-server jitter)."""

FAST: dict[str, object] = {
    "CRAWLPLUG_IDLE_CLOSE": 1.5,
    "CRAWLPLUG_HEARTBEAT": 0.5,
    "CRAWLPLUG_LEASE_TIMEOUT": 5,
    "RANDOMIZE_DOWNLOAD_DELAY": False,
    "DOWNLOAD_DELAY": 0,
}


# -- helpers ------------------------------------------------------------------------------


def run_crawl(
    crawl: Callable[..., Any],
    tmp_path: Path,
    site: PoliteSite,
    redis_url: str,
    *,
    nodes: int,
    crawl_id: str,
    settings: dict[str, object],
    timeout: float = 50,
) -> list[Any]:
    """Start ``nodes`` multisite nodes on one crawl, start them together, wait until they finish."""
    go = tmp_path / f"go-{crawl_id}"
    args = {"start_urls": ",".join(site.start_urls), "go_file": str(go)}
    all_settings = {"REDIS_URL": redis_url, "CRAWLPLUG_CRAWL_ID": crawl_id, **FAST, **settings}
    started = [crawl("multisite", args=args, settings=all_settings) for _ in range(nodes)]
    return run_together(started, go, crawl_id, timeout)


def assert_each_page_once(site: PoliteSite, nodes: list[Any]) -> None:
    counts = Counter((v.host, v.path) for v in site.pages())
    expected = site.expected()
    missing = expected - set(counts)
    assert not missing, f"{len(missing)} pages never fetched, e.g. {sorted(missing)[:10]}"
    unexpected = set(counts) - expected
    assert not unexpected, f"fetched outside the sites' pages: {sorted(unexpected)[:10]}"
    twice = {k: n for k, n in counts.items() if n > 1}
    assert not twice, f"pages fetched more than once: {twice}"
    items = [json.loads(line) for node in nodes for line in node.item_lines()]
    assert len(items) == len(expected), f"{len(items)} items for {len(expected)} pages"


def per_node(nodes: list[Any]) -> list[int]:
    """Pages each node crawled (from its feed)."""
    return [len(node.item_lines()) for node in nodes]


def children(visits: list[Visit]) -> list[Visit]:
    """Visits of the pages below a start page (the start page is fetched alone, before them)."""
    return [v for v in visits if v.path != "/"]


# -- the instruments themselves (no crawl) ------------------------------------------------


def test_measurements_on_a_known_record():
    a, b = "127.0.0.2", "127.0.0.3"
    visits = [
        Visit(a, "/", 0.0, 1.0),
        Visit(a, "/page/1", 0.5, 1.5),
        Visit(a, "/page/2", 0.9, 1.0),
        Visit(a, "/page/3", 1.5, 2.0),  # starts when /page/1 ends: no overlap
        Visit(b, "/", 0.0, 0.1),
        Visit(b, "/page/1", 0.3, 0.4),
    ]
    assert max_in_flight(visits) == {a: 3, b: 1}
    gaps = min_start_gap(visits)
    assert gaps[a] == pytest.approx(0.4) and gaps[b] == pytest.approx(0.3)
    assert start_rate(visits[:4]) == pytest.approx(3 / 1.5)
    assert last_end(visits) == {a: 2.0, b: 0.4}


def test_site_shapes_and_records():
    hosts = loopback_hosts(2)
    flat, tree = HostSite(pages=5), HostSite(pages=10, fanout=2, robots="User-agent: *\nCrawl-delay: 1\n")
    assert list(flat.children(0)) == [1, 2, 3, 4, 5] and not list(flat.children(3))
    assert list(tree.children(0)) == [1, 2] and list(tree.children(4)) == [9, 10] and not list(tree.children(5))
    with PoliteSite({hosts[0]: flat, hosts[1]: tree}) as site:
        status, body, _ = site.render(hosts[0], "/")
        assert status == 200 and b'href="/page/5"' in body and site.start_url(hosts[1]).encode() in body
        assert site.render(hosts[0], "/page/6")[0] == 404
        assert site.render(hosts[0], "/robots.txt")[0] == 404
        assert site.render(hosts[1], "/robots.txt") == (200, tree.robots.encode(), "text/plain")
        assert len(site.expected()) == 6 + 11


def test_multisite_spider_stays_on_each_pages_host():
    with pytest.raises(ValueError, match="start URLs"):
        MultiSiteSpider()
    with pytest.raises(ValueError, match="absolute"):
        MultiSiteSpider(start_urls="http://127.0.0.2:1/,/relative")
    spider = MultiSiteSpider(start_urls=" http://127.0.0.2:1/ , http://127.0.0.3:1/", max_pages="2")
    assert spider.start_urls == ["http://127.0.0.2:1/", "http://127.0.0.3:1/"]
    page = (
        '<a href="/page/1">x</a><a href="http://127.0.0.2:9/other">same host, other port</a>'
        '<a href="http://127.0.0.3:1/">other host</a><a href="mailto:a@b">mail</a>'
    )
    url = "http://127.0.0.2:1/"
    response = HtmlResponse(url, body=f"<title>T</title>{page}".encode(), encoding="utf-8", request=Request(url))
    out = list(spider.parse_page(response))
    assert out[0] == {"url": url, "host": "127.0.0.2", "status": 200, "title": "T"}
    assert [r.url for r in out[1:]] == ["http://127.0.0.2:1/page/1", "http://127.0.0.2:9/other"]
    assert all(r.callback == spider.parse_page for r in out[1:])
    with pytest.raises(CloseSpider) as closed:
        list(spider.parse_page(response))
    assert closed.value.reason == "max_pages"


# -- crawls ---------------------------------------------------------------------------------


def test_domain_delay_is_crawl_wide(crawl, redis_url, tmp_path):
    """a. Three nodes, CRAWLPLUG_DOMAIN_DELAY=0.5: no two request starts of the host closer than 0.5 s."""
    host = loopback_hosts(1)[0]
    with PoliteSite({host: HostSite(pages=14, latency=0.05)}) as site:
        polite = {"CRAWLPLUG_QUEUE_CLASS": DOMAIN_QUEUE, "CRAWLPLUG_DOMAIN_DELAY": 0.5}
        nodes = run_crawl(crawl, tmp_path, site, redis_url, nodes=3, crawl_id="polite-delay", settings=polite)
        visits = site.pages(host)
        assert_each_page_once(site, nodes)
        gap = min_start_gap(visits)[host]
        polite_rate = start_rate(children(visits))
        print(
            f"\n[polite] DomainQueue delay 0.5 s, 3 nodes: min gap {gap:.3f} s, "
            f"{polite_rate:.2f} requests/s, pages per node {per_node(nodes)}"
        )
        assert gap >= 0.5 - TOLERANCE, f"two request starts of {host} only {gap:.3f} s apart (delay 0.5 s)"

        # Baseline: the default queue and a node-local DOWNLOAD_DELAY of 0.5 s on each
        # node. CONCURRENT_REQUESTS=1 keeps a node from leasing every page at once
        # (a node leases as many requests as it has free download slots), so the
        # pages spread over the three nodes as they would in a bigger crawl.
        site.reset()
        local = {"DOWNLOAD_DELAY": 0.5, "CONCURRENT_REQUESTS": 1, "CRAWLPLUG_POLITENESS": "node"}
        nodes = run_crawl(crawl, tmp_path, site, redis_url, nodes=3, crawl_id="local-delay", settings=local)
        visits = site.pages(host)
        assert_each_page_once(site, nodes)
        assert all(
            "politeness: per node (CRAWLPLUG_POLITENESS='node'): DOWNLOAD_DELAY=0.5s holds in each node" in n.text()
            for n in nodes
        ), nodes[0].text()[-3000:]
        local_rate = start_rate(children(visits))
        print(
            f"[polite] default queue, DOWNLOAD_DELAY 0.5 s per node, 3 nodes: min gap "
            f"{min_start_gap(visits)[host]:.3f} s, {local_rate:.2f} requests/s, pages per node "
            f"{per_node(nodes)}; rate ratio {local_rate / polite_rate:.2f}"
        )
        assert local_rate / polite_rate >= 2.0, (
            f"node-local delays: {local_rate:.2f} requests/s, crawl-wide delay: {polite_rate:.2f} requests/s"
        )


def test_scrapy_delay_a_project_sets_holds_for_the_crawl(crawl, redis_url, tmp_path):
    """a2. What `scrapy startproject` writes, DOWNLOAD_DELAY and CONCURRENT_REQUESTS_PER_DOMAIN, with
    no crawlplug setting: three nodes, and the site sees the delay the project set."""
    host = loopback_hosts(1)[0]
    # 24 pages at 0.5 s: a crawl of 12 s, so that nodes started late on a loaded machine
    # still find work (with 12 pages one node once crawled them all before the others began)
    with PoliteSite({host: HostSite(pages=24, latency=0.05)}) as site:
        project = {
            "DOWNLOAD_DELAY": 0.5,
            "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
            "RANDOMIZE_DOWNLOAD_DELAY": True,
        }  # Scrapy's default: each node's own jitter must not show
        nodes = run_crawl(crawl, tmp_path, site, redis_url, nodes=3, crawl_id="project-delay", settings=project)
        assert_each_page_once(site, nodes)
        visits = site.pages(host)
        gap = min_start_gap(visits)[host]
        print(
            f"\n[polite] DOWNLOAD_DELAY 0.5 s and CONCURRENT_REQUESTS_PER_DOMAIN 1 of the project, 3 nodes: min "
            f"gap {gap:.3f} s, at most {max_in_flight(visits)[host]} in flight, pages per node {per_node(nodes)}"
        )
        for node in nodes:
            assert (
                "politeness: crawl-wide: DOWNLOAD_DELAY=0.5s and CONCURRENT_REQUESTS_PER_DOMAIN=1 hold per "
                "domain for every node together"
            ) in node.text(), node.text()[-3000:]
        assert gap >= 0.5 - TOLERANCE, f"two request starts of {host} only {gap:.3f} s apart (DOWNLOAD_DELAY 0.5 s)"
        assert max_in_flight(visits)[host] == 1
        assert sum(1 for n in per_node(nodes) if n) >= 2, f"one node crawled alone: {per_node(nodes)}"


def test_domain_concurrency_is_crawl_wide(crawl, redis_url, tmp_path):
    """b. CRAWLPLUG_DOMAIN_CONCURRENCY=2, three nodes of CONCURRENT_REQUESTS=8: never more than 2 in flight."""
    host = loopback_hosts(1)[0]
    with PoliteSite({host: HostSite(pages=20, latency=0.3)}) as site:
        polite = {
            "CRAWLPLUG_QUEUE_CLASS": DOMAIN_QUEUE,
            "CRAWLPLUG_DOMAIN_CONCURRENCY": 2,
            "CRAWLPLUG_DOMAIN_DELAY": 0,
            "CONCURRENT_REQUESTS": 8,
        }
        nodes = run_crawl(crawl, tmp_path, site, redis_url, nodes=3, crawl_id="polite-conc", settings=polite)
        assert_each_page_once(site, nodes)
        visits = site.pages(host)
        peak = max_in_flight(visits)[host]
        print(
            f"\n[polite] DomainQueue concurrency 2, 3 nodes x 8: at most {peak} in flight, "
            f"{mean_in_flight(children(visits)):.2f} on average, pages per node {per_node(nodes)}"
        )
        assert peak <= 2, f"the server answered {peak} requests of {host} at once (limit 2)"
        assert peak == 2, "never 2 requests in flight: the limit was not reached, the test proves nothing"

        # Baseline: the default queue lets each node run 8 at once.
        site.reset()
        nodes = run_crawl(
            crawl, tmp_path, site, redis_url, nodes=3, crawl_id="local-conc", settings={"CONCURRENT_REQUESTS": 8}
        )
        assert_each_page_once(site, nodes)
        visits = site.pages(host)
        base_peak = max_in_flight(visits)[host]
        print(
            f"[polite] default queue, 3 nodes x 8: at most {base_peak} in flight, "
            f"{mean_in_flight(children(visits)):.2f} on average, pages per node {per_node(nodes)}"
        )
        assert base_peak > 2, "the measurement cannot see more than 2 in flight even without the limit"


def finish_report(site: PoliteSite, big: str) -> tuple[list[tuple[str, float]], str]:
    visits = site.pages()
    t0 = min(v.start for v in visits)
    order = sorted(((h, t - t0) for h, t in last_end(visits).items()), key=lambda x: x[1])
    small_done = max(t for h, t in order if h != big) + t0
    big_started = sum(1 for v in visits if v.host == big and v.start < small_done)
    text = ", ".join(f"{h.rsplit('.', 1)[1]}{'(big)' if h == big else ''} {t:.2f}s" for h, t in order)
    text += f"; big host pages started when the last small host was done: {big_started}/{site.hosts[big].pages + 1}"
    big_visits = [v for v in visits if v.host == big]
    text += (
        f"; big host: at most {max_in_flight(big_visits)[big]}, on average "
        f"{mean_in_flight(children(big_visits)):.2f} in flight"
    )
    return order, text


def test_small_hosts_are_not_held_up_by_a_big_one(crawl, redis_url, tmp_path):
    """c. Ten hosts, one ten times bigger, 2 per domain crawl-wide: every small host finishes first."""
    hosts = loopback_hosts(10)
    big = hosts[0]
    # The big host is flat (its start page links to 100 pages); the small ones are
    # trees of 10 pages (fanout 2, 3 levels), so each of their levels is only
    # discovered after the previous one was fetched: a queue that serves hosts in
    # one crawl-wide FIFO puts every level of a small host behind the big host's backlog.
    spec = {
        h: HostSite(pages=100, latency=0.1) if h == big else HostSite(pages=10, fanout=2, latency=0.1) for h in hosts
    }
    with PoliteSite(spec) as site:
        polite = {"CRAWLPLUG_QUEUE_CLASS": DOMAIN_QUEUE, "CRAWLPLUG_DOMAIN_CONCURRENCY": 2, "CRAWLPLUG_DOMAIN_DELAY": 0}
        nodes = run_crawl(crawl, tmp_path, site, redis_url, nodes=2, crawl_id="polite-fair", settings=polite)
        assert_each_page_once(site, nodes)
        order, text = finish_report(site, big)
        peaks = max_in_flight(site.pages())
        print(f"\n[polite] DomainQueue finish order: {text}; most in flight of any host {max(peaks.values())}")
        ends = dict(order)
        late = [h for h in hosts if h != big and ends[h] >= ends[big]]
        assert not late, f"small hosts finished after the big host {big}: {late} (order: {text})"
        assert max(peaks.values()) <= 2, f"more than 2 requests of a host in flight: {peaks}"

        # Baseline (printed only): the default PriorityQueue with a node-local limit of 2 per
        # domain. (Scrapy 2.19 under its default asyncio reactor does not keep
        # CONCURRENT_REQUESTS_PER_DOMAIN when several requests of a slot are queued at once:
        # the printed "most in flight" shows what the server really saw.)
        site.reset()
        nodes = run_crawl(
            crawl,
            tmp_path,
            site,
            redis_url,
            nodes=2,
            crawl_id="local-fair",
            settings={"CONCURRENT_REQUESTS_PER_DOMAIN": 2, "CRAWLPLUG_POLITENESS": "node"},
        )
        assert_each_page_once(site, nodes)
        base_order, base_text = finish_report(site, big)
        same = [h for h, _ in base_order] == [h for h, _ in order]
        print(
            f"[polite] PriorityQueue finish order{' (the same)' if same else ''}: {base_text}; "
            f"most in flight of any host {max(max_in_flight(site.pages()).values())}"
        )


def test_robots_crawl_delay(crawl, redis_url, tmp_path):
    """d. ROBOTSTXT_OBEY and "Crawl-delay: 1" in a host's robots.txt: its request starts are >= 1 s apart."""
    slow, other = loopback_hosts(2)
    spec = {slow: HostSite(pages=6, robots="User-agent: *\nCrawl-delay: 1\n"), other: HostSite(pages=6)}
    with PoliteSite(spec) as site:
        settings = {"CRAWLPLUG_QUEUE_CLASS": DOMAIN_QUEUE, "ROBOTSTXT_OBEY": True, "CRAWLPLUG_DOMAIN_DELAY": 0}
        nodes = run_crawl(crawl, tmp_path, site, redis_url, nodes=2, crawl_id="polite-robots", settings=settings)
        assert_each_page_once(site, nodes)
        gaps = min_start_gap(site.pages())
        robots = Counter(v.host for v in site.visits if v.path == "/robots.txt")
        print(
            f"\n[polite] robots Crawl-delay 1 on {slow}: min gap {gaps[slow]:.3f} s; "
            f"no Crawl-delay on {other}: min gap {gaps[other]:.3f} s; robots.txt fetches {dict(robots)}"
        )
        assert robots[slow] >= 1, "robots.txt was never fetched"
        assert gaps[slow] >= 1 - TOLERANCE, (
            f"two request starts of {slow} only {gaps[slow]:.3f} s apart (Crawl-delay 1)"
        )


def test_delay_holds_when_nodes_fetch_robots_txt_first(crawl, redis_url, tmp_path):
    """d2. ROBOTSTXT_OBEY on three nodes, a host that answers in 0.3 s, CRAWLPLUG_DOMAIN_DELAY=1.

    Each node fetches robots.txt before its own first request of the host, so that
    request reaches the host up to 0.3 s after the queue gave it out; the delay
    counts between request starts all the same.
    """
    host = loopback_hosts(1)[0]
    with PoliteSite({host: HostSite(pages=8, latency=0.3)}) as site:  # robots.txt: 404 after 0.3 s
        settings = {"CRAWLPLUG_QUEUE_CLASS": DOMAIN_QUEUE, "ROBOTSTXT_OBEY": True, "CRAWLPLUG_DOMAIN_DELAY": 1}
        nodes = run_crawl(crawl, tmp_path, site, redis_url, nodes=3, crawl_id="polite-robots-fetch", settings=settings)
        assert_each_page_once(site, nodes)
        gap = min_start_gap(site.pages(host))[host]
        robots = sum(1 for v in site.visits if v.path == "/robots.txt")
        print(
            f"\n[polite] delay 1 s, ROBOTSTXT_OBEY, 3 nodes, 0.3 s answers: min gap between page starts "
            f"{gap:.3f} s (robots.txt included: {min_start_gap(site.visits)[host]:.3f} s), "
            f"{robots} robots.txt fetches, pages per node {per_node(nodes)}"
        )
        assert gap >= 1 - TOLERANCE, f"two request starts of {host} only {gap:.3f} s apart (delay 1 s)"


def test_a_killed_node_frees_its_domains_slot_before_its_lease_expires(crawl, redis_url, r, tmp_path):
    """e. A node killed while it downloads from a host whose concurrency is 1: declared dead
    after 3 missed heartbeats, its request stops holding the host's slot and the other node
    crawls the host, while the killed node's lease waits for the lease timeout before it is
    requeued. Asserted on the order of the states Redis went through, read in one
    transaction at a time (no time is asserted); nothing is lost."""
    from crawlplug.frontier.keys import CrawlKeys

    host = loopback_hosts(1)[0]
    keys = CrawlKeys("polite-dead")
    with PoliteSite({host: HostSite(pages=5, latency=0.8)}) as site:
        settings = {
            "REDIS_URL": redis_url,
            "CRAWLPLUG_CRAWL_ID": keys.crawl,
            **FAST,
            "CRAWLPLUG_LEASE_TIMEOUT": 4,
            "CRAWLPLUG_QUEUE_CLASS": DOMAIN_QUEUE,
            "CRAWLPLUG_DOMAIN_CONCURRENCY": 1,
            "CRAWLPLUG_DOMAIN_DELAY": 0,
            "CONCURRENT_REQUESTS": 1,
        }
        go = tmp_path / "go"
        args = {"start_urls": ",".join(site.start_urls), "go_file": str(go)}
        nodes = [crawl("multisite", args=args, settings=settings) for _ in range(2)]
        for node in nodes:
            wait_until(lambda node=node: "multisite: waiting for" in node.text(), "the nodes up", nodes=[node])
        go.touch()

        def holder() -> tuple[str, str] | None:
            """(lease id, pid of its node) of a lease on the host whose download has not ended
            (its record has no "|f": it holds the host's slot), once more pages are queued."""
            for lease, info in r.hgetall(keys.leased).items():
                node, *rest = info.decode().split("|")
                if len(rest) == 3 and r.zcard(keys.dq) > 0:
                    return lease.decode(), node.split(":")[1]
            return None

        wait_until(lambda: holder() is not None, "a node to hold the host's one slot, pages queued", nodes=nodes)
        held, pid = holder()  # type: ignore[misc]
        victim = next(n for n in nodes if str(n.proc.pid) == pid)
        survivor = next(n for n in nodes if n is not victim)
        victim.kill()
        states: list[tuple[bool, bool, bool]] = []  # (victim registered, its lease held, the survivor holds one)
        while True:
            pipe = r.pipeline(transaction=True)
            pipe.zrange(keys.nodes, 0, -1)
            pipe.zscore(keys.leases, held)
            pipe.hgetall(keys.leased)
            registered, deadline, leased = pipe.execute()
            state = (
                any(n.decode().split(":")[1] == pid for n in registered),
                deadline is not None,
                any(
                    info.decode().split(":")[1] == str(survivor.proc.pid) and info.decode().count("|") >= 3
                    for info in leased.values()
                ),
            )
            if not states or states[-1] != state:
                states.append(state)
            if not state[1]:
                break  # the lease expired and was reaped
            assert survivor.proc.poll() is None, survivor.text()[-3000:]
            time.sleep(0.02)
        print(f"\n[polite] states after the kill (registered, its lease held, survivor on the host): {states}")
        assert states[0] == (True, True, False), "killed while it held the host's one slot"
        freed = (False, True, True)  # declared dead, its lease still held, the survivor crawling the host
        assert freed in states, states
        assert states.index(freed) < len(states) - 1 and not states[-1][1], "freed first, its lease reaped later"
        assert survivor.wait(60) == 0, survivor.text()[-3000:]
        assert int(r.hget(keys.stats, "slots_freed") or 0) >= 1
        fetched = {(v.host, v.path) for v in site.pages()}
        assert fetched == site.expected(), "nothing lost: the killed node's page was fetched again"
