"""The console's API (issue 39): every call of its OpenAPI document, made once by a role
that may and once by one that may not (401 without a login, 403 without the permission),
against a real Redis, two real Scrapyd daemons and the demo shop on loopback; each change
in the audit log; a schedule added through the API fired by a real `crawlplug control`;
cookie sessions need their CSRF token."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from crawlplug.access import audit, users
from crawlplug.console.api import router
from crawlplug.console.app import create_console
from crawlplug.console.studio import router as studio_router
from crawlplug.crawl import runs
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.nodelog import store as nodelog
from crawlplug.schedules import store as schedule_store
from crawlplug.server.clients import Connection, client_from_url
from crawlplug.sites.recent import Recent

from .support.control import ControlProcess
from .support.scrapyd import wait_for
from .support.webhook import WebhookReceiver

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
KEYS = CrawlKeys("shop")
#: the roles, each allowed what the one before it is, and more
LADDER = ("viewer", "operator", "site-editor", "admin")
FAST = {"CRAWLPLUG_IDLE_CLOSE": "1", "CRAWLPLUG_HEARTBEAT": "0.5", "LOG_LEVEL": "INFO"}


@pytest.fixture(params=["one Redis", "Redis Cluster"])
def store(request: pytest.FixtureRequest) -> tuple[str, redis.Redis]:
    """The Redis the console serves (its URL, a client for the test's own checks): one Redis,
    then a cluster of three primaries, where a write over a crawl's key and a Redis-wide
    index (users, alerts, schedules) once failed."""
    if request.param == "one Redis":
        return request.getfixturevalue("redis_url"), request.getfixturevalue("r")
    return request.getfixturevalue("cluster_url"), request.getfixturevalue("cluster_client")


def _permissions() -> dict[tuple[str, str], str]:
    """(METHOD, path) -> the permission its route names (from the route's dependencies)."""
    out = {}
    for route in [*router.routes, *studio_router.routes]:
        if not hasattr(route, "dependant"):
            continue
        names = [getattr(d.call, "permission", None) for d in route.dependant.dependencies]
        for method in route.methods:
            out[(method, route.path)] = next((n for n in names if n), "")
    return out


def _roles(permission: str) -> tuple[str | None, str]:
    """(a role that may not, or None for anonymous; the least role that may)."""
    allowed = next(r for r in LADDER if users.may(r, permission))
    below = LADDER[: LADDER.index(allowed)]
    return (below[-1] if below else None), allowed


def _dead_letter(r: redis.Redis, n: int) -> None:
    f = Frontier(r, KEYS, node_id="dead-maker")
    for i in range(n):
        fp = hashlib.sha1(f"dead-{i}".encode()).digest()
        f.admit([(fp, 0.0, b'{"v": 2, "url": "http://a.test/dead/%d"}' % i)])
    for lease in f.pop(n):
        f.dead_letter(lease.id, "test: made dead")


def test_every_call_of_the_api_by_a_role_that_may_and_one_that_may_not(
    make_scrapyd, make_shop, store, tmp_path, monkeypatch
):
    redis_url, r = store
    monkeypatch.chdir(ROOT)  # the Scrapy project: forget's fingerprints, the site pipelines allowed
    shop = make_shop(items=20)
    daemons = [make_scrapyd(), make_scrapyd()]
    hook = WebhookReceiver()
    client = client_from_url(redis_url)
    app = create_console(Connection(client, redis_url, embedded=False), admin_token="the-admin-token-1234")
    api = TestClient(app, base_url="http://127.0.0.1")
    tokens = {role: users.add(r, f"u-{role}", role, by="test") for role in LADDER}
    permission = _permissions()
    documented = {
        (method.upper(), path)
        for path, ops in api.get("/api/v1/openapi.json").json()["paths"].items()
        for method in ops
    }
    assert documented == {k for k, p in permission.items() if k[1].startswith("/api/v1")}, "every route is documented"
    made: set[tuple[str, str]] = set()

    def call(method: str, path: str, body: Any = None, *, expect: int = 200, query: str = "", **fmt: str) -> Any:
        """The call by a role that may not (refused, nothing done) and by the least that may."""
        url = path.format(crawl="shop", **fmt) + query
        need = permission[(method, path)]
        denied, allowed = _roles(need)
        headers = {} if denied is None else {"Authorization": f"Bearer {tokens[denied]}"}
        before = len(audit.entries(r, 10_000))
        refused = api.request(method, url, json=body, headers=headers)
        assert refused.status_code == (401 if denied is None else 403), (method, url, denied, refused.text)
        assert len(audit.entries(r, 10_000)) == before, f"a refused call changed the audit log: {method} {url}"
        res = api.request(method, url, json=body, headers={"Authorization": f"Bearer {tokens[allowed]}"})
        assert res.status_code == expect, (method, url, allowed, res.text)
        if method != "GET" and path not in (
            "/api/v1/sites/check",
            "/api/v1/sites/try",
            "/api/v1/sites/try-recent",
            "/api/v1/alerts/check",
        ):
            newest = audit.entries(r, 1)[0]
            assert newest["who"] == f"u-{allowed}" and newest["source"] == "testclient", newest
        made.add((method, path))
        return res.json()

    call("GET", "/api/v1/crawls")
    pushed = call("POST", "/api/v1/crawls/{crawl}/start-urls", {"entries": [f"{shop.url}/", "not a url"]})
    assert pushed["pushed"] == 1 and pushed["skipped"][0]["entry"] == "entry 1"
    runs.join(r, KEYS, node_id="a-node", ttl_ms=60_000)  # run 1, running
    for path in ("", "/runs", "/history", "/report", "/nodes", "/limits", "/domains", "/seeds", "/dead"):
        call("GET", "/api/v1/crawls/{crawl}" + path)
    # a node's log (crawlplug.nodelog; what a real node sends: tests/test_nodelog.py)
    warned = {"t": 1, "level": "WARNING", "logger": "scrapy.core.scraper", "text": "a warning"}
    nodelog.append(r, KEYS, "a-node", [warned, {**warned, "t": 2, "level": "ERROR", "text": "an error"}], keep=10)
    logged = call("GET", "/api/v1/crawls/{crawl}/nodes/{node}/log", node="a-node")
    assert [x["text"] for x in logged["records"]] == ["a warning", "an error"]
    assert logged["summary"] == {"levels": {"WARNING": 1, "ERROR": 1}, "loggers": {"scrapy.core.scraper": 2}}
    viewer = {"Authorization": f"Bearer {tokens['viewer']}"}
    errors = api.get("/api/v1/crawls/shop/nodes/a-node/log?level=error&q=AN%20err", headers=viewer).json()
    assert [x["text"] for x in errors["records"]] == ["an error"], errors
    unknown = api.get("/api/v1/crawls/shop/nodes/nobody/log", headers=viewer)
    assert unknown.status_code == 404 and "no node 'nobody' in crawl 'shop' (its nodes: a-node)" in unknown.text
    assert api.get("/api/v1/crawls/shop/nodes/a-node/log?level=info", headers=viewer).status_code == 400
    for path in ("/schedules", "/alerts"):
        call("GET", "/api/v1/crawls/{crawl}" + path)
    # the crawl's schedules paused and resumed (a firing due meanwhile is skipped: tests/test_alert_actions.py)
    paused = call("POST", "/api/v1/crawls/{crawl}/schedules/pause")
    assert paused["changed"] is True and paused["paused"]["by"] == "u-operator"
    assert api.get("/api/v1/crawls/shop/schedules", headers=viewer).json()["paused"]["by"] == "u-operator"
    assert call("POST", "/api/v1/crawls/{crawl}/schedules/resume") == {"paused": None, "changed": True}
    call("GET", "/api/v1/audit")
    # what the console's pages ask beside: who is logged in, a home row, a cron's times, a condition's grammar
    assert call("GET", "/api/v1/session") == {"name": "u-viewer", "role": "viewer", "may": ["read"]}
    home = api.get("/api/v1/crawls?detail=true", headers=viewer).json()["crawls"][0]
    assert home["crawl"] == "shop" and home["nodes"] == {"live": 1, "silent": 0, "dead": 0} and home["firing"] == []
    assert set(home) >= {"pages_per_min", "items_per_min", "paused", "failed", "dead"}
    times = call("GET", "/api/v1/cron", query="?cron=0%203%20*%20*%20*&tz=Europe/Paris")["next_five_ms"]
    assert len(times) == 5 and times == sorted(times) and times[1] - times[0] == 86_400_000
    bad = api.get("/api/v1/cron?cron=61%20*%20*%20*%20*", headers=viewer)
    assert bad.status_code == 400 and "cron" in bad.json()["detail"]
    assert call("POST", "/api/v1/alerts/check", {"when": "error_rate > 0.1 for 5m"})["ok"] is True
    wrong = call("POST", "/api/v1/alerts/check", {"when": "error_rate >"})
    assert wrong["ok"] is False and wrong["error"]
    assert call("POST", "/api/v1/crawls/{crawl}/pause")["changed"] is True
    assert call("POST", "/api/v1/crawls/{crawl}/resume")["changed"] is True
    assert call("PUT", "/api/v1/crawls/{crawl}/limits", {"pages": 1000})["limits"]["pages"] == 1000
    call("PUT", "/api/v1/crawls/{crawl}/domains/{domain}", {"delay": 1.5, "concurrency": 2}, domain="a.test")
    assert r.hget(KEYS.dconf, "o:a.test") == b"1500 2"
    assert call("DELETE", "/api/v1/crawls/{crawl}/domains/{domain}", domain="a.test")["had_override"] is True
    seed = call("POST", "/api/v1/crawls/{crawl}/seeds", {"entries": [f"{shop.url}/"], "every": "1h"})["added"][0]
    call("DELETE", "/api/v1/crawls/{crawl}/seeds/{ident}", ident=seed["id"])
    _dead_letter(r, 2)
    assert call("POST", "/api/v1/crawls/{crawl}/dead/requeue", {"indexes": [0]})["requeued"] == 1
    assert call("POST", "/api/v1/crawls/{crawl}/dead/drop", {"all": True})["dropped"] == 1
    rule = {"name": "rule1", "when": "error_rate > 0.5", "notify": [hook.apprise_url()]}
    assert call("POST", "/api/v1/crawls/{crawl}/alerts", rule)["rule"]["notify"] == ["json://..."]
    call("POST", "/api/v1/crawls/{crawl}/alerts/{rule}/test", rule="rule1")
    wait_for(lambda: hook.bodies(), 10, "the test notification")
    assert "test of alert rule 'rule1'" in str(hook.bodies()[0])
    call("DELETE", "/api/v1/crawls/{crawl}/alerts/{rule}", rule="rule1")
    plan = {"daemons": [d.url for d in daemons], "args": {"base_url": shop.url}, "settings": FAST}
    added = call("POST", "/api/v1/crawls/{crawl}/schedules", {**plan, "name": "nightly", "cron": "0 2 * * *"})
    assert len(added["next_five_ms"]) == 5 and added["next_five_ms"] == sorted(added["next_five_ms"])
    call("DELETE", "/api/v1/crawls/{crawl}/schedules/{name}", name="nightly")
    definition = (ROOT / "spiders" / "sites" / "shop.yaml").read_text()
    checked = call("POST", "/api/v1/sites/check", {"definition": definition})
    assert checked["valid"] is True and checked["errors"] == [] and checked["name"] == "shop", checked
    put = call("PUT", "/api/v1/sites", {"definition": definition})
    assert put == {"name": "shop", "version": put["version"], "n": 1, "unchanged": False}
    call("GET", "/api/v1/sites")
    assert call("GET", "/api/v1/sites/{name}", name="shop")["doc"]["name"] == "shop"
    # its versions: a second one, compared, and the first stored again (tests/test_sites_versions.py)
    edited = definition.replace('{css: "h1.name::text", required: true}', '{css: "h2.name::text", required: true}')
    editor = {"Authorization": f"Bearer {tokens['site-editor']}"}
    assert api.put("/api/v1/sites", json={"definition": edited}, headers=editor).json()["n"] == 2
    versions = call("GET", "/api/v1/sites/{name}/versions", name="shop")
    assert versions["in_force"] == 2 and [v["n"] for v in versions["versions"]] == [2, 1]
    assert versions["versions"][0]["by"] == "u-site-editor" and "doc" not in versions["versions"][0]
    first = call("GET", "/api/v1/sites/{name}/versions/{n}", name="shop", n="1")
    assert first["doc"]["fields"]["name"]["css"] == "h1.name::text" and first["in_force"] is False
    diff = call("GET", "/api/v1/sites/{name}/diff", name="shop")
    assert (diff["a"], diff["b"]) == (1, 2) and "+    css: h2.name::text" in diff["diff"].splitlines(), diff
    back = call("POST", "/api/v1/sites/{name}/rollback", {"to": 1}, name="shop")
    assert back == {"name": "shop", "n": 3, "version": first["version"], "rollback_of": 1}
    tried = call("POST", "/api/v1/sites/try", {"site": "shop", "url": f"{shop.url}/item/3/"})
    assert tried["page"]["url"] == f"{shop.url}/item/3/", tried
    # the site studio's reads and its trial on recent URLs (tests/test_site_studio.py, a real crawl)
    seen = Recent("shop")
    seen.saw("shop", f"{shop.url}/item/4/", "item")
    seen.push(r)
    assert call("GET", "/api/v1/sites/{site}/recent", site="shop")["urls"][0]["url"] == f"{shop.url}/item/4/"
    minutes = call("GET", "/api/v1/crawls/{crawl}/sites/{site}/minutes", site="shop")
    assert len(minutes["t"]) == 60 and minutes["by_version"] == {} and [a["n"] for a in minutes["applied"]] == [1, 2, 3]
    recent = call("POST", "/api/v1/sites/try-recent", {"site": "shop", "n": 1})
    assert [t["url"] for t in recent["trials"]] == [f"{shop.url}/item/4/"] and recent["summary"]["item_pages"] == 1
    forgot = call("POST", "/api/v1/crawls/{crawl}/forget", {"urls": [f"{shop.url}/item/3/"]})
    assert forgot["urls"] == [f"{shop.url}/item/3/"] and forgot["forgot"] == 0, "never crawled: not recorded"
    assert call("POST", "/api/v1/crawls/{crawl}/stop", {"drain": False})["state"] == "stopped"
    assert call("POST", "/api/v1/crawls/{crawl}/continue", {})["state"] == "running"
    api.post("/api/v1/crawls/shop/stop", json={}, headers={"Authorization": f"Bearer {tokens['operator']}"})
    assert call("POST", "/api/v1/crawls/{crawl}/new-run")["next_run"] == 2
    started = call("POST", "/api/v1/crawls/{crawl}/start", {**plan, "nodes_per_host": 1, "new_run": True})
    assert started["action"] == "new" and started["run"] == 2 and len(started["jobs"]) == 2, started
    assert not started["refused"], started
    wait_for(lambda: sum(len(d.jobs("default")["finished"]) for d in daemons) >= 2, 120, "the two started nodes to end")
    assert runs.view(r, KEYS).id == 2, "the nodes began the run asked for"
    got = call("GET", "/api/v1/crawls/{crawl}/jobs/{job}/log", job=started["jobs"][0]["id"])
    assert got["levels"]["INFO"] > 0 and any("Spider closed (finished)" in x for x in got["lines"]), got
    missing = api.get("/api/v1/crawls/shop/jobs/nope/log", headers={"Authorization": f"Bearer {tokens['viewer']}"})
    assert missing.status_code == 404 and "has no Scrapyd job 'nope'" in missing.text
    fleet = call("GET", "/api/v1/daemons")["daemons"]
    assert sorted(d["url"] for d in fleet) == sorted(d.url for d in daemons), fleet
    assert all(d["reachable"] and d["crawls"] == ["shop"] and d["finished"] >= 1 for d in fleet), fleet

    # a schedule added through the API fires in `crawlplug control`
    every = call("POST", "/api/v1/crawls/{crawl}/schedules", {**plan, "name": "soon", "cron": "* * * * * */2"})
    assert every["new"] is True
    control = ControlProcess(redis_url, tmp_path / "control.log")
    try:
        fired = wait_for(
            lambda: (schedule_store.get(r, KEYS, "soon") or {}).get("last"), 60, "the schedule's first firing"
        )
        wait_for(
            lambda: (schedule_store.get(r, KEYS, "soon") or {}).get("last", {}).get("state") not in (None, "firing"),
            60,
            "its firing to be carried out",
        )
        assert fired["due"] >= every["schedule"]["next"], fired
        assert schedule_store.fires(r, KEYS, 1), "recorded among the crawl's firings"
    finally:
        control.stop()
    call("DELETE", "/api/v1/crawls/{crawl}/schedules/{name}", name="soon")
    # the nodes the firings started end first: a node still running at the purge below joins the
    # crawl afresh (crawl.runs.purge), and the crawl would exist again (CI: 200, not 404)
    wait_for(
        lambda: not any(j["pending"] or j["running"] for j in (d.jobs("default") for d in daemons)),
        180,
        "the nodes the schedule started to end",
    )

    created = call("POST", "/api/v1/users", {"name": "zed", "role": "viewer"})
    zed = {"Authorization": f"Bearer {created['token']}"}
    assert api.get("/api/v1/crawls", headers=zed).status_code == 200
    assert {u["name"] for u in call("GET", "/api/v1/users")["users"]} >= {"zed", "u-admin"}
    call("DELETE", "/api/v1/users/{name}", name="zed")
    assert api.get("/api/v1/crawls", headers=zed).status_code == 401, "a revoked token opens nothing"
    assert call("DELETE", "/api/v1/crawls/{crawl}")["keys_deleted"] > 0
    assert api.get("/api/v1/crawls/shop", headers={"Authorization": f"Bearer {tokens['viewer']}"}).status_code == 404

    sessions = {("POST", "/api/v1/session"), ("DELETE", "/api/v1/session")}
    assert made | sessions == documented, f"not exercised: {sorted(documented - made - sessions)}"
    log = audit.entries(r, 10_000)
    done = {(e["action"], e["who"]) for e in log}
    for action, role in [
        ("push", "operator"),
        ("pause", "operator"),
        ("limits", "operator"),
        ("domains.set", "operator"),
        ("seeds.add", "operator"),
        ("dead.requeue", "operator"),
        ("alerts.add", "operator"),
        ("alerts.test", "operator"),
        ("schedules.add", "operator"),
        ("sites.put", "site-editor"),
        ("sites.rollback", "site-editor"),
        ("forget", "admin"),
        ("stop", "operator"),
        ("new-run", "operator"),
        ("start", "operator"),
        ("users.add", "admin"),
        ("users.revoke", "admin"),
        ("purge", "admin"),
    ]:
        assert (action, f"u-{role}") in done, (action, role)
    hook.stop()
    client.close()


def test_a_session_cookie_changes_nothing_without_its_csrf_token_and_a_refusal_says_why(store):
    redis_url, r = store
    client = client_from_url(redis_url)
    app = create_console(Connection(client, redis_url, embedded=False))
    api = TestClient(app, base_url="http://127.0.0.1")
    token = users.add(r, "olga", "operator", by="test")
    Frontier(r, KEYS, node_id="n").admit([(b"x" * 20, 0.0, b'{"v": 2, "url": "http://a.test/"}')])
    runs.join(r, KEYS, node_id="n", ttl_ms=60_000)
    assert api.post("/api/v1/session", json={"token": "not-a-token"}).status_code == 401
    login = api.post("/api/v1/session", json={"token": token})
    assert login.status_code == 200 and login.json()["role"] == "operator"
    assert "httponly" in login.headers.get("set-cookie", "").lower()
    assert api.get("/api/v1/crawls").status_code == 200, "reads need no CSRF token"
    no_csrf = api.post("/api/v1/crawls/shop/pause")
    assert no_csrf.status_code == 403 and "X-CSRF-Token" in no_csrf.json()["detail"]
    assert not r.exists(KEYS.control) or b"paused" not in (r.hkeys(KEYS.control) or []), "nothing paused"
    ok = api.post("/api/v1/crawls/shop/pause", headers={"X-CSRF-Token": login.json()["csrf"]})
    assert ok.status_code == 200 and ok.json()["changed"] is True
    # a refusal by the crawl itself is a 4xx with the CLI's reason, and audited as refused
    refused = api.post("/api/v1/crawls/shop/new-run", headers={"X-CSRF-Token": login.json()["csrf"]})
    assert refused.status_code == 409 and "stop it first" in refused.json()["detail"], refused.text
    assert audit.entries(r, 1)[0]["outcome"].startswith("refused: the run is running")
    nowhere = api.post(
        "/api/v1/crawls/shop/start", json={"daemons": []}, headers={"X-CSRF-Token": login.json()["csrf"]}
    )
    assert nowhere.status_code == 409 and "give at least one Scrapyd daemon" in nowhere.json()["detail"], nowhere.text
    unknown = api.post("/api/v1/crawls/shpo/pause", headers={"X-CSRF-Token": login.json()["csrf"]})
    assert unknown.status_code == 404 and "shop" in unknown.json()["detail"], "names the known crawls"
    assert api.delete("/api/v1/session").json()["closed"] is True
    assert api.get("/api/v1/crawls").status_code == 401, "logged out"
    users.revoke(r, "olga")
    client.close()


@pytest.mark.skipif(os.environ.get("CRAWLPLUG_NO_DASHBOARD_COMPAT") == "1", reason="asked to skip")
def test_the_dashboard_of_one_crawl_keeps_its_api_beside_the_consoles(redis_url, r):
    client = client_from_url(redis_url)
    app = create_console(Connection(client, redis_url, embedded=False), admin_token="tok-0123456789", crawl=KEYS)
    api = TestClient(app, base_url="http://127.0.0.1")
    Frontier(r, KEYS, node_id="n").admit([(b"y" * 20, 0.0, b'{"v": 2, "url": "http://a.test/"}')])
    assert api.get("/api/status").json()["queued"] == 1, "today's /api/* paths"
    assert api.post("/api/pause").status_code == 401, "its token needed, as before"
    assert api.post("/api/pause", headers={"Authorization": "Bearer tok-0123456789"}).status_code == 200
    assert audit.entries(r, 1)[0]["action"] == "pause", "the dashboard's changes are audited too"
    assert api.get("/api/v1/crawls/shop", headers={"Authorization": "Bearer tok-0123456789"}).json()["paused"]
    assert api.get("/").status_code == 200
    client.close()


def test_changes_made_with_the_command_are_audited_under_the_os_user_and_host(store):
    redis_url, r = store
    import getpass
    import socket

    from click.testing import CliRunner

    from crawlplug.cli import main

    def cli(*args: str) -> Any:
        res = CliRunner().invoke(
            main, ["--redis-url", redis_url, *args], env={"REDIS_URL": None, "CRAWLPLUG_CRAWL": None}
        )
        assert res.exit_code == 0, res.output
        return res

    cli("push", "--crawl", "shop", "http://a.test/")
    cli("pause", "--crawl", "shop")
    token = cli("users", "add", "vera", "--role", "viewer").stdout.strip().splitlines()[-1]
    assert users.authenticate(r, token) is not None, "the token alone on standard output"
    cli("users", "revoke", "vera")
    log = audit.entries(r, 10)
    me = f"cli:{getpass.getuser()}@{socket.gethostname()}"
    assert [(e["action"], e["crawl"], e["who"], e["source"]) for e in reversed(log)] == [
        ("push", "shop", me, socket.gethostname()),
        ("pause", "shop", me, socket.gethostname()),
        ("users.add", "", me, socket.gethostname()),
        ("users.revoke", "", me, socket.gethostname()),
    ]
    assert log[1]["detail"] == {"user": "vera", "role": "viewer"}, "no token in the log"


def test_site_versions_through_the_api_refusals_and_a_check_with_lines(store, monkeypatch):
    """What a console page on the versions needs: an identical PUT says unchanged, a
    rollback refused says why (404, 409) and is audited, a check answers 200 with each
    problem at its line."""
    redis_url, r = store
    monkeypatch.chdir(ROOT)  # the Scrapy project: the site pipelines allowed
    client = client_from_url(redis_url)
    api = TestClient(create_console(Connection(client, redis_url, embedded=False)), base_url="http://127.0.0.1")
    editor = {"Authorization": f"Bearer {users.add(r, 'eda', 'site-editor', by='test')}"}
    definition = (ROOT / "spiders" / "sites" / "shop.yaml").read_text()
    stored = api.put("/api/v1/sites", json={"definition": definition}, headers=editor).json()
    again = api.put("/api/v1/sites", json={"definition": definition}, headers=editor).json()
    assert again == {**stored, "unchanged": True} and stored["unchanged"] is False
    assert audit.entries(r, 1)[0]["outcome"] == "unchanged"
    assert r.llen("crawlplug:sites:log:shop") == 1

    same = api.post("/api/v1/sites/shop/rollback", json={"to": 1}, headers=editor)
    assert same.status_code == 409 and "is the definition in force already" in same.json()["detail"]
    refused = audit.entries(r, 1)[0]
    assert refused["action"] == "sites.rollback" and refused["outcome"].startswith("refused: version 1 of site 'shop'")
    assert refused["detail"] == {"site": "shop", "to": 1}
    unknown = api.post("/api/v1/sites/shop/rollback", json={"to": 4}, headers=editor)
    assert unknown.status_code == 404 and "(its versions: v1)" in unknown.json()["detail"]
    nosite = api.post("/api/v1/sites/nosuch/rollback", json={"to": 1}, headers=editor)
    assert nosite.status_code == 404 and "has no versions stored" in nosite.json()["detail"]
    assert api.post("/api/v1/sites/shop/rollback", json={"to": 0}, headers=editor).status_code == 422
    assert api.get("/api/v1/sites/nosuch/versions", headers=editor).status_code == 404
    assert api.get("/api/v1/sites/shop/versions/2", headers=editor).status_code == 404
    assert api.get("/api/v1/sites/shop/diff?a=3", headers=editor).status_code == 404
    r.rpush("crawlplug:sites:log:shop", b"not json")
    assert api.get("/api/v1/sites/shop/versions", headers=editor).json()["versions"][0]["n"] == 1
    corrupt = api.get("/api/v1/sites/shop/versions/2", headers=editor)
    assert corrupt.status_code == 409 and "version 2 of site 'shop' is not readable" in corrupt.json()["detail"]

    wrong = definition.replace("    type: bool\n", "    type: boolean\n")
    checked = api.post("/api/v1/sites/check", json={"definition": wrong}, headers=editor)
    assert checked.status_code == 200
    line = wrong.splitlines().index("    type: boolean") + 1
    assert checked.json() == {
        "valid": False,
        "errors": [
            {
                "line": line,
                "column": 5,
                "path": "fields.in_stock.type",
                "message": "Input should be 'str', 'int', 'float' or 'bool'",
            }
        ],
        "name": "shop",
        "steps": [],
        "fields": [],
    }
    broken = api.post("/api/v1/sites/check", json={"definition": "name: x\nsteps: [\n"}, headers=editor).json()
    assert broken["valid"] is False and broken["errors"][0]["line"] == 3 and broken["errors"][0]["path"] == ""
    users.revoke(r, "eda")
    client.close()
