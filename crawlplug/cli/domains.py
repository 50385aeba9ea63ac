"""``crawlplug domains list|set|reset``: the per-domain queue (DomainQueue) and its limits at runtime."""

from __future__ import annotations

import json

import click

from ..access import audit
from ..frontier.core import open_domains
from ..frontier.keys import CrawlKeys
from .common import Cli, Target, create_if_new, created_note, fail, main, pass_cli


@main.group()
def domains() -> None:
    """The per-domain queue (DomainQueue): queue sizes, delays, concurrency, at runtime."""


@domains.command("list")
@pass_cli()
@click.option(
    "-n", "count", type=click.IntRange(min=1), default=20, show_default=True, help="Show the N domains due soonest."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def domains_list(keys: CrawlKeys, target: Target, count: int, as_json: bool) -> None:
    """Domains with queued requests, soonest due first, and the limits in force.

    Limits come, strongest first, from `crawlplug domains set`, then the nodes'
    settings (CRAWLPLUG_DOMAINS, CRAWLPLUG_DOMAIN_DELAY, ..._CONCURRENCY), then
    robots.txt Crawl-delay (which may only lengthen the default delay).
    """
    view = open_domains(target.client, keys)
    total = view.scheduled_count()
    rows = view.table(count)
    if as_json:
        click.echo(json.dumps({"crawl": keys.crawl, "domains": total, "limits": view.limits(), "rows": rows}, indent=2))
        return
    shown = f", showing {len(rows)}" if len(rows) < total else ""
    click.echo(f"{total} domains with queued requests in crawl {keys.crawl!r} on {target.safe_url}{shown}")
    if rows:
        width = max(len(r["domain"]) for r in rows)
        click.echo(
            f"  {'domain'.ljust(width)}  {'queued':>8}  {'in flight':>9}  {'delay s':>7}  {'concurrency':>11}  next"
        )
    for r in rows:
        nxt = "at concurrency limit" if r["at_concurrency"] else f"in {r['ready_in']:.1f}s"
        conc = r["concurrency"] or "no limit"
        click.echo(
            f"  {r['domain'].ljust(width)}  {r['queued']:>8}  {r['in_flight']:>9}  {r['delay']:>7.2f}  "
            f"{conc!s:>11}  {nxt}"
        )


@domains.command("set")
@pass_cli()
@click.argument("domain")
@click.option(
    "--delay",
    type=click.FloatRange(min=0),
    default=None,
    help="Seconds between two request starts of DOMAIN, crawl-wide.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=0),
    default=None,
    help="Most requests of DOMAIN in flight, crawl-wide (0: no limit).",
)
def domains_set(cli: Cli, domain: str, delay: float | None, concurrency: int | None) -> None:
    """Override DOMAIN's limits while the crawl runs ("*" = every domain's default).

    Takes effect at once on every node and outlives node restarts; a limit
    not given keeps coming from the settings. Undo with `domains reset`.
    """
    if delay is None and concurrency is None:
        fail("give --delay and/or --concurrency")
    keys, target = cli.keys, cli.target  # after the checks of its own arguments
    # checked first (a bad domain: one line, ConfigError): a refused change creates no crawl
    open_domains(target.client, keys).override(domain, delay=delay, concurrency=concurrency)
    if create_if_new(target, keys):
        click.echo(created_note(keys))
    audit.record(
        target.client,
        audit.cli_user(),
        "domains.set",
        keys.crawl,
        {"domain": domain, "delay": delay, "concurrency": concurrency},
    )
    said = []
    if delay is not None:
        said.append(f"delay {delay:g}s")
    if concurrency is not None:
        said.append(f"concurrency {concurrency or 'unlimited'}")
    click.echo(f"{domain}: {', '.join(said)} in crawl {keys.crawl!r}")


@domains.command("reset")
@pass_cli()
@click.argument("domain")
def domains_reset(keys: CrawlKeys, target: Target, domain: str) -> None:
    """Drop the runtime override of DOMAIN ("*": of the default): settings rule again."""
    existed = open_domains(target.client, keys).reset(domain)
    audit.record(
        target.client,
        audit.cli_user(),
        "domains.reset",
        keys.crawl,
        {"domain": domain},
        "ok" if existed else "had no override",
    )
    click.echo(f"{domain}: {'override removed' if existed else 'had no override'} in crawl {keys.crawl!r}")
