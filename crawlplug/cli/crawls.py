"""``crawlplug crawls``: every crawl on a Redis, and the runs of one.

    crawlplug crawls [--json]              # name, run and state, queued, done, nodes, last activity
    crawlplug crawls show CRAWL [--json]   # its runs: started, ended, reason, pages, items, errors

Thin commands over :mod:`crawlplug.crawl.runs`; registered on ``crawlplug.cli.main``.
"""

from __future__ import annotations

import json
from typing import Any

import click

from ..crawl import runs
from ..errors import ConfigError
from ..frontier.keys import CrawlKeys
from ..frontier.store import redis_ms
from ..scrapyd import jobs as ops_jobs
from ..scrapyd import store as jobs
from .common import Cli, fail, main, pass_cli, when


def _ago(ms: int | None, now_ms: int) -> str:
    if ms is None:
        return "-"
    seconds = max(0, (now_ms - ms) // 1000)
    if seconds < 120:
        return f"{seconds}s ago"
    if seconds < 7200:
        return f"{seconds // 60}m ago"
    if seconds < 172800:
        return f"{seconds // 3600}h ago"
    return f"{seconds // 86400}d ago"


@main.group(invoke_without_command=True)
@pass_cli()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def crawls(cli: Cli, as_json: bool) -> None:
    """Every crawl on this Redis: its current run and state, queued, done, live nodes, last activity.

    A crawl is listed once a node or `crawlplug push` started it (the crawl
    registry), and so are crawls made before the registry existed (found by a
    scan, on every primary of a cluster). `crawlplug crawls show CRAWL` lists
    the runs of one. States: running, interrupted (work left, no live node),
    draining, finished, limit (ended by a crawl-wide limit), stopped, starting.
    """
    if click.get_current_context().invoked_subcommand is not None:
        return
    target = cli.server
    rows = runs.crawl_rows(target.client)
    problems: list[str] = []
    for r in rows:
        keys = CrawlKeys(r["crawl"])
        if r["run"] is not None and target.client.exists(keys.jobs):
            problems += ops_jobs.refresh(target.client, keys, run=r["run"], timeout=3.0)
            r["jobs"] = [_job_brief(j) for j in jobs.all_jobs(target.client, keys, run=r["run"])]
    if as_json:
        click.echo(json.dumps({"redis": target.safe_url, "crawls": rows}, indent=2))
        return
    click.echo(f"{len(rows)} crawl{'s' if len(rows) != 1 else ''} on {target.safe_url}")
    if not rows:
        click.echo("  (none yet: a node of a spider, or `crawlplug push --crawl NAME URL`, starts one)")
        return
    now = redis_ms(target.client)
    width = max(len(r["crawl"]) for r in rows)
    click.echo(
        f"  {'crawl'.ljust(width)}  {'run':>4}  {'state':<11}  {'queued':>8}  {'in flight':>9}  "
        f"{'done':>8}  {'nodes':>5}  last activity"
    )
    for r in rows:
        queued = r["queued"] + r["start_entries"]
        click.echo(
            f"  {r['crawl'].ljust(width)}  {r['run'] if r['run'] is not None else '-':>4}  "
            f"{r['state']:<11}  {queued:>8}  {r['in_flight']:>9}  {r['done']:>8}  {r['live_nodes']:>5}  "
            f"{_ago(r['last_activity'], now)}"
        )
        for job in r.get("jobs", []):
            node = f"node {job['node']}" if job.get("node") else "no node yet"
            click.echo(f"  {''.ljust(width)}    Scrapyd {job['daemon']} job {job['id']}: {job['state']}, {node}")
    for problem in dict.fromkeys(problems):
        click.echo(f"crawlplug: could not ask a daemon: {problem}", err=True)


def _job_brief(job: dict[str, Any]) -> dict[str, Any]:
    """A job as `crawlplug crawls` shows it (its daemon's password masked)."""
    return {"id": job["id"], "daemon": ops_jobs.daemon_label(job), "state": job["state"], "node": job.get("node")}


def _job_row(job: dict[str, Any]) -> str:
    parts = [f"Scrapyd {ops_jobs.daemon_label(job)} job {job['id']}", job["state"]]
    if job.get("reason"):
        parts[-1] += f" ({job['reason']})"
    parts.append(f"node {job['node']}" if job.get("node") else "no node")
    parts.append(f"started {when(job.get('started'))}" if job.get("started") else "not started")
    if job.get("ended"):
        parts.append(f"ended {when(job['ended'])}")
    for name in ("pages", "items"):
        if name in job:
            parts.append(f"{name} {job[name]}")
    if job.get("error"):
        parts.append(job["error"])
    return "  ".join(parts)


def _show_row(run: dict[str, Any]) -> str:
    parts = [f"run {run.get('id')}", str(run.get("state", "?"))]
    if run.get("reason") and run.get("reason") != run.get("state"):
        parts.append(f"({run['reason']})")
    if run.get("drained"):
        parts.append("(drained)")
    parts.append(f"started {when(run.get('started'))}")
    parts.append(f"ended {when(run.get('ended'))}" if run.get("ended") else "not ended")
    for name in ("pages", "items", "errors", "dead"):
        if name in run:
            parts.append(f"{name} {run[name]}")
    return "  ".join(parts)


@crawls.command("show")
@pass_cli(crawl_argument="CRAWL")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def crawls_show(cli: Cli, as_json: bool) -> None:
    """The runs of CRAWL, oldest first: state, reason, started, ended, pages, items, errors."""
    if not cli.crawl:
        fail("which crawl? `crawlplug crawls show CRAWL` (`crawlplug crawls` lists them)")
    try:
        keys = CrawlKeys(cli.crawl)
    except ConfigError as exc:
        fail(str(exc))
    target = cli.target
    problems = ops_jobs.refresh(target.client, keys, timeout=3.0)
    history = runs.history(target.client, keys)
    current = runs.view(target.client, keys)
    by_run = ops_jobs.per_run(jobs.all_jobs(target.client, keys))
    if as_json:
        for run in history:
            run["jobs"] = [{**j, "daemon": ops_jobs.daemon_label(j)} for j in by_run.get(run.get("id"), [])]
        click.echo(json.dumps({"crawl": keys.crawl, "current": current.as_dict(), "runs": history}, indent=2))
        return
    click.echo(
        f"crawl {keys.crawl!r} on {target.safe_url}: "
        + (f"run {current.id} {current.state}" if current.id is not None else "no run recorded")
    )
    for run in history:
        click.echo(f"  {_show_row(run)}")
        for job in by_run.get(run.get("id"), []):
            click.echo(f"      {_job_row(job)}")
    if None in by_run:  # scheduled for a next run that no node began (none started, or all failed)
        click.echo("  jobs of no run yet:")
        for job in by_run[None]:
            click.echo(f"      {_job_row(job)}")
    for problem in problems:
        click.echo(f"crawlplug: could not ask a daemon: {problem}", err=True)
