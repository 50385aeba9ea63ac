"""``crawlplug start`` and ``crawlplug scrapyd``: a crawl's nodes started and ended through Scrapyd.

    crawlplug start CRAWL --scrapyd URL [URL ...] [--nodes-per-host N] [-s NAME=VALUE] [--new-run]
    crawlplug scrapyd cancel CRAWL [--grace S] [--run N] [--signal TERM]

Thin commands over :mod:`crawlplug.scrapyd.launch` and :mod:`crawlplug.scrapyd.jobs`;
registered on ``crawlplug.cli.main``.
"""

from __future__ import annotations

import json
from typing import Any

import click

from ..access import audit
from ..crawl import registry
from ..errors import ScrapydError
from ..frontier.keys import CrawlKeys
from ..schedules import store as schedule_store
from ..scrapyd import fleet
from ..scrapyd import jobs as ops_jobs
from ..scrapyd import logs as ops_logs
from ..scrapyd.launch import launch
from .common import Cli, Target, echo_counts, fail, main, pass_cli
from .plan import make_plan, plan_options


@main.command("start")
@pass_cli(crawl_argument="CRAWL")
@plan_options
@click.option(
    "--new-run",
    is_flag=True,
    help="Begin a new run now, whatever the state of the last one (a run still running is cut "
    "short: recorded as reset; its live nodes join the new run).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def start(keys: CrawlKeys, target: Target, new_run: bool, as_json: bool, **kw: Any) -> None:
    """Start CRAWL's nodes on Scrapyd daemons: N jobs on each (schedule.json), one crawl.

    Every node gets the settings that make them one crawl: REDIS_URL (the Redis
    every machine reaches: --redis-url, or --node-redis-url as the nodes see it),
    CRAWLPLUG_CRAWL_ID and its Scrapyd job (CRAWLPLUG_SCRAPYD_JOB). A running or
    interrupted run is continued; after a finished one the nodes begin the next;
    a run stopped or ended by a limit stays so unless --new-run. Refuses, starting
    nothing, when the Redis is the embedded one or an address of this machine only
    (loopback or unspecified, in any spelling) while a daemon is on another machine,
    or when a daemon cannot run the spider; warns when a host name resolves to
    loopback here.
    """
    plan = make_plan(target, keys.crawl, kw, new_run=new_run)
    new = not registry.exists(target.client, keys)
    # launch checks first (the Redis reachable from every daemon, each daemon running the
    # spider, the run's state) and raises having written nothing: a refused start creates nothing
    out = launch(
        target.client,
        keys,
        plan,
        by="start",
        warn=lambda warning: click.echo(f"crawlplug: warning: {warning}", err=True),
    )
    created = new and registry.register(target.client, keys)  # its job records are its first keys
    audit.record(
        target.client,
        audit.cli_user(),
        "start",
        keys.crawl,
        {"daemons": plan.daemons, "nodes_per_host": plan.nodes_per_host, "jobs": len(out.jobs)},
        "ok" if not out.refused else f"{len(out.refused)} jobs refused",
    )
    if as_json:
        click.echo(json.dumps({"crawl": keys.crawl, **out.as_dict()}, indent=2, default=str))
    else:
        if created:
            click.echo(f"crawl {keys.crawl!r} is new: created it")
        started = len(out.jobs) - len(out.refused)
        click.echo(f"crawl {keys.crawl!r} on {target.safe_url}: {out.message}")
        click.echo(
            f"  scheduled {started} node{'s' if started != 1 else ''} on {len(plan.daemons)} Scrapyd "
            f"daemon{'s' if len(plan.daemons) != 1 else ''} (spider {plan.spider_name!r}, project "
            f"{plan.project!r}):"
        )
        for job in out.jobs:
            state = "refused" if job.get("daemon_state") == "error" else "scheduled"
            click.echo(f"    {ops_jobs.daemon_label(job)}  job {job['id']}  {state}")
        click.echo(f"  watch them: crawlplug crawls show {keys.crawl}")
    if out.refused:
        fail(f"{len(out.refused)} of {len(out.jobs)} jobs were refused: " + "; ".join(out.refused))


@main.group("scrapyd")
def scrapyd_group() -> None:
    """The Scrapyd jobs of a crawl's nodes (`crawlplug start` starts them)."""


@scrapyd_group.command("cancel")
@pass_cli(crawl_argument="CRAWL")
@click.option(
    "--grace",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds the jobs get to end by themselves before they are cancelled.",
)
@click.option("--run", "run_id", type=int, default=None, help="Only the jobs of this run (default: every open job).")
@click.option(
    "--signal",
    "sig",
    default="TERM",
    show_default=True,
    help="The signal cancel.json sends a running job (TERM: Scrapy closes cleanly; KILL: at once).",
)
def scrapyd_cancel(cli: Cli, grace: float, run_id: int | None, sig: str) -> None:
    """Cancel CRAWL's Scrapyd jobs that do not end by themselves within --grace seconds.

    Pending jobs are removed from their daemon's queue; running ones are sent
    --signal (cancel.json), then given --grace seconds more. It does not stop the
    run: a new node would join it (`crawlplug stop` stops the run, then cancels).
    """
    if grace < 0:
        fail("--grace must be 0 or more seconds")
    keys, target = cli.keys, cli.target  # after the checks of its own arguments
    report = ops_jobs.cancel_jobs(target.client, keys, grace=grace, run=run_id, signal=sig.upper())
    lines = report.lines()
    click.echo(f"crawl {keys.crawl!r}: " + ("no Scrapyd job was open" if not lines else lines[0]))
    for line in lines[1:]:
        click.echo(f"  {line}")
    if report.problems or report.still_running:
        raise SystemExit(1)


@scrapyd_group.command("log")
@pass_cli(crawl_argument="CRAWL")
@click.argument("job")
@click.option("--tail", type=click.IntRange(min=1), default=200, show_default=True, help="The last N lines.")
@click.option("--grep", "search", default=None, metavar="TEXT", help="Only the records holding TEXT (any case).")
@click.option("--json", "as_json", is_flag=True, help="Print the lines and the counts as one JSON object.")
def scrapyd_log(keys: CrawlKeys, target: Target, job: str, tail: int, search: str | None, as_json: bool) -> None:
    """Job JOB's log, read from its Scrapyd daemon (its last megabyte): the last --tail
    lines, then how many records of each level and logger it holds. JOB is a job id
    `crawlplug crawls show CRAWL` lists."""
    try:
        got = ops_logs.job_log(target.client, keys, job, tail=tail, search=search)
    except ScrapydError as exc:
        fail(str(exc))
    if as_json:
        click.echo(json.dumps(got, indent=2))
        return
    for line in got["lines"]:
        click.echo(line)
    click.echo(f"job {job} on Scrapyd {got['daemon']}: {got['records']} records in the part read")
    echo_counts(got["levels"], got["loggers"])


@scrapyd_group.command("daemons")
@pass_cli(crawl_option=False)
@click.argument("urls", nargs=-1, metavar="[URL]...")
@click.option("--json", "as_json", is_flag=True, help="Print every daemon as one JSON object.")
def scrapyd_daemons(target: Target, urls: tuple[str, ...], as_json: bool) -> None:
    """The Scrapyd daemons the crawls on this Redis know (a job started there, a schedule's
    plan), or those given: reachable or not and why, node name, projects with their
    versions and spiders, pending and running jobs. Exit code 1 if one is unreachable."""
    if urls:
        rows = fleet.describe(urls)
    else:
        rows = fleet.describe_known(fleet.job_daemons(target.client), schedule_store.plan_daemons(target.client))
    if as_json:
        click.echo(json.dumps({"daemons": rows}, indent=2))
    elif not rows:
        click.echo("no Scrapyd daemon known: no crawl started jobs or has a schedule (name some: URL...)")
    for row in [] if as_json else rows:
        used = f" (crawls: {', '.join(row['crawls'])})" if row.get("crawls") else ""
        if not row["reachable"]:
            click.echo(f"{row['url']}{used}: UNREACHABLE: {row['error']}")
            continue
        click.echo(
            f"{row['url']}{used}: node {row['node_name']}, {len(row['running'])} running, "
            f"{len(row['pending'])} pending, {row['finished']} finished"
        )
        for p in row["projects"]:
            version = p["versions"][-1] if p["versions"] else "-"
            click.echo(
                f"  project {p['project']} (version {version} of {len(p['versions'])}): {', '.join(p['spiders'])}"
            )
        for job in row["running"] + row["pending"]:
            state = "running" if job in row["running"] else "pending"
            click.echo(f"  {state} {job['project']}/{job['spider']} job {job['job']}")
    if any(not row["reachable"] for row in rows):
        raise SystemExit(1)
