"""``crawlplug schedule`` and ``crawlplug control``: runs started at cron times, and the
process that starts them.

    crawlplug schedule CRAWL --cron "0 2 * * *" --scrapyd URL [...]   # = schedule add
    crawlplug schedule list [CRAWL] [--json]
    crawlplug schedule delete CRAWL NAME
    crawlplug control                         # fires the schedules; run it next to Redis

Thin commands over :mod:`crawlplug.schedules.firing` and :mod:`crawlplug.controlprocess`;
registered on ``crawlplug.cli.main``.
"""

from __future__ import annotations

import json
import logging
import signal
from typing import Any

import click

from .. import defaults
from ..access import audit
from ..controlprocess import LEASE, TICK, Control, utc
from ..crawl import control as runctl
from ..frontier.keys import CrawlKeys
from ..schedules import firing as schedules
from ..schedules import store as stored
from .common import (
    Cli,
    Target,
    create_if_new,
    fail,
    main,
    pass_cli,
)
from .plan import make_plan, plan_options


class _AddByDefault(click.Group):
    """`crawlplug schedule CRAWL --cron ...` is `crawlplug schedule add CRAWL --cron ...`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["add", *args]
        return super().parse_args(ctx, args)


@main.group("schedule", cls=_AddByDefault)
def schedule_group() -> None:
    """Runs started at the times of a cron expression, by `crawlplug control`.

    `crawlplug schedule CRAWL --cron EXPR --scrapyd URL ...` adds one (as
    `schedule add`); `schedule list` and `schedule delete` the others.
    """


@schedule_group.command("add")
@pass_cli(crawl_argument="CRAWL")
@click.option(
    "--cron",
    required=True,
    help="When: five fields (minute hour day month weekday: '0 2 * * *' is 02:00 every day), or six "
    "with seconds last ('* * * * * */30': every 30 seconds).",
)
@click.option("--tz", default="UTC", show_default=True, help="The time zone the cron expression is read in.")
@click.option(
    "--name",
    "schedule_name",
    default="default",
    show_default=True,
    help="The schedule's name (a crawl may have several; the same name replaces it).",
)
@plan_options
def schedule_add(keys: CrawlKeys, target: Target, cron: str, tz: str, schedule_name: str, **kw: Any) -> None:
    """Start a NEW run of CRAWL at the times of --cron, on the --scrapyd daemons.

    At each time the leading `crawlplug control` process begins a new run (the
    last one finished, was stopped or interrupted) and starts the nodes as
    `crawlplug start` does; a run that still runs with live nodes is left to run
    and the firing is skipped, saying so. A time missed while no control process
    ran is fired once when one runs again.
    """
    plan = make_plan(target, keys.crawl, kw)
    from ..scrapyd.launch import check_reach  # noqa: PLC0415

    for warning in check_reach(plan.redis_url, plan.daemons, embedded=plan.embedded):
        click.echo(f"crawlplug: warning: {warning}", err=True)
    spec = schedules.make(target.client, keys, name=schedule_name, cron=cron, tz=tz, plan=plan)
    created = create_if_new(target, keys)
    new = schedules.add(target.client, keys, spec)
    audit.record(
        target.client,
        audit.cli_user(),
        "schedules.add",
        keys.crawl,
        {"name": schedule_name, "cron": cron, "tz": tz, "daemons": plan.daemons},
    )
    if created:
        click.echo(f"crawl {keys.crawl!r} is new: created it")
    click.echo(
        f"{'added' if new else 'replaced'} schedule {schedule_name!r} of crawl {keys.crawl!r}: cron "
        f"'{cron}' ({tz}), {plan.nodes_per_host} node{'s' if plan.nodes_per_host != 1 else ''} on each of "
        f"{len(plan.daemons)} Scrapyd daemon{'s' if len(plan.daemons) != 1 else ''}; next run "
        f"{utc(spec['next'])}"
    )
    if plan.kind:
        click.echo(
            f"  each run it begins is {plan.kind}: "
            + ("pages seen in earlier runs are skipped" if plan.incremental else "every page is fetched again")
        )
    click.echo("  it is fired by `crawlplug control` (run it next to Redis; several may run, one fires)")


def _last(spec: dict[str, Any]) -> str:
    last = spec.get("last")
    if not isinstance(last, dict):
        return "never fired"
    said = last.get("message") or last.get("why") or ""
    run = f", run {last['run']}" if last.get("run") else ""
    return f"last: {last.get('state')} (due {utc(last.get('due'))}{run}){': ' + said if said else ''}"


@schedule_group.command("list")
@pass_cli(crawl_argument="[CRAWL]")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def schedule_list(cli: Cli, as_json: bool) -> None:
    """The schedules of CRAWL, or of every crawl: cron, next time, last firing."""
    target = cli.target
    crawls = [cli.crawl] if cli.crawl else stored.scheduled_crawls(target.client)
    found = {c: stored.all_schedules(target.client, CrawlKeys(c)) for c in crawls}
    if as_json:
        for specs in found.values():
            for spec in specs.values():
                plan = spec.get("plan") or {}
                plan.pop("redis_url", None)  # a password in it is not printed
        fires = {c: stored.fires(target.client, CrawlKeys(c), 20) for c in crawls}
        click.echo(json.dumps({"schedules": found, "fires": fires}, indent=2))
        return
    total = sum(len(s) for s in found.values())
    click.echo(f"{total} schedule{'s' if total != 1 else ''} on {target.safe_url}")
    for crawl_name, specs in found.items():
        paused = runctl.schedules_paused(target.client, CrawlKeys(crawl_name))
        if paused:
            click.echo(f"  {crawl_name}: PAUSED by {paused.get('by')} ({paused.get('why') or 'no reason given'})")
        for spec_name, spec in specs.items():
            if "unreadable" in spec:
                click.echo(f"  {crawl_name}/{spec_name}: unreadable ({spec['unreadable']!r}): delete it")
                continue
            plan = spec.get("plan") or {}
            click.echo(
                f"  {crawl_name}/{spec_name}  cron '{spec.get('cron')}' ({spec.get('tz')})  next "
                f"{utc(spec.get('next'))}  {plan.get('nodes_per_host')} x {len(plan.get('daemons') or [])} "
                f"daemons" + {True: ", incremental", False: ", full"}.get(plan.get("incremental"), "")  # type: ignore[arg-type]
            )
            click.echo(f"    {_last(spec)}")


@schedule_group.command("pause")
@pass_cli(crawl_argument="CRAWL", required=True)
def schedule_pause(keys: CrawlKeys, target: Target) -> None:
    """Hold every schedule of CRAWL: a firing due meanwhile is recorded as skipped."""
    who = audit.cli_user()
    done = runctl.pause_schedules(target.client, keys, by=who.name, why="paused by an operator")
    audit.record(target.client, who, "schedules.pause", keys.crawl, {}, "ok" if done else "already paused")
    if not done:
        paused = runctl.schedules_paused(target.client, keys) or {}
        click.echo(f"the schedules of crawl {keys.crawl!r} were paused already (by {paused.get('by')})")
        return
    click.echo(f"paused the schedules of crawl {keys.crawl!r} (crawlplug schedule resume {keys.crawl} lets them fire)")


@schedule_group.command("resume")
@pass_cli(crawl_argument="CRAWL", required=True)
def schedule_resume(keys: CrawlKeys, target: Target) -> None:
    """Let the schedules of CRAWL fire again (paused by `schedule pause` or an alert rule)."""
    paused = runctl.schedules_paused(target.client, keys)
    done = runctl.resume_schedules(target.client, keys)
    audit.record(target.client, audit.cli_user(), "schedules.resume", keys.crawl, {}, "ok" if done else "not paused")
    if not done:
        click.echo(f"the schedules of crawl {keys.crawl!r} were not paused")
        return
    click.echo(f"the schedules of crawl {keys.crawl!r} fire again (they were paused by {(paused or {}).get('by')})")


@schedule_group.command("delete")
@pass_cli(crawl_argument="CRAWL", required=True)
@click.argument("schedule_name", metavar="NAME", default="default")
def schedule_delete(keys: CrawlKeys, target: Target, schedule_name: str) -> None:
    """Delete schedule NAME ("default" if not given) of CRAWL."""
    deleted = stored.delete(target.client, keys, schedule_name)
    audit.record(
        target.client,
        audit.cli_user(),
        "schedules.delete",
        keys.crawl,
        {"name": schedule_name},
        "ok" if deleted else "no such schedule",
    )
    if not deleted:
        have = ", ".join(stored.all_schedules(target.client, keys)) or "none"
        fail(f"crawl {keys.crawl!r} has no schedule {schedule_name!r} (it has: {have})")
    click.echo(f"deleted schedule {schedule_name!r} of crawl {keys.crawl!r}")


@main.command("control")
@pass_cli()
@click.option("--tick", type=float, default=TICK, show_default=True, help="Seconds between two looks at the schedules.")
@click.option(
    "--lease",
    type=float,
    default=LEASE,
    show_default=True,
    help="Seconds a leader's lease lasts unless renewed: how soon another process takes over from one that died.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve every crawl's Prometheus metrics at http://HOST:PORT/metrics (0: any free port, "
    "printed). Off unless given.",
)
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="Address the metrics listen on.")
@click.option(
    "--top-domains",
    type=click.IntRange(0, 10_000),
    default=defaults.SETTINGS["CRAWLPLUG_METRICS_TOP_DOMAINS"][0],
    show_default=True,
    help="Domains with labels of their own in the metrics; the rest are 'other'.",
)
@click.option(
    "--dashboard-url",
    default="",
    envvar="CRAWLPLUG_DASHBOARD_URL",
    help="The dashboard's address, linked from alert notifications (also CRAWLPLUG_DASHBOARD_URL).",
)
def control(
    cli: Cli,
    tick: float,
    lease: float,
    metrics_port: int | None,
    metrics_host: str,
    top_domains: int,
    dashboard_url: str,
) -> None:
    """The control process: fires every crawl's scheduled runs and evaluates its alert
    rules (crawlplug alerts); with --metrics-port it serves their Prometheus metrics.
    Run it next to Redis.

    Several may run (on one machine or several): for each crawl one leads (a lease
    in Redis with a fencing token) and fires its schedules; if it dies another takes
    over within --lease seconds. A time missed while none ran is fired once. Alert
    rules are led the same way, apart (a dashboard may lead them). Stops on Ctrl-C or
    SIGTERM, handing its leads over at once.
    """
    if tick <= 0 or lease <= 3 * tick:
        fail("--tick must be more than 0 seconds and --lease more than three ticks")
    target = cli.server
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    proc = Control(target.client, lease=lease, tick=tick, dashboard_url=dashboard_url)
    signal.signal(signal.SIGTERM, lambda *_: proc.stop())
    if metrics_port is not None:
        from prometheus_client import start_http_server  # noqa: PLC0415

        from ..crawl.registry import registered_crawls  # noqa: PLC0415
        from ..metrics.exporter import registry  # noqa: PLC0415

        reg = registry(target.client, lambda: [CrawlKeys(c) for c in registered_crawls(target.client)], top_domains)
        try:
            server, _ = start_http_server(metrics_port, metrics_host, registry=reg)
        except OSError as exc:
            fail(f"cannot serve the metrics on {metrics_host}:{metrics_port}: {exc.strerror or exc}")
        click.echo(
            f"crawlplug control: Prometheus metrics at http://{metrics_host}:{server.server_port}/metrics", err=True
        )
    click.echo(
        f"crawlplug control {proc.owner} on {target.safe_url}: firing the scheduled runs and evaluating the "
        "alert rules of every crawl (Ctrl-C stops)",
        err=True,
    )
    try:
        proc.run()
    except KeyboardInterrupt:
        proc.stop()
    click.echo(f"crawlplug control {proc.owner}: stopped, leads released", err=True)
