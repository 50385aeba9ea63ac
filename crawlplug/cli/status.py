"""``crawlplug status`` (counts, rates, ETA, nodes; --watch, --json) and ``crawlplug purge``."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from ..access import audit
from ..crawl import Crawl, registry, runs
from ..crawl.nodes import live_of
from ..frontier.core import open_frontier
from ..frontier.fpadmin import store_info
from ..frontier.keys import CrawlKeys
from ..frontier.store import redis_ms
from ..history import series as crawl_history
from ..ops import status as crawl_status
from ..sites import outcomes
from .common import Cli, Target, fail, main, pass_cli, table, when


def _node_line(node: dict[str, Any]) -> str:
    """One node: its state first when it is not simply live, then its (last) numbers."""
    numbers = []
    for name, label in (("pages_per_min", "pages/min"), ("leases", "leases"), ("acked", "acked"), ("pid", "pid")):
        if name in node:
            numbers.append(f"{label} {node[name]}")
    if "uptime" in node:
        numbers.append(f"up {crawl_status.duration(node['uptime'])}")
    if node["state"] == "live":
        age = node["heartbeat_age"]
        beat = f"heartbeat {age:.1f}s ago" if age is not None else "no heartbeat yet"
        head = [node["id"], beat] + (["PAUSED"] if node.get("paused") else [])
        return "   ".join(head + numbers)
    word, _, rest = node["state_text"].partition(" ")  # "SILENT for 7 s ...", "DEAD since 12:03:04 ..."
    return "   ".join([node["id"], f"{word.upper()} {rest}", "last: " + ", ".join(numbers)])


def _status_report(target: Target, keys: CrawlKeys, since_ms: int | None = None) -> dict[str, Any]:
    snap = crawl_status.snapshot(target.client, keys)
    past = None
    if since_ms is not None:
        # from the crawl's beginning when it began within the range: no row before it
        start = snap["now_ms"] - since_ms
        began = crawl_history.began(target.client, keys)
        later = began is not None and start < began < snap["now_ms"]
        # minute or hour records: items and errors too (the 10 s series has neither)
        past = crawl_history.history(
            target.client, keys, since_ms=began if later else start, until_ms=snap["now_ms"], finest="minute"
        )
        if later:
            past["began"], past["asked_seconds"] = began, since_ms // 1000
    return {
        "crawl": keys.crawl,
        "redis": target.safe_url,
        "embedded": target.embedded,
        **{
            k: snap[k]
            for k in (
                "run",
                "paused",
                "queued",
                "start_urls",
                "in_flight",
                "seen",
                "done",
                "failed",
                "dead",
                "domains",
                "shards",
                "redis_memory",
                "pages_per_min",
                "pages_last_min",
                "net_drain_per_min",
                "eta_seconds",
                "eta_text",
                "rate",
                "held",
                "history",
            )
        },
        "stats": snap["counters"],
        "scrapy_stats": snap["scrapy_stats"],
        "sites": outcomes.outcomes(snap["scrapy_stats"]),
        "live_nodes": snap["live_nodes"],
        "nodes": snap["nodes"],
        "exists": (exists := registry.exists(target.client, keys)),
        "known_crawls": None if exists else registry.known_crawls(target.client, keys.prefix),
        **({"since": past} if past is not None else {}),
    }


def _nodes_summary(report: dict[str, Any]) -> str:
    states = [n["state"] for n in report["nodes"]]
    out = f"nodes: {report['live_nodes']} live"
    for state in ("silent", "dead"):
        if state in states:
            out += f", {states.count(state)} {state}"
    return out


def _status_lines(report: dict[str, Any]) -> list[str]:
    where = f"{report['redis']}{' (embedded)' if report['embedded'] else ''}"
    lines = [f"crawl {report['crawl']!r} on {where}"]
    run = report.get("run") or {}
    if run.get("id") is not None:
        ended = f", ended {when(run['ended'])} ({run.get('reason')})" if run.get("ended") else ""
        lines.append(f"run {run['id']}: {run['state']}, started {when(run.get('started'))}{ended}")
        limits = run.get("limits") or {}
        if limits:
            shown = ", ".join(
                f"{value:g} s" if name == "timeout" else f"{value} {name}" for name, value in limits.items()
            )
            lines.append(f"limits (crawl-wide, `crawlplug limits`): {shown}")
        if run.get("state") == "stopped":
            lines.append(
                f"STOPPED by {run.get('by') or '?'}: nodes started now exit (`crawlplug continue "
                f"{report['crawl']}` or `crawlplug new-run {report['crawl']}`)"
            )
        elif run.get("state") == "draining":
            lines.append("DRAINING: no new requests are admitted; the run stops when the queue has run out")
    if report.get("paused"):
        lines.append(f"PAUSED by {report['paused'].get('by', '?')} (crawlplug resume to go on)")
    mem = report.get("redis_memory") or {}
    if mem.get("nearly_full"):
        lines.append(
            f"WARNING: Redis uses {mem['ratio']:.0%} of its maxmemory ({mem['policy']}): when full it "
            "refuses new requests and the nodes wait"
        )
    if report.get("held"):
        lines.append(f"WAITING: {report['held']['text']}")
    if report.get("shards"):
        per = " ".join(f"{sh['queued']}/{sh['in_flight']}" for sh in report["shards"])
        lines.append(f"{len(report['shards'])} shards (CRAWLPLUG_SHARDS), queued/in flight per shard: {per}")
    rows: list[tuple[str, Any]] = [
        ("queued", report["queued"]),
        ("in flight", report["in_flight"]),
        ("done", report["done"]),
        ("seen", report["seen"]),
        ("dead", report["dead"]),
    ]
    if report["failed"] is not None:
        rows.append(("failed", report["failed"]))
    if report["start_urls"]:
        rows.append(("start entries", f"{report['start_urls']} waiting"))
    if report["domains"]:
        rows.append(("domains", f"{report['domains']} with queued requests"))
    rows.append(("rate", report["rate"]["text"]))
    eta = report["eta_seconds"]
    if eta:
        rows.append(("ETA", f"{crawl_status.duration(eta)} {report['eta_text']}"))
    else:
        rows.append(("ETA", report["eta_text"]))
    lines += table(rows)
    lines.append("counters")
    lines += table(list(report["stats"].items())) or ["  (none)"]
    if report.get("sites"):
        lines.append("sites (outcomes of site spiders, crawl-wide)")
        lines += outcomes.status_lines(report["scrapy_stats"])
    lines.append(_nodes_summary(report))
    lines += [f"  {_node_line(n)}" for n in report["nodes"]]
    if report.get("since") is not None:
        lines += _history_lines(report["since"])
    if not any(
        (
            report["queued"],
            report["in_flight"],
            report["seen"],
            report["dead"],
            report["stats"],
            report["nodes"],
            report["start_urls"],
        )
    ):
        known = ", ".join(repr(c) for c in report.get("known_crawls") or []) or "none"
        lines.append(
            f"(nothing is stored for crawl {report['crawl']!r} on this Redis: is --crawl right? Known crawls: {known})"
        )
    return lines


def _history_lines(points: dict[str, Any]) -> list[str]:
    """The --since section: totals over the range, a row per equal slice of it, a sparkline."""
    rows = crawl_history.rows(points)
    if points.get("began") is not None:  # a crawl begun in the range: no row before its first record
        # (it began when its first node registered, which may be a minute before its first record)
        while len(rows) > 1 and rows[0]["done"] is None:
            rows.pop(0)
    seconds = (points["until"] - points["since"]) // 1000
    totals = points["totals"]
    if points.get("began") is not None:  # the crawl began within the range asked: from then on
        asked = points["asked_seconds"]
        asked_text = crawl_history.span(asked) if asked % 60 == 0 else crawl_status.duration(asked)
        over = f"since the crawl began, {crawl_status.duration(seconds)} ago (of the last {asked_text} asked)"
    else:
        over = f"last {crawl_history.span(seconds) if seconds % 60 == 0 else crawl_status.duration(seconds)}"
    head = (
        f"history, {over}: {totals['done']:,} pages, {totals['items']:,} items, {totals['errors']:,} errors, "
        f"{totals['admitted']:,} admitted"
    )
    if not rows or all(r["done"] is None for r in rows):
        return [head, "  (no record in this range: no node was running, or it ran before the history was kept)"]
    lines = [f"{head}; {crawl_history.describe_step(points, rows[0]['points'])}"]
    long = points["until"] - points["since"] > 86_400_000
    stamp = "%m-%d %H:%M" if long else "%H:%M"
    names = ("done", "items", "errors", "admitted", "queued", "in_flight", "dead", "nodes")
    labels = ("pages", "items", "errors", "admitted", "queued", "in flight", "dead", "nodes")
    cells = [
        [time.strftime(stamp, time.localtime(r["t"] / 1000))] + ["-" if r[n] is None else f"{r[n]:,}" for n in names]
        for r in rows
    ]
    header = ["from", *labels]
    widths = [max(len(str(c[i])) for c in [header, *cells]) for i in range(len(header))]
    fmt = lambda c: (
        "  " + "  ".join(str(v).rjust(w) if i else str(v).ljust(w) for i, (v, w) in enumerate(zip(c, widths)))
    )
    lines += [fmt(header), *(fmt(c) for c in cells)]
    rates = [v for v in points["pages_per_min"] if v is not None]
    if rates:
        per = {"10s": "10 s point", "minute": "minute", "hour": "hour"}[points["step"]]
        lines.append(
            f"  pages/min {_spark([round(v) for v in rates])}  (a bar per {per} with a record, top {max(rates):,.0f})"
        )
    return lines


def _spark(values: list[int]) -> str:
    bars = " ▁▂▃▄▅▆▇█"
    top = max(values, default=0)
    return "".join(bars[min(8, round(v * 8 / top))] if top else bars[0] for v in values)


def _status_view(report: dict[str, Any]) -> Any:
    """A rich renderable of the status: counts, progress, rate history, nodes."""
    from rich.console import Group  # noqa: PLC0415 - only for --watch
    from rich.progress_bar import ProgressBar  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    counts = Table.grid(padding=(0, 2))
    for label, key in (
        ("queued", "queued"),
        ("in flight", "in_flight"),
        ("done", "done"),
        ("seen", "seen"),
        ("dead", "dead"),
        ("failed", "failed"),
        ("start entries", "start_urls"),
    ):
        if report.get(key) is not None:
            counts.add_row(label, str(report[key]))
    total = report["done"] + report["queued"] + report["in_flight"] + report["start_urls"]
    eta = report["eta_seconds"]
    eta_text = "done" if eta == 0 else (crawl_status.duration(eta) if eta is not None else "unknown")
    head = (
        f"crawl [bold]{report['crawl']}[/] on {report['redis']}   {report['rate']['text']}   "
        f"ETA {eta_text}   {_nodes_summary(report)}"
    )
    if report.get("held"):
        head += f"\n[yellow]{report['held']['text']}[/]"
    bar = Table.grid(padding=(0, 1))
    bar.add_row(ProgressBar(total=max(total, 1), completed=report["done"], width=50), f"{report['done']}/{total}")
    hist = report["history"]["acked"]
    nodes = Table("node", "host", "pid", "pages/min", "leases", "heartbeat", "state", box=None)
    for n in report["nodes"]:
        age = n["heartbeat_age"]
        state = n["state_text"] if n["state"] == "live" else f"[red]{n['state_text']}[/]"
        nodes.add_row(
            n["id"],
            n["host"],
            str(n.get("pid", "")),
            str(n.get("pages_per_min", "")),
            str(n.get("leases", "")),
            f"{age:.1f}s ago" if age is not None else "-",
            state,
        )
    return Group(head, bar, counts, f"pages/min, last {len(hist)} min: {_spark(hist)}", nodes)


@main.command()
@pass_cli()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@click.option("--watch", "-w", is_flag=True, help="Redraw live, with progress bars, until Ctrl-C.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=2.0,
    show_default=True,
    help="Seconds between redraws with --watch.",
)
@click.option("--count", type=click.IntRange(min=1), default=None, help="With --watch: stop after N redraws.")
@click.option(
    "--since",
    "since",
    metavar="DURATION",
    default=None,
    help="Also show the crawl's history over the last DURATION (6h, 90m, 2d; per minute for a "
    "day, per hour for a month).",
)
def status(cli: Cli, as_json: bool, watch: bool, interval: float, count: int | None, since: str | None) -> None:
    """Counts, rate, ETA, counters and nodes of the crawl.

    Queued and in-flight requests, pages done, fingerprints seen, dead letters,
    failed requests (HTTP 400 and more, download errors after retries, callbacks
    that raised; robots.txt is no page), pages/min over the last minutes and the
    ETA at that rate, the counters of the crawl, and each node with its rate,
    leases and heartbeat age (Redis clock). --watch redraws it live; --json prints
    it for scripts; --since adds the history of a range (from the crawl's beginning
    if it began within it).
    """
    since_ms = crawl_history.parse_duration(since) if since is not None else None  # bad input: before connecting
    if since_ms is not None and watch:
        fail("--since shows a range of the past; --watch redraws the present: give one of them")
    keys, target = cli.keys, cli.target  # after the checks of its own arguments
    if not watch:
        report = _status_report(target, keys, since_ms)
        click.echo(json.dumps(report, indent=2, default=str) if as_json else "\n".join(_status_lines(report)))
        return
    from rich.live import Live  # noqa: PLC0415

    frames = 0
    try:
        with Live(_status_view(_status_report(target, keys)), refresh_per_second=4, transient=False) as live:
            while count is None or frames < count - 1:
                time.sleep(interval)
                live.update(_status_view(_status_report(target, keys)))
                frames += 1
    except KeyboardInterrupt:
        pass


@main.command()
@pass_cli()
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def purge(keys: CrawlKeys, target: Target, yes: bool) -> None:
    """Delete every key of the crawl (asks first unless --yes).

    Queue, leases, fingerprints, counters, dead letters, node records and
    the history of runs: the crawl starts from nothing next time. Live nodes
    learn it at their next call to Redis: they drop what they hold of the old
    state and join the crawl afresh (`crawlplug crawls` no longer lists it
    until then).
    """
    st = Crawl(target.client, keys).status()
    live = len(_alive(target, st["nodes"]))
    what = (
        f"crawl {keys.crawl!r} on {target.safe_url} ({st['queued']} queued, {st['in_flight']} in flight, "
        f"{st['seen']} seen, {st['dead']} dead, and the history of its runs)"
    )
    if live:
        nodes = (
            f"{live} node{'s are' if live != 1 else ' is'} live: each drops what it holds of this crawl "
            "(in-flight pages and their links, its fingerprint cache) at its next call to Redis, and "
            "stays, joining the crawl afresh (a worker waits for new start entries; others finish "
            "once nothing is pushed)"
        )
    else:
        nodes = "no node is live"
    if yes:
        click.echo(f"Deleting {what}; {nodes}.")
    elif not click.confirm(f"Delete {what}? {nodes[0].upper()}{nodes[1:]}.", default=False):
        click.echo("Nothing deleted.", err=True)
        raise click.exceptions.Exit(1)
    deleted = runs.purge(target.client, keys)
    audit.record(target.client, audit.cli_user(), "purge", keys.crawl, {"keys_deleted": deleted})
    click.echo(f"Deleted {deleted} keys of crawl {keys.crawl!r} on {target.safe_url}.")


def _alive(target: Target, deadlines: dict[str, int]) -> list[str]:
    now_ms = redis_ms(target.client)
    return live_of(deadlines, now_ms)


@main.command("dedup-info")
@pass_cli()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
def dedup_info(keys: CrawlKeys, target: Target, as_json: bool) -> None:
    """What the crawl's exact fingerprint store holds: for the compact store, its buckets
    (how many, mean fill, the largest, how many are past the server's compact limit and
    the bytes they take), by SCAN and one HLEN and MEMORY USAGE a bucket (not for a hot
    loop); for a set, its size."""
    frontier = open_frontier(target.client, keys)
    info = store_info(frontier)
    if as_json:
        click.echo(json.dumps(info))
        return
    rows: list[tuple[str, Any]] = [(name.replace("_", " "), value) for name, value in info.items()]
    click.echo(f"crawl {keys.crawl!r}: exact fingerprint store")
    for line in table(rows):
        click.echo(line)
