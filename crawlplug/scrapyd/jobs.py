"""The Scrapyd jobs of a crawl, as operators see and end them.

* :func:`refresh` asks each daemon (``listjobs.json``) what became of the crawl's
  jobs that have not ended, and records its answer (crawlplug.scrapyd.store);
* :func:`cancel_jobs` ends a run's jobs that do not end by themselves within a
  grace time (``cancel.json``): what ``crawlplug stop`` does after it stopped the
  run, and ``crawlplug scrapyd cancel`` alone;
* :func:`per_run` groups the jobs by run and node for ``crawlplug crawls show``.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import redis

from ..errors import ScrapydError
from ..frontier.keys import CrawlKeys
from ..frontier.store import redis_ms
from ..server.clients import mask_url
from . import store as jobs
from .daemon import Daemon

logger = logging.getLogger(__name__)


def refresh(
    client: redis.Redis, keys: CrawlKeys, *, run: int | None = None, timeout: float = 5.0, only: set[str] | None = None
) -> list[str]:
    """Record what each daemon says of the crawl's open jobs (of ``run``, or the jobs named in
    ``only``); returns one line per daemon that could not be asked. A job a daemon no longer
    lists (it keeps ``finished_to_keep`` finished jobs, and forgets them all when restarted)
    is recorded as ``unknown``."""
    open_jobs = [
        j
        for j in jobs.all_jobs(client, keys, run=run)
        if j["state"] in jobs.OPEN_STATES and (only is None or j["id"] in only)
    ]
    by_daemon: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for job in open_jobs:
        if job.get("daemon"):
            by_daemon[(job["daemon"], job.get("project", "default"))].append(job)
    problems = []
    now = redis_ms(client)
    for (url, project), group in by_daemon.items():
        try:
            listed = Daemon(url, timeout).jobs(project)
        except ScrapydError as exc:
            problems.append(str(exc))
            continue
        for job in group:
            seen = listed.get(job["id"])
            fields: dict[str, Any] = {"checked": now}
            if seen is None:
                fields["daemon_state"] = "unknown" if job.get("daemon_state") != "cancelled" else "cancelled"
            else:
                fields.update(
                    daemon_state=seen["state"],
                    daemon_pid=seen.get("pid"),
                    daemon_start=seen.get("start_time"),
                    daemon_end=seen.get("end_time"),
                )
            jobs.update(client, keys, job["id"], fields)
    return problems


@dataclass
class Cancelled:
    """What :func:`cancel_jobs` did."""

    ended: list[str] = field(default_factory=list)  #: jobs that ended by themselves within the grace time
    removed: list[str] = field(default_factory=list)  #: pending jobs removed from the daemon's queue
    signalled: list[str] = field(default_factory=list)  #: running jobs sent the signal
    ended_after: list[str] = field(default_factory=list)  #: signalled jobs that then ended
    still_running: list[str] = field(default_factory=list)  #: signalled jobs still running after the wait
    gone: list[str] = field(default_factory=list)  #: jobs the daemon did not have any more
    problems: list[str] = field(default_factory=list)  #: daemons that could not be asked

    def lines(self) -> list[str]:
        said = [
            (self.ended, "ended by themselves within the grace time"),
            (self.removed, "were waiting on their daemon and were removed (cancel.json)"),
            (self.signalled, "were running and were sent the signal (cancel.json)"),
            (self.ended_after, "ended after the signal"),
            (self.still_running, "still run after the signal (`crawlplug scrapyd cancel --signal KILL` ends them)"),
            (self.gone, "were no longer known to their daemon"),
        ]
        out = [f"{len(ids)} job{'s' if len(ids) != 1 else ''} {what}: {', '.join(ids)}" for ids, what in said if ids]
        return out + [f"could not ask: {p}" for p in self.problems]


def open_jobs(client: redis.Redis, keys: CrawlKeys, *, run: int | None = None) -> list[dict[str, Any]]:
    """The crawl's Scrapyd jobs (of ``run``, default every run) that have not ended, as recorded."""
    return _open(client, keys, run, None)


def _open(client: redis.Redis, keys: CrawlKeys, run: int | None, ids: set[str] | None) -> list[dict[str, Any]]:
    return [
        j
        for j in jobs.all_jobs(client, keys, run=run)
        if j["state"] in jobs.OPEN_STATES and (ids is None or j["id"] in ids)
    ]


def _wait(
    client: redis.Redis,
    keys: CrawlKeys,
    run: int | None,
    ids: set[str],
    seconds: float,
    poll: float,
    problems: list[str],
) -> set[str]:
    """Wait up to ``seconds`` for the jobs ``ids`` to end; returns those still open."""
    deadline = time.monotonic() + seconds
    while True:
        problems[:] = refresh(client, keys, run=run, only=ids)
        still = {j["id"] for j in _open(client, keys, run, ids)}
        if not still or time.monotonic() >= deadline:
            return still
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())))


def cancel_jobs(
    client: redis.Redis,
    keys: CrawlKeys,
    *,
    grace: float,
    run: int | None = None,
    signal: str = "TERM",
    wait_after: float | None = None,
    poll: float = 0.5,
) -> Cancelled:
    """Give the crawl's open jobs (of ``run``, default every run) ``grace`` seconds to end by
    themselves (nodes of a stopped run close at their next heartbeat); cancel the rest with
    ``cancel.json`` (a pending one is removed, a running one is sent ``signal``: TERM makes
    Scrapy close cleanly, giving its leases back), then wait up to ``wait_after`` (default:
    ``grace``) for the signalled ones to end."""
    out = Cancelled()
    ids = {j["id"] for j in _open(client, keys, run, None)}
    if not ids:
        return out
    still = _wait(client, keys, run, ids, grace, poll, out.problems)
    out.ended = sorted(ids - still)
    by_id = {j["id"]: j for j in jobs.all_jobs(client, keys, ids=sorted(still))}
    for job_id in sorted(still):
        job = by_id.get(job_id, {})
        try:
            prev = Daemon(job.get("daemon", ""), 10.0).cancel(job.get("project", "default"), job_id, signal)
        except ScrapydError as exc:
            out.problems.append(str(exc))
            continue
        now = redis_ms(client)
        if prev == "pending":
            jobs.update(client, keys, job_id, {"daemon_state": "cancelled", "cancelled": now})
            out.removed.append(job_id)
        elif prev == "running":
            jobs.update(client, keys, job_id, {"cancelled": now, "cancel_signal": signal})
            out.signalled.append(job_id)
        else:
            out.gone.append(job_id)
    if out.signalled:
        left = _wait(
            client, keys, run, set(out.signalled), grace if wait_after is None else wait_after, poll, out.problems
        )
        out.ended_after = sorted(set(out.signalled) - left)
        out.still_running = sorted(left)
    logger.info("crawlplug: crawl %r: %s", keys.crawl, "; ".join(out.lines()) or "no open job")
    return out


def daemon_label(job: dict[str, Any]) -> str:
    return mask_url(job["daemon"]) if job.get("daemon") else "-"


def per_run(all_jobs: list[dict[str, Any]]) -> dict[int | None, list[dict[str, Any]]]:
    """Run id -> its jobs, in the order they were scheduled."""
    out: dict[int | None, list[dict[str, Any]]] = defaultdict(list)
    for job in all_jobs:
        out[job.get("run") if isinstance(job.get("run"), int) else None].append(job)
    return dict(out)


def summary(all_jobs: list[dict[str, Any]]) -> dict[str, int]:
    """State -> how many jobs are in it."""
    counts: dict[str, int] = defaultdict(int)
    for job in all_jobs:
        counts[job["state"]] += 1
    return dict(counts)


def annotate_nodes(client: redis.Redis, keys: CrawlKeys, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each node row (crawlplug.ops.status) with the Scrapyd job it is, if any:
    ``job`` = {"id", "daemon" (masked), "state"} or None."""
    found = jobs.by_node(client, keys)
    for row in nodes:
        job = found.get(str(row.get("id")))
        row["job"] = None if job is None else {"id": job["id"], "daemon": daemon_label(job), "state": job["state"]}
    return nodes
