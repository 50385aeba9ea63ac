"""The `crawlplug` operator command, against the real test Redis."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import redis
import scrapy
from click.testing import CliRunner

import crawlplug
from crawlplug.cli import main
from crawlplug.crawl import registry
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.domains import Domains
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.serializers import JsonSerializer

from .support.nodes import ROOT
from .support.servers import RedisServer, free_port

KEYS = CrawlKeys("clitest")


def _payload(url: str) -> bytes:
    return JsonSerializer().dumps(scrapy.Request(url), None)


def _admit(client: redis.Redis, urls: list[str]) -> Frontier:
    frontier = Frontier(client, KEYS)
    result = frontier.admit([(os.urandom(20), 0.0, _payload(u)) for u in urls])
    assert result.admitted == len(urls)
    return frontier


def run(*args: str, input: str | None = None, env: dict[str, str] | None = None):
    # REDIS_URL / CRAWLPLUG_CRAWL of the caller's shell must not leak into the tests
    base = {"REDIS_URL": None, "CRAWLPLUG_CRAWL": None}
    return CliRunner().invoke(main, list(args), input=input, env={**base, **(env or {})})


def test_status_of_an_empty_crawl(redis_url, r):
    registry.register(r, KEYS)  # it exists (a command created it), with nothing stored yet
    res = run("status", "--redis-url", redis_url, "--crawl", KEYS.crawl)
    assert res.exit_code == 0, res.output
    assert "crawl 'clitest' on redis://127.0.0.1:" in res.output
    for label in ("queued", "in flight", "seen", "dead"):
        assert any(line.split() == [*label.split(), "0"] for line in res.output.splitlines()), label
    assert "nodes: 0 live" in res.output
    assert "nothing is stored for crawl 'clitest'" in res.output


def test_status_counts_admitted_requests(redis_url, r):
    frontier = _admit(r, [f"http://example.com/{i}" for i in range(5)])
    frontier.pop(2)
    frontier.heartbeat([], metrics={"pid": 4242, "acked": 7})
    res = run("status", "--redis-url", redis_url, "--crawl", KEYS.crawl)
    assert res.exit_code == 0, res.output
    lines = [line.split() for line in res.output.splitlines()]
    assert ["queued", "3"] in lines
    assert ["in", "flight", "2"] in lines
    assert ["seen", "5"] in lines
    assert ["enqueued", "5"] in lines
    assert "nodes: 1 live" in res.output
    node_line = next(line for line in res.output.splitlines() if frontier.node_id in line)
    assert "heartbeat" in node_line and "s ago" in node_line and "pid 4242" in node_line


def test_status_json(redis_url, r):
    frontier = _admit(r, [f"http://example.com/{i}" for i in range(4)])
    frontier.pop(1)
    frontier.heartbeat([])
    res = run("--redis-url", redis_url, "--crawl", KEYS.crawl, "status", "--json")  # options before the command
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert (data["queued"], data["in_flight"], data["seen"], data["dead"]) == (3, 1, 4, 0)
    assert data["crawl"] == "clitest"
    assert data["stats"]["enqueued"] == 4 and data["stats"]["leased"] == 1
    assert data["live_nodes"] == 1
    [node] = data["nodes"]
    assert node["id"] == frontier.node_id and node["alive"] is True
    assert 0 <= node["heartbeat_age"] < 60


def test_environment_variables_choose_redis_and_crawl(redis_url, r):
    _admit(r, ["http://example.com/a"])
    res = run("status", "--json", env={"REDIS_URL": redis_url, "CRAWLPLUG_CRAWL": KEYS.crawl})
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["queued"] == 1


def test_crawl_is_required(redis_url):
    res = run("status", "--redis-url", redis_url)
    assert res.exit_code == 1
    assert "--crawl" in res.output
    assert "Traceback" not in res.output


def test_purge_asks_and_n_deletes_nothing(redis_url, r):
    _admit(r, ["http://example.com/a", "http://example.com/b"])
    before = sorted(r.scan_iter(match=KEYS.pattern()))
    assert before
    res = run("purge", "--redis-url", redis_url, "--crawl", KEYS.crawl, input="n\n")
    assert res.exit_code == 1
    assert "Delete crawl 'clitest'" in res.output and "2 queued" in res.output
    assert "Nothing deleted" in res.output
    assert sorted(r.scan_iter(match=KEYS.pattern())) == before


def test_purge_yes_deletes_everything(redis_url, r):
    frontier = _admit(r, ["http://example.com/a", "http://example.com/b"])
    frontier.heartbeat([])  # also a node:<id> hash
    other = CrawlKeys("other")
    Frontier(r, other).admit([(os.urandom(20), 0.0, _payload("http://example.com/x"))])
    res = run("purge", "--yes", "--redis-url", redis_url, "--crawl", KEYS.crawl)
    assert res.exit_code == 0, res.output
    assert "Deleted" in res.output
    assert list(r.scan_iter(match=KEYS.pattern())) == []
    assert list(r.scan_iter(match=other.pattern())), "another crawl's keys are left alone"


def test_purge_confirmed_with_y(redis_url, r):
    _admit(r, ["http://example.com/a"])
    res = run("purge", "--redis-url", redis_url, "--crawl", KEYS.crawl, input="y\n")
    assert res.exit_code == 0, res.output
    assert list(r.scan_iter(match=KEYS.pattern())) == []


def test_dead_list_shows_reason_and_url(redis_url, r):
    frontier = _admit(r, ["http://example.com/dead-one", "http://example.com/alive"])
    [first, second] = frontier.pop(2)
    assert frontier.dead_letter(first.id, "unknown callback 'parse_x'", deliveries=first.deliveries)
    res = run("dead", "list", "--redis-url", redis_url, "--crawl", KEYS.crawl)
    assert res.exit_code == 0, res.output
    assert "1 dead letters" in res.output
    [line] = [line for line in res.output.splitlines() if line.strip().startswith("[0]")]
    assert "http://example.com/dead-one" in line
    assert "unknown callback 'parse_x'" in line
    assert "http://example.com/alive" not in res.output


def test_dead_list_newest_n_and_foreign_payloads(redis_url, r):
    frontier = _admit(r, [f"http://example.com/{i}" for i in range(3)])
    for leased in frontier.pop(3):
        frontier.dead_letter(leased.id, f"reason {leased.id}")
    r.rpush(KEYS.dead, b"not a dead letter at all")
    res = run("dead", "list", "-n", "2", "--redis-url", redis_url, "--crawl", KEYS.crawl)
    assert res.exit_code == 0, res.output
    assert "4 dead letters" in res.output and "showing the newest 2" in res.output
    shown = [line.strip() for line in res.output.splitlines() if line.strip().startswith("[")]
    assert [s.split()[0] for s in shown] == ["[2]", "[3]"]
    assert "http://example.com/2" in shown[0]
    assert "unparseable dead letter" in shown[1] and "not a crawlplug JSON request" in shown[1]


@pytest.mark.parametrize("command", [["status"], ["purge", "--yes"], ["dead", "list"]])
def test_unreachable_redis_is_one_clear_line(command):
    url = "redis://127.0.0.1:1/0"
    res = run(*command, "--redis-url", url, "--crawl", "x")
    assert res.exit_code == 1
    assert isinstance(res.exception, SystemExit), res.exception  # a clean exit, not a crash
    [line] = res.output.strip().splitlines()
    assert url in line and "cannot reach Redis" in line


def test_malformed_url_is_one_clear_line():
    res = run("status", "--redis-url", "http://127.0.0.1:6379", "--crawl", "x")
    assert res.exit_code == 1
    [line] = res.output.strip().splitlines()
    assert "malformed REDIS_URL" in line


def test_password_is_masked_when_unreachable():
    res = run("status", "--redis-url", "redis://user:hunter2secret@127.0.0.1:1/0", "--crawl", "x")
    assert res.exit_code == 1
    assert "hunter2secret" not in res.output
    assert "redis://user:***@127.0.0.1:1/0" in res.output


@pytest.mark.integration  # starts processes of its own
def test_password_is_masked_in_status(tmp_path):
    server = RedisServer(free_port(), tmp_path).start()  # its readiness probe has no password
    try:
        redis.Redis(port=server.port).config_set("requirepass", "hunter2secret")
        url = f"redis://:hunter2secret@127.0.0.1:{server.port}/0"
        registry.register(redis.Redis(port=server.port, password="hunter2secret"), CrawlKeys("x"))
        for args in (["status"], ["status", "--json"], ["dead", "list"], ["purge", "--yes"]):
            res = run(*args, "--redis-url", url, "--crawl", "x")
            assert res.exit_code == 0, res.output
            assert "hunter2secret" not in res.output
            assert "***" in res.output
        wrong = run("status", "--redis-url", url.replace("hunter2secret", "wrongpass"), "--crawl", "x")
        assert wrong.exit_code == 1 and "wrongpass" not in wrong.output and "***" in wrong.output
    finally:
        server.stop()


def test_embedded_start_url_stop(project_copy, monkeypatch):
    monkeypatch.chdir(project_copy)
    try:
        res = run("embedded", "url")
        assert res.exit_code == 1 and "not running" in res.output
        started = run("embedded", "start")
        assert started.exit_code == 0, started.output
        url = started.output.strip()
        assert url.startswith("unix://") and str(project_copy) in url
        assert run("embedded", "url").output.strip() == url
        # with no --redis-url the commands use (and would start) this Redis
        assert run("push", "--crawl", "shop", "http://example.com/").exit_code == 0
        status = run("status", "--crawl", "shop", "--json")
        assert status.exit_code == 0, status.output
        assert json.loads(status.output)["embedded"] is True
    finally:
        stopped = run("embedded", "stop")
    assert stopped.exit_code == 0 and "Stopped" in stopped.output
    assert run("embedded", "url").exit_code == 1
    assert "was not running" in run("embedded", "stop").output


def test_a_command_that_starts_the_embedded_redis_says_so(project_copy, monkeypatch):
    """`crawlplug crawls` with no Redis running starts the project's embedded one, which goes
    on running after the command: said on stderr (stdout stays the listing), once."""
    monkeypatch.chdir(project_copy)
    try:
        first = run("crawls", "--json")
        assert first.exit_code == 0, first.output
        assert json.loads(first.stdout)["crawls"] == []
        assert first.stderr == (
            f"crawlplug: started the embedded Redis of {project_copy / '.crawlplug'}; it keeps "
            "running (`crawlplug embedded stop` stops it)\n"
        )
        again = run("crawls", "--json")
        assert again.exit_code == 0 and again.stderr == "", "already running: nothing to say"
    finally:
        assert "Stopped" in run("embedded", "stop").output


def test_no_project_and_no_url_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = run("status", "--crawl", "shop")
    assert res.exit_code == 1
    assert "scrapy.cfg" in res.output and "--redis-url" in res.output


# -- issue 18: --version, --json on every listing, a busy dashboard port ------------------------


@pytest.mark.integration  # starts processes of its own
def test_version_is_printed_and_is_the_package_version():
    """`crawlplug --version`, as a user types it (a real process): one line, the one version."""
    exe = str(Path(sys.executable).with_name("crawlplug"))
    for flag in ("--version", "-V"):
        proc = subprocess.run([exe, flag], capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == f"crawlplug {crawlplug.__version__}\n"
    # setup.cfg reads the version from crawlplug.__version__: the installed metadata agrees
    assert version("crawlplug") == crawlplug.__version__


def test_every_listing_command_prints_json(redis_url, r):
    """dead list, domains list, sites list and seeds list all take --json and print one JSON
    document with what the text shows."""

    frontier = _admit(r, ["http://example.com/dead-one", "http://example.com/ok"])
    [leased, _] = frontier.pop(2)
    assert frontier.dead_letter(leased.id, "unknown callback 'parse_x'")
    Domains(r, KEYS).configure({"o:example.com": "2000 1"})
    assert (
        run(
            "seeds", "add", "--redis-url", redis_url, "--crawl", KEYS.crawl, "--every", "1h", "http://example.com/seed"
        ).exit_code
        == 0
    )
    put = run("sites", "put", "--redis-url", redis_url, str(ROOT / "spiders" / "sites" / "cars.yaml"))
    assert put.exit_code == 0, put.output
    common = ["--redis-url", redis_url, "--crawl", KEYS.crawl]

    res = run("dead", "list", *common, "--json")
    assert res.exit_code == 0, res.output
    dead = json.loads(res.output)
    assert dead["crawl"] == KEYS.crawl and dead["total"] == 1
    [row] = dead["rows"]
    assert (row["index"], row["url"], row["reason"]) == (0, "http://example.com/dead-one", "unknown callback 'parse_x'")
    assert row["node"] == frontier.node_id and isinstance(row["at"], int)
    text = run("dead", "list", *common)
    assert "[0]" in text.output and "http://example.com/dead-one  unknown callback 'parse_x'" in text.output

    res = run("domains", "list", *common, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["limits"] == {"o:example.com": "2000 1"}

    res = run("seeds", "list", *common, "--json")
    assert res.exit_code == 0, res.output
    assert [s["url"] for s in json.loads(res.output)] == ["http://example.com/seed"]

    res = run("sites", "list", "--redis-url", redis_url, "--json")
    assert res.exit_code == 0, res.output
    assert [s["name"] for s in json.loads(res.output)["sites"]] == ["cars"]


@pytest.mark.integration  # starts processes of its own
def test_dashboard_on_a_busy_port_says_so_and_exits(redis_url):
    """The real `crawlplug dashboard` on a port something listens on: one line naming the
    port, exit status 1, and no line claiming to serve."""
    exe = str(Path(sys.executable).with_name("crawlplug"))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = subprocess.run(
            [exe, "dashboard", "--redis-url", redis_url, "--crawl", "shop", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    expected = (
        f"crawlplug: error: port {port} on 127.0.0.1 is already in use (another dashboard?): give "
        "another one with --port N, or --port 0 for any free port"
    )
    assert lines == [expected], proc.stderr
    assert "dashboard of crawl" not in proc.stderr + proc.stdout and "Traceback" not in proc.stderr
    # an address that is not this machine's (TEST-NET-1): the same, instead of claiming to serve
    proc = subprocess.run(
        [exe, "dashboard", "--redis-url", redis_url, "--crawl", "shop", "--host", "192.0.2.1", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("crawlplug: error: cannot serve the dashboard on 192.0.2.1:0: "), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "dashboard of crawl" not in proc.stderr


# -- pass_cli: the shared options and the connected target, written once -----------------------------


def _commands(group, path=()):
    """Every command of the click group, with its path ("dead list")."""
    for name, command in sorted(group.commands.items()):
        yield " ".join((*path, name)), command
        if hasattr(command, "commands"):
            yield from _commands(command, (*path, name))


def test_every_command_that_reaches_redis_is_handed_its_target_by_pass_cli():
    """A command with --redis-url takes it through pass_cli (one way to read the shared options,
    connect and say an error), not with a preamble of its own."""
    reaching = {path: cmd for path, cmd in _commands(main) if any(p.name == "redis_url" for p in cmd.params)}
    assert len(reaching) > 30, sorted(reaching)
    without = sorted(path for path, cmd in reaching.items() if not getattr(cmd.callback, "crawlplug_passes", None))
    assert not without, f"commands with --redis-url not made by pass_cli: {without}"


UNREACHABLE = "redis://127.0.0.1:1/0"

#: one command of each way pass_cli hands a command its target: keys and target before it runs
#: (dead list; stop, by a CRAWL argument), the Redis whatever crawl is named (crawls, sites list,
#: items count --key), the Cli read after the command's own checks (push, alerts list, report)
EVERY_WAY = [
    ["dead", "list", "--crawl", "x"],
    ["stop", "x"],
    ["crawls"],
    ["sites", "list"],
    ["items", "count", "--key", "k"],
    ["push", "--crawl", "x", "http://example.com/"],
    ["alerts", "list"],
    ["report", "x"],
]


@pytest.mark.parametrize("command", EVERY_WAY, ids=" ".join)
def test_unreachable_redis_is_one_clear_line_whichever_way_a_command_is_handed_it(command):
    res = run(*command, "--redis-url", UNREACHABLE)
    assert res.exit_code == 1
    assert isinstance(res.exception, SystemExit), res.exception
    [line] = res.output.strip().splitlines()
    assert line.startswith("crawlplug: error: cannot reach Redis at") and UNREACHABLE in line, line


@pytest.mark.parametrize("command", EVERY_WAY, ids=" ".join)
def test_a_malformed_url_is_one_clear_line_whichever_way_a_command_is_handed_it(command):
    res = run(*command, "--redis-url", "http://127.0.0.1:6379")
    assert res.exit_code == 1
    [line] = res.output.strip().splitlines()
    assert "malformed REDIS_URL" in line, line


@pytest.mark.parametrize(
    "command", [["dead", "list"], ["stop"], ["push", "http://example.com/"], ["report"]], ids=" ".join
)
def test_which_crawl_is_asked_before_redis_is(command):
    """No crawl named: the command says so, and reaches no Redis (nor starts the embedded one)."""
    res = run(*command, "--redis-url", UNREACHABLE)
    assert res.exit_code == 1
    assert "which crawl?" in res.output and "cannot reach" not in res.output, res.output


def test_a_command_checks_its_own_arguments_before_it_reaches_redis():
    res = run("push", "--crawl", "x", "--redis-url", UNREACHABLE)
    assert res.exit_code == 1 and "nothing to push" in res.output, res.output
    res = run("status", "--crawl", "x", "--redis-url", UNREACHABLE, "--since", "6h", "--watch")
    assert res.exit_code == 1 and "--since shows a range of the past" in res.output, res.output


@pytest.mark.parametrize(
    "command",
    [["stop", "shop"], ["crawls", "show", "shop"], ["report", "shop"], ["alerts", "list", "shop"]],
    ids=" ".join,
)
def test_a_crawl_named_twice_differently_is_refused(command):
    res = run(*command, "--crawl", "other", "--redis-url", UNREACHABLE)
    assert res.exit_code == 1
    assert "two crawls named: 'shop' and --crawl 'other'" in res.output, res.output


def test_a_command_over_no_crawl_is_not_refused_for_the_crawl_the_environment_names(redis_url):
    """CRAWLPLUG_CRAWL (the group's --crawl) names an unknown crawl: the commands that name no crawl
    (site definitions, a key of one's own) go on, where those of one crawl refuse it."""
    env = {"CRAWLPLUG_CRAWL": "no-such-crawl-here"}
    sites = run("sites", "list", "--redis-url", redis_url, env=env)
    assert sites.exit_code == 0 and "site definitions on" in sites.output, sites.output
    items = run("items", "count", "--key", "no-such-key", "--redis-url", redis_url, env=env)
    assert items.exit_code == 0 and items.output.strip() == "0", items.output
    dead = run("dead", "list", "--redis-url", redis_url, env=env)
    assert dead.exit_code == 1 and "no-such-crawl-here" in dead.output, dead.output
