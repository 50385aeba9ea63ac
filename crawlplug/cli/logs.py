"""``crawlplug logs [CRAWL] [--node N]... [--level L] [--grep TEXT] [--limit N] [--json]``:
the nodes' last WARNING-and-above log records that they keep in Redis (see
:mod:`crawlplug.nodelog`), oldest first, with counts by level and by logger."""

from __future__ import annotations

import datetime as dt
import json

import click

from ..nodelog import store as nodelog
from .common import Cli, echo_counts, fail, main, pass_cli


@main.command()
@pass_cli(crawl_argument="[CRAWL]")
@click.option(
    "--node", "nodes", multiple=True, metavar="NODE", help="This node's records (repeat); default: every node's."
)
@click.option(
    "--level",
    type=click.Choice(["WARNING", "ERROR", "CRITICAL"], case_sensitive=False),
    default=None,
    help="Records of this level and above.",
)
@click.option(
    "--grep", "search", default=None, metavar="TEXT", help="Records whose text or logger holds TEXT (any case)."
)
@click.option("--limit", type=click.IntRange(min=1), default=200, show_default=True, help="The last N records.")
@click.option("--json", "as_json", is_flag=True, help="Print the records and the counts as one JSON object.")
def logs(cli: Cli, nodes: tuple[str, ...], level: str | None, search: str | None, limit: int, as_json: bool) -> None:
    """The nodes' last log records of level WARNING and above (each node keeps its last
    CRAWLPLUG_NODE_LOG in Redis, an hour after its last), oldest first, then how many of
    each level and logger. Exit code 1 if a node named has none kept."""
    keys, client = cli.keys, cli.target.client
    kept = nodelog.kept(client, keys)
    missing = [n for n in nodes if n not in kept]
    if missing:
        fail(
            f"no log kept for node {', '.join(missing)} in crawl {keys.crawl!r} "
            f"(nodes with one: {', '.join(kept) or 'none'})"
        )
    records = nodelog.read(client, keys, nodes or kept, level=level, search=search, limit=limit)
    counts = nodelog.summary(records)
    if as_json:
        click.echo(json.dumps({"records": records, "summary": counts}, indent=2))
        return
    if not records:
        click.echo(f"no log records kept for crawl {keys.crawl!r}" + (" that match" if level or search else ""))
        return
    for r in records:
        when = dt.datetime.fromtimestamp(r["t"] / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        click.echo(f"{when} {r['node']} [{r['logger']}] {r['level']}: {r['text']}")
    echo_counts(counts["levels"], counts["loggers"])
