"""Nodes started through real Scrapyd daemons (issue 22): `crawlplug start` on several
daemons makes one crawl, the jobs are shown per run and node, `crawlplug scrapyd
cancel` ends those that do not end by themselves, an egg deployed with scrapyd-deploy
runs, and a Redis the other machines cannot reach is refused."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from starlette.testclient import TestClient

from crawlplug.cli import main
from crawlplug.crawl import registry, runs
from crawlplug.errors import ConfigError
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.scrapyd import store as jobs
from crawlplug.scrapyd.daemon import Daemon
from crawlplug.scrapyd.jobs import open_jobs
from crawlplug.scrapyd.launch import check_reach
from crawlplug.web import create_app

from .support.scrapyd import wait_for
from .support.servers import free_port

pytestmark = pytest.mark.e2e

KEYS = CrawlKeys("shop")
#: nodes close one second after the whole crawl is done
FAST = ["-s", "CRAWLPLUG_IDLE_CLOSE=1", "-s", "CRAWLPLUG_HEARTBEAT=0.5", "-s", "LOG_LEVEL=INFO"]


def cli(redis_url: str, *args: str):
    return CliRunner().invoke(main, ["--redis-url", redis_url, *args], env={"REDIS_URL": None, "CRAWLPLUG_CRAWL": None})


def finished_on(daemons, n: int, timeout: float = 60, project: str = "default"):
    """Wait until the daemons list ``n`` finished jobs between them; returns them."""

    def done():
        found = [j for d in daemons for j in d.jobs(project)["finished"]]
        return found if len(found) >= n else None

    return wait_for(done, timeout, f"{n} finished Scrapyd jobs")


def test_start_on_two_daemons_is_one_crawl_and_shows_each_nodes_job(make_scrapyd, make_shop, redis_url, r):
    shop = make_shop(items=20)
    a, b = make_scrapyd(), make_scrapyd()
    res = cli(redis_url, "start", "shop", "--scrapyd", a.url, b.url, *FAST, "-a", f"base_url={shop.url}")
    assert res.exit_code == 0, res.output
    assert "run 1 of crawl 'shop' (its first), begun by the first node" in res.output
    assert "scheduled 2 nodes on 2 Scrapyd daemons" in res.output

    finished = finished_on([a, b], 2)
    assert {j["id"] for j in finished} == {j["id"] for j in jobs.all_jobs(r, KEYS)}
    # one crawl: every page of the shop fetched once between the two machines, not once by each
    hits = shop.hits
    assert max(hits.values()) == 1, hits.most_common(3)
    assert runs.view(r, KEYS).state == "finished"
    recorded = jobs.all_jobs(r, KEYS)
    assert {j["state"] for j in recorded} == {"ended"}
    assert {j["reason"] for j in recorded} == {"finished"}
    assert sum(j["pages"] for j in recorded) == sum(hits.values())
    assert sum(j["items"] for j in recorded) == 20
    assert len({j["node"] for j in recorded}) == 2 and all(j["run"] == 1 for j in recorded)
    for job in recorded:  # the node says so in its own log on its daemon
        daemon = a if job["daemon"] == a.url else b
        log = daemon.job_log(job["id"])
        # started for run 1 (CRAWLPLUG_FOR_RUN): started late, after run 1 ended, it would begin no run 2
        assert f"this node is Scrapyd job {job['id']} of crawl 'shop', started for run 1" in log
        # the same, read from the daemon by `crawlplug scrapyd log` (its web server's logs/)
        shown = cli(redis_url, "scrapyd", "log", "shop", job["id"], "--grep", "started for run")
        assert shown.exit_code == 0, shown.output
        assert f"this node is Scrapyd job {job['id']} of crawl 'shop', started for run 1" in shown.output
        assert shown.output.count("] INFO: ") == 1, "only the records holding the text"
        level_line = next(x for x in shown.output.splitlines() if x.startswith("by level: "))
        assert f"INFO {log.count('] INFO: ')}" in level_line, (level_line, "counted over the whole log")
        # a long log is read from its end (a Range request), starting at a whole line
        part = Daemon.of(str(job["daemon"])).log("default", "shop", str(job["id"]), last_bytes=300)
        assert len(log) > 300 and 0 < len(part) <= 300 and log.endswith(part) and log[-len(part) - 1] == "\n"
        last = json.loads(cli(redis_url, "scrapyd", "log", "shop", job["id"], "--tail", "3", "--json").output)
        assert last["lines"] == log.splitlines()[-3:] and last["daemon"] in (a.url, b.url)
    unknown = cli(redis_url, "scrapyd", "log", "shop", "no-such-job")
    assert unknown.exit_code == 1 and "crawl 'shop' has no Scrapyd job 'no-such-job' (its latest: " in unknown.output

    # the daemons the crawl knows (its jobs), and one given that does not answer
    fleet = cli(redis_url, "scrapyd", "daemons")
    assert fleet.exit_code == 0, fleet.output
    for daemon in (a, b):
        line = next(x for x in fleet.output.splitlines() if x.startswith(daemon.url))
        assert "(crawls: shop): node " in line and "0 running, 0 pending, 1 finished" in line, line
    assert fleet.output.count("  project default (version ") == 2 and ": shop" in fleet.output
    dead = f"http://127.0.0.1:{free_port()}"
    given = cli(redis_url, "scrapyd", "daemons", a.url, dead, "--json")
    assert given.exit_code == 1
    rows = json.loads(given.output)["daemons"]
    assert [row["reachable"] for row in rows] == [True, False]
    assert rows[1]["error"].startswith(f"cannot reach Scrapyd {dead}")
    assert (
        rows[0]["projects"][0]["spiders"] == sorted(rows[0]["projects"][0]["spiders"])
        and "shop" in rows[0]["projects"][0]["spiders"]
    )

    show = cli(redis_url, "crawls", "show", "shop")
    assert show.exit_code == 0, show.output
    for job in recorded:
        line = next(x for x in show.output.splitlines() if job["id"] in x)
        assert f"Scrapyd {job['daemon']}" in line and "ended (finished)" in line
        assert f"node {job['node']}" in line and f"pages {job['pages']}" in line and f"items {job['items']}" in line
    listing = cli(redis_url, "crawls", "--json")
    row = json.loads(listing.output)["crawls"][0]
    assert sorted(j["node"] for j in row["jobs"]) == sorted(j["node"] for j in recorded)

    # started again after a finished run: the nodes begin run 2 themselves
    again = cli(redis_url, "start", "shop", "--scrapyd", a.url, *FAST, "-a", f"base_url={shop.url}")
    assert again.exit_code == 0, again.output
    assert "run 2 of crawl 'shop' (run 1 finished), begun by the first node" in again.output
    finished_on([a, b], 3)
    assert [s["id"] for s in runs.history(r, KEYS)] == [1, 2]
    assert [j["run"] for j in jobs.all_jobs(r, KEYS)] == [1, 1, 2]


def test_cancel_removes_a_waiting_job_and_signals_a_running_one(make_scrapyd, make_shop, redis_url, r):
    shop = make_shop(items=200, delay=0.2)  # slow: the nodes do not end by themselves within the grace time
    daemon = make_scrapyd(max_proc=1)  # one slot: the second job waits
    res = cli(
        redis_url,
        "start",
        "shop",
        "--scrapyd",
        daemon.url,
        "--nodes-per-host",
        "2",
        *FAST,
        "-s",
        "CONCURRENT_REQUESTS=2",
        "-a",
        f"base_url={shop.url}",
    )
    assert res.exit_code == 0, res.output
    wait_for(lambda: any(j["state"] == "running" for j in jobs.all_jobs(r, KEYS)), 60, "the first node to open")
    assert len(daemon.jobs()["pending"]) == 1
    # the dashboard shows the running node's job
    (running,) = [j for j in jobs.all_jobs(r, KEYS) if j["state"] == "running"]
    dash = TestClient(create_app(r, KEYS), base_url="http://127.0.0.1")
    rows = wait_for(
        lambda: [n for n in dash.get("/api/nodes").json()["nodes"] if n["id"] == running["node"]],
        10,
        "the node's first heartbeat",
    )
    assert rows[0]["job"] == {"id": running["id"], "daemon": daemon.url, "state": "running"}

    res = cli(redis_url, "scrapyd", "cancel", "shop", "--grace", "1")
    assert res.exit_code == 0, res.output
    assert "1 job were waiting on their daemon and were removed" in res.output
    assert "1 job were running and were sent the signal" in res.output
    assert "1 job ended after the signal" in res.output
    by_state = {j["state"]: j for j in jobs.all_jobs(r, KEYS)}
    assert set(by_state) == {"cancelled", "ended"}
    assert by_state["ended"]["reason"] == "shutdown"  # TERM: Scrapy closed cleanly
    # the process exits a moment after its spider closed
    wait_for(lambda: not daemon.jobs()["running"], 30, "the signalled process to exit")
    assert daemon.jobs()["pending"] == []
    show = cli(redis_url, "crawls", "show", "shop")
    assert "cancelled" in show.output and "ended (shutdown)" in show.output
    # nothing left to cancel: it says so
    res = cli(redis_url, "scrapyd", "cancel", "shop", "--grace", "0")
    assert res.exit_code == 0 and "no Scrapyd job was open" in res.output


def test_stop_lets_running_nodes_close_and_cancels_the_jobs_that_do_not_end(make_scrapyd, make_shop, redis_url, r):
    """`crawlplug stop` on a crawl started through Scrapyd: the running node closes with
    'stopped' by itself within the grace time; the job that waited for its slot either
    starts a node that is told the run is stopped and exits, or is removed from its daemon
    when the grace time is over. Either way no job of the run is left open."""
    shop = make_shop(items=200, delay=0.2)
    daemon = make_scrapyd(max_proc=1)  # one slot: the second job waits
    res = cli(
        redis_url,
        "start",
        "shop",
        "--scrapyd",
        daemon.url,
        "--nodes-per-host",
        "2",
        *FAST,
        "-s",
        "CONCURRENT_REQUESTS=2",
        "-a",
        f"base_url={shop.url}",
    )
    assert res.exit_code == 0, res.output
    wait_for(lambda: any(j["state"] == "running" for j in jobs.all_jobs(r, KEYS)), 60, "the first node to open")
    assert len(daemon.jobs()["pending"]) == 1
    res = cli(redis_url, "stop", "shop", "--grace", "30")
    assert res.exit_code == 0, res.output
    assert "waiting up to 30 s for the run's Scrapyd jobs to end by themselves" in res.output
    said = re.findall(
        r"^(\d+) jobs? (ended by themselves|were waiting on their daemon and were removed)", res.output, re.MULTILINE
    )
    assert sum(int(n) for n, _ in said) == 2, res.output
    assert "were running and were sent the signal" not in res.output, "a stopped node had to be signalled"
    assert open_jobs(r, KEYS) == []
    ended = [j for j in jobs.all_jobs(r, KEYS) if j["state"] == "ended"]
    assert ended and all(j["reason"] == "stopped" for j in ended), ended
    assert runs.view(r, KEYS).state == "stopped"
    wait_for(lambda: not daemon.jobs()["running"] and not daemon.jobs()["pending"], 30, "the daemon to be idle")
    assert len(shop.hits) < len(shop.shop.paths()), "the run was stopped, not crawled to its end"


def test_a_stopped_run_is_not_restarted_unless_a_new_run_is_asked_for(make_scrapyd, make_shop, redis_url, r):
    shop = make_shop(items=10)
    daemon = make_scrapyd()
    # run 1 was stopped by an operator (as `crawlplug stop` leaves it)
    r.hset(KEYS.run, mapping={"id": 1, "state": "stopped", "started": 1, "ended": 2, "by": "ops", "epoch": "e1"})
    res = cli(redis_url, "start", "shop", "--scrapyd", daemon.url, *FAST, "-a", f"base_url={shop.url}")
    assert res.exit_code == 1
    assert "run 1 of crawl 'shop' was stopped by an operator and stays so: give --new-run" in res.output
    assert jobs.all_jobs(r, KEYS) == [] and daemon.get("daemonstatus.json")["pending"] == 0

    res = cli(redis_url, "start", "shop", "--scrapyd", daemon.url, "--new-run", *FAST, "-a", f"base_url={shop.url}")
    assert res.exit_code == 0, res.output
    assert "began run 2 of crawl 'shop' (run 1 stopped, fingerprints cleared)" in res.output
    finished_on([daemon], 1)
    wait_for(lambda: runs.view(r, KEYS).state == "finished", 30, "run 2 to finish")
    assert [(s["id"], s["state"]) for s in runs.history(r, KEYS)] == [(1, "stopped"), (2, "finished")]
    assert jobs.all_jobs(r, KEYS)[0]["run"] == 2


def test_redis_the_other_machines_cannot_reach_is_refused(redis_url, r):
    # no daemon is contacted: the check comes first (worker-1.invalid is never resolved)
    res = cli(redis_url, "start", "shop", "--scrapyd", "http://worker-1.invalid:6800")
    assert res.exit_code == 1
    assert "an address of this machine only (127.0.0.1 (loopback))" in res.output
    assert "Scrapyd on worker-1.invalid runs on another machine: each machine would crawl alone" in res.output
    assert jobs.all_jobs(r, KEYS) == []
    with pytest.raises(ConfigError, match="the embedded Redis of this project"):
        check_reach("unix:///tmp/x/redis.sock", ["http://127.0.0.1:6800", "http://10.1.2.3:6800"], embedded=True)
    with pytest.raises(ConfigError, match="a unix socket on this machine"):
        check_reach("unix:///tmp/x/redis.sock", ["http://[2001:db8::1]:6800"], embedded=False)
    # loopback everywhere (one machine), or a Redis named by an address the others reach: allowed
    check_reach("unix:///tmp/x/redis.sock", ["http://127.0.0.1:6800", "localhost:6801"], embedded=True)
    check_reach("redis+sentinel://10.0.0.5:26379,10.0.0.6:26379/main", ["http://10.1.2.3:6800"], embedded=False)
    res = cli(redis_url, "start", "shop", "--scrapyd", "http://worker-1.invalid:6800", "-s", "REDIS_URL=redis://x")
    assert res.exit_code == 1 and "-s REDIS_URL=... is set by crawlplug on every node it starts" in res.output


def test_a_daemon_without_the_spider_starts_nothing_anywhere(make_scrapyd, redis_url, r):
    a, b = make_scrapyd(), make_scrapyd()
    res = cli(redis_url, "start", "shop", "--scrapyd", a.url, b.url, "--project", "nope")
    assert res.exit_code == 1
    assert "nothing was started" in res.output and "project 'nope' not found" in res.output
    res = cli(redis_url, "start", "nosuchspider", "--scrapyd", a.url, b.url)
    assert res.exit_code == 1 and "has no spider 'nosuchspider' in project 'default'" in res.output
    assert a.get("daemonstatus.json")["pending"] == b.get("daemonstatus.json")["pending"] == 0
    assert a.jobs()["finished"] == [] and jobs.all_jobs(r, CrawlKeys("nosuchspider")) == []
    # a refused start creates no crawl: none is listed, none is scraped, none is known
    assert registry.known_crawls(r) == [] and r.keys("*") == []
    res = cli(redis_url, "status", "--crawl", "nosuchspider")
    assert res.exit_code == 1 and "no crawl 'nosuchspider' on this Redis; known crawls: none" in res.output


def test_an_egg_deployed_with_scrapyd_deploy_runs(
    make_scrapyd, make_shop, project_copy: Path, redis_url, tmp_path, r: redis.Redis
):
    """The other way to deploy: a daemon started in an empty directory gets the project as an
    egg (scrapyd-deploy builds and uploads it), and runs it under the [deploy] project's name."""
    empty = tmp_path / "machine"
    empty.mkdir()
    daemon = make_scrapyd(project_dir=empty)
    assert daemon.get("listprojects.json")["projects"] == []
    cfg = project_copy / "scrapy.cfg"
    cfg.write_text(cfg.read_text() + f"\n[deploy:test]\nurl = {daemon.url}/\nproject = crawlplug_demo\n")
    deploy = subprocess.run(
        [str(Path(sys.executable).with_name("scrapyd-deploy")), "test"],
        cwd=project_copy,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert deploy.returncode == 0, deploy.stdout + deploy.stderr
    assert daemon.get("listprojects.json")["projects"] == ["crawlplug_demo"]

    shop = make_shop(items=10)
    res = cli(
        redis_url,
        "start",
        "shop",
        "--scrapyd",
        daemon.url,
        "--project",
        "crawlplug_demo",
        *FAST,
        "-a",
        f"base_url={shop.url}",
    )
    assert res.exit_code == 0, res.output
    finished_on([daemon], 1, project="crawlplug_demo")
    (job,) = jobs.all_jobs(r, KEYS)
    assert job["state"] == "ended" and job["reason"] == "finished" and job["items"] == 10
    assert job["project"] == "crawlplug_demo"


@pytest.mark.unit
def test_a_job_logs_analysis_counts_records_and_keeps_a_records_lines_together():
    from crawlplug.scrapyd.logs import analyse

    lines = [
        "mid-line of a record cut at the head of the part read",
        "2026-12-07 10:00:00 [scrapy.core.engine] INFO: Spider opened",
        "2026-12-07 10:00:01 [scrapy.core.scraper] ERROR: Spider error processing <GET http://a.test/>",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in parse',
        "ValueError: bad price",
        "2026-12-07 10:00:02 [scrapy.core.engine] INFO: Spider closed (finished)",
    ]
    text = "\n".join(lines)
    got = analyse(text, tail=3)
    assert got["records"] == 3 and got["levels"] == {"INFO": 2, "ERROR": 1}
    assert got["loggers"] == {"scrapy.core.engine": 2, "scrapy.core.scraper": 1}
    assert got["lines"] == text.splitlines()[-3:]
    found = analyse(text, search="bad PRICE")
    assert found["lines"] == text.splitlines()[2:6], "the whole record whose traceback holds the text"
