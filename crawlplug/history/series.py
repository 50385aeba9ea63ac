"""A crawl's history as numbers per 10 s, minute or hour: one definition for
``crawlplug status --since``, its JSON and the dashboard's charts.

The records (crawlplug.history.store) hold the run's counters as they stood
at the last heartbeat of each minute (hour); a minute's pages are the difference
from the record before it. So:

* a record written twice, or a heartbeat that came twice in a minute, counts nothing
  twice; a minute no node sampled shows nothing (a gap), and what happened in it
  lands in the next sampled minute;
* a new run starts its counters from 0: its first minute counts from 0, and the
  pages the last run finished after its last sample (its summary says how many it
  finished in all) are added to the last minute it was sampled in, so a run's
  minutes add up to its summary;
* the first minute of the range counts from the record before it (looked up to an
  hour back, a day for hours); with none, it counts from 0 if its run began then,
  else it is unknown (None).

Gauges (queued, in flight, dead letters, live nodes) are the last sample's.
Ranges within the last hour can be read at 10 s (the per-10 s ``series`` the
scripts keep for the rates: pages, admissions and gauges, no items or errors).
"""

from __future__ import annotations

import re
from typing import Any

import redis

from ..crawl import registry, runs
from ..errors import ConfigError
from ..frontier.keys import CrawlKeys
from ..frontier.store import redis_ms
from ..ops import status
from . import store as records
from .store import DAY_MS, HOUR_MS, MINUTE_MS

#: The resolutions, by name: their step in ms.
STEPS = {"10s": status.BUCKET_MS, "minute": MINUTE_MS, "hour": HOUR_MS}
#: What each point holds: counts over its step, then gauges at its end.
COUNTS = ("done", "admitted", "items", "errors")
GAUGES = ("queued", "in_flight", "dead", "nodes")
#: The summary fields of a run (crawlplug.crawl.runs.totals) for each record counter.
_SUMMARY = {"acked": "pages", "enqueued": "enqueued", "items": "items", "errors": "errors"}

_UNITS = {"s": 1000, "m": MINUTE_MS, "h": HOUR_MS, "d": DAY_MS, "w": 7 * DAY_MS}
#: One piece of a duration: digits and a unit. A duration is read piece by piece, never by
#: a repeated group (text from Redis, alert rules, is read by it: no backtracking).
_PIECE = re.compile(r"([0-9]{1,15})([smhdw])")


def parse_time(raw: str | None, now_ms: int) -> int | None:
    """A time as the dashboard's and the console's calls give it: ms since the epoch, or a
    duration back from now (6h, 90m); None for none. ConfigError for what is neither."""
    if raw is None or raw == "":
        return None
    if raw.lstrip("-").isdigit():
        return int(raw)
    return now_ms - parse_duration(raw)


def parse_duration(value: str) -> int:
    """``6h``, ``90m``, ``1h30m``, ``2d``, ``1w`` as ms; ConfigError for anything else."""
    text = value.strip().lower()
    pos, ms = 0, 0
    while pos < len(text):
        piece = _PIECE.match(text, pos)
        if piece is None:
            break
        ms += int(piece[1]) * _UNITS[piece[2]]
        pos = piece.end()
    if not text or pos != len(text):
        raise ConfigError(f"{value[:60]!r} is not a duration: a number and a unit, s m h d or w (6h, 90m, 1h30m, 2d)")
    if ms <= 0:
        raise ConfigError(f"{value!r} is not a duration longer than 0")
    return ms


def choose_step(since_ms: int, until_ms: int, now_ms: int, *, run: int | None = None, finest: str = "10s") -> str:
    """The finest resolution kept for [since_ms, until_ms]: 10 s within the last hour (not
    for one run: the 10 s series knows no runs; not if ``finest`` is "minute"), minutes
    within the last day, else hours."""
    ten = run is None and finest == "10s"
    if (
        ten
        and since_ms >= now_ms - status.SERIES_MS - status.BUCKET_MS
        and until_ms - since_ms <= HOUR_MS + status.BUCKET_MS
    ):
        return "10s"
    if since_ms >= now_ms - DAY_MS - MINUTE_MS:  # "the last 24 h" asked a moment ago: still minutes
        return "minute"
    return "hour"


def began(client: redis.Redis, keys: CrawlKeys) -> int | None:
    """When the crawl began on this Redis (ms): the earliest of its registration (its first
    node, or the command that created it) and its runs' starts; None if it has neither.
    A range of the history before it holds nothing to show."""
    entry = registry.entry(client, keys) or {}
    times = [
        t
        for t in (entry.get("created"), *(s.get("started") for s in runs.history(client, keys)))
        if isinstance(t, int) and not isinstance(t, bool) and t > 0
    ]
    return min(times) if times else None


def _run_summaries(client: redis.Redis, keys: CrawlKeys) -> dict[int, dict[str, Any]]:
    return {s["id"]: s for s in runs.history(client, keys) if isinstance(s.get("id"), int)}


def history(
    client: redis.Redis,
    keys: CrawlKeys,
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
    run: int | None = None,
    step: str = "auto",
    finest: str = "10s",
) -> dict[str, Any]:
    """The crawl's points over [since_ms, until_ms] (default: the last hour; with ``run``, that
    run's time) at ``step`` ("10s", "minute", "hour" or "auto": :func:`choose_step`, no finer
    than ``finest``).

    Returns {"step", "step_seconds", "since", "until", "now", "run", "t": bucket starts (ms),
    "runs": the run of each point, "done", "admitted", "items", "errors" (counts per point),
    "queued", "in_flight", "dead", "nodes" (at its end), "pages_per_min", "totals"}; a point
    without a record is None throughout (no node was sampling then)."""
    now = redis_ms(client)
    summaries = _run_summaries(client, keys)
    if run is not None:
        if run not in summaries:
            known = ", ".join(str(r) for r in sorted(summaries)) or "none yet"
            raise ConfigError(f"crawl {keys.crawl!r} has no run {run} (its runs: {known})")
        started, ended = summaries[run].get("started"), summaries[run].get("ended")
        since_ms = since_ms if since_ms is not None else (started if isinstance(started, int) else now - HOUR_MS)
        until_ms = until_ms if until_ms is not None else (ended if isinstance(ended, int) else now)
    until = min(now, until_ms if until_ms is not None else now)
    since = since_ms if since_ms is not None else until - HOUR_MS
    if since >= until:
        raise ConfigError("the range of the history is empty: its start must be before its end")
    if step == "auto":
        step = choose_step(since, until, now, run=run, finest=finest)
    if step not in STEPS or finest not in STEPS:
        raise ConfigError(f"unknown resolution {step if step not in STEPS else finest!r}: 10s, minute, hour or auto")
    if step == "10s":
        if run is not None:
            raise ConfigError("the 10 s points know no runs: give a resolution of minute or hour with a run")
        points = _ten_seconds(client, keys, since, until, now)
    else:
        points = _points(client, keys, STEPS[step], since, until, now, summaries, run)
    # what the points do not keep (items, errors at 10 s) has no total: None, not 0
    totals = {
        name: sum(v for v in points[name] if v is not None) if step != "10s" or name in ("done", "admitted") else None
        for name in COUNTS
    }
    return {
        "step": step,
        "step_seconds": STEPS[step] // 1000,
        "since": since,
        "until": until,
        "now": now,
        "run": run,
        **points,
        "totals": totals,
    }


def _ten_seconds(client: redis.Redis, keys: CrawlKeys, since: int, until: int, now: int) -> dict[str, Any]:
    """The per-10 s series (the last hour only) in the shape of :func:`history`."""
    oldest = now - status.SERIES_MS + status.BUCKET_MS
    out = status.series_points(client, keys, max(since, oldest), until, now)
    n = len(out["t"])
    out["runs"] = [None] * n
    for name in ("items", "errors", "nodes"):
        out[name] = [None] * n
    return out


Key = tuple[int, int | None]  # (bucket start ms, run)


def _points(
    client: redis.Redis,
    keys: CrawlKeys,
    step: int,
    since: int,
    until: int,
    now: int,
    summaries: dict[int, dict[str, Any]],
    only_run: int | None,
) -> dict[str, Any]:
    first = since // step * step
    buckets = list(range(first, until // step * step + 1, step))
    lookback = HOUR_MS if step == MINUTE_MS else DAY_MS
    per_part = records.records(client, keys, step, first - lookback, buckets[-1])
    counts: dict[Key, list[int | None]] = {}
    gauges: dict[Key, list[tuple[int | None, ...]]] = {}
    for i, part in enumerate(per_part):
        prev: records.Record | None = None
        latest: dict[Key, records.Record] = {}
        for bucket, rec in part:
            row = counts.setdefault((bucket, rec.run), [0] * len(records.COUNTERS))
            for c, value in enumerate(rec.counters):
                if prev is not None and rec.run == prev.run and value >= prev.counters[c]:
                    delta: int | None = value - prev.counters[c]
                elif prev is not None or _began_since(summaries, rec.run, bucket - step):
                    delta = value  # a new run (or counters reset): they count from 0
                else:
                    delta = None  # the first record there is, of a run that began before: unknown
                row[c] = None if delta is None or row[c] is None else row[c] + delta  # type: ignore[operator]
            if i == 0:  # runs begun and ended between two records: none of their pages was sampled
                since_prev = prev.at_ms if prev is not None else bucket - step
                for x in _unseen_runs(summaries, rec.run, prev.run if prev else None, since_prev):
                    into = counts.setdefault((bucket, x), [0] * len(records.COUNTERS))
                    for c, name in enumerate(records.COUNTERS):
                        into[c] = (into[c] or 0) + _final(summaries[x], name)
            latest[(bucket, rec.run)] = rec
            prev = rec
        for key, rec in latest.items():
            gauges.setdefault(key, []).append(rec.gauges)
    _add_run_tails(per_part, counts, summaries, buckets[-1] + step)

    base_runs: dict[int, list[int | None]] = {}  # bucket -> the runs the crawl's own keys sampled in it, in order
    for bucket, rec in per_part[0] if per_part else []:
        if rec.run not in base_runs.setdefault(bucket, []):
            base_runs[bucket].append(rec.run)
    for bucket, run in counts:  # an unseen run shows in the bucket it was found in
        if bucket in base_runs and run not in base_runs[bucket]:
            base_runs[bucket].insert(0, run)
    out: dict[str, Any] = {"t": buckets, "runs": []}
    for name in (*COUNTS, *GAUGES, "pages_per_min"):
        out[name] = []
    for bucket in buckets:
        shown = [r for r in base_runs.get(bucket, []) if only_run is None or r == only_run]
        out["runs"].append(shown[-1] if shown else None)
        for c, name in enumerate(COUNTS):
            known = [v for v in (counts[(bucket, r)][c] for r in shown) if v is not None]
            out[name].append(sum(known) if known else None)
        last = gauges.get((bucket, shown[-1]), []) if shown else []
        for g, name in enumerate(GAUGES):
            values = [v[g] for v in last if v[g] is not None]
            out[name].append(sum(values) if values else None)
        done = out["done"][-1]
        covered = min(step, max(1000, now - bucket))
        out["pages_per_min"].append(None if done is None else round(done * MINUTE_MS / covered, 1))
    return out


def _final(summary: dict[str, Any], counter: str) -> int:
    value = summary.get(_SUMMARY[counter])
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _began_since(summaries: dict[int, dict[str, Any]], run: int | None, since_ms: int) -> bool:
    began = (summaries.get(run) or {}).get("started") if run is not None else None
    return isinstance(began, int) and began >= since_ms


def _unseen_runs(
    summaries: dict[int, dict[str, Any]], run: int | None, prev_run: int | None, since_ms: int
) -> list[int]:
    """The ended runs between the record of ``prev_run`` (at ``since_ms``; None: none before)
    and one of ``run``: begun after it, ended before, so no record of theirs was kept
    (a run between two heartbeats, at hour resolution one of twenty minutes)."""
    if run is None or run == prev_run:
        return []
    return sorted(
        x
        for x, s in summaries.items()
        if x < run
        and isinstance(s.get("ended"), int)
        and (x > prev_run if prev_run is not None else _began_since(summaries, x, since_ms))
    )


def _add_run_tails(
    per_part: list[list[tuple[int, records.Record]]],
    counts: dict[Key, list[int | None]],
    summaries: dict[int, dict[str, Any]],
    read_until: int,
) -> None:
    """Add to the last record of every run that ended before ``read_until`` what it finished
    after that record: its summary's totals less its last records, summed over the parts."""
    last_bucket: dict[int, int] = {}
    last_counts: dict[int, list[int]] = {}
    for i, part in enumerate(per_part):
        final_rec: dict[int, records.Record] = {}
        for bucket, rec in part:
            if rec.run is not None:
                final_rec[rec.run] = rec
                if i == 0:
                    last_bucket[rec.run] = bucket
        for run, rec in final_rec.items():
            sums = last_counts.setdefault(run, [0] * len(records.COUNTERS))
            for c, value in enumerate(rec.counters):
                sums[c] += value
    for run, bucket in last_bucket.items():
        summary = summaries.get(run) or {}
        ended = summary.get("ended")
        row = counts.get((bucket, run))
        if not isinstance(ended, int) or ended >= read_until or row is None:
            continue  # not over, or over after the records read: later records may follow
        for c, name in enumerate(records.COUNTERS):
            if row[c] is not None:
                row[c] += max(0, _final(summary, name) - last_counts[run][c])  # type: ignore[operator]


# -- as text: a table with a row per step, at most so many rows ---------------------------------


def rows(points: dict[str, Any], max_rows: int = 24) -> list[dict[str, Any]]:
    """The points merged into at most ``max_rows`` rows of equal length: counts added up
    (None when no point of the row had a record), gauges the row's last known ones."""
    n = len(points["t"])
    if n == 0:
        return []
    per = -(-n // max_rows)
    out = []
    for i in range(0, n, per):
        chunk = range(i, min(n, i + per))
        row: dict[str, Any] = {"t": points["t"][i], "points": len(chunk)}
        for name in COUNTS:
            known = [points[name][j] for j in chunk if points[name][j] is not None]
            row[name] = sum(known) if known else None
        for name in GAUGES:
            known = [points[name][j] for j in chunk if points[name][j] is not None]
            row[name] = known[-1] if known else None
        out.append(row)
    return out


def describe_step(points: dict[str, Any], row_points: int) -> str:
    """What a row covers, in words: "per 15 min (minute records)"."""
    names = {"10s": "10 s points", "minute": "minute records", "hour": "hour records"}
    return f"per {span(points['step_seconds'] * row_points)} ({names[points['step']]})"


def span(seconds: int) -> str:
    """A whole number of seconds as the largest unit that divides it: 2 d, 6 h, 15 min, 10 s."""
    for unit, name in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= unit and seconds % unit == 0:
            return f"{seconds // unit} {name}"
    return f"{seconds} s"
