"""Run control: ``crawlplug stop``, ``continue``, ``new-run`` and ``limits``.

    crawlplug stop CRAWL [--drain]     # end the current run now (or once its queue has run out)
    crawlplug continue CRAWL [--pages N ...]   # a stopped run, or one ended by a limit, runs again
    crawlplug new-run CRAWL            # the next node that starts begins a new run
    crawlplug limits CRAWL [--pages N --items N --errors N --timeout S --domain-pages N]

Not to be mixed up with ``pause`` / ``resume``, which hold every node of a run that goes
on. Thin commands over :mod:`crawlplug.crawl.control`; registered on
``crawlplug.cli.main``.
"""

from __future__ import annotations

import json
from typing import Any

import click

from ..access import audit
from ..crawl import Crawl, control, runs
from ..crawl.nodes import live_nodes
from ..frontier.keys import CrawlKeys
from ..frontier.store import redis_ms
from ..scrapyd import jobs as ops_jobs
from .common import Target, fail, main, pass_cli, when

_LIMIT_OPTIONS = (
    ("pages", click.IntRange(min=0), "Pages done in the run, every node together (CLOSESPIDER_PAGECOUNT)."),
    ("items", click.IntRange(min=0), "Items scraped in the run (CLOSESPIDER_ITEMCOUNT)."),
    ("errors", click.IntRange(min=0), "Spider errors in the run (CLOSESPIDER_ERRORCOUNT)."),
    ("timeout", click.FloatRange(min=0), "Seconds since the run began (CLOSESPIDER_TIMEOUT)."),
)


def _limit_options(func: Any) -> Any:
    for name, kind, text in reversed(_LIMIT_OPTIONS):
        func = click.option(
            f"--{name}", type=kind, default=None, metavar="N" if name != "timeout" else "S", help=f"{text} 0: no limit."
        )(func)
    return func


def _live(target: Target, keys: CrawlKeys) -> int:
    return live_nodes(target.client, keys)


def _counts(target: Target, keys: CrawlKeys) -> dict[str, Any]:
    """What the run has done against its limits: pages, items, spider errors, seconds."""
    totals = runs.totals(target.client, runs.part_keys(target.client, keys))
    record = runs.record(target.client, keys)
    started = int(record["started"]) if record.get("started", "").isdigit() else None
    return {
        "pages": totals["pages"],
        "items": totals["items"],
        "errors": int(target.client.hget(keys.stats, "spider_errors") or 0),
        "seconds": round((redis_ms(target.client) - started) / 1000, 1) if started else None,
    }


def _ended_how(target: Target, keys: CrawlKeys) -> str:
    record = runs.record(target.client, keys)
    by = f" by {record['by']}" if record.get("by") else ""
    at = f" at {when(int(record['ended']))}" if record.get("ended", "").isdigit() else ""
    reason = f" ({record['reason']})" if record.get("reason") and record.get("state") == "limit" else ""
    return f"{reason}{by}{at}"


def _no_run(keys: CrawlKeys) -> None:
    fail(f"crawl {keys.crawl!r} has no run recorded yet (no node has started it): nothing to change")


@main.command()
@pass_cli(crawl_argument="CRAWL")
@click.option(
    "--drain", is_flag=True, help="Admit no new requests and let the queue run out first; the run then ends as stopped."
)
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds the run's Scrapyd jobs (crawlplug start) get to end by themselves before they are "
    "cancelled (cancel.json); not with --drain.",
)
@click.option("--no-cancel", is_flag=True, help="Leave the run's Scrapyd jobs alone.")
def stop(keys: CrawlKeys, target: Target, drain: bool, grace: float, no_cancel: bool) -> None:
    """Stop the current run of CRAWL (not a pause: see `crawlplug pause`).

    Every node finishes what it is downloading, gives back what it has not
    started, and closes with finish_reason 'stopped'; what is queued stays
    queued. With --drain the nodes admit no new requests, crawl what is
    queued, and close with 'stopped' when it has run out. Stopped is sticky:
    a node started later (by hand, by Scrapyd, by a schedule) says the run was
    stopped, by whom and when, and exits, until `crawlplug continue CRAWL`
    (the run goes on) or `crawlplug new-run CRAWL`.

    Nodes started through Scrapyd (`crawlplug start`) that have not ended within
    --grace seconds are cancelled on their daemon (a waiting job is removed, a
    running one sent TERM); a drained run's jobs end by themselves.
    """
    out = control.stop(
        target.client, keys, by=control.operator("crawlplug stop" + (" --drain" if drain else "")), drain=drain
    )
    crawl_name = keys.crawl
    audit.record(
        target.client,
        audit.cli_user(),
        "stop",
        crawl_name,
        {"drain": drain},
        "ok" if out.ok else f"the run is {out.state}",
    )
    if out.outcome == "none":
        _no_run(keys)
    if not out.ok:
        if out.state == "stopped":
            click.echo(f"run {out.run} of crawl {crawl_name!r} was already stopped{_ended_how(target, keys)}")
            return
        if out.state == "draining" and drain:
            click.echo(
                f"run {out.run} of crawl {crawl_name!r} is already draining; `crawlplug stop {crawl_name}` stops it now"
            )
            return
        hint = {
            "finished": "it is finished",
            "limit": f"it ended by a limit{_ended_how(target, keys)}",
            "starting": "a node is beginning it: try again in a moment",
        }.get(out.state, out.state)
        fail(f"run {out.run} of crawl {crawl_name!r} was not stopped: {hint}")
    st = Crawl(target.client, keys).status()
    live = _live(target, keys)
    one = live == 1
    nodes = f"{live} live node{'' if one else 's'}"
    if drain:
        click.echo(
            f"run {out.run} of crawl {crawl_name!r} is draining: {nodes} {'admits' if one else 'admit'} no "
            f"new requests (from {'its' if one else 'their'} next heartbeat) and {'crawls' if one else 'crawl'} "
            f"the {st['queued']} queued and {st['in_flight']} in flight; then the run ends as stopped and "
            f"{'it closes' if one else 'they close'} with 'stopped'. Nodes started meanwhile exit."
        )
        return
    click.echo(
        f"run {out.run} of crawl {crawl_name!r} stopped: {nodes} {'finishes' if one else 'finish'} what "
        f"{'it downloads' if one else 'they download'}, {'gives' if one else 'give'} back what "
        f"{'it has' if one else 'they have'} not started and {'closes' if one else 'close'} with 'stopped'; "
        f"{st['queued']} requests stay queued. Nodes started later exit until `crawlplug continue "
        f"{crawl_name}` (the run goes on) or `crawlplug new-run {crawl_name}`."
    )
    if not no_cancel and ops_jobs.open_jobs(target.client, keys, run=out.run):
        click.echo(
            f"waiting up to {grace:g} s for the run's Scrapyd jobs to end by themselves, then cancelling the "
            "rest (--grace, --no-cancel)"
        )
        for line in ops_jobs.cancel_jobs(target.client, keys, grace=grace, run=out.run).lines():
            click.echo(line)


@main.command("continue")
@pass_cli(crawl_argument="CRAWL")
@_limit_options
def continue_(keys: CrawlKeys, target: Target, **limits: float | None) -> None:
    """Continue the run of CRAWL that was stopped, ended by a limit, or is draining.

    The options raise (or with 0 drop) the run's crawl-wide limits first; a run
    whose limit stays reached is not continued. Nodes started afterwards join it
    and crawl what is queued (start them: the ones that closed do not come back).
    """
    changes = {k: float(v) for k, v in limits.items() if v is not None}
    out = control.continue_run(target.client, keys, by=control.operator("crawlplug continue"), changes=changes)
    crawl_name = keys.crawl
    audit.record(
        target.client,
        audit.cli_user(),
        "continue",
        crawl_name,
        {"limits": changes},
        "ok" if out.ok else f"not continued: {out.outcome} {out.state}",
    )
    if out.outcome == "none":
        _no_run(keys)
    if out.outcome == "reached":
        done = _counts(target, keys)
        option = {v[2]: k for k, v in control.LIMITS.items()}.get(out.reached, "pages")
        fail(
            f"run {out.run} of crawl {crawl_name!r} was not continued: its limit {out.reached} is still reached "
            f"({out.limits.text()}; done: {done['pages']} pages, {done['items']} items, {done['errors']} spider "
            f"errors, {done['seconds']} s): raise it, e.g. `crawlplug continue {crawl_name} --{option} N`, "
            "or drop it with 0"
        )
    if not out.ok:
        hint = {
            "running": "it is running",
            "finished": "it is finished: a node that starts begins a new run",
            "starting": "a node is beginning it",
        }.get(out.state, out.state)
        fail(f"run {out.run} of crawl {crawl_name!r} has nothing to continue: {hint}")
    queued = Crawl(target.client, keys).status()["queued"]
    live = _live(target, keys)
    nodes = (
        f"{live} live node{'s' if live != 1 else ''} go on (admitting new requests again if it was draining)"
        if live
        else "no node is live: start nodes, they join it"
    )
    click.echo(
        f"run {out.run} of crawl {crawl_name!r} continues (limits: {out.limits.text()}); {queued} requests "
        f"queued; {nodes}."
    )


@main.command("new-run")
@pass_cli(crawl_argument="CRAWL")
def new_run(keys: CrawlKeys, target: Target) -> None:
    """After a run of CRAWL that was stopped or ended by a limit: the next node that
    starts begins a new run (its queue and, unless the crawl is incremental, its
    fingerprints start empty; the ended run stays in `crawlplug crawls show`)."""
    out = control.new_run(target.client, keys, by=control.operator("crawlplug new-run"))
    crawl_name = keys.crawl
    audit.record(
        target.client, audit.cli_user(), "new-run", crawl_name, {}, "ok" if out.ok else f"the run is {out.state}"
    )
    if out.outcome == "none":
        _no_run(keys)
    if not out.ok:
        if out.state == "finished":
            click.echo(
                f"run {out.run} of crawl {crawl_name!r} is finished: the next node that starts begins a new run anyway"
            )
            return
        fail(
            f"run {out.run} of crawl {crawl_name!r} is {out.state}: stop it first (`crawlplug stop {crawl_name}`), "
            "then ask for a new run"
        )
    ended = {"limit": "ended by a limit"}.get(out.state, out.state)
    click.echo(
        f"run {out.run} of crawl {crawl_name!r} stays {ended}; the next node that starts begins run "
        f"{out.run + 1} (what run {out.run} left queued is dropped then)"
    )


@main.command()
@pass_cli(crawl_argument="CRAWL")
@_limit_options
@click.option(
    "--domain-pages",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Most pages of one domain admitted in a run (per-domain queue; overrides CRAWLPLUG_DOMAIN_PAGES). "
    "0: back to the nodes' setting.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def limits(keys: CrawlKeys, target: Target, domain_pages: int | None, as_json: bool, **given: float | None) -> None:
    """Show, or change, the crawl-wide limits of the current run of CRAWL.

    The run takes them from its nodes' CLOSESPIDER_* settings when it begins
    (CRAWLPLUG_LIMITS = 'crawl', the default); a changed limit holds at once.
    A run that reaches one ends by it; `crawlplug continue CRAWL --pages N`
    raises the limit and continues it.
    """
    changes = {k: float(v) for k, v in given.items() if v is not None}
    if changes:
        out = control.set_limits(target.client, keys, changes, by=control.operator("crawlplug limits"))
        audit.record(
            target.client,
            audit.cli_user(),
            "limits",
            keys.crawl,
            {"limits": changes},
            "ok" if out.ok else f"the run is {out.state}",
        )
        if out.outcome == "none":
            _no_run(keys)
        if not out.ok:
            fail(
                f"run {out.run} of crawl {keys.crawl!r} is {out.state}: its limits no longer matter (the next run "
                "takes its nodes' settings)"
            )
    if domain_pages is not None:
        control.set_domain_pages(target.client, keys, domain_pages)
        audit.record(target.client, audit.cli_user(), "limits", keys.crawl, {"domain_pages": domain_pages})
    view = runs.view(target.client, keys)
    if view.id is None:
        _no_run(keys)
    in_force = control.Limits.from_fields(view.raw)
    done = _counts(target, keys)
    cap = control.domain_pages(target.client, keys)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "crawl": keys.crawl,
                    "run": view.id,
                    "state": view.state,
                    "limits": {
                        "pages": in_force.pages,
                        "items": in_force.items,
                        "errors": in_force.errors,
                        "timeout": in_force.timeout,
                    },
                    "done": done,
                    "domain_pages": cap,
                },
                indent=2,
            )
        )
        return
    click.echo(f"run {view.id} of crawl {keys.crawl!r} ({view.state}): crawl-wide limits {in_force.text()}")
    seconds = f", {done['seconds']} s since it began" if done["seconds"] is not None else ""
    click.echo(f"  done: {done['pages']} pages, {done['items']} items, {done['errors']} spider errors{seconds}")
    click.echo(f"  per-domain page cap: {cap if cap else 'none'}")
