"""Nodes whose clocks disagree share one crawl safely: leases, heartbeats and domain delays
follow Redis's clock (TIME inside the scripts), never a node's.

Two real ``scrapy crawl multisite`` nodes crawl the loopback sites of
:mod:`tests.politesite` through :class:`crawlplug.queues.DomainQueue` with a
per-domain delay and a short lease timeout. One of them runs with its wall
clock 45 seconds ahead or behind (``tests/support/clockshift/sitecustomize.py``
shifts ``time.time()`` and ``datetime.now()`` in that process only). If leases
or heartbeats were stamped with a node's clock, the node that is behind would
hand out leases already expired (the other node reaps them: pages fetched
twice) or look dead; the node that is ahead would hold leases 45 s too long.
If the domain schedule used a node's clock, the node that is behind would
fetch a host again before its delay, the node that is ahead would block the
host for 45 s. The site records when each request started (its own monotonic
clock), so the delay is measured where a site owner would see it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from crawlplug.frontier.keys import CrawlKeys
from tests.support.nodes import run_together
from tests.support.politesite import HostSite, PoliteSite, loopback_hosts, min_start_gap
from tests.test_polite import DOMAIN_QUEUE, TOLERANCE, assert_each_page_once, per_node

SHIFT_DIR = Path(__file__).resolve().parent / "support" / "clockshift"
DELAY = 0.4
SETTINGS: dict[str, object] = {
    "CRAWLPLUG_QUEUE_CLASS": DOMAIN_QUEUE,
    "CRAWLPLUG_DOMAIN_DELAY": DELAY,
    "CRAWLPLUG_LEASE_TIMEOUT": 2,  # far shorter than the skew: a lease stamped by a node's clock shows
    "CRAWLPLUG_HEARTBEAT": 0.5,
    "CRAWLPLUG_IDLE_CLOSE": 1.5,
    "CONCURRENT_REQUESTS": 4,
    "RANDOMIZE_DOWNLOAD_DELAY": False,
    "DOWNLOAD_DELAY": 0,
    "STATS_CLASS": "crawlplug.stats.RedisStatsCollector",
}


def shifted_env(shift: float, mark: Path) -> dict[str, str]:
    """Environment of a node whose wall clock is ``shift`` seconds off."""
    path = os.pathsep.join(p for p in (str(SHIFT_DIR), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "CRAWLPLUG_TEST_CLOCK_SHIFT": str(shift), "CRAWLPLUG_TEST_CLOCK_MARK": str(mark)}


def run_nodes(
    crawl: Callable[..., Any],
    tmp_path: Path,
    site: PoliteSite,
    redis_url: str,
    crawl_id: str,
    envs: list[dict[str, str]],
    timeout: float = 60,
) -> list[Any]:
    """One multisite node per environment, started together (go file), run to the end."""
    go = tmp_path / f"go-{crawl_id}"
    args = {"start_urls": ",".join(site.start_urls), "go_file": str(go)}
    settings = {"REDIS_URL": redis_url, "CRAWLPLUG_CRAWL_ID": crawl_id, **SETTINGS}
    nodes = [crawl("multisite", args=args, settings=settings, env=env) for env in envs]
    return run_together(nodes, go, crawl_id, timeout)


@pytest.mark.parametrize("shift", [45.0, -45.0], ids=["ahead", "behind"])
def test_a_node_with_a_wrong_clock_breaks_no_lease_and_no_delay(crawl, redis_url, tmp_path, shift):
    hosts = loopback_hosts(2)
    mark = tmp_path / "shifted.txt"
    crawl_id = f"clock-{'ahead' if shift > 0 else 'behind'}"
    with PoliteSite({h: HostSite(pages=10, latency=0.05) for h in hosts}) as site:
        nodes = run_nodes(crawl, tmp_path, site, redis_url, crawl_id, [{}, shifted_env(shift, mark)])
        assert mark.exists() and f"{shift:+g}" in mark.read_text(), "the second node did not run on a shifted clock"

        # no lease reaped, none lost: every page fetched exactly once
        assert_each_page_once(site, nodes)
        client = redis.Redis.from_url(redis_url)
        try:
            stats = {k.decode(): v.decode() for k, v in client.hgetall(CrawlKeys(crawl_id).stats).items()}
        finally:
            client.close()
        assert int(stats.get("reaped", 0)) == 0, f"leases were reaped although no node died: {stats}"
        for node in nodes:
            assert "leases of this node expired" not in node.text()
            assert "crawlplug/lost_leases" not in node.text()
        counts = per_node(nodes)
        assert all(counts), f"both nodes must crawl for the test to mean anything: pages per node {counts}"

        # the per-domain delay holds between request starts, whichever node made them
        gaps = min_start_gap(site.pages())
        print(
            f"\n[clock] one node {shift:+g} s: pages per node {counts}, "
            f"min gap per host {', '.join(f'{h} {g:.3f}s' for h, g in gaps.items())} (delay {DELAY} s)"
        )
        for host, gap in gaps.items():
            assert gap >= DELAY - TOLERANCE, f"two request starts of {host} only {gap:.3f} s apart (delay {DELAY} s)"
