"""The dashboard answers only the hosts it is meant to be reached by (DNS rebinding).

A page on evil.example whose DNS name the attacker re-points at 127.0.0.1 makes the
browser send ``Host: evil.example:<port>`` to a loopback dashboard; without a Host check
its script could read the GET API. Real `crawlplug dashboard` processes over loopback.
"""

from __future__ import annotations

import socket

import pytest
import uvicorn
from click.testing import CliRunner

from crawlplug.cli import main as cli_main
from crawlplug.cli import web as cli_web
from crawlplug.crawl import Crawl
from crawlplug.errors import ConfigError
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.web import allowed_hosts, host_pattern

from .support.dashboardproc import HOSTS_ENVVAR, start_dashboard

KEYS = CrawlKeys("shop")
TOKEN = "s3cret-dashboard-token-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
READS = (
    "/",
    "/api",
    "/api/status",
    "/api/nodes",
    "/api/history",
    "/api/domains",
    "/api/dead",
    "/api/errors",
    "/static/app.js",
)


def raw_get(port: int, head: bytes) -> bytes:
    """The status line a raw HTTP request ``head`` gets (for Host headers httpx will not send)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n", 1)[0]


@pytest.mark.integration  # starts processes of its own
def test_a_loopback_dashboard_refuses_other_hosts(redis_url, r, tmp_path):
    dash = start_dashboard(redis_url, "shop", tmp_path, token=TOKEN)
    try:
        port = dash.port
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST", "127.0.0.1"):
            assert dash.http.get("/api/status", headers={"Host": host}).status_code == 200, host
        for host in (
            f"evil.example:{port}",
            "evil.example",
            f"127.0.0.1.evil.example:{port}",
            f"localhost.evil.example:{port}",
            "10.0.0.1",
            "[::2]",
        ):
            for path in READS:
                res = dash.http.get(path, headers={"Host": host})
                assert res.status_code == 400 and res.text == "Invalid host header", (host, path, res.text[:80])
                assert "queued" not in res.text
            res = dash.http.post("/api/pause", headers={"Host": host, **AUTH})
            assert res.status_code == 400, host
        assert Crawl.of(Frontier(r, KEYS)).paused_info() is None, "no refused request paused the crawl"
        # the same action from an allowed host works: the refusals above were the Host check's
        assert dash.http.post("/api/pause", headers=AUTH).json()["paused"] is True
        # HTTP/1.0 without a Host header, and a malformed one
        assert raw_get(port, b"GET /api/status HTTP/1.0\r\n\r\n").split(b" ")[1] == b"400"
        assert raw_get(port, b"GET /api/status HTTP/1.1\r\nHost: a b\r\n\r\n").split(b" ")[1] == b"400"
        assert (
            raw_get(port, f"GET /api/status HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n".encode()).split(b" ")[1]
            == b"200"
        )
    finally:
        dash.stop()


@pytest.mark.integration  # starts processes of its own
def test_a_real_hostname_is_allowed_by_option_and_environment(redis_url, tmp_path):
    dash = start_dashboard(
        redis_url,
        "shop",
        tmp_path,
        extra_args=("--allow-host", "crawl.example.org", "--allow-host", "10.1.2.3"),
        env={HOSTS_ENVVAR: "*.internal.example, ops.example.net"},
    )
    try:
        for host in (
            "crawl.example.org:8642",
            "CRAWL.example.org",
            "10.1.2.3",
            "a.internal.example",
            "b.c.internal.example:80",
            "ops.example.net",
            f"127.0.0.1:{dash.port}",
        ):
            assert dash.http.get("/api/status", headers={"Host": host}).status_code == 200, host
        for host in ("evil.example", "internal.example.evil", "example.org", "www.crawl.example.org", "10.1.2.4"):
            assert dash.http.get("/api/status", headers={"Host": host}).status_code == 400, host
        assert (
            "answering Host: 127.0.0.1, localhost, [::1], *.internal.example, ops.example.net, "
            "crawl.example.org, 10.1.2.3" in dash.text()
        )
    finally:
        dash.stop()


def test_the_bound_address_is_allowed(redis_url, monkeypatch):
    """Bound to an address, the dashboard answers that address too; bound to every interface
    (0.0.0.0), no address names it, so only --allow-host adds what the network uses."""
    apps: list = []
    # no real interface of this machine has these addresses: a loopback socket stands in for
    # the one the command binds, and the server is not run (what is checked is the Host list)
    monkeypatch.setattr(cli_web, "listen", lambda host, port: socket.create_server(("127.0.0.1", 0)))
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: apps.append(self.config.app))
    for bind, expected in (
        ("192.168.1.10", "192.168.1.10"),
        ("fe80::1", "[fe80::1]"),
        ("0.0.0.0", None),
        ("::", None),
        ("dash.example.com", "dash.example.com"),
    ):
        res = CliRunner().invoke(
            cli_main, ["--redis-url", redis_url, "--crawl", "shop", "dashboard", "--host", bind, "--port", "0"]
        )
        assert res.exit_code == 0, res.output
        line = next(line for line in res.output.splitlines() if line.startswith("answering Host: "))
        assert line.startswith("answering Host: 127.0.0.1, localhost, [::1]")
        if expected:
            assert line.split(": ", 1)[1].split(" (")[0].split(", ")[-1] == expected, line
        else:
            assert line.startswith("answering Host: 127.0.0.1, localhost, [::1] ("), line
    assert len(apps) == 5


@pytest.mark.parametrize(
    "bad",
    ["crawl.example.org:8642", "http://crawl.example.org", "a b", "", "ex*ample.com", "[not-an-address]", "user@host"],
)
def test_a_host_the_header_cannot_hold_is_refused_before_serving(redis_url, monkeypatch, bad):
    served: list = []
    monkeypatch.setattr(uvicorn, "run", lambda app, host, port, **kw: served.append(host))
    res = CliRunner().invoke(
        cli_main, ["--redis-url", redis_url, "--crawl", "shop", "dashboard", "--allow-host", bad, "--port", "0"]
    )
    assert res.exit_code != 0 and "is not a host name for the dashboard's allowed hosts" in res.output, res.output
    assert served == []
    with pytest.raises(ConfigError):
        host_pattern(bad)


def test_allowed_hosts_as_the_middleware_matches_them():
    assert allowed_hosts() == ["127.0.0.1", "localhost", "[::1]"]
    assert allowed_hosts("::1") == ["127.0.0.1", "localhost", "[::1]"]
    assert allowed_hosts("0:0::1", ["Dash.Example.COM", "*.Example.org", "*"]) == [
        "127.0.0.1",
        "localhost",
        "[::1]",
        "dash.example.com",
        "*.example.org",
        "*",
    ]


@pytest.mark.integration  # starts processes of its own
def test_a_wildcard_turns_the_check_off_and_says_so(redis_url, tmp_path):
    dash = start_dashboard(redis_url, "shop", tmp_path, extra_args=("--allow-host", "*"))
    try:
        assert dash.http.get("/api/status", headers={"Host": "anything.example"}).status_code == 200
        assert "any Host header is answered" in dash.text()
    finally:
        dash.stop()
