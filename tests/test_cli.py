"""The `crawlplug` operator command, against the real test Redis."""

from __future__ import annotations

import json
import os

import pytest
import redis
import scrapy
from click.testing import CliRunner

from crawlplug import runs
from crawlplug.cli import main
from crawlplug.frontier import Frontier
from crawlplug.keys import CrawlKeys
from crawlplug.serializers import JsonSerializer

from .conftest import RedisServer, free_port

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


def test_status_of_an_empty_crawl(redis_url):
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


def test_password_is_masked_in_status(tmp_path):
    server = RedisServer(free_port(), tmp_path).start()  # its readiness probe has no password
    try:
        redis.Redis(port=server.port).config_set("requirepass", "hunter2secret")
        url = f"redis://:hunter2secret@127.0.0.1:{server.port}/0"
        runs.register(redis.Redis(port=server.port, password="hunter2secret"), CrawlKeys("x"))
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
        status = run("status", "--crawl", "shop", "--json")
        assert status.exit_code == 0, status.output
        assert json.loads(status.output)["embedded"] is True
    finally:
        stopped = run("embedded", "stop")
    assert stopped.exit_code == 0 and "Stopped" in stopped.output
    assert run("embedded", "url").exit_code == 1
    assert "was not running" in run("embedded", "stop").output


def test_no_project_and_no_url_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = run("status", "--crawl", "shop")
    assert res.exit_code == 1
    assert "scrapy.cfg" in res.output and "--redis-url" in res.output
