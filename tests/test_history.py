"""A crawl's history (crawlplug.history.store, crawlplug.history.series): minute records
for a day and hour records for a month, written by the heartbeats, read as pages, items
and errors per minute or hour, in bounded memory.

Most tests write the history with the real lua/history.lua whose clock is replaced by a
time of the test's (tests/support/history.py), so a month takes a second; the first
tests and the last one let the nodes' own heartbeats write it.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from crawlplug.cli import main
from crawlplug.crawl import runs
from crawlplug.errors import ConfigError, StaleEpoch
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.layout import claim_shards
from crawlplug.frontier.scripts import Scripts
from crawlplug.frontier.store import redis_ms
from crawlplug.history import series as history
from crawlplug.history import store as records
from crawlplug.history.store import DAY_MS, HOUR_MS, MINUTE_MS
from crawlplug.web import create_app

from .support.history import HistoryAt

K = CrawlKeys("hist")


def cli(redis_url: str, *args: str):
    return CliRunner().invoke(main, ["--redis-url", redis_url, *args], env={"REDIS_URL": None, "CRAWLPLUG_CRAWL": None})


def payload(n: int) -> tuple[bytes, float, bytes]:
    return (str(n).encode().ljust(20, b"_"), 0.0, json.dumps({"url": f"http://example.com/{n}"}).encode())


def history_keys(r) -> dict[str, dict[bytes, bytes]]:
    return {k.decode(): r.hgetall(k) for k in r.scan_iter(match="*:hist:*")}


# -- what a heartbeat writes -------------------------------------------------------------------


def test_a_heartbeat_samples_the_crawl_into_a_minute_and_an_hour_record(r):
    joined = runs.join(r, K, node_id="a", ttl_ms=10_000)
    frontier = Frontier(r, K, node_id="a", epoch=joined.epoch, run_id=joined.run, sampler=records.sample_call)
    frontier.admit([payload(i) for i in range(5)])
    held = frontier.pop(2)
    r.hset(K.stats, mapping={"items": 7, "errors": 1})  # the heartbeats' counts so far
    frontier.heartbeat_and_reap([x.id for x in held])
    now = redis_ms(r)

    found = history_keys(r)
    hour, day = now // HOUR_MS, now // DAY_MS
    assert set(found) == {records.minute_key(K, hour), records.hour_key(K, day)}
    minute_record = found[records.minute_key(K, hour)]
    assert list(minute_record) == [str(now % HOUR_MS // MINUTE_MS).encode()]
    run_id, second, *numbers = next(iter(minute_record.values())).decode().split()
    assert run_id == str(joined.run) and abs(int(second) - now % MINUTE_MS // 1000) <= 1
    # acked, enqueued, items, errors; queued, in flight, dead letters, live nodes
    assert [int(n) for n in numbers] == [0, 5, 7, 1, 3, 2, 0, 1]
    # compact (a listpack hash), and gone by itself: a day after its hour, a month after its day
    for key, kept in (
        (records.minute_key(K, hour), (hour + 1) * HOUR_MS + DAY_MS - now),
        (records.hour_key(K, day), (day + 1) * DAY_MS + 31 * DAY_MS - now),
    ):
        assert r.object("encoding", key) in (b"listpack", b"ziplist")  # Redis 7, 6.2
        assert kept - 5_000 <= r.pttl(key) <= kept

    got = history.history(r, K, since_ms=now - HOUR_MS, step="minute")
    last = len(got["t"]) - 1
    assert got["runs"][last] == joined.run
    assert (got["queued"][last], got["in_flight"][last], got["nodes"][last]) == (3, 2, 1)
    assert got["done"][last] == 0 and got["items"][last] == 7, "the run began in this minute: counts from 0"
    assert got["done"][:last] == [None] * last, "no record before: no node sampled then"


@pytest.fixture(params=["one-redis", "cluster"])
def client(request: pytest.FixtureRequest):
    return request.getfixturevalue("r" if request.param == "one-redis" else "cluster_client")


def test_every_part_of_a_sharded_crawl_is_sampled_and_summed(client):
    """On one Redis and on a 3-primary cluster (each shard's keys under its own hash tag)."""
    r = client
    claim_shards(r, K, 3)
    frontier = Frontier(r, K, shards=3, node_id="a", sampler=records.sample_call)
    frontier.admit([(*payload(i), "", f"site{i}.test") for i in range(9)])
    frontier.pop(4)
    frontier.heartbeat_and_reap([])
    per_part = records.records(r, K, MINUTE_MS, redis_ms(r) - HOUR_MS, redis_ms(r))
    assert len(per_part) == 4 and all(len(p) == 1 for p in per_part), "the crawl's own keys and 3 shards"
    parts = [p[0][1] for p in per_part]
    assert sum(p.gauges[0] for p in parts) == 5 and sum(p.gauges[1] for p in parts) == 4
    assert parts[0].gauges[3] == 1 and all(p.gauges[3] is None for p in parts[1:]), "live nodes: the crawl's own"
    got = history.history(r, K, since_ms=redis_ms(r) - 5 * MINUTE_MS, step="minute")
    assert (got["queued"][-1], got["in_flight"][-1]) == (5, 4)


def test_a_sample_named_for_another_hour_writes_nothing(r):
    frontier = Frontier(r, K, node_id="a", sampler=records.sample_call)
    now = redis_ms(r)
    name, keys, args = frontier.base.history_call(now - 2 * HOUR_MS)  # a clock estimate 2 h off
    reply = frontier.scripts.history(keys=keys, args=args)
    assert reply[1] == 0 and abs(int(reply[0]) - now) < 5_000
    assert history_keys(r) == {}


def test_a_node_of_a_purged_crawl_writes_no_history(r):
    joined = runs.join(r, K, node_id="a", ttl_ms=10_000)
    frontier = Frontier(r, K, node_id="a", epoch=joined.epoch, sampler=records.sample_call)
    frontier.heartbeat_and_reap([])
    assert history_keys(r)
    runs.purge(r, K)
    with pytest.raises(StaleEpoch):
        frontier.heartbeat_and_reap([])
    assert history_keys(r) == {}, "the stale node's sample was refused with its heartbeat"


# -- reading it: pages per minute and per hour, per run -------------------------------------------


def _two_runs(r, at: HistoryAt, now: int) -> dict[str, int]:
    """Run 1: 10 minutes from 40 min ago, 10 pages a minute, 5 more after its last sample;
    run 2: from 20 min ago, 3 pages a minute, no record in one of its minutes."""
    start1 = (now - 40 * MINUTE_MS) // MINUTE_MS * MINUTE_MS
    r.hset(
        K.runs,
        "1",
        json.dumps(
            {
                "id": 1,
                "state": "finished",
                "started": start1 + 1000,
                "ended": start1 + 10 * MINUTE_MS,
                "pages": 105,
                "enqueued": 200,
                "items": 52,
                "errors": 1,
            }
        ),
    )
    for m in range(10):
        at.sample(
            K,
            start1 + m * MINUTE_MS + 50_000,
            run=1,
            acked=10 * (m + 1),
            enqueued=20 * (m + 1),
            items=5 * (m + 1),
            errors=1 if m >= 5 else 0,
            queued=10 - m,
        )
    start2 = (now - 20 * MINUTE_MS) // MINUTE_MS * MINUTE_MS
    r.hset(K.run, mapping={"id": 2, "state": "running", "started": start2 + 2000, "epoch": "x"})
    for m in range(10):
        if m == 4:
            continue  # no node sampled this minute: its pages land in the next one
        at.sample(K, start2 + m * MINUTE_MS + 30_000, run=2, acked=3 * (m + 1), enqueued=3 * (m + 1))
    return {"start1": start1, "start2": start2}


def test_minutes_count_each_runs_pages_and_add_up_to_its_summary(r):
    now = redis_ms(r)
    t = _two_runs(r, HistoryAt(r), now)
    one = history.history(r, K, run=1)
    assert one["step"] == "minute" and one["since"] == t["start1"] + 1000
    assert [v for v in one["done"] if v is not None] == [10] * 9 + [15], "the 5 after its last sample: its last minute"
    assert one["totals"] == {"done": 105, "admitted": 200, "items": 52, "errors": 1}, "as its summary says"
    assert [v for v in one["queued"] if v is not None] == list(range(10, 0, -1))

    two = history.history(r, K, run=2)
    done = two["done"]
    assert done[:4] == [3] * 4 and done[4] is None and done[5] == 6 and done[6:10] == [3] * 4
    assert two["totals"]["done"] == 30 and set(two["runs"]) <= {2, None}

    both = history.history(r, K, since_ms=now - HOUR_MS, step="minute")
    assert both["totals"]["done"] == 135 and both["totals"]["items"] == 52
    assert len(both["t"]) == 61 and both["step_seconds"] == 60
    hours = history.history(r, K, since_ms=now - 3 * HOUR_MS, step="hour")
    assert hours["totals"]["done"] == 135, "the hour records say the same"
    assert hours["totals"] == {k: both["totals"][k] for k in hours["totals"]}


def test_two_runs_in_one_minute_keep_a_record_each(r):
    """A run that ends and the next that begins in the same minute (and hour): the minute's
    record of the first moves aside ("<minute>.<run>"), so each run keeps its own."""
    at = HistoryAt(r)
    now = redis_ms(r)
    minute = (now - 5 * MINUTE_MS) // MINUTE_MS * MINUTE_MS
    r.hset(
        K.runs,
        "1",
        json.dumps(
            {
                "id": 1,
                "state": "finished",
                "started": minute + 1000,
                "ended": minute + 25_000,
                "pages": 12,
                "enqueued": 12,
                "items": 6,
                "errors": 0,
            }
        ),
    )
    r.hset(K.run, mapping={"id": 2, "state": "running", "started": minute + 30_000})
    at.sample(K, minute + 10_000, run=1, acked=4, enqueued=12, items=2)
    at.sample(K, minute + 20_000, run=1, acked=10, enqueued=12, items=5)
    at.sample(K, minute + 40_000, run=2, acked=7, enqueued=9, items=3)
    at.sample(K, minute + MINUTE_MS + 10_000, run=2, acked=9, enqueued=9, items=4)
    fields = {k.decode() for k in r.hkeys(records.minute_key(K, minute // HOUR_MS))}
    slot = str(minute % HOUR_MS // MINUTE_MS)
    assert {slot, f"{slot}.1"} <= fields

    for run, done, items in ((1, [12], 6), (2, [7, 2], 4)):
        got = history.history(r, K, run=run, step="minute")
        assert [v for v in got["done"] if v is not None] == done and got["totals"]["items"] == items, (run, got)
    both = history.history(r, K, since_ms=minute - MINUTE_MS, until_ms=minute + 2 * MINUTE_MS, step="minute")
    assert both["done"][1:3] == [19, 2] and both["runs"][1] == 2
    hours = history.history(r, K, since_ms=minute - HOUR_MS, step="hour")
    assert hours["totals"]["done"] == 21 and hours["totals"]["items"] == 10


def test_the_resolution_follows_the_range(r):
    now = redis_ms(r)
    assert history.choose_step(now - HOUR_MS + 20_000, now, now) == "10s"
    assert history.choose_step(now - 6 * HOUR_MS, now, now) == "minute"
    assert history.choose_step(now - 20 * MINUTE_MS, now, now, run=3) == "minute", "10 s points know no runs"
    assert history.choose_step(now - 3 * DAY_MS, now, now) == "hour"
    assert history.parse_duration("1h30m") == 90 * MINUTE_MS and history.parse_duration("2d") == 2 * DAY_MS
    for bad in ("6x", "", "h", "0m", "-1h"):
        with pytest.raises(ConfigError):
            history.parse_duration(bad)
    with pytest.raises(ConfigError, match="has no run 9"):
        history.history(r, K, run=9)


def test_a_month_of_history_stays_in_bounded_memory(r):
    """A month of a large crawl's samples (8-digit counters), written by history.lua: what
    is left is a day of minutes and a month of hours, each hash compact. The numbers
    docs/dashboard.md gives come from this test (printed)."""
    at = HistoryAt(r)
    now = redis_ms(r)
    start = now - 35 * DAY_MS
    # a sample every minute of the last 26 hours and every hour before (the same records
    # survive as with a sample a minute all month: only the last one of a bucket is kept)
    times = [t for t in range(start, now - 26 * HOUR_MS, HOUR_MS)] + list(range(now - 26 * HOUR_MS, now, MINUTE_MS))
    pipe = r.pipeline(transaction=False)
    for i, t in enumerate(times):
        pipe.hset(
            K.stats,
            mapping={
                "acked": 10_000_000 + i * 97,
                "enqueued": 12_000_000 + i * 101,
                "items": 9_000_000 + i * 89,
                "errors": 100_000 + i,
            },
        )
        at.call(K, t, pipe, run=12)
        if len(pipe) >= 1000:
            pipe.execute()
    pipe.execute()
    keys = [k for k in r.scan_iter(match="*:hist:*")]
    minute_keys = [k for k in keys if b":hist:m:" in k]
    hour_keys = [k for k in keys if b":hist:h:" in k]
    assert 24 <= len(minute_keys) <= 26 and 31 <= len(hour_keys) <= 33
    assert {r.object("encoding", k) for k in keys} <= {b"listpack", b"ziplist"}
    minutes_bytes = sum(r.memory_usage(k) for k in minute_keys)
    hours_bytes = sum(r.memory_usage(k) for k in hour_keys)
    print(
        f"\n[history memory] {len(minute_keys)} minute keys {minutes_bytes:,} B + {len(hour_keys)} hour keys "
        f"{hours_bytes:,} B = {minutes_bytes + hours_bytes:,} B per crawl part"
    )
    assert minutes_bytes + hours_bytes < 160_000

    day = history.history(r, K, since_ms=now - DAY_MS + MINUTE_MS, step="minute")
    assert sum(v is not None for v in day["done"]) >= 1438, "a record for every minute of the last day"
    month = history.history(r, K, since_ms=now - 30 * DAY_MS, step="hour")
    assert sum(v is not None for v in month["done"]) >= 719, "a record for every hour of the last month"
    assert all(v == 97 * 60 for v in month["done"][-20:-2]), "the hour of minute samples: 60 of 97 pages"


def test_status_since_prints_and_serves_the_history(r, redis_url):
    """`status --since 1h` of a crawl that began 40 minutes ago: its rows start when it began,
    none of dashes for the 20 minutes before it existed."""
    now = redis_ms(r)
    t = _two_runs(r, HistoryAt(r), now)
    res = cli(redis_url, "status", "--crawl", "hist", "--since", "1h")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    head = next(line for line in lines if line.startswith("history, "))
    assert re.fullmatch(
        r"history, since the crawl began, 4[01]m\d\ds ago \(of the last 1 h asked\): 135 pages, "
        r"52 items, 1 errors, 230 admitted; per 2 min \(minute records\)",
        head,
    ), head
    table = lines[lines.index(head) + 1 :]
    assert table[0].split() == [
        "from",
        "pages",
        "items",
        "errors",
        "admitted",
        "queued",
        "in",
        "flight",
        "dead",
        "nodes",
    ]
    rows = table[1:-1]
    assert rows[0].split()[0] == time.strftime("%H:%M", time.localtime(t["start1"] / 1000)), "the first row: it began"
    assert rows[0].split()[1] != "-" and len(rows) <= 21
    assert sum(int(row.split()[1].replace(",", "")) for row in rows if row.split()[1] != "-") == 135
    assert "pages/min" in table[-1]

    got = json.loads(cli(redis_url, "status", "--crawl", "hist", "--since", "1h", "--json").output)
    assert got["since"]["step"] == "minute" and got["since"]["totals"]["done"] == 135
    bad = cli(redis_url, "status", "--crawl", "hist", "--since", "6 hours")
    assert bad.exit_code == 1 and "crawlplug: error: '6 hours' is not a duration" in bad.output


def test_the_dashboard_serves_the_history_of_a_range_or_a_run(r):
    now = redis_ms(r)
    t = _two_runs(r, HistoryAt(r), now)
    app = TestClient(create_app(r, K), base_url="http://127.0.0.1")
    got = app.get("/api/history?since=1h&step=minute").json()
    assert got["step"] == "minute" and got["totals"]["done"] == 135 and len(got["t"]) == 61
    one = app.get("/api/history?run=1").json()
    assert one["step"] == "minute" and one["run"] == 1 and one["totals"]["done"] == 105
    ranged = app.get(f"/api/history?since={t['start2']}&until={t['start2'] + 3 * MINUTE_MS}&step=minute").json()
    assert ranged["done"] == [3, 3, 3, 3], "run 2's first minutes, by ms"
    assert app.get("/api/history?since=20m").json()["step"] == "10s", "the last hour: the 10 s points"
    assert app.get("/api/history?since=20m&finest=minute").json()["step"] == "minute"
    legacy = app.get("/api/history").json()
    assert legacy["bucket_seconds"] == 10 and len(legacy["t"]) == 360, "no range asked: the hour of 10 s points"
    for query, said in (
        ("since=6x", "is not a duration"),
        ("run=9", "has no run 9"),
        ("since=1h&step=week", "unknown"),
        ("since=5m&until=1h", "its start must be before its end"),
    ):
        res = app.get(f"/api/history?{query}")
        assert res.status_code == 400 and said in res.json()["error"], (query, res.text)
    runs_listed = app.get("/api/runs").json()
    assert [x["id"] for x in runs_listed["runs"]] == [1, 2] and runs_listed["kept"] == []


def test_a_crawl_begun_in_the_range_shows_no_row_before_its_first_record():
    """A crawl begins when its first node registers, which may be the minute before its
    first record: that minute is no row of dashes in `status --since`."""
    from crawlplug.cli.status import _history_lines

    t0 = 1_700_000_040_000  # a minute boundary
    points: dict = {
        "since": t0 + 58_000,
        "until": t0 + 60_000 + 9_000,
        "began": t0 + 58_000,
        "asked_seconds": 3600,
        "step": "minute",
        "step_seconds": 60,
        "t": [t0, t0 + 60_000],
        "totals": {"done": 32, "items": 20, "errors": 1, "admitted": 32},
        "pages_per_min": [None, 32.0],
    }
    for name, values in {
        "done": [None, 32],
        "admitted": [None, 32],
        "items": [None, 20],
        "errors": [None, 1],
        "queued": [None, 0],
        "in_flight": [None, 0],
        "dead": [None, 0],
        "nodes": [None, 1],
    }.items():
        points[name] = values
    lines = _history_lines(points)
    rows = lines[2:-1]  # after the head and the column names, before the sparkline
    assert len(rows) == 1 and rows[0].split()[1] == "32", lines


def test_a_sample_pipelined_after_the_heartbeat_counts_the_node_on_a_server_holding_only_the_sample(r):
    """A pipeline's calls run in the order sent even on a server that holds some of their
    scripts and not others (another client loaded one): the EVALSHAs it had no script for
    used to be sent again after the others had run, so the history sample ran before the
    heartbeat ahead of it and counted no live node (CI, a sharded crawl on a cluster)."""
    frontier = Frontier(r, K, node_id="a", sampler=records.sample_call)
    frontier.scripts = Scripts(r, functions=False)  # the scripts, not the Functions library (one unit)
    r.script_flush()
    r.script_load(frontier.scripts._scripts["history"].script)  # the sample's script only
    frontier.heartbeat_and_reap([])
    (per_part,) = records.records(r, K, MINUTE_MS, redis_ms(r) - HOUR_MS, redis_ms(r))
    assert per_part[0][1].gauges[3] == 1, "the node the heartbeat ahead of the sample registered"
