"""Prometheus metrics (issue 23): /metrics of the dashboard, of `crawlplug control` and of a
node (CRAWLPLUG_METRICS_PORT), scraped during a real crawl, parsed by prometheus_client's
own parser and checked against what Redis holds."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from crawlplug.crawl import Crawl
from crawlplug.frontier.core import open_frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.metrics import exporter as metrics
from crawlplug.stats import node_stats

from .support.control import ControlProcess
from .support.dashboardproc import start_dashboard, wait_for
from .support.fingerprints import recorded
from .support.nodes import start_each_joined
from .support.servers import free_port

KEYS = CrawlKeys("shop")


def scrape(url: str, host: str | None = None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, as prometheus_client's parser reads ``url``."""
    res = httpx.get(url, headers={"Host": host} if host else None, timeout=10)
    assert res.status_code == 200, res.text
    assert res.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(res.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def one(found: dict, name: str, **labels: str) -> float:
    """The value of ``name`` whose labels include ``labels``; exactly one must match."""
    hits = [v for (n, ls), v in found.items() if n == name and set(labels.items()) <= set(ls)]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def test_top_domains_keeps_n_and_sums_the_rest_as_other():
    rows = [{"domain": f"d{i}", "queued": i, "in_flight": 1, "leased_total": 10 * i} for i in range(5)]
    got = metrics.top_domains(rows, 2)
    assert [r["domain"] for r in got] == ["d4", "d3", "other"]
    assert got[-1] == {"domain": "other", "queued": 0 + 1 + 2, "in_flight": 3, "leased_total": 0 + 10 + 20}
    assert metrics.top_domains(rows, 10) == [
        {k: r[k] for k in ("domain", "queued", "in_flight", "leased_total")} for r in reversed(rows)
    ]


@pytest.mark.e2e
def test_metrics_scraped_during_a_real_crawl_agree_with_redis(
    redis_url, r: redis.Redis, crawl, make_shop, tmp_path: Path
):
    shop = make_shop(items=400, delay=0.1)  # ~10 s of crawling: still running when it is paused
    node_port = free_port()
    settings = {
        "CRAWLPLUG_HEARTBEAT": 0.5,
        "CRAWLPLUG_IDLE_CLOSE": 2,
        "CONCURRENT_REQUESTS": 2,
        "STATS_CLASS": "crawlplug.stats.RedisStatsCollector",
        "REDIS_URL": redis_url,
        "CRAWLPLUG_QUEUE_CLASS": "crawlplug.queues.DomainQueue",
        "STATS_DUMP": False,
        "CRAWLPLUG_STATS_INTERVAL": 0.5,
    }
    # both nodes in the run before a page is answered: the scrape below counts two live nodes
    nodes = start_each_joined(
        [
            lambda: crawl(args={"base_url": shop.url}, settings={**settings, "CRAWLPLUG_METRICS_PORT": node_port}),
            lambda: crawl(args={"base_url": shop.url}, settings=settings),
        ],
        shop,
    )
    wait_for(lambda: int(r.hget(KEYS.stats, "acked") or 0) >= 10, 60, "pages crawled")
    dash = start_dashboard(redis_url, "shop", tmp_path)
    control = ControlProcess(redis_url, tmp_path / "control.log", ("--metrics-port", "0", "--top-domains", "0"))
    try:
        control_url = wait_for(control.metrics_url, 20, "the control process's metrics address")
        during = scrape(f"{dash.url}/metrics")
        assert one(during, "crawlplug_live_nodes", crawl="shop") == 2
        assert one(during, "crawlplug_requests_done_total", crawl="shop") >= 10
        assert (
            one(during, "crawlplug_queued_requests", crawl="shop")
            + one(during, "crawlplug_in_flight_requests", crawl="shop")
            > 0
        )
        # a scrape while nothing moves: pause the crawl, wait for what is in flight to end
        Crawl.of(open_frontier(r, KEYS)).pause(by="test")
        wait_for(lambda: r.zcard(KEYS.leases) == 0, 30, "the requests in flight to end")

        def settled() -> bool:  # every node's heartbeat and stats flush after the last ack
            acked = int(r.hget(KEYS.stats, "acked") or 0)
            per_node = sum(
                int(r.hget(KEYS.node(n), "acked") or 0) for n in (x.decode() for x in r.zrange(KEYS.nodes, 0, -1))
            )
            items = sum(int(s.get("item_scraped_count", 0)) for s in node_stats(r, KEYS).values())
            return acked == per_node and 0 < items == int(r.hget(KEYS.crawlstats, "item_scraped_count") or 0)

        wait_for(settled, 20, "the nodes' heartbeats and stats to catch up")
        wait_for(
            lambda: (
                Crawl.of(open_frontier(r, KEYS)).status()["nodes"]
                and all(
                    int(r.hget(KEYS.node(n), "paused") or 0) for n in Crawl.of(open_frontier(r, KEYS)).status()["nodes"]
                )
            ),
            20,
            "both nodes to say they are paused",
        )
        time.sleep(1.5)  # one more heartbeat and stats flush each
        from_dash = scrape(f"{dash.url}/metrics")
        from_control = scrape(control_url)
        from_node = scrape(f"http://127.0.0.1:{node_port}/metrics")
        run = r.hget(KEYS.run, "id").decode()
        queued = r.zcard(KEYS.queue) + r.zcard(KEYS.dq)
        done = int(r.hget(KEYS.stats, "acked"))
        filtered = int(r.hget(KEYS.stats, "filtered") or 0)
        for found in (from_dash, from_control, from_node):
            assert one(found, "crawlplug_queued_requests", crawl="shop", run=run) == queued > 0
            assert one(found, "crawlplug_in_flight_requests", crawl="shop", run=run) == 0
            assert one(found, "crawlplug_requests_done_total", crawl="shop", run=run) == done
            assert one(found, "crawlplug_requests_filtered_total", crawl="shop", run=run) == filtered > 0
            assert one(found, "crawlplug_dead_letters", crawl="shop", run=run) == r.llen(KEYS.dead)
            assert one(found, "crawlplug_seen_fingerprints", crawl="shop", run=run) == len(recorded(r, KEYS))
            assert one(found, "crawlplug_paused", crawl="shop") == 1
            assert one(found, "crawlplug_requests_failed_total", crawl="shop") == 0
            for node_id, stats in node_stats(r, KEYS).items():
                assert one(found, "crawlplug_node_pages_total", node=node_id) == int(
                    r.hget(KEYS.node(node_id), "acked")
                )
                assert one(found, "crawlplug_node_items_total", node=node_id) == stats["item_scraped_count"]
                assert one(found, "crawlplug_node_up", node=node_id) == 1
            assert one(found, "crawlplug_redis_commands_processed_total") > 0
            assert one(found, "crawlplug_redis_memory_used_bytes", crawl="shop") > 0
        assert sum(stats["item_scraped_count"] for stats in node_stats(r, KEYS).values()) > 0
        # per domain: the one domain of the shop under its name, or as "other" with --top-domains 0
        host = httpx.URL(shop.url).host
        for found in (from_dash, from_node):
            assert one(found, "crawlplug_domain_queued_requests", domain=host) == queued
            assert one(found, "crawlplug_domain_leased_requests_total", domain=host) > 0
        assert one(from_control, "crawlplug_domain_queued_requests", domain="other") == queued
        assert not [k for k in from_control if ("domain", host) in k[1]]
        # a scraper that names the dashboard by another host is refused unless allowed
        assert httpx.get(f"{dash.url}/metrics", headers={"Host": "prometheus.example"}).status_code == 400
    finally:
        control.stop()
        dash.stop()
        for node in nodes:
            node.kill()


def test_the_grafana_dashboard_and_the_docs_use_the_names_served():
    root = Path(__file__).resolve().parent.parent
    served = {name + ("_total" if kind == "counter" else "") for name, (kind, _) in metrics.METRICS.items()}
    grafana = json.loads((root / "docs" / "grafana-dashboard.json").read_text())
    used = {
        name
        for panel in grafana["panels"]
        for target in panel["targets"]
        for name in re.findall(r"crawlplug_[a-z_]+", target["expr"])
    }
    assert used and used <= served, used - served
    documented = set(re.findall(r"`(crawlplug_[a-z_]+)`", (root / "docs" / "metrics.md").read_text()))
    assert documented == served
