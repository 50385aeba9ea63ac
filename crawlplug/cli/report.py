"""``crawlplug report [CRAWL] [--run R] [--json | --csv]``: a run per node and domain, per
node and site definition, and per field (see :mod:`crawlplug.reports.report`)."""

from __future__ import annotations

import csv
import io
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
@click.option(
    "--changes",
    is_flag=True,
    help="What changed in the items stored by key (SQLItemPipeline): new, changed (and which fields), "
    "unchanged and gone, per site.",
)
@click.option(
    "--sql-url",
    default=None,
    metavar="URL",
    help="With --changes: count from this database (default: the project's CRAWLPLUG_ITEMS_SQL_URL); "
    "without one, the report the nodes kept in Redis when the run ended.",
)
def report(
    cli: Cli, run: int | None, as_json: bool, as_csv: bool, table: str, changes: bool, sql_url: str | None
) -> None:
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
    if changes:
        _changes(cli, run, sql_url, as_json, as_csv)
        return
    rep = run_report.report(target.client, keys, run)
    if as_json:
        click.echo(json.dumps(rep, indent=2))
    elif as_csv:
        click.echo(run_report.as_csv(rep, table), nl=False)
    else:
        click.echo("\n".join(_lines(rep)))


def _changes(cli: Cli, run: int | None, sql_url: str | None, as_json: bool, as_csv: bool) -> None:
    from ..crawl import runs  # noqa: PLC0415
    from ..errors import ConfigError  # noqa: PLC0415
    from ..pipelines import sqlitems  # noqa: PLC0415

    keys, client = cli.keys, cli.target.client
    run = run or runs.view(client, keys).id
    if not run:
        fail(f"crawl {keys.crawl!r} has no run yet")
    url = sql_url
    if url is None:
        from scrapy.utils.project import get_project_settings  # noqa: PLC0415

        url = get_project_settings().get("CRAWLPLUG_ITEMS_SQL_URL")
    if url:
        try:
            engine = sqlitems.make_engine(str(url))
            rep = sqlitems.report_for(client, keys, engine, sqlitems.open_table(engine), run)
            engine.dispose()
        except ConfigError as exc:
            fail(str(exc))
        rep["source"] = "database"
    else:
        kept = sqlitems.kept_report(client, keys, run)
        if kept is None:
            fail(
                f"no change report of run {run} of crawl {keys.crawl!r}: the nodes of SQLItemPipeline keep one "
                "when the run ends; give --sql-url (or run in the project) to count it from the database"
            )
        rep = {**kept, "source": "kept"}
    if as_json:
        click.echo(json.dumps(rep, indent=2))
        return
    rows = [("(all)", rep["total"]), *rep["sites"].items()]
    if as_csv:
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["site", "new", "changed", "unchanged", "gone", "changed fields"])
        for site, t in rows:
            fields = " ".join(f"{k}:{n}" for k, n in sorted(t["fields"].items()))
            writer.writerow([site, t["new"], t["changed"], t["unchanged"], t["gone"], fields])
        click.echo(out.getvalue(), nl=False)
        return
    against = rep.get("gone_checked_against")
    click.echo(
        f"changes in run {rep['run']} of crawl {rep['crawl']!r} ({rep.get('state') or 'running'}"
        f"{', incremental' if rep.get('incremental') else ''}), from the "
        f"{'database' if rep['source'] == 'database' else 'report kept when it ended'}; gone: "
        + (f"against run {against}" if against else "not checked (only for a finished full run after another)")
    )
    for site, t in rows:
        fields = ", ".join(f"{k} {n}" for k, n in sorted(t["fields"].items()))
        click.echo(
            f"  {site or '(no site)'}: {t['new']} new, {t['changed']} changed{f' ({fields})' if fields else ''}, "
            f"{t['unchanged']} unchanged, {t['gone']} gone"
        )
