"""``crawlplug dead list|requeue|drop``: the dead letters of a crawl, and of its earlier runs."""

from __future__ import annotations

import json

import click

from ..access import audit
from ..frontier.keys import CrawlKeys
from ..ops import dead as dead_letters
from .common import Target, main, pass_cli, when


@main.group()
def dead() -> None:
    """Dead letters: requests that could not be crawled."""


@dead.command("list")
@pass_cli()
@click.option(
    "-n",
    "count",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="Show the newest N dead letters (0: all).",
)
@click.option(
    "--run",
    "run",
    type=click.IntRange(min=1),
    default=None,
    help="Those an earlier run left (kept when the next run began); default: the current run's.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def dead_list(keys: CrawlKeys, target: Target, count: int, run: int | None, as_json: bool) -> None:
    """Each dead letter's index, time, URL and reason (oldest first)."""
    total = dead_letters.dead_count(target.client, keys, run)
    first = 0 if count == 0 else max(0, total - count)
    rows = dead_letters.dead_rows(target.client, keys, first, -1, run) if total else []
    if as_json:
        click.echo(json.dumps({"crawl": keys.crawl, "run": run, "total": total, "rows": rows}, indent=2))
        return
    shown = f", showing the newest {len(rows)}" if len(rows) < total else ""
    of_run = f" left by run {run}" if run is not None else ""
    click.echo(f"{total} dead letters{of_run} in crawl {keys.crawl!r} on {target.safe_url}{shown}")
    for row in rows:
        extra = f" (deliveries {row['deliveries']})" if row["deliveries"] is not None else ""
        click.echo(f"  [{row['index']}] {when(row['at'])}  {row['url']}  {row['reason']}{extra}")


@dead.command("requeue")
@pass_cli()
@click.argument("indexes", nargs=-1, type=int)
@click.option("--all", "all_", is_flag=True, help="Every dead letter.")
def dead_requeue(keys: CrawlKeys, target: Target, indexes: tuple[int, ...], all_: bool) -> None:
    """Put dead letters back in the queue (delivery count reset, dedup bypassed).

    Only entries that are valid crawlplug requests go back; invalid start
    entries and undecodable payloads stay dead and are listed.
    """
    requeued, kept = dead_letters.requeue_dead(target.client, keys, indexes, all_)
    audit.record(
        target.client,
        audit.cli_user(),
        "dead.requeue",
        keys.crawl,
        {"indexes": list(indexes), "all": all_, "requeued": requeued},
    )
    click.echo(f"requeued {requeued} dead letters of crawl {keys.crawl!r}")
    for i, why in kept:
        click.echo(f"  [{i}] kept: {why}", err=True)


@dead.command("drop")
@pass_cli()
@click.argument("indexes", nargs=-1, type=int)
@click.option("--all", "all_", is_flag=True, help="Every dead letter.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def dead_drop(keys: CrawlKeys, target: Target, indexes: tuple[int, ...], all_: bool, yes: bool) -> None:
    """Delete dead letters for good (asks first unless --yes)."""
    picked = dead_letters.pick_dead(target.client, keys, indexes, all_)
    if not yes and not click.confirm(f"Delete {len(picked)} dead letters of crawl {keys.crawl!r}?", default=False):
        click.echo("Nothing deleted.", err=True)
        raise click.exceptions.Exit(1)
    removed = dead_letters.remove_dead(target.client, keys, [i for i, _ in picked])
    audit.record(
        target.client,
        audit.cli_user(),
        "dead.drop",
        keys.crawl,
        {"indexes": [i for i, _ in picked], "dropped": removed},
    )
    click.echo(f"dropped {removed} dead letters of crawl {keys.crawl!r}")
