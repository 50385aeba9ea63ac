"""What `crawlplug status`, `status --json` and the dashboard say about a node that is
SIGKILLed mid-crawl, and about the rates and ETA of a real crawl (issue 18).

Real `scrapy crawl` nodes on real Redis; the dashboard is the real Starlette app
(in-process), read at the same moments as the CLI. A killed node must be shown
"silent for N s" (with the work it holds and when that returns to the queue)
once its heartbeat is late, then "dead since T (N leases requeued)" with its
last numbers, never "live" for the whole lease timeout and never dropped.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import time
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from starlette.testclient import TestClient

from crawlplug.cli import main
from crawlplug.demo.shop import DemoShop, serve
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.layout import parts
from crawlplug.ops.status import rates, snapshot
from crawlplug.web import create_app

from .support.dashboardproc import wait_for
from .support.nodes import joined

HOSTS = [f"127.0.0.{i}" for i in range(21, 27)]
KEYS = CrawlKeys("multisite")
#: heartbeat 1 s: silent after 2 s without one; leases (and the node) expire after 6 s
NODE = {"CRAWLPLUG_HEARTBEAT": 1, "CRAWLPLUG_LEASE_TIMEOUT": 6, "CRAWLPLUG_IDLE_CLOSE": 2, "CONCURRENT_REQUESTS": 4}


def _cli(redis_url: str, *args: str) -> str:
    res = CliRunner().invoke(
        main, ["--redis-url", redis_url, "--crawl", KEYS.crawl, *args], env={"REDIS_URL": None, "CRAWLPLUG_CRAWL": None}
    )
    assert res.exit_code == 0, res.output
    return res.output


def _views(redis_url: str, dashboard: TestClient, node_id: str) -> dict[str, Any]:
    """The node as status --json, the status text and the dashboard's two endpoints show it."""
    report = json.loads(_cli(redis_url, "status", "--json"))
    text = _cli(redis_url, "status")
    api = dashboard.get("/api/status").json()
    listed = dashboard.get("/api/nodes").json()["nodes"]

    def by_id(nodes: list[dict]) -> dict | None:
        return next((n for n in nodes if n["id"] == node_id), None)

    line = next((x for x in text.splitlines() if node_id in x), None)
    return {
        "json": by_id(report["nodes"]),
        "report": report,
        "text": text,
        "line": line,
        "api": by_id(api["nodes"]),
        "api_status": api,
        "api_nodes": by_id(listed),
    }


def _node_id(client: redis.Redis, pid: int) -> str | None:
    prefix = f"{socket.gethostname()}:{pid}:"
    return next((m.decode() for m in client.zrange(KEYS.nodes, 0, -1) if m.decode().startswith(prefix)), None)


def _leases_per_part(client: redis.Redis, node_id: str) -> list[int]:
    prefix = f"{node_id}|".encode()
    return [sum(1 for v in client.hvals(p.leased) if v.startswith(prefix)) for p in parts(client, KEYS)]


@pytest.mark.parametrize("shards", [1, 3])
def test_a_killed_node_is_shown_silent_then_dead_with_its_leases(crawl, redis_url, r, shards):
    try:
        servers = [
            serve(DemoShop(items=80, per_page=10, categories=3, seed=i, delay=0.05), host=h)
            for i, h in enumerate(HOSTS)
        ]
    except OSError as exc:  # pragma: no cover - a machine without 127/8 routed to lo
        pytest.skip(f"cannot bind loopback addresses {HOSTS[0]}-{HOSTS[-1]}: {exc}")
    try:
        start_urls = ",".join(f"http://{s.host}:{s.port}/" for s in servers)
        settings = {"REDIS_URL": redis_url, **NODE, "CRAWLPLUG_SHARDS": shards}
        victim = crawl("multisite", args={"start_urls": start_urls}, settings=settings)
        survivor = crawl("multisite", args={"start_urls": start_urls}, settings=settings)
        dashboard = TestClient(create_app(r, KEYS), base_url="http://127.0.0.1")
        victim_id = wait_for(lambda: _node_id(r, victim.proc.pid), 60, "the victim to register")
        # the survivor in the run before the victim stops: the views below count it live
        wait_for(lambda: joined(survivor), 60, "the survivor to join the run")

        def busy() -> bool:  # the victim holds leases and has published them
            views = _views(redis_url, dashboard, victim_id)
            return bool(views["json"] and views["json"]["state"] == "live" and views["json"].get("leases"))

        wait_for(busy, 60, "the victim to crawl", step=0.2)
        # stop it first, to count exactly what it holds, then kill it
        victim.signal(signal.SIGSTOP)
        held = _leases_per_part(r, victim_id)
        victim.kill()
        assert sum(held) > 0
        if shards > 1:
            assert sum(1 for n in held if n) >= 2, f"leases in several shards: {held}"

        # -- silent: its heartbeat is late, it is not "live" any more, its work is said to wait
        silent = wait_for(
            lambda: (v := _views(redis_url, dashboard, victim_id))["json"]["state"] == "silent" and v,
            10,
            "the victim to be shown silent",
            step=0.1,
        )
        node = silent["json"]
        assert node["alive"] is False and node["silent_for"] >= 2
        assert 0 <= node["leases_back_in"] <= 6
        assert node["state_text"].startswith(f"silent for {node['silent_for']:.0f} s (no heartbeat")
        assert f"its {node['leases']} leases go back to the queue in" in node["state_text"]
        # the CLI's line is read just after the JSON: a second may have gone by between them
        said = re.search(r"SILENT for (\d+) s", silent["line"] or "")
        assert said and 0 <= int(said.group(1)) - round(node["silent_for"]) <= 1, silent["line"]
        assert "last: " in silent["line"] and f"pid {victim.proc.pid}" in silent["line"]
        report = silent["report"]
        assert report["held"]["text"].startswith(
            f"{node['leases']} requests held by a silent node, back in the queue in"
        )
        assert f"WAITING: {report['held']['text']}" in silent["text"]
        assert "nodes: 1 live, 1 silent" in silent["text"]
        for seen in (silent["api"], silent["api_nodes"]):  # the dashboard says the same
            assert seen["state"] == "silent" and seen["state_text"].startswith("silent for ")
        assert silent["api_status"]["held"]["requests"] == node["leases"]
        assert silent["api_status"]["live_nodes"] == 1

        # -- dead: reaped, shown with what became of its leases and its last numbers
        def dead() -> dict | None:
            views = _views(redis_url, dashboard, victim_id)
            node = views["json"]
            return views if node and node["state"] == "dead" and node["requeued"] == sum(held) else None

        dead_views = wait_for(dead, 30, f"the victim dead with its {sum(held)} leases requeued", step=0.2)
        node = dead_views["json"]
        when = time.strftime("%H:%M:%S", time.localtime(node["dead_since_ms"] / 1000))
        assert node["state_text"] == f"dead since {when} ({sum(held)} leases requeued)"
        assert dead_views["line"].split("   ")[1] == f"DEAD since {when} ({sum(held)} leases requeued)"
        assert node["pid"] == victim.proc.pid and node["acked"] >= 0 and "pages_per_min" in node
        assert node["dead_since_ms"] <= dead_views["report"]["rate"]["until_ms"] + 10_000
        for seen in (dead_views["api"], dead_views["api_nodes"]):
            assert (seen["state"], seen["requeued"], seen["state_text"]) == ("dead", sum(held), node["state_text"])
        # reaped per shard, where each lease was: the graveyard's counts add up to what it held
        per_part = []
        for part in parts(r, KEYS):
            raw = r.hget(part.graveyard, victim_id)
            per_part.append(int(raw.split()[2]) if raw else 0)
        assert per_part == held, (per_part, held)

        # -- after the crawl: the survivor left (a clean close), the victim stays dead
        assert survivor.wait(180) == 0, survivor.text()[-3000:]
        final = json.loads(_cli(redis_url, "status", "--json"))
        assert [(n["id"], n["state"], n["requeued"]) for n in final["nodes"]] == [(victim_id, "dead", sum(held))]
        counters = final["stats"]
        assert counters.get("reaped", 0) + counters.get("start_returned", 0) == sum(held)
        assert final["live_nodes"] == 0 and final["held"] is None
        assert "nodes: 0 live, 1 dead" in _cli(redis_url, "status")
    finally:
        for s in servers:
            s.stop()


def test_rates_of_a_short_crawl_are_over_the_time_it_ran(crawl, shop, redis_url, r):
    """A crawl of a few seconds: its rate is taken over those seconds (not "over 5 min"),
    the CLI, its JSON and the dashboard give the same numbers, and no age is negative."""
    node = crawl(args={"base_url": shop.url}, settings={"REDIS_URL": redis_url, **NODE})
    dashboard = TestClient(create_app(r, CrawlKeys("shop")), base_url="http://127.0.0.1")
    ages = []
    while node.proc.poll() is None:
        snap = snapshot(r, CrawlKeys("shop"))
        ages += [n["heartbeat_age"] for n in snap["nodes"] if n["heartbeat_age"] is not None]
        time.sleep(0.1)
    assert node.proc.returncode == 0, node.text()[-3000:]
    assert ages and min(ages) >= 0, "a heartbeat age is never negative"
    res = CliRunner().invoke(main, ["--redis-url", redis_url, "--crawl", "shop", "status", "--json"])
    report = json.loads(res.output)
    api = dashboard.get("/api/status").json()
    rate = report["rate"]
    pages = len(shop.shop.paths())
    assert rate["finished"] is True and rate["run_pages"] == report["done"] == pages
    elapsed = float(node.text().split("'elapsed_time_seconds': ")[1].split(",")[0])
    assert 0 < rate["run_seconds"] <= elapsed, "the run is measured inside the node's own lifetime"
    assert rate["window_seconds"] == rate["run_seconds"] < 60
    exact_seconds = (rate["run_end_ms"] - rate["run_start_ms"]) / 1000  # run_seconds is rounded to 0.1 s
    assert rate["pages_per_min"] == pytest.approx(pages * 60 / max(1.0, exact_seconds), rel=0.01)
    assert rate["text"].startswith(f"{rate['pages_per_min']:,.0f} pages/min over its ")
    assert "5 min" not in _cli_status(redis_url, "shop")
    for key in ("pages_per_min", "window_seconds", "run_seconds", "run_pages", "run_start_ms", "run_end_ms"):
        assert api["rate"][key] == rate[key], key  # one definition, whoever asks
    assert api["pages_per_min"] == report["pages_per_min"] == rate["pages_per_min"]
    # the chart's last points are the same definition: pages per minute over each 10 s
    history = dashboard.get("/api/history?minutes=5").json()
    assert sum(history["done"]) == pages and max(history["pages_per_min"]) > 0
    # a run start given by the caller (a crawl run's own start) moves the window
    now_ms = report["rate"]["run_end_ms"] + 1000
    later = rates(r, CrawlKeys("shop"), now_ms, start_ms=report["rate"]["run_start_ms"] - 5000, finished=True)
    # (run_seconds in the report is rounded to a tenth: the window is compared in ms)
    span_ms = rate["run_end_ms"] - (rate["run_start_ms"] - 5000)
    assert later.run_seconds == pytest.approx(span_ms / 1000, abs=0.01)


def _cli_status(redis_url: str, crawl_name: str) -> str:
    res = CliRunner().invoke(main, ["--redis-url", redis_url, "--crawl", crawl_name, "status"])
    assert res.exit_code == 0, res.output
    return res.output


def test_a_draining_queue_gets_an_eta(crawl, make_shop, redis_url, r):
    """The demo shop is found quickly (its lists) and then drained (its items): once the
    work left shrinks, the ETA is a number, said to be taken at the recent pace."""
    shop = make_shop(items=1200, delay=0.03)
    node = crawl(args={"base_url": shop.url}, settings={"REDIS_URL": redis_url, **NODE})
    seen: list[tuple[int, Any, str]] = []
    while node.proc.poll() is None:
        snap = snapshot(r, CrawlKeys("shop"))
        left = snap["queued"] + snap["in_flight"] + snap["start_urls"]
        if left:
            seen.append((left, snap["eta_seconds"], snap["eta_text"]))
        time.sleep(0.5)
    assert node.proc.returncode == 0, node.text()[-3000:]
    peak = max(range(len(seen)), key=lambda i: seen[i][0])
    draining = [s for s in seen[peak + 1 :] if s[0] < seen[peak][0]]
    known = [i for i, (_, eta, _) in enumerate(draining) if eta]
    assert known, f"no ETA while the work left shrank: {draining}"
    # how soon the first one comes depends on when the heartbeats sampled (a loaded machine
    # is late); once given, it stays a number until the end, taken at the recent pace
    after = draining[known[0] :]
    assert all(eta and text.startswith("at the pace of the last ") for _, eta, text in after), after
    assert len(after) >= 5, f"an ETA only at the very end: {draining}"
    assert not [s for s in seen if "not shrinking" in s[2]]
