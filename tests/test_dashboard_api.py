"""The dashboard's JSON API (crawlplug.web) against real multi-node crawls of the demo shop.

Most tests drive the Starlette app in-process (starlette.testclient); the
pause/resume and Redis-down tests talk HTTP over loopback to a real
`crawlplug dashboard` process. Every crawl is two real `scrapy crawl shop`
processes sharing one Redis.
"""

from __future__ import annotations

import hmac
import itertools
import os
import socket
import time

import httpx
import pytest
import scrapy
import uvicorn
from click.testing import CliRunner
from starlette.testclient import TestClient

from crawlplug.cli import main as cli_main
from crawlplug.cli import web as cli_web
from crawlplug.cli.web import is_loopback
from crawlplug.crawl import Crawl, runs
from crawlplug.demo.crawl import DashboardThread
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.serializers import JsonSerializer
from crawlplug.server.clients import client_from_url
from crawlplug.web import API, create_app

from .support.dashboardproc import (
    CRAWL_SETTINGS,
    SHOP_DELAY,
    SHOP_ITEMS,
    listening_addresses,
    start_dashboard,
    wait_for,
)

KEYS = CrawlKeys("shop")
TOKEN = "s3cret-dashboard-token-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


# -- helpers ---------------------------------------------------------------------------------


def start_nodes(crawl, shop, redis_url: str, n: int = 2, **extra: object) -> list:
    settings = {"REDIS_URL": redis_url, **CRAWL_SETTINGS, **extra}
    return [crawl(args={"base_url": shop.url}, settings=settings) for _ in range(n)]


def get(client, path: str) -> dict:
    res = client.get(path)
    assert res.status_code == 200, (path, res.status_code, res.text)
    return res.json()


def alive_nodes(client) -> list[dict]:
    return [n for n in get(client, "/api/nodes")["nodes"] if n["alive"]]


def wait_running(client, nodes: list, done: int = 100) -> dict:
    """Until every node is registered alive and ``done`` pages are finished."""

    def running() -> dict | None:
        for node in nodes:
            assert node.proc.poll() is None, node.text()[-3000:]
        st = get(client, "/api/status")
        return st if st["done"] >= done and sum(n["alive"] for n in st["nodes"]) == len(nodes) else None

    return wait_for(running, 30, f"{len(nodes)} live nodes and {done} pages done")


def finish(nodes: list, timeout: float = 60) -> None:
    for node in nodes:
        assert node.wait(timeout) == 0, node.text()[-3000:]
        assert "'finish_reason': 'finished'" in node.text()


def assert_fetched_once(shop, extra: set[str] = frozenset()) -> None:
    hits = shop.hits
    assert set(hits) == shop.shop.paths() | set(extra)
    twice = {path: n for path, n in hits.items() if n > 1}
    assert not twice, f"pages fetched more than once: {twice}"


def push(redis_url: str, *urls: str) -> None:
    res = CliRunner().invoke(
        cli_main,
        ["push", "--redis-url", redis_url, "--crawl", KEYS.crawl, *urls],
        env={"REDIS_URL": None, "CRAWLPLUG_CRAWL": None},
    )
    assert res.exit_code == 0, res.output
    assert f"pushed {len(urls)} start entries" in res.output


# -- reads during a crawl ----------------------------------------------------------------


def test_reads_follow_a_two_node_crawl(crawl, make_shop, redis_url, r):
    """/api, /api/status, /api/history, /api/nodes and /api/errors during a real crawl of two
    nodes, and /api/status equal to Crawl.status() once it is over."""
    shop = make_shop(items=SHOP_ITEMS, delay=SHOP_DELAY)
    client = TestClient(create_app(r, KEYS, None, "redis://test-label"), base_url="http://127.0.0.1")
    index = get(client, "/api")
    assert index["crawl"] == "shop"
    assert index["endpoints"] == API
    assert {e.split()[0] for e in API} == {"GET", "POST", "DELETE"}
    for endpoint in API:  # every read answers, even before the crawl exists
        method, path = endpoint.split()
        if method == "GET":
            get(client, path.split("?")[0])
    assert client.get("/").status_code == 200 and 'id="n-done"' in client.get("/").text
    assert client.get("/static/app.js").status_code == 200

    nodes = start_nodes(crawl, shop, redis_url)
    pids = {node.proc.pid for node in nodes}
    first = wait_running(client, nodes)
    missing = [f"{shop.url}/missing/{i}/" for i in range(3)]
    push(redis_url, *missing)  # the shop spider takes pushed entries from the scheduler

    # the numbers move: done grows between two reads
    time.sleep(1.5)
    second = get(client, "/api/status")
    assert second["done"] > first["done"], (first["done"], second["done"])
    assert second["redis"] == "redis://test-label" and second["actions"] is False
    assert second["paused"] is None and second["crawl"] == "shop"
    # ... and agree with Crawl.status() read just before and just after
    frontier = Frontier(r, KEYS)
    before = Crawl.of(frontier).status()
    st = get(client, "/api/status")
    after = Crawl.of(frontier).status()
    assert before["stats"]["acked"] <= st["done"] <= after["stats"]["acked"]
    assert before["seen"] <= st["seen"] <= after["seen"]
    assert before["stats"]["enqueued"] <= st["counters"]["enqueued"] <= after["stats"]["enqueued"]
    assert {n["id"] for n in st["nodes"]} == set(after["nodes"])
    assert st["queued"] + st["in_flight"] > 0 and st["eta_seconds"] != 0

    # history: 10 s points over the hour, pages done in the latest ones
    history = get(client, "/api/history")
    assert history["bucket_seconds"] == 10
    t = history["t"]
    assert len(t) == 360 and all(b - a == 10_000 for a, b in itertools.pairwise(t))
    assert abs(t[-1] - st["now_ms"]) <= 10_000
    for name in ("done", "admitted", "queued", "in_flight", "dead"):
        assert len(history[name]) == 360, name
    assert sum(history["done"][-2:]) > 0, history["done"][-3:]
    assert sum(history["admitted"][-2:]) > 0
    assert any(v is not None for v in history["queued"][-2:]), "the heartbeats sample the queue"
    assert len(get(client, "/api/history?minutes=5")["t"]) == 30

    # nodes: both alive, with their pid, a fresh heartbeat, leases and rates
    listed = alive_nodes(client)
    assert {n["pid"] for n in listed} == pids
    for n in listed:
        assert 0 <= n["heartbeat_age"] < 3, n
        assert n["uptime"] > 0 and n["expires_in"] > 0
        assert isinstance(n["leases"], int) and n["paused"] == 0
        assert n["id"].startswith(n["host"] + ":")

    # errors: the pushed URLs of missing pages, as http/404 with their URLs as samples
    def errors_404() -> dict | None:
        found = [e for e in get(client, "/api/errors")["errors"] if e["kind"] == "http/404"]
        return found[0] if found and found[0]["count"] == len(missing) else None

    error = wait_for(errors_404, 20, "http/404 x3 in /api/errors")
    assert (error["group"], error["name"]) == ("http", "404")
    assert sorted(error["samples"]) == sorted(missing)

    finish(nodes)
    assert_fetched_once(shop, {f"/missing/{i}/" for i in range(3)})
    final = get(client, "/api/status")
    status = Crawl.of(frontier).status()
    assert (final["queued"], final["in_flight"], final["seen"], final["dead"], final["start_urls"]) == (
        status["queued"],
        status["in_flight"],
        status["seen"],
        status["dead"],
        status["start_urls"],
    )
    assert final["counters"] == status["stats"]
    assert final["done"] == status["stats"]["acked"]
    # "done" counts finished requests; a pushed start entry is acked on its own, not as a page
    assert final["counters"]["start_taken"] == final["counters"]["start_acked"] == len(missing)
    assert final["done"] == sum(shop.hits.values()) == len(shop.shop.paths()) + len(missing)
    assert final["queued"] == final["in_flight"] == 0 and final["eta_seconds"] == 0
    assert final["scrapy_stats"]["item_scraped_count"] == SHOP_ITEMS, "crawl-wide stats of both nodes"
    assert final["failed"] == len(missing), "the 404s count as failures"
    assert not [n for n in final["nodes"] if n["alive"]], "closed nodes leave"
    # every finished request is in the series (the test runs well within the hour)
    assert sum(get(client, "/api/history")["done"]) == final["done"]
    print(
        f"\n[dashboard] done {first['done']} -> {second['done']} in 1.5 s; final {final['done']}; "
        f"404s {error['count']}; rate {second['pages_per_min']}/min"
    )


# -- actions -----------------------------------------------------------------------------------

ACTIONS = [
    ("POST", "/api/pause", None),
    ("POST", "/api/resume", None),
    ("POST", "/api/stop", {"drain": False}),
    ("POST", "/api/continue", None),
    ("POST", "/api/domains/example.com", {"delay": 2}),
    ("DELETE", "/api/domains/example.com", None),
    ("POST", "/api/dead/requeue", {"all": True}),
]


def test_actions_need_a_configured_token(r):
    """Read-only without a token (403); with one, no or a wrong Authorization is 401."""
    read_only = TestClient(create_app(r, KEYS), base_url="http://127.0.0.1")
    guarded = TestClient(create_app(r, KEYS, TOKEN), base_url="http://127.0.0.1")
    for method, path, body in ACTIONS:
        res = read_only.request(method, path, json=body, headers=AUTH)
        assert res.status_code == 403, (method, path, res.text)
        assert "CRAWLPLUG_DASHBOARD_TOKEN" in res.json()["error"]
        for headers in (
            {},
            {"Authorization": "Bearer wrong-token-wrong-token"},
            {"Authorization": TOKEN},
            {"Authorization": f"Basic {TOKEN}"},
            {"Authorization": f"Bearer {TOKEN}x"},
        ):
            res = guarded.request(method, path, json=body, headers=headers)
            assert res.status_code == 401, (method, path, headers, res.text)
            assert "token" in res.json()["error"]
    assert not r.exists(KEYS.control) and not r.exists(KEYS.dconf), "refused actions changed nothing"
    # reads need no token
    assert read_only.get("/api/status").json()["actions"] is False
    assert guarded.get("/api/status").json()["actions"] is True
    for method, path, body in ACTIONS:
        res = guarded.request(method, path, json=body, headers=AUTH)
        assert res.status_code == 200, (method, path, res.text)
    assert Crawl.of(Frontier(r, KEYS)).paused_info() is None  # paused, then resumed
    assert int(r.hget(KEYS.stats, "pauses")) == 1


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/domains/example.com", '{"delay": -1}'),
        ("/api/domains/example.com", '{"delay": "soon"}'),
        ("/api/domains/example.com", '{"delay": "inf"}'),
        ("/api/domains/example.com", '{"delay": 1e400}'),
        ("/api/domains/example.com", '{"delay": NaN}'),
        ("/api/domains/example.com", '{"delay": true}'),
        ("/api/domains/example.com", '{"concurrency": 1e400}'),
        ("/api/domains/example.com", '{"concurrency": 2.5}'),
        ("/api/domains/example.com", '{"concurrency": [2]}'),
        ("/api/domains/example.com", "{}"),
        ("/api/domains/example.com", "[1]"),
        ("/api/domains/example.com", "not json"),
        ("/api/domains/a%09b", '{"delay": 1}'),
        ("/api/dead/requeue", '{"indexes": [1e400]}'),
        ("/api/dead/requeue", '{"indexes": [0]}'),
        ("/api/dead/requeue", '{"indexes": null}'),
        ("/api/dead/requeue", '{"indexes": ["x"]}'),
        ("/api/dead/requeue", "{}"),
        ("/api/dead/requeue", "not json"),
        ("/api/stop", '{"drain": "yes"}'),
        ("/api/stop", "[1]"),
        ("/api/stop", "not json"),
    ],
)
def test_bad_action_bodies_are_400(r, path, body):
    """Malformed, non-finite or out-of-range input is a 400 with a JSON error, never a 500,
    and changes nothing."""
    client = TestClient(create_app(r, KEYS, TOKEN), base_url="http://127.0.0.1")
    res = client.post(path, content=body, headers={**AUTH, "Content-Type": "application/json"})
    assert res.status_code == 400, res.text
    assert res.json()["error"]
    assert not r.exists(KEYS.dconf) and not r.exists(KEYS.queue)


def test_stop_drain_and_continue_buttons_change_the_run(r):
    """The dashboard's Stop, Drain and Continue buttons (token): each changes the run's state in
    Redis, the status says so, and one that can do nothing says why."""
    client = TestClient(create_app(r, KEYS, TOKEN), base_url="http://127.0.0.1")
    res = client.post("/api/stop", headers=AUTH)
    assert res.status_code == 200 and res.json()["changed"] is False and res.json()["why"] == "no run is recorded yet"
    runs.join(r, KEYS, node_id="n1", ttl_ms=10_000)
    res = client.post("/api/stop", json={"drain": True}, headers=AUTH).json()
    assert (res["changed"], res["state"], res["run"], res["drain"]) == (True, "draining", 1, True)
    assert get(client, "/api/status")["run"]["state"] == "draining"
    assert runs.record(r, KEYS)["drain_by"].startswith("dashboard (")
    res = client.post("/api/stop", headers=AUTH).json()  # no body: stop now
    assert (res["changed"], res["state"]) == (True, "stopped")
    assert runs.record(r, KEYS)["by"].startswith("dashboard (")
    res = client.post("/api/continue", headers=AUTH).json()
    assert (res["changed"], res["state"]) == (True, "running")
    res = client.post("/api/continue", headers=AUTH).json()
    assert res["changed"] is False and res["why"] == "the run is running"
    assert get(client, "/api")["endpoints"]["POST /api/stop"]


def test_pause_and_resume_over_http(crawl, make_shop, redis_url, tmp_path):
    """The real `crawlplug dashboard` with a token: pausing stops every node within a few
    heartbeats (leases 0, done frozen), resuming finishes the crawl, each page once."""
    shop = make_shop(items=SHOP_ITEMS, delay=SHOP_DELAY)
    dash = start_dashboard(redis_url, KEYS.crawl, tmp_path, token=TOKEN)
    try:
        line = dash.text()
        assert f"on http://127.0.0.1:{dash.port}/" in line and "actions need the token" in line
        assert listening_addresses(dash.port) in ({"127.0.0.1"}, None), "loopback only"
        http = dash.http
        nodes = start_nodes(crawl, shop, redis_url)
        wait_running(http, nodes, done=150)

        for headers in ({}, {"Authorization": "Bearer not-the-token-at-all"}):
            assert http.post("/api/pause", headers=headers).status_code == 401
        assert get(http, "/api/status")["paused"] is None
        res = http.post("/api/pause", headers=AUTH)
        assert res.status_code == 200 and res.json() == {"paused": True, "changed": True}
        paused_at = time.monotonic()
        assert http.post("/api/pause", headers=AUTH).json()["changed"] is False

        def all_stopped() -> list | None:
            listed = alive_nodes(http)
            ok = len(listed) == 2 and all(n["paused"] == 1 and n["leases"] == 0 for n in listed)
            return listed if ok else None

        wait_for(all_stopped, 6, "both nodes paused with no lease", step=0.2)
        took = time.monotonic() - paused_at
        st = get(http, "/api/status")
        assert st["paused"]["by"] == "dashboard" and st["in_flight"] == 0
        frozen, hits = st["done"], sum(shop.hits.values())
        time.sleep(3)
        assert get(http, "/api/status")["done"] == frozen, "done stops while paused"
        assert sum(shop.hits.values()) == hits, "no page fetched while paused"
        assert all(node.proc.poll() is None for node in nodes), "paused nodes wait, they do not close"
        assert frozen < len(shop.shop.paths())

        res = http.post("/api/resume", headers=AUTH)
        assert res.status_code == 200 and res.json() == {"paused": False, "changed": True}
        wait_for(lambda: get(http, "/api/status")["done"] > frozen, 10, "done to grow after resume")
        finish(nodes)
        assert_fetched_once(shop)
        final = get(http, "/api/status")
        assert final["done"] == len(shop.shop.paths()) and final["paused"] is None
        assert final["counters"]["pauses"] == 2  # the second pause was a no-op, still counted
        for node in nodes:
            assert "paused by an operator" in node.text() and "resumed" in node.text()
        print(
            f"\n[dashboard] paused at done={frozen}: every node idle after {took:.1f}s; "
            f"resumed and finished at {final['done']}"
        )
    finally:
        dash.stop()


def test_domains_view_and_delay_change(crawl, make_shop, redis_url, r):
    """A DomainQueue crawl: /api/domains shows the host and its limits; POST changes the delay
    (in Redis dconf, in force at once), DELETE gives the settings back."""
    shop = make_shop(items=SHOP_ITEMS, delay=SHOP_DELAY)
    client = TestClient(create_app(r, KEYS, TOKEN), base_url="http://127.0.0.1")
    nodes = start_nodes(
        crawl,
        shop,
        redis_url,
        CRAWLPLUG_QUEUE_CLASS="crawlplug.queues.DomainQueue",
        CRAWLPLUG_DOMAIN_DELAY=0.005,
        CRAWLPLUG_DOMAIN_CONCURRENCY=6,
    )
    wait_running(client, nodes, done=100)
    host = "127.0.0.1"

    def row() -> dict | None:
        view = get(client, "/api/domains")
        return next((x for x in view["rows"] if x["domain"] == host), None)

    before = wait_for(row, 10, f"{host} in /api/domains")
    view = get(client, "/api/domains")
    assert view["domains"] == 1
    assert (before["delay"], before["concurrency"]) == (0.005, 6), before
    assert before["queued"] > 0 and 0 <= before["in_flight"] <= 6
    assert f"o:{host}" not in view["limits"]

    for bad in ({"delay": -1}, {"delay": "soon"}, {}, {"concurrency": "x"}):
        res = client.post(f"/api/domains/{host}", json=bad, headers=AUTH)
        assert res.status_code == 400, (bad, res.text)
    res = client.post(f"/api/domains/{host}", json={"delay": 0.25}, headers=AUTH)
    assert res.status_code == 200, res.text
    assert res.json() == {"domain": host, "override": {"delay": 0.25, "concurrency": None}}
    changed = time.monotonic()
    assert r.hget(KEYS.dconf, f"o:{host}") == b"250 -"
    after = wait_for(row, 5, f"{host} in /api/domains")
    assert (after["delay"], after["concurrency"]) == (0.25, 6)
    assert get(client, "/api/domains")["limits"][f"o:{host}"] == "250 -"

    # in force on both nodes: after a second (what was started or leased before is done),
    # the host gets at most one request every 0.25 s crawl-wide
    time.sleep(3)
    log = [t for t, _ in shop.hit_log if changed + 1 <= t <= changed + 3]
    gaps = [b - a for a, b in itertools.pairwise(log)]
    assert 5 <= len(log) <= 10, len(log)
    # (the shop logs a hit when its handler runs: on a loaded machine that lags the request's
    # sending by tens of ms either way; tests/test_polite.py measures the gap exactly)
    assert min(gaps) > 0.15, gaps

    res = client.delete(f"/api/domains/{host}", headers=AUTH)
    assert res.status_code == 200 and res.json() == {"domain": host, "override": None}
    assert r.hget(KEYS.dconf, f"o:{host}") is None
    finish(nodes)
    assert_fetched_once(shop)
    print(
        f"\n[dashboard] {host}: delay {before['delay']}s -> 0.25s: {len(log)} pages in 2 s, "
        f"min gap {min(gaps):.3f}s; reset, finished"
    )


def test_dead_letters_listed_and_requeued(crawl, make_shop, redis_url, r):
    """/api/dead lists a dead letter; POST /api/dead/requeue puts it back and a node crawls it."""
    shop = make_shop(items=SHOP_ITEMS, delay=SHOP_DELAY)
    path = "/gone/dead-letter/"
    payload = JsonSerializer().dumps(scrapy.Request(shop.url + path, priority=5), None)
    operator = Frontier(r, KEYS, node_id="test-operator")
    assert operator.push([(os.urandom(20), 0.0, payload)]).admitted == 1
    [leased] = operator.pop(1)
    assert operator.dead_letter(leased.id, "gave up: test", deliveries=5)
    client = TestClient(create_app(r, KEYS, TOKEN), base_url="http://127.0.0.1")

    nodes = start_nodes(crawl, shop, redis_url)
    st = wait_running(client, nodes, done=50)
    assert st["dead"] == 1
    dead = get(client, "/api/dead")
    assert dead["total"] == 1
    [row] = dead["rows"]
    assert (row["index"], row["url"], row["reason"], row["deliveries"], row["node"]) == (
        0,
        shop.url + path,
        "gave up: test",
        5,
        "test-operator",
    )
    assert abs(row["at"] - time.time() * 1000) < 60_000

    assert client.post("/api/dead/requeue", json={"indexes": [0]}).status_code == 401
    res = client.post("/api/dead/requeue", json={"indexes": [3]}, headers=AUTH)
    assert res.status_code == 400 and "no dead letter at index 3" in res.json()["error"]
    assert client.post("/api/dead/requeue", json={"indexes": "x"}, headers=AUTH).status_code == 400
    res = client.post("/api/dead/requeue", json={"indexes": [0]}, headers=AUTH)
    assert res.status_code == 200 and res.json() == {"requeued": 1, "kept": []}
    assert get(client, "/api/dead") == {"total": 0, "rows": []}

    wait_for(lambda: shop.hits[path] >= 1, 20, f"{path} to be crawled after the requeue")
    finish(nodes)
    assert_fetched_once(shop, {path})
    assert get(client, "/api/status")["dead"] == 0


# -- Redis down, and the real command's defaults --------------------------------------------


def test_redis_down_is_a_503_with_a_json_error(fresh_redis, tmp_path):
    """Both the app and the real command (which binds loopback by default): a Redis that
    stops answering gives 503 and a JSON error, the page still loads, the server lives on."""
    client = client_from_url(fresh_redis.url)  # the client `crawlplug dashboard` makes
    app = TestClient(create_app(client, KEYS), base_url="http://127.0.0.1")
    dash = start_dashboard(fresh_redis.url, KEYS.crawl, tmp_path)
    try:
        assert "read-only" in dash.text() and f"http://127.0.0.1:{dash.port}/" in dash.text()
        assert listening_addresses(dash.port) in ({"127.0.0.1"}, None), "loopback only"
        for http in (app, dash.http):
            assert http.get("/api/status").status_code == 200
        fresh_redis.stop()
        for http in (app, dash.http):
            for path in ("/api/status", "/api/nodes", "/api/history", "/api/dead"):
                started = time.monotonic()
                res = http.get(path)
                assert res.status_code == 503, (path, res.status_code, res.text)
                assert res.headers["content-type"] == "application/json"
                assert res.json()["error"].startswith("Redis error:"), res.json()
                assert time.monotonic() - started < 5, "an unreachable Redis is answered quickly"
            assert http.get("/").status_code == 200, "the page itself needs no Redis"
        assert dash.proc.poll() is None, "the dashboard keeps running"
    finally:
        dash.stop()
        client.close()


# -- who can reach the dashboard, and with what token -------------------------------------------


def test_token_is_compared_in_constant_time(r, monkeypatch):
    """Every action's token check goes through hmac.compare_digest (whose time does not tell
    how much of a guess was right), and only the exact token passes."""
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    client = TestClient(create_app(r, KEYS, TOKEN), base_url="http://127.0.0.1")
    for given, status in ((TOKEN[:-1] + "X", 401), (TOKEN[:5], 401), ("", 401), (TOKEN + "x", 401), (TOKEN, 200)):
        for method, path, body in ACTIONS:
            calls.clear()
            res = client.request(method, path, json=body, headers={"Authorization": f"Bearer {given}"})
            assert res.status_code == status, (given, method, path, res.text)
            assert calls == [(given.encode(), TOKEN.encode())], "the token must be compared by hmac.compare_digest"


@pytest.mark.integration  # starts processes of its own
def test_real_dashboard_never_shows_its_token(redis_url, tmp_path):
    """`crawlplug dashboard` takes the token from the environment only (never a command-line
    argument, which `ps` shows), and neither prints it nor serves it."""
    dash = start_dashboard(redis_url, KEYS.crawl, tmp_path, token=TOKEN)
    try:
        assert TOKEN not in " ".join(dash.proc.args)
        assert "actions need the token" in dash.text()
        for path in ("/", "/api", "/api/status", "/api/nodes", "/api/history", "/api/domains", "/api/dead"):
            res = dash.http.get(path)
            assert res.status_code == 200 and TOKEN not in res.text, path
        assert dash.http.get("/api/status").json()["actions"] is True
        assert dash.http.post("/api/pause").status_code == 401
        assert dash.http.post("/api/pause", headers=AUTH).json()["paused"] is True
        assert dash.http.post("/api/resume", headers=AUTH).json()["paused"] is False
        assert TOKEN not in dash.text()
    finally:
        dash.stop()


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("dashboard.example.com", False),
    ],
)
def test_a_dashboard_open_to_the_network_is_warned_about(redis_url, monkeypatch, host, loopback):
    """The default is loopback; asked for another address, the command says who can then read
    the crawl, and that a token would cross the network in clear text. (The web server itself is
    not started here: the real one is started by the tests above.)"""
    assert is_loopback(host) is loopback
    served: list[tuple[str, int]] = []

    def listen(host: str, port: int) -> socket.socket:  # the address may not be this machine's
        served.append((host, port))
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        return sock

    monkeypatch.setattr(cli_web, "listen", listen)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: sockets[0].close())
    res = CliRunner().invoke(
        cli_main,
        ["--redis-url", redis_url, "--crawl", "shop", "dashboard", "--host", host, "--port", "0"],
        env={"CRAWLPLUG_DASHBOARD_TOKEN": TOKEN},
    )
    assert res.exit_code == 0, res.output
    assert served == [(host, 0)]
    warned = "is not a loopback address" in res.output
    assert warned is not loopback, res.output
    if warned:
        assert "clear text" in res.output
    assert TOKEN not in res.output
    default = CliRunner().invoke(cli_main, ["--redis-url", redis_url, "--crawl", "shop", "dashboard"])
    assert default.exit_code == 0 and served[-1] == ("127.0.0.1", 8642) and "warning" not in default.output


def test_demo_dashboard_is_loopback_and_read_only(r, redis_url):
    """The dashboard `make crawl` serves while the demo runs: loopback, no actions."""
    dash = DashboardThread(r, KEYS, redis_url, 0)
    try:
        assert dash.url.startswith("http://127.0.0.1:")
        assert listening_addresses(dash.port) in ({"127.0.0.1"}, None), "loopback only"
        with httpx.Client(base_url=dash.url, timeout=10) as http:
            wait_for(lambda: _answers(http), 20, "the demo dashboard to answer")
            assert http.get("/api/status").json()["actions"] is False
            assert http.post("/api/pause", headers=AUTH).status_code == 403
        assert Crawl.of(Frontier(r, KEYS)).paused_info() is None
    finally:
        dash.stop()


def _answers(http) -> bool:
    try:
        return http.get("/api").status_code == 200
    except httpx.TransportError:
        return False
