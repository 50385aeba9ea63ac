"""``crawlplug report [CRAWL] [--run R] [--json | --csv]``: a run per node and domain, per
node and site definition, and per field (see :mod:`crawlplug.reports.report`)."""

from __future__ import annotations

import json

import click

from ..reports import report as run_report
from .common import Cli, fail, main, pass_cli

_TEXT_COLUMNS = frozenset({"node", "domain", "site", "field", "versions", "errors by kind"})


def _lines(rep: dict) -> list[str]:
    run = rep["run"]
    where = "its nodes' stats in Redis" if run["source"] == "live" else "the node stats kept when it ended"
    lines = [
        f"report of crawl {rep['crawl']!r}, run {run['id'] if run['id'] is not None else '-'} "
        f"({run['state']}), from {where}: {len(rep['nodes'])} node{'s' * (len(rep['nodes']) != 1)}"
    ]
    if rep["note"]:
        lines.append(f"  ({rep['note']})")
        return lines
    for title, header, rows in run_report.text_tables(rep):
        lines.append(title)
        if not rows:
            lines.append("  (none)")
            continue
        widths = [max(len(c) for c in column) for column in zip(header, *rows)]
        left = [name in _TEXT_COLUMNS for name in header]  # names to the left, numbers to the right
        for row in (header, *rows):
            cells = [c.ljust(w) if is_text else c.rjust(w) for c, w, is_text in zip(row, widths, left)]
            lines.append(("  " + "  ".join(cells)).rstrip())
    if rep["kept_runs"]:
        lines.append(f"ended runs with a report kept (--run R): {', '.join(map(str, rep['kept_runs']))}")
    return lines


@main.command()
@pass_cli(crawl_argument="[CRAWL]")
@click.option(
    "--run",
    "run",
    type=click.IntRange(min=1),
    default=None,
    help="An ended run (the node stats of the last 20 are kept); default: the current run.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the whole report as one JSON object.")
@click.option("--csv", "as_csv", is_flag=True, help="Print one table as CSV (--table).")
@click.option(
    "--table",
    type=click.Choice(sorted(run_report.COLUMNS)),
    default="domains",
    show_default=True,
    help="With --csv: node x domain, node x site, or per field.",
)
def report(cli: Cli, run: int | None, as_json: bool, as_csv: bool, table: str) -> None:
    """Per node: pages, items, errors by kind, success rate and mean response time of each
    domain; pages, items and errors of each site definition, and each field's filled,
    missing, invalid and defaulted counts.

    From the Scrapy stats the nodes keep in Redis (STATS_CLASS =
    crawlplug.stats.RedisStatsCollector, which the add-on sets): the current run's
    as they stand, an ended run's (--run) as they were when the next run began.
    """
    if as_json and as_csv:
        fail("--json and --csv: give one of them")
    keys, target = cli.keys, cli.target  # after the checks of its own arguments
    rep = run_report.report(target.client, keys, run)
    if as_json:
        click.echo(json.dumps(rep, indent=2))
    elif as_csv:
        click.echo(run_report.as_csv(rep, table), nl=False)
    else:
        click.echo("\n".join(_lines(rep)))
