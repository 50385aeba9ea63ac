"""The Scrapyd daemons a Redis's crawls know, and what each has: reachable or not (with
why), its node name, its projects with their versions and spiders, and its pending and
running jobs (every project's), as an operator checks before starting a crawl on them.

A daemon is known by a job a crawl started on it (:mod:`crawlplug.scrapyd.store`) or by
a schedule that starts nodes on it (the callers add those: schedules are a layer above).
Each daemon is asked in a thread of its own with a short timeout, so one that does not
answer costs that timeout once, not once per question."""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis

from ..crawl import registry
from ..errors import ScrapydError
from ..frontier.keys import CrawlKeys
from ..server.clients import mask_url
from . import store
from .daemon import Daemon, normalize

__all__ = ["describe", "describe_known", "job_daemons"]

#: seconds one daemon may take to answer one question here (a listing page waits for them)
TIMEOUT = 5.0


def job_daemons(client: redis.Redis, prefix: str = "crawlplug") -> dict[str, set[str]]:
    """Daemon URL -> the crawls that started jobs on it (their recorded jobs)."""
    out: dict[str, set[str]] = {}
    for crawl in registry.known_crawls(client, prefix):
        for job in store.all_jobs(client, CrawlKeys(crawl, prefix)):
            url = str(job.get("daemon") or "")
            if url:
                out.setdefault(url, set()).add(crawl)
    return out


def _one(url: str, timeout: float) -> dict[str, Any]:
    try:
        daemon = Daemon.of(url, timeout)
    except ScrapydError as exc:
        return {"url": mask_url(url), "reachable": False, "error": str(exc)}
    out: dict[str, Any] = {"url": daemon.label, "reachable": False}
    try:
        status = daemon.status()
        projects = daemon.projects()
        listed = []
        pending: list[dict[str, Any]] = []
        running: list[dict[str, Any]] = []
        for project in projects:
            versions = daemon.versions(project)
            listed.append({"project": project, "versions": versions, "spiders": daemon.spiders(project)})
            for job_id, job in daemon.jobs(project).items():
                row = {"project": project, "spider": job.get("spider"), "job": job_id, "since": job.get("start_time")}
                if job["state"] == "pending":
                    pending.append(row)
                elif job["state"] == "running":
                    running.append({**row, "pid": job.get("pid")})
    except ScrapydError as exc:
        out["error"] = str(exc)
        return out
    out.update(
        reachable=True,
        node_name=status.get("node_name"),
        projects=listed,
        pending=pending,
        running=running,
        finished=int(status.get("finished") or 0),
    )
    return out


def describe(urls: Iterable[str], *, timeout: float = TIMEOUT) -> list[dict[str, Any]]:
    """What each daemon of ``urls`` has (module docstring), in the order given, each once."""
    seen: dict[str, str] = {}
    for url in urls:
        try:
            seen.setdefault(normalize(url), url)
        except ScrapydError:
            seen.setdefault(url, url)  # described as not reachable, with why
    if not seen:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(seen))) as pool:
        return list(pool.map(lambda u: _one(u, timeout), seen))


def describe_known(*known: dict[str, set[str]], timeout: float = TIMEOUT) -> list[dict[str, Any]]:
    """:func:`describe` of the daemons of maps URL -> crawls (:func:`job_daemons`, the
    schedules' plans), one row each (URLs that name one daemon merged), with its ``crawls``."""
    crawls: dict[str, set[str]] = {}
    for mapping in known:
        for url, names in mapping.items():
            try:
                key = normalize(url)
            except ScrapydError:
                key = url
            crawls.setdefault(key, set()).update(names)
    rows = describe(crawls, timeout=timeout)
    for row, names in zip(rows, crawls.values()):
        row["crawls"] = sorted(names)
    return rows
