"""A read-only snapshot of a running crawl: counts, rates, ETA, nodes.

Everything here is read from Redis in a few round trips; nothing is written.
``crawlplug status`` prints it, ``--watch`` redraws it, and the dashboard
serves it, so the three say the same: every rate is defined once, by
:func:`rates`, and every sentence about a rate, an ETA or a node's state is
made here (:func:`rate_text`, :func:`eta`) or in :mod:`crawlplug.ops.nodes`.

* Rates come from the ``series`` hash: requests finished and admitted per
  10 s (admit.lua), and the span the crawl has been busy, first admission to
  last ack, so a 9-second crawl is measured over its 9 seconds, not over a
  five-minute window it never filled.
* The ETA comes from the work left (queued, in flight, start entries waiting)
  as the nodes' heartbeats sample it (reap.lua): how fast it shrank lately.
* Nodes (:mod:`crawlplug.ops.nodes`): live, "silent" once a heartbeat is
  late, "dead" after it expired, with what became of its leases, until the next run begins (an
  hour at most).
* Failures: the run's ``errors`` counter, the failed requests as crawlplug.failures
  defines them (HTTP 400 and more, download errors after retries, callbacks that
  raised; robots.txt is no page), which every node adds with its heartbeat: the one
  number ``status``, ``status --since``, the run summaries, the ``error_rate`` alert
  and the metrics show.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import redis

from ..crawl import Crawl, runs, views
from ..crawl.nodes import live_of
from ..frontier.keys import CrawlKeys
from ..frontier.store import redis_ms, text
from ..server.memory import memory as redis_memory
from ..stats import crawl_stats
from .nodes import expired_leases, held, nodes

BUCKET_MS = 10_000
#: The current rate is taken over the last minute (or since the run started, if later).
RATE_WINDOW_MS = 60_000
#: The ETA follows the work left over about the last half minute, as reap.lua samples
#: it (the last sample of every 5 s slot), from a sample at least ETA_MIN_AGE_MS old.
ETA_WINDOW_MS = 30_000
SAMPLE_MS = 5_000
ETA_MIN_AGE_MS = 2_000
#: How far back the series goes (reap.lua trims older buckets).
SERIES_MS = 3_600_000
#: admit.lua: a crawl idle this long starts a new busy span.
SPAN_GAP_MS = 60_000
#: The run's counter of failed requests (heartbeat.lua adds each node's crawlplug/failed to it).
FAILED_COUNTER = "errors"


def _series_values(client: redis.Redis, keys: CrawlKeys, fields: list[str]) -> list[int | None]:
    """``fields`` of the crawl's series hash, summed over its shards (None: in none of them)."""
    out: list[int | None] = [None] * len(fields)
    for values in views.series_per_part(client, keys, fields):
        for i, value in enumerate(values):
            if value is not None:
                out[i] = (out[i] or 0) + int(value)
    return out


def _series(client: redis.Redis, keys: CrawlKeys, now_ms: int, minutes: int) -> dict[str, list[int]]:
    """Per-minute acked/enqueued counts, oldest first, the current (partial) minute excluded."""
    last = now_ms // BUCKET_MS  # the current, incomplete bucket
    buckets = list(range(last - minutes * 6, last))
    fields = [f"a:{b}" for b in buckets] + [f"e:{b}" for b in buckets]
    values = [v or 0 for v in _series_values(client, keys, fields)]
    n = len(buckets)
    acked, enqueued = values[:n], values[n:]
    per_min = lambda xs: [sum(xs[i : i + 6]) for i in range(0, n, 6)]
    return {"acked": per_min(acked), "enqueued": per_min(enqueued)}


# -- rates: one definition -------------------------------------------------------------------


@dataclass
class Rates:
    """The crawl's rates at ``now_ms``, as :func:`rates` defines them."""

    now_ms: int
    #: requests finished per minute over [since_ms, until_ms] (the last minute of the run)
    pages_per_min: float
    #: requests admitted per minute over the same window
    admitted_per_min: float
    since_ms: int | None
    until_ms: int | None
    #: pages finished in the last 60 s (whole buckets, the current one included)
    pages_last_min: int
    #: the busy span the rates belong to: the run's start (given, else the first admission
    #: of the current span, else the first busy bucket of the hour) and its last activity
    run_start_ms: int | None
    run_end_ms: int | None
    #: pages finished in the run (within the hour the series keeps)
    run_pages: int
    #: True when nothing is left to do: the window ends at the run's last activity
    finished: bool

    @property
    def window_seconds(self) -> float:
        if self.since_ms is None or self.until_ms is None:
            return 0.0
        return max(0.0, (self.until_ms - self.since_ms) / 1000)

    @property
    def run_seconds(self) -> float:
        if self.run_start_ms is None or self.run_end_ms is None:
            return 0.0
        return max(0.0, (self.run_end_ms - self.run_start_ms) / 1000)

    @property
    def run_pages_per_min(self) -> float:
        seconds = self.run_seconds
        return self.run_pages * 60 / seconds if seconds >= 1 else 0.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("now_ms")
        out["pages_per_min"] = round(self.pages_per_min, 1)
        out["admitted_per_min"] = round(self.admitted_per_min, 1)
        out["window_seconds"] = round(self.window_seconds, 1)
        out["run_seconds"] = round(self.run_seconds, 1)
        out["run_pages_per_min"] = round(self.run_pages_per_min, 1)
        out["text"] = rate_text(self)
        return out


def _busy_span(client: redis.Redis, keys: CrawlKeys) -> tuple[int | None, int | None]:
    """(first admission, last activity) of the crawl's current busy span, over its shards."""
    spans = []
    for start, end in views.series_per_part(client, keys, ["busy_from", "busy_to"]):
        if start is not None and end is not None:
            spans.append((int(start), int(end)))
    if not spans:
        return None, None
    end = max(e for _, e in spans)
    # a shard idle for longer than the gap belongs to an earlier span
    start = min(s for s, e in spans if e >= end - SPAN_GAP_MS)
    return start, end


def _counts(
    client: redis.Redis, keys: CrawlKeys, t0: int, t1: int, now_ms: int, *, whole_first: bool, whole_last: bool
) -> tuple[float, float]:
    """(finished, admitted) between ``t0`` and ``t1`` (ms) from the 10 s buckets. A bucket
    partly inside counts for the part inside (the current one for the time it covered),
    except the first (last) one when ``t0`` (``t1``) is where activity began (ended)."""
    if t1 <= t0:
        return 0.0, 0.0
    buckets = list(range(t0 // BUCKET_MS, t1 // BUCKET_MS + 1))
    values = _series_values(client, keys, [f"a:{b}" for b in buckets] + [f"e:{b}" for b in buckets])
    n = len(buckets)
    done = admitted = 0.0
    for i, b in enumerate(buckets):
        lo, hi = b * BUCKET_MS, min((b + 1) * BUCKET_MS, max(now_ms, b * BUCKET_MS + 1))
        inside = max(0, min(hi, t1) - max(lo, t0))
        share = inside / (hi - lo)
        if (i == 0 and whole_first) or (i == n - 1 and whole_last):
            share = 1.0
        done += (values[i] or 0) * share
        admitted += (values[n + i] or 0) * share
    return done, admitted


def rates(
    client: redis.Redis, keys: CrawlKeys, now_ms: int, *, start_ms: int | None = None, finished: bool = False
) -> Rates:
    """The crawl's rates: the one definition the status, its JSON and the dashboard show.

    ``pages_per_min`` is the requests finished per minute over the last minute of
    the run: [max(run start, end - 60 s), end], where end is now, or the run's last
    activity when ``finished`` (nothing left to do). The run starts at ``start_ms``
    if given (a run's own start time), else at the first admission of the crawl's
    current busy span (admit.lua), else at the first busy bucket of the hour.
    """
    span_start, span_end = _busy_span(client, keys)
    start = start_ms if start_ms is not None else span_start
    last_bucket = now_ms // BUCKET_MS
    if start is None or span_end is None:  # no span recorded: the first and last busy buckets
        buckets = list(range(last_bucket - SERIES_MS // BUCKET_MS + 1, last_bucket + 1))
        values = _series_values(client, keys, [f"a:{b}" for b in buckets] + [f"e:{b}" for b in buckets])
        n = len(buckets)
        busy = [i for i in range(n) if values[i] or values[n + i]]
        if not busy:
            return Rates(now_ms, 0.0, 0.0, None, None, 0, start, None, 0, finished)
        start = start if start is not None else buckets[busy[0]] * BUCKET_MS
        span_end = min(now_ms, (buckets[busy[-1]] + 1) * BUCKET_MS)
    end = min(now_ms, span_end) if finished else now_ms
    end = max(end, start)
    since = max(start, end - RATE_WINDOW_MS)
    whole_last = finished  # the run's last activity is inside the last bucket
    done, admitted = _counts(client, keys, since, end, now_ms, whole_first=since == start, whole_last=whole_last)
    seconds = max(1.0, (end - since) / 1000)  # a run younger than a second: not a rate yet

    def per_min(count: float) -> float:
        return count * 60 / seconds

    run_done, _ = _counts(client, keys, start, end, now_ms, whole_first=True, whole_last=whole_last)
    minute = _series_values(client, keys, [f"a:{b}" for b in range(last_bucket - 5, last_bucket + 1)])
    return Rates(
        now_ms=now_ms,
        pages_per_min=per_min(done),
        admitted_per_min=per_min(admitted),
        since_ms=since,
        until_ms=end,
        pages_last_min=sum(v or 0 for v in minute),
        run_start_ms=start,
        run_end_ms=min(now_ms, span_end) if finished else end,
        run_pages=round(run_done),
        finished=finished,
    )


def rate_text(r: Rates) -> str:
    """What :func:`rates` measured, in words: the number and what it is taken over."""
    if r.since_ms is None:
        return "no request finished yet"
    rate = f"{r.pages_per_min:,.0f} pages/min"
    window = duration(r.window_seconds)
    if r.finished:
        ago = duration(max(0.0, (r.now_ms - (r.run_end_ms or r.now_ms)) / 1000))
        if r.window_seconds >= r.run_seconds - 0.5:
            return f"{rate} over its {window} run ({r.run_pages:,} pages; finished {ago} ago)"
        return (
            f"{rate} over the last minute of its {duration(r.run_seconds)} run "
            f"({r.run_pages:,} pages; finished {ago} ago)"
        )
    if (r.since_ms or 0) > (r.run_start_ms or 0) or r.window_seconds >= RATE_WINDOW_MS / 1000 - 0.5:
        return f"{rate} over the last minute"
    return f"{rate} over {window}, since the crawl started"


# -- the ETA -------------------------------------------------------------------------------------


def _left_samples(client: redis.Redis, keys: CrawlKeys, now_ms: int, window_ms: int) -> list[tuple[int, int]]:
    """(time ms, work left) as the heartbeats sampled it, oldest first, over ``window_ms``
    (the last sample of each 5 s slot, summed over the shards)."""
    last = now_ms // SAMPLE_MS
    fields = [f"r:{b}" for b in range(last - window_ms // SAMPLE_MS - 1, last + 1)]
    merged: dict[int, tuple[int, int]] = {}
    for values in views.series_per_part(client, keys, fields):
        for i, raw in enumerate(values):
            if raw is None:
                continue
            at, _, left = text(raw).partition(" ")
            if not (at.isdigit() and left.isdigit()):
                continue
            t, n = merged.get(i, (0, 0))
            merged[i] = (max(t, int(at)), n + int(left))
    return [merged[i] for i in sorted(merged)]


def eta(
    client: redis.Redis,
    keys: CrawlKeys,
    now_ms: int,
    left: int,
    *,
    paused: bool,
    live_nodes: int,
    run_start_ms: int | None = None,
) -> dict[str, Any]:
    """{"seconds": ETA or None, "drain_per_min": how fast the work left shrank, "text"}.

    The trend is the work left now against the most of it sampled over about the last
    half minute (at least 2 s ago; since the run started if that is later): a crawl
    that found its pages and now drains them gets an ETA, one that still finds pages
    faster than it crawls them says so.
    """
    if left == 0:
        return {"seconds": 0, "drain_per_min": None, "text": "nothing left"}
    if paused:
        return {"seconds": None, "drain_per_min": None, "text": "paused (crawlplug resume to go on)"}
    if live_nodes == 0:
        return {"seconds": None, "drain_per_min": None, "text": "no live node is crawling"}
    usable = [
        (t, n)
        for t, n in _left_samples(client, keys, now_ms, ETA_WINDOW_MS)
        if now_ms - t >= ETA_MIN_AGE_MS and (run_start_ms is None or t >= run_start_ms)
    ]
    if not usable:
        return {"seconds": None, "drain_per_min": None, "text": "unknown: too early to tell"}
    # from the most work left in the window: a crawl that found its pages and now drains
    # them is measured from its peak, not from a start when its queue was still growing
    then, before = max(usable, key=lambda s: (s[1], -s[0]))
    seconds = (now_ms - then) / 1000
    drain = (before - left) * 60 / seconds
    over = duration(seconds)
    if drain > 0:
        return {
            "seconds": max(1, round(left / drain * 60)),
            "drain_per_min": round(drain, 1),
            "text": f"at the pace of the last {over} (work left {before:,} -> {left:,})",
        }
    first, oldest = usable[0]
    over = duration((now_ms - first) / 1000)
    if oldest == left:
        what = f"unknown: the work left has not moved in the last {over} ({left:,})"
    else:
        what = (
            f"unknown: the work left grew in the last {over} ({oldest:,} -> {left:,}): pages are found "
            "faster than crawled"
        )
    return {"seconds": None, "drain_per_min": round(drain, 1), "text": what}


# -- the snapshot ----------------------------------------------------------------------------------


def snapshot(
    client: redis.Redis, keys: CrawlKeys, *, history_minutes: int = 15, start_ms: int | None = None
) -> dict[str, Any]:
    """The crawl's state now: see the module docstring. ``start_ms``: the run's start,
    when the caller knows it (rates are taken since then)."""
    crawl = Crawl(client, keys)
    st = crawl.status()
    now_ms = redis_ms(client)
    series = _series(client, keys, now_ms, history_minutes)
    stats = st["stats"]
    done = stats.get("acked", 0)
    left = st["queued"] + st["in_flight"] + st.get("start_urls", 0)
    run = runs.view(client, keys, live_nodes=len(live_of(st["nodes"], now_ms)), work=left)
    r = rates(client, keys, now_ms, start_ms=start_ms, finished=left == 0)
    node_list = nodes(client, keys, st["nodes"], now_ms)
    live = sum(1 for n in node_list if n["state"] == "live")
    paused = crawl.paused_info()
    eta_info = eta(client, keys, now_ms, left, paused=paused is not None, live_nodes=live, run_start_ms=r.run_start_ms)
    scrapy_stats = crawl_stats(client, keys)
    failed = int(stats.get(FAILED_COUNTER, 0) or 0)
    return {
        "crawl": keys.crawl,
        "now_ms": now_ms,
        "run": run.as_dict(),
        "paused": paused,
        "queued": st["queued"],
        "start_urls": st.get("start_urls", 0),
        "in_flight": st["in_flight"],
        "seen": st["seen"],
        "done": done,
        "failed": failed,
        "dead": st["dead"],
        "domains": st.get("domains", 0),
        "shards": st.get("shards"),  # a sharded crawl: queued, in flight, dead per shard
        "redis_memory": redis_memory(client),  # used, max, policy, ratio, nearly_full (None: no INFO)
        "pages_per_min": round(r.pages_per_min, 1),
        "pages_last_min": r.pages_last_min,
        "net_drain_per_min": eta_info["drain_per_min"],
        "eta_seconds": eta_info["seconds"],
        "eta_text": eta_info["text"],
        "rate": r.as_dict(),
        "held": held(node_list, expired_leases(client, keys, now_ms), live),
        "history": {"minutes": history_minutes, **series},
        "counters": dict(sorted(stats.items())),
        "scrapy_stats": scrapy_stats,
        "live_nodes": live,
        "nodes": node_list,
    }


def history(client: redis.Redis, keys: CrawlKeys, minutes: int = 60) -> dict[str, Any]:
    """Per-10 s points of the last ``minutes``: finished and admitted requests (counts per
    bucket, and ``pages_per_min``: finished per minute over the time each bucket covered,
    the current one so far), queued, in flight and dead letters (sampled by the nodes'
    heartbeats; None where no node was running)."""
    now_ms = redis_ms(client)
    last = now_ms // BUCKET_MS
    return series_points(client, keys, (last - minutes * 6 + 1) * BUCKET_MS, now_ms, now_ms)


def series_points(client: redis.Redis, keys: CrawlKeys, since_ms: int, until_ms: int, now_ms: int) -> dict[str, Any]:
    """:func:`history`'s points for the 10 s buckets starting in [since_ms, until_ms] (the
    series keeps the last hour: older buckets read as empty)."""
    buckets = list(range(since_ms // BUCKET_MS, until_ms // BUCKET_MS + 1))
    names = {"a": "done", "e": "admitted", "q": "queued", "f": "in_flight", "x": "dead"}
    fields = [f"{p}:{b}" for p in names for b in buckets]
    values = _series_values(client, keys, fields)
    n = len(buckets)
    out: dict[str, Any] = {"bucket_seconds": BUCKET_MS // 1000, "t": [b * BUCKET_MS for b in buckets]}
    for i, (prefix, name) in enumerate(names.items()):
        chunk = values[i * n : (i + 1) * n]
        if prefix in "ae":
            out[name] = [int(v or 0) for v in chunk]
        else:
            out[name] = [None if v is None else int(v) for v in chunk]
    covered = [min(BUCKET_MS, max(1, now_ms - b * BUCKET_MS)) for b in buckets]
    out["pages_per_min"] = [round(d * 60_000 / c) for d, c in zip(out["done"], covered)]
    return out


def duration(seconds: float | None) -> str:
    """1h02m, 3m05s, 42s; "-" when unknown."""
    if seconds is None:
        return "-"
    seconds = round(max(0.0, seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"
