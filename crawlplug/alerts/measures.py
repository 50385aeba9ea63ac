"""What alert rules watch: a fixed list of metrics, each computed from the crawl's status
snapshot (:func:`crawlplug.ops.status.snapshot`, the numbers ``crawlplug status`` shows),
or :class:`Unknown` with why when it cannot be computed now (crawlplug.alerts.rules reads
rules and evaluates them over these)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from ..crawl import runs
from ..frontier.keys import CrawlKeys
from ..ops import status
from ..pipelines.sqlitems import kept_report

#: A window's bounds (the site's minutes are kept a day: crawlplug.sites.minutes)
MINUTE_MS, DAY_MS = 60_000, 86_400_000

__all__ = [
    "DAY_MS",
    "METRICS",
    "MINUTE_MS",
    "NO_SCRAPY_STATS",
    "RUN_END_STATES",
    "RUN_METRICS",
    "WINDOWED",
    "Metric",
    "Unknown",
    "run_summaries",
    "run_value",
]


class Unknown(str):
    """What a metric gives when it cannot be evaluated now: the reason, in words."""


Metric = Callable[[redis.Redis, CrawlKeys, dict[str, Any], "str | None"], "float | Unknown"]

#: Why a metric of the crawl-wide Scrapy stats cannot be evaluated when there are none.
NO_SCRAPY_STATS = (
    "no crawl-wide Scrapy stats in Redis: the nodes keep them with STATS_CLASS = "
    "'crawlplug.stats.RedisStatsCollector', which the add-on sets unless the project "
    "names another"
)


def _error_rate(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | Unknown:
    # the run's errors counter, which every node's heartbeat adds to (crawlplug.failures)
    return round(snap["failed"] / snap["done"], 4) if snap["done"] else 0.0


def _dead_growth(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | Unknown:
    now = snap["now_ms"]
    sampled = [d for d in status.series_points(client, keys, now - 60_000, now, now)["dead"] if d is not None]
    return float(snap["dead"] - sampled[0]) if sampled else 0.0


def _no_progress(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | Unknown:
    if snap["queued"] + snap["in_flight"] + snap["start_urls"] == 0:
        return 0.0
    now = snap["now_ms"]
    points = status.series_points(client, keys, now - status.SERIES_MS + status.BUCKET_MS, now, now)
    done_at = [t for t, d in zip(points["t"], points["done"]) if d]
    if done_at:
        last = min(now, done_at[-1] + status.BUCKET_MS)
    else:
        last = snap["run"].get("started") or (now - status.SERIES_MS)
    return round(max(0, now - last) / 60_000, 2)


def _silent_nodes(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | Unknown:
    return float(sum(1 for node in snap["nodes"] if node["state"] != "live"))


def _null_rate(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | Unknown:
    site, _, field = (arg or "").rpartition(".")
    stats = snap["scrapy_stats"]
    if not stats:
        return Unknown(NO_SCRAPY_STATS)
    counts = {
        what: int(stats.get(f"site/{site}/field/{field}/{what}", 0) or 0)
        for what in ("filled", "missing", "invalid", "default")
    }
    total = sum(counts.values())
    if not total:
        return Unknown(f"no item of site {site!r} counted for field {field!r} yet (is {arg!r} right?)")
    return round(counts["missing"] / total, 4)


def _limit_reached(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | Unknown:
    return 1.0 if snap["run"].get("state") == "limit" else 0.0


#: The states a run ends in (crawlplug.crawl.runs), what run_end(STATE) takes.
RUN_END_STATES = ("finished", "limit", "stopped", "interrupted")


def _run_end(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | Unknown:
    state = snap["run"].get("state")
    return 1.0 if (state == arg if arg else state in RUN_END_STATES) else 0.0


def _changes(what: str) -> Metric:
    """Items ``what`` (new, changed, gone) in the crawl's last run, from the change report the
    nodes of SQLItemPipeline keep when the run ends (crawlplug.pipelines.sqlitems)."""

    def metric(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | Unknown:
        run = snap["run"].get("id")
        rep = kept_report(client, keys, int(run)) if run else None
        if rep is None:
            return Unknown(
                f"no change report of run {run or '-'} (its items are counted when it ends, by "
                "crawlplug.pipelines.SQLItemPipeline)"
            )
        value = rep["total"][what]
        if not isinstance(value, int):
            return Unknown(f"run {run}: gone items are not checked (the run did not finish, or was incremental)")
        return float(value)

    return metric


# -- the run's own numbers, and the last run's (for last_run.METRIC) --------------------------


def run_summaries(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the current run's summary, the run before it's; {} when there is none), from the runs'
    records (crawlplug.crawl.runs.history: the current run with its totals so far), read once
    per snapshot: every rule of an evaluation shares them."""
    history = snap.get("_runs")
    if history is None:
        history = snap["_runs"] = runs.history(client, keys)
    run_id = snap["run"].get("id")
    current = next((s for s in history if s.get("id") == run_id), {})
    earlier = [s for s in history if run_id is not None and (s.get("id") or 0) < run_id]
    return current, (earlier[-1] if earlier else {})


def run_value(name: str, summary: dict[str, Any], now_ms: int) -> float | Unknown:
    """A run metric (:data:`RUN_METRICS`) of one run's summary."""
    if not summary:
        return Unknown("no such run")
    if name == "duration":
        started = summary.get("started")
        if not started:
            return Unknown("the run has not started")
        return round((int(summary.get("ended") or now_ms) - int(started)) / 1000, 1)
    pages, errors = int(summary.get("pages") or 0), int(summary.get("errors") or 0)
    if name in ("success_rate", "error_rate"):
        if not pages:
            return Unknown("no page done in the run")
        return round((pages - errors) / pages if name == "success_rate" else errors / pages, 4)
    return float(int(summary.get(name) or 0))


def _run_metric(name: str) -> Metric:
    def metric(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | Unknown:
        current, _ = run_summaries(client, keys, snap)
        return run_value(name, current, snap["now_ms"])

    return metric


def _memory(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | Unknown:
    memory = snap["redis_memory"]
    if not memory:
        return Unknown("Redis refused INFO (an ACL user without it): its memory is not known")
    return round(float(memory.get("ratio") or 0.0) * 100, 1)


#: name -> (what it is, the argument it takes or None, how it is computed).
METRICS: dict[str, tuple[str, str | None, Metric]] = {
    "error_rate": (
        "failed requests (crawlplug status's failed: HTTP 400 and more, download errors after retries, "
        "callbacks that raised; robots.txt is no page) per request done in the run",
        None,
        _error_rate,
    ),
    "dead_letters_growth": (
        "dead letters added over the last minute (as the heartbeats sampled them)",
        None,
        _dead_growth,
    ),
    "no_progress_minutes": (
        "minutes since a request last finished, while work is queued, in flight or waiting "
        "in start_urls (0 when there is none)",
        None,
        _no_progress,
    ),
    "silent_nodes": (
        "nodes whose heartbeat is late (silent) or expired (dead, listed until the next run, an hour at most)",
        None,
        _silent_nodes,
    ),
    "null_rate": (
        "share of a site definition's items whose field was null: null_rate(SITE.FIELD) over the run; "
        "null_rate(SITE.FIELD, 10m) over the last 10 minutes (whole minutes, the current one included); "
        "unknown until an item of it is counted",
        "SITE.FIELD",
        _null_rate,
    ),
    "limit_reached": ("1 when the run ended by a limit (run state 'limit'), else 0", None, _limit_reached),
    "run_end": (
        "1 when the crawl's last run ended (run_end), or ended in STATE (finished, limit, stopped, "
        "interrupted): run_end(STATE); else 0",
        "STATE?",
        _run_end,
    ),
    "redis_memory_percent": ("Redis memory used, % of maxmemory (0 when no maxmemory is set)", None, _memory),
    "pages": ("pages done in the run (acknowledged, over every node)", None, _run_metric("pages")),
    "items": ("items scraped in the run, over every node (as their heartbeats count them)", None, _run_metric("items")),
    "errors": ("failed requests in the run", None, _run_metric("errors")),
    "success_rate": ("pages of the run that did not fail, per page done", None, _run_metric("success_rate")),
    "duration": ("seconds since the run began (a run that ended: how long it ran)", None, _run_metric("duration")),
    "new_items": ("items first seen in the last run (items stored by key: SQLItemPipeline)", None, _changes("new")),
    "changed_items": (
        "items of the last run that differ from what the run before saw (items stored by key)",
        None,
        _changes("changed"),
    ),
    "gone_items": (
        "items seen in the last full run that finished before, and not in the last run (items stored by "
        "key; unknown unless the last run finished and was not incremental)",
        None,
        _changes("gone"),
    ),
}


def _null_rate_window(
    client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None, window_ms: int
) -> float | Unknown:
    from ..sites.minutes import null_rate  # noqa: PLC0415 - the [sites] extra's package, read only here

    site, _, field = (arg or "").rpartition(".")
    rate = null_rate(client, keys, site, field, window_ms, snap["now_ms"])
    if rate is None:
        return Unknown(f"no item of site {site!r} counted for field {field!r} in the window (is {arg!r} right?)")
    return rate


#: Metrics that take a window as a second argument: name -> f(client, keys, snapshot, arg, window ms).
WINDOWED: dict[str, Callable[[redis.Redis, CrawlKeys, dict[str, Any], str | None, int], float | Unknown]] = {
    "null_rate": _null_rate_window
}
#: Metrics of one run that last_run.METRIC reads of the run before the current one.
RUN_METRICS = frozenset({"pages", "items", "errors", "success_rate", "error_rate", "duration"})
