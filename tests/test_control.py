"""Scheduled runs and the control process (issue 22): the leader lease and its fencing
token against a real Redis, cron times with seconds, and real `crawlplug control`
processes firing a schedule on a real Scrapyd daemon: two processes fire each time
once, and a process restarted across due times fires the missed ones once."""

from __future__ import annotations

import itertools
import json
import signal
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from crawlplug.cli import main
from crawlplug.controlprocess import Control
from crawlplug.crawl import runs
from crawlplug.errors import ConfigError
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.store import redis_ms
from crawlplug.schedules import firing as ops_schedules
from crawlplug.schedules import store as schedules
from crawlplug.schedules.store import ScheduleLeadership as Leadership
from crawlplug.scrapyd import store as jobs

from .support.control import ControlProcess
from .support.scrapyd import wait_for

KEYS = CrawlKeys("shop")
CRAWLPLUG = str(Path(sys.executable).with_name("crawlplug"))


def cli(redis_url: str, *args: str):
    return CliRunner().invoke(main, ["--redis-url", redis_url, *args], env={"REDIS_URL": None, "CRAWLPLUG_CRAWL": None})


def _spec(r: redis.Redis, due: int) -> None:
    schedules.put(r, KEYS, {"name": "n", "cron": "* * * * * *", "tz": "UTC", "plan": {}, "next": due, "last": None})


# -- the lease and the fence (unit: the session's Redis) ----------------------------------------------------


def test_one_leader_at_a_time_and_a_replaced_leader_writes_nothing(r: redis.Redis):
    a = Leadership(r, KEYS, "a", lease_ms=300)
    b = Leadership(r, KEYS, "b", lease_ms=300)
    assert a.hold() == "acquired" and a.fence == 1
    assert b.hold() == "held" and b.fence == 0 and b.holder == "a"
    assert a.hold() == "renewed" and a.fence == 1
    _spec(r, 1000)
    assert a.claim("n", 1000, 2000) == ("claimed", "")
    assert b.claim("n", 2000, 3000)[0] == "deposed"  # not the leader: nothing written
    time.sleep(0.4)  # a stalls past its lease
    assert b.hold() == "acquired" and b.fence == 2
    # a wakes up, not knowing: its writes are refused by the fence
    assert a.done("n", 1000, {"state": "fired"})[0] == "deposed"
    assert a.claim("n", 2000, 3000)[0] == "deposed"
    assert schedules.get(r, KEYS, "n")["last"]["state"] == "firing"
    # b adopts the firing a left unfinished, and finishes it
    assert b.adopt("n", 1000) == ("adopted", "")
    assert b.done("n", 1000, {"state": "fired", "jobs": 2}) == ("done", "")
    spec = schedules.get(r, KEYS, "n")
    assert spec["last"]["state"] == "fired" and spec["last"]["fence"] == 2 and spec["last"]["adopted_from"] == 1
    assert spec["next"] == 2000
    # the same time cannot be claimed twice
    assert b.claim("n", 1000, 2000)[0] == "moved"
    assert b.claim("n", 2000, 3000) == ("claimed", "")
    assert [f["due"] for f in schedules.fires(r, KEYS)] == [1000]
    b.release()
    assert a.hold() == "acquired" and a.fence == 3  # at once, not after b's lease


def test_a_schedule_deleted_meanwhile_and_a_corrupt_key(r: redis.Redis):
    a = Leadership(r, KEYS, "a", lease_ms=5000)
    a.hold()
    assert a.claim("gone", 1, 2) == ("gone", "")
    r.hset(KEYS.schedules, "bad", "not json")
    with pytest.raises(redis.ResponseError, match="is not a JSON object: nothing was done"):
        a.claim("bad", 1, 2)
    r.delete(KEYS.fires)
    r.set(KEYS.fires, "x")
    _spec(r, 1)
    with pytest.raises(redis.ResponseError, match="holds a string, not a list"):
        a.claim("n", 1, 2)
    assert schedules.get(r, KEYS, "n")["next"] == 1  # all or nothing


def test_cron_times_with_seconds_and_missed_times_counted_once():
    t0 = 1_800_000_000_000  # an instant on a 5 s boundary
    assert ops_schedules.next_after("* * * * * */5", "UTC", t0) == t0 + 5000
    assert ops_schedules.next_after("* * * * * */5", "UTC", t0 + 1) == t0 + 5000
    assert ops_schedules.times_between("* * * * * */5", "UTC", t0, t0 + 12_000) == 3
    nightly = ops_schedules.next_after("0 2 * * *", "Europe/Paris", t0)
    assert time.strftime("%H:%M", time.gmtime(nightly / 1000)) in ("00:00", "01:00")  # 02:00 in Paris
    for bad in ("every day", "61 * * * *", "* * * *"):
        with pytest.raises(ConfigError, match="is not a cron expression"):
            ops_schedules.check_cron(bad)
    with pytest.raises(ConfigError, match="unknown time zone"):
        ops_schedules.check_cron("0 2 * * *", "Mars/Olympus")


def test_a_cron_whose_times_never_come_is_refused_and_a_stored_one_is_skipped_said_once(r: redis.Redis, caplog):
    """February 31st passes croniter's syntax check and has no time: `schedule add` refuses it,
    and one written into Redis by hand is skipped by the control process, said once, while the
    crawl's other schedule is fired at the same tick."""
    with pytest.raises(ConfigError, match="gives no next time"):
        ops_schedules.check_cron("0 0 31 2 *")
    with pytest.raises(ConfigError, match="unknown time zone"):
        ops_schedules.check_cron("0 2 * * *", "a" * 300)  # a name too long for a file name: OSError before
    due = redis_ms(r) - 1000
    schedules.put(r, KEYS, {"name": "never", "cron": "0 0 31 2 *", "tz": "UTC", "plan": {}, "next": due, "last": None})
    schedules.put(
        r, KEYS, {"name": "zone", "cron": "* * * * * *", "tz": "Nope/Zone", "plan": {}, "next": due, "last": None}
    )
    schedules.put(
        r, KEYS, {"name": "nightly", "cron": "* * * * * *", "tz": "UTC", "plan": {}, "next": due, "last": None}
    )
    control = Control(r, lease=5, tick=0.1, timeout=2)
    with caplog.at_level("WARNING", logger="crawlplug.controlprocess"):
        control.tick()
        control.tick()
    assert schedules.get(r, KEYS, "nightly")["last"]["state"] == "failed"  # fired: its empty plan fails, said so
    assert schedules.get(r, KEYS, "never")["last"] is None and schedules.get(r, KEYS, "zone")["last"] is None
    said = [rec.getMessage() for rec in caplog.records if "is unreadable" in rec.getMessage()]
    assert len(said) == 2 and any("'never'" in line and "gives no next time" in line for line in said), said
    control.release()
    control.alerts.release()


def test_schedule_commands(redis_url: str, r: redis.Redis):
    res = cli(
        redis_url,
        "schedule",
        "shop",
        "--cron",
        "0 2 * * *",
        "--scrapyd",
        "http://127.0.0.1:6800",
        "http://127.0.0.1:6801",
        "--nodes-per-host",
        "2",
        "-s",
        "CRAWLPLUG_IDLE_CLOSE=5",
    )
    assert res.exit_code == 0, res.output
    assert "added schedule 'default' of crawl 'shop': cron '0 2 * * *' (UTC), 2 nodes on each of 2" in res.output
    spec = schedules.get(r, KEYS, "default")
    assert spec["plan"]["daemons"] == ["http://127.0.0.1:6800", "http://127.0.0.1:6801"]
    assert spec["plan"]["settings"] == {"CRAWLPLUG_IDLE_CLOSE": "5"} and spec["next"] > redis_ms(r)
    listed = cli(redis_url, "schedule", "list")
    assert "shop/default  cron '0 2 * * *' (UTC)" in listed.output and "never fired" in listed.output
    assert json.loads(cli(redis_url, "schedule", "list", "--json").output)["schedules"]["shop"]["default"]["cron"]
    bad = cli(redis_url, "schedule", "shop", "--cron", "0 25 * * *", "--scrapyd", "http://127.0.0.1:6800")
    assert bad.exit_code == 1 and "is not a cron expression" in bad.output
    far = cli(redis_url, "schedule", "shop", "--cron", "0 2 * * *", "--scrapyd", "http://worker-1.invalid:6800")
    assert far.exit_code == 1 and "each machine would crawl alone" in far.output
    assert cli(redis_url, "schedule", "delete", "shop", "nope").exit_code == 1
    res = cli(redis_url, "schedule", "delete", "shop")
    assert res.exit_code == 0 and schedules.all_schedules(r, KEYS) == {}
    assert schedules.scheduled_crawls(r) == []


# -- real control processes, a real daemon, real nodes (e2e) ------------------------------------------------


@pytest.fixture
def controls(redis_url: str, tmp_path: Path):
    started: list[ControlProcess] = []

    def start() -> ControlProcess:
        proc = ControlProcess(redis_url, tmp_path / f"control{len(started) + 1}.log")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop(signal.SIGKILL)


def _schedule(redis_url: str, daemon, shop, cron: str) -> None:
    res = cli(
        redis_url,
        "schedule",
        "shop",
        "--cron",
        cron,
        "--scrapyd",
        daemon.url,
        "-s",
        "CRAWLPLUG_IDLE_CLOSE=1",
        "-s",
        "CRAWLPLUG_HEARTBEAT=0.5",
        "-a",
        f"base_url={shop.url}",
    )
    assert res.exit_code == 0, res.output


def _scrapyd_jobs(daemon) -> list[str]:
    listed = daemon.jobs()
    return [j["id"] for state in ("pending", "running", "finished") for j in listed[state]]


@pytest.mark.e2e
def test_two_control_processes_fire_each_time_once(make_scrapyd, make_shop, redis_url, r, controls):
    shop = make_shop(items=10)
    daemon = make_scrapyd()
    first, second = controls(), controls()
    _schedule(redis_url, daemon, shop, "* * * * * */4")
    wait_for(lambda: len(schedules.fires(r, KEYS)) >= 3, 40, "three firings")
    leaders = [p for p in (first, second) if "leading the schedules of crawl 'shop'" in p.text()]
    assert len(leaders) == 1, [p.text()[-2000:] for p in (first, second)]
    for proc in (first, second):
        proc.stop(signal.SIGKILL)
    fires = schedules.fires(r, KEYS)
    dues = [f["due"] for f in fires]
    assert len(dues) == len(set(dues)), dues  # no time fired twice
    # nor one skipped: each firing stands for its due time and the ones after it it found
    # missed ("times": a leader late by more than the period, on a loaded machine, fires them once)
    ordered = sorted(fires, key=lambda f: f["due"])
    assert all(b["due"] - a["due"] == 4000 * a["times"] for a, b in itertools.pairwise(ordered)), ordered
    assert {f["state"] for f in fires} <= {"fired", "skipped"}
    fired = [f for f in fires if f["state"] == "fired"]
    assert fired and all(f["jobs"] == 1 for f in fired)
    # the daemon was asked once per firing: its jobs are exactly those recorded, one per fired time
    recorded = jobs.all_jobs(r, KEYS)
    assert sorted(_scrapyd_jobs(daemon)) == sorted(j["id"] for j in recorded)
    assert sorted(j["firing"] for j in recorded) == sorted(f"default@{f['due']}" for f in fired)
    assert {f["fence"] for f in fires} == {1}


@pytest.mark.e2e
def test_a_control_process_restarted_across_due_times_fires_them_once(make_scrapyd, make_shop, redis_url, r, controls):
    shop = make_shop(items=10)
    daemon = make_scrapyd()
    _schedule(redis_url, daemon, shop, "* * * * * */3")
    control = controls()
    wait_for(lambda: schedules.fires(r, KEYS), 20, "the first firing")
    control.stop(signal.SIGKILL)  # no release: the next process waits out its lease
    missed_from = schedules.get(r, KEYS, "default")["next"]
    # down across at least two due times
    wait_for(lambda: redis_ms(r) > missed_from + 3000 + 500, 20, "two due times to pass", every=0.1)
    down_until = redis_ms(r)
    again = controls()
    # (the first process may have fired more than once before its kill, on a loaded machine)
    since_kill = lambda: [f for f in schedules.fires(r, KEYS) if f["due"] >= missed_from]
    wait_for(lambda: len(since_kill()) >= 2, 30, "the catch-up firing and the one after it")
    again.stop()
    fires = sorted(since_kill(), key=lambda f: f["due"])
    catch_up, after = fires[0], fires[1]
    assert catch_up["due"] == missed_from and catch_up["times"] >= 2  # the missed times, fired once
    assert catch_up["fence"] == 2  # by the new leader
    # nothing else fired for the times missed while no control process ran
    assert [f["due"] for f in fires if missed_from <= f["due"] <= down_until] == [missed_from]
    assert after["due"] > down_until and after["times"] == 1
    assert f"stands for {catch_up['times']} due times missed" in again.text()
    recorded = jobs.all_jobs(r, KEYS)
    assert sorted(_scrapyd_jobs(daemon)) == sorted(j["id"] for j in recorded)


@pytest.mark.e2e
def test_a_firing_left_half_done_by_a_dead_leader_is_finished_by_the_next(make_scrapyd, make_shop, redis_url, r):
    """A leader claimed a firing, recorded one of its two jobs and died: the next leader (a
    higher fence) adopts the firing and starts only the job that was not recorded."""
    from crawlplug.controlprocess import Control

    shop = make_shop(items=10)
    daemon = make_scrapyd()
    res = cli(
        redis_url,
        "schedule",
        "shop",
        "--cron",
        "0 2 * * *",
        "--scrapyd",
        daemon.url,
        "--nodes-per-host",
        "2",
        "-s",
        "CRAWLPLUG_IDLE_CLOSE=1",
        "-a",
        f"base_url={shop.url}",
    )
    assert res.exit_code == 0, res.output
    due = schedules.get(r, KEYS, "default")["next"]
    dead = Leadership(r, KEYS, "dead-leader", lease_ms=200)
    assert dead.hold() == "acquired"
    assert dead.claim("default", due, due + 86_400_000) == ("claimed", "")
    firing = f"default@{due}"
    jobs.record(
        r,
        KEYS,
        f"shop-default-{due}-0-0",
        {"daemon": daemon.url, "project": "default", "spider": "shop", "firing": firing, "fence": dead.fence},
        scheduled_ms=redis_ms(r),
    )
    time.sleep(0.3)  # its lease runs out

    Control(r, lease=3, tick=0.2).run(ticks=2)
    (fire,) = schedules.fires(r, KEYS)
    assert fire["due"] == due and fire["state"] == "fired", fire
    assert fire["adopted_from"] == 1 and fire["fence"] == 2
    assert fire["resumed"] == 1 and fire["jobs"] == 1
    assert sorted(j["id"] for j in jobs.with_firing(r, KEYS, firing)) == [f"shop-default-{due}-0-{s}" for s in (0, 1)]
    assert _scrapyd_jobs(daemon) == [f"shop-default-{due}-0-1"]  # the recorded one was not started again
    assert schedules.get(r, KEYS, "default")["last"]["state"] == "fired"


def _at(seconds: float) -> str:
    """A cron expression (seconds last) that fires once a day, ``seconds`` from now (UTC)."""
    when = datetime.now(timezone.utc) + timedelta(seconds=seconds)
    return f"{when.minute} {when.hour} * * * {when.second}"


@pytest.mark.e2e
def test_a_daily_incremental_and_a_weekly_full_schedule_each_decide_the_run_it_begins(
    make_scrapyd, make_shop, redis_url, r, controls
):
    """Two schedules of one crawl: the incremental one's runs skip the pages seen before, the
    full one's fetch every page again, whoever begins the run and whatever the last run was
    (a stopped incremental run does not make the full firing after it incremental)."""
    shop = make_shop(items=40, delay=0.1)
    daemon = make_scrapyd()
    controls()
    node = ["-s", "CRAWLPLUG_IDLE_CLOSE=1", "-s", "CRAWLPLUG_HEARTBEAT=0.5", "-s", "CONCURRENT_REQUESTS=2"]

    def schedule(name: str, kind: str, cron: str) -> str:
        res = cli(
            redis_url,
            "schedule",
            "shop",
            "--name",
            name,
            "--cron",
            cron,
            f"--{kind}",
            "--scrapyd",
            daemon.url,
            *node,
            "-a",
            f"base_url={shop.url}",
        )
        assert res.exit_code == 0, res.output
        return res.output

    # run 1, begun by the daily (incremental) firing, stopped by the operator part-way
    said = schedule("daily", "incremental", _at(6))
    assert "each run it begins is incremental: pages seen in earlier runs are skipped" in said
    wait_for(lambda: runs.view(r, KEYS).id == 1 and runs.view(r, KEYS).state == "running", 30, "run 1")
    wait_for(lambda: sum(shop.hits.values()) >= 10, 30, "run 1 to fetch 10 pages")
    assert cli(redis_url, "stop", "shop").exit_code == 0
    wait_for(lambda: not daemon.jobs()["running"] and not daemon.jobs()["pending"], 60, "run 1's node to close")
    run_1 = shop.hits
    assert runs.view(r, KEYS).state == "stopped" and runs.view(r, KEYS).raw.get("incremental") == "1"
    assert 10 <= sum(run_1.values()) < len(shop.shop.item_paths()), "stopped part-way"

    # run 2, begun by the weekly (full) firing itself (the run was stopped): full, as it says
    listed = schedule("weekly", "full", _at(6))
    assert "each run it begins is full: every page is fetched again" in listed
    wait_for(lambda: runs.view(r, KEYS).id == 2 and runs.view(r, KEYS).state == "finished", 90, "run 2")
    fires = [f for f in schedules.fires(r, KEYS) if f["schedule"] == "weekly"]
    assert fires and "fingerprints cleared" in fires[0]["message"], fires
    after_2 = shop.hits
    # every page run 1 fetched was fetched again, and every page once in run 2
    assert all(after_2[path] == 2 for path in run_1), [p for p in run_1 if after_2[p] != 2][:5]
    assert {p.rstrip("/") for p in after_2 if p.startswith("/item/")} >= {p.rstrip("/") for p in shop.shop.item_paths()}
    assert max(n - run_1[p] for p, n in after_2.items()) == 1

    # run 3, the daily (incremental) firing after a finished full run: known pages skipped
    schedule("daily", "incremental", _at(6))
    wait_for(lambda: runs.view(r, KEYS).id == 3 and runs.view(r, KEYS).state == "finished", 90, "run 3")
    run_3 = shop.hits - after_2
    assert not [p for p in run_3 if p.startswith("/item/")], run_3  # no item page fetched again
    assert sum(run_3.values()) <= 2, run_3  # the start page (and robots.txt, if asked)
    assert [s.get("incremental") for s in runs.history(r, KEYS)] == [True, False, True]
    listing = cli(redis_url, "schedule", "list", "shop")
    assert "daemons, incremental" in listing.output and "daemons, full" in listing.output
