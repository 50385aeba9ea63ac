"""The ``crawlplug`` operator command.

Look at a crawl, clear it, read its dead letters, run the embedded Redis::

    crawlplug status --crawl shop            # counts, counters, live nodes
    crawlplug status --crawl shop --json
    crawlplug purge --crawl shop [--yes]     # delete every key of the crawl
    crawlplug dead list --crawl shop [-n 20]
    crawlplug domains list --crawl shop      # DomainQueue: per-domain queue, delay, concurrency
    crawlplug domains set example.com --delay 2 --concurrency 1 --crawl shop
    crawlplug domains reset example.com --crawl shop
    crawlplug embedded start|stop|url

``--redis-url`` (or ``REDIS_URL``) picks the Redis; without it the command
uses the embedded Redis of the Scrapy project it is run in (the directory
holding ``scrapy.cfg``, here or above), starting it if needed. ``--crawl``
(or ``CRAWLPLUG_CRAWL``) names the crawl: the spider name unless the project
sets ``CRAWLPLUG_CRAWL_ID``. Both options may be given before or after the
command name. Each command is a thin layer over :class:`~crawlplug.frontier.Frontier`
and :mod:`crawlplug.embedded`; passwords in URLs are always shown masked.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NoReturn, TypeVar

import click
import redis

from . import connection, embedded, monitor, operations, runs, siteoutcomes
from .errors import CrawlplugError
from .frontier import DeadLetter
from .keys import CrawlKeys
from .shards import open_domains, open_frontier

F = TypeVar("F", bound=Callable[..., Any])

_REDIS_HELP = (
    "Redis of the crawl: redis://, rediss://, unix://, redis+cluster://h:p[,h:p] or "
    "redis+sentinel://h:p[,h:p]/service. "
    "Default: the embedded Redis of the Scrapy project in this directory (started if needed)."
)
_META_URL = "crawlplug.safe_url"
#: Environment variable naming the crawl (not a Scrapy setting).
CRAWL_ENVVAR = "CRAWLPLUG_CRAWL"
_CRAWL_HELP = "Name of the crawl (the spider's name unless CRAWLPLUG_CRAWL_ID is set)."


@dataclass
class Options:
    redis_url: str | None = None
    crawl: str | None = None


class Fail(click.ClickException):
    """One line on stderr, exit code 1, no traceback."""

    def show(self, file: Any = None) -> None:
        click.echo(f"crawlplug: error: {self.format_message()}", err=True)


def _fail(message: str) -> NoReturn:
    raise Fail(message)


def _shared_options(*, envvar: bool) -> Callable[[F], F]:
    """``--redis-url`` and ``--crawl``; on the group they read the environment,
    on a command they override the group's values."""

    def decorate(func: F) -> F:
        func = click.option(
            "--crawl", "crawl", metavar="NAME", default=None,
            envvar=CRAWL_ENVVAR if envvar else None, show_envvar=envvar, help=_CRAWL_HELP,
        )(func)  # fmt: skip
        func = click.option(
            "--redis-url", metavar="URL", default=None,
            envvar="REDIS_URL" if envvar else None, show_envvar=envvar, help=_REDIS_HELP,
        )(func)  # fmt: skip
        return func

    return decorate


def _options(redis_url: str | None, crawl: str | None) -> Options:
    parent = click.get_current_context().find_object(Options) or Options()
    return Options(redis_url or parent.redis_url, crawl or parent.crawl)


def _friendly_errors(func: F) -> F:
    """Turn Redis and configuration errors met while a command runs into one line."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (Fail, click.exceptions.Exit, click.Abort):
            raise
        except CrawlplugError as exc:
            _fail(str(exc))
        except redis.RedisError as exc:
            url = click.get_current_context().meta.get(_META_URL, "Redis")
            _fail(f"Redis error on {url}: {exc}")

    return wrapper  # type: ignore[return-value]


# -- resolving the Redis and the crawl --------------------------------------


def _project_root() -> Path | None:
    from scrapy.utils.conf import closest_scrapy_cfg  # noqa: PLC0415 - keep --help fast

    cfg = closest_scrapy_cfg()
    return Path(cfg).parent if cfg else None


def _embedded_dir() -> Path:
    if _project_root() is None:
        _fail(
            "no --redis-url given (nor REDIS_URL) and no Scrapy project here "
            "(no scrapy.cfg in this directory or above) whose embedded Redis could be used"
        )
    from scrapy.utils.project import get_project_settings  # noqa: PLC0415

    # the project's own CRAWLPLUG_EMBEDDED_DIR, if it sets one
    return connection.embedded_dir(get_project_settings())


#: What a command talks to: a client that answered PING, its URL, whether it is embedded.
_Target = connection.Connection


#: Commands that may name a crawl with no state on this Redis: those that write into it
#: create it and say so; the items commands read keys a pipeline may use without a crawl.
CRAWL_MAY_BE_NEW = frozenset({
    "push", "seeds add", "domains set", "import", "migrate from-scrapy-redis", "dashboard", "crawls",
    "crawls show", "embedded start", "embedded stop", "embedded url", "items count", "items export",
    # says so in its report (and lists the known crawls), exit code 0: a status probe of a crawl
    # about to start is not an error
    "status",
})  # fmt: skip


def _command_name() -> str:
    """The running command's path without the program name ("seeds add")."""
    path = click.get_current_context().command_path.split()
    return " ".join(path[1:])


def _connect(opts: Options) -> _Target:
    """A client that answered PING, or a :class:`Fail`; one naming a crawl that does not
    exist on it, unless the command may (CRAWL_MAY_BE_NEW)."""
    if opts.redis_url:
        url, is_embedded = opts.redis_url, False
    else:
        directory = _embedded_dir()
        try:
            url = embedded.ensure(directory)
        except OSError as exc:
            _fail(f"could not start the embedded Redis in {directory}: {exc}")
        is_embedded = True
    target = connection.Connection(connection.client_from_url(url), url, is_embedded)
    connection.check(target)  # RedisUnavailable: "cannot reach Redis at <masked url>: ..."
    click.get_current_context().meta[_META_URL] = target.safe_url  # for _friendly_errors
    if opts.crawl and _command_name() not in CRAWL_MAY_BE_NEW:
        try:
            keys = CrawlKeys(opts.crawl)
        except ValueError as exc:
            _fail(str(exc))
        if not runs.exists(target.client, keys):
            _fail(runs.unknown_crawl_message(target.client, keys))
    return target


def _create_if_new(target: _Target, keys: CrawlKeys) -> bool:
    """A command that writes into a crawl that does not exist creates it (True), and says so."""
    if runs.exists(target.client, keys):
        return False
    runs.register(target.client, keys)
    return True


def _created_note(keys: CrawlKeys) -> str:
    return (f"crawl {keys.crawl!r} is new: created it (nodes of a spider named {keys.crawl!r}, or with "
            f"CRAWLPLUG_CRAWL_ID={keys.crawl}, crawl it)")  # fmt: skip


def _keys(opts: Options) -> CrawlKeys:
    if not opts.crawl:
        _fail("which crawl? give --crawl NAME (or set CRAWLPLUG_CRAWL); it is the spider's name by default")
    try:
        return CrawlKeys(opts.crawl)
    except ValueError as exc:
        _fail(str(exc))


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _table(rows: list[tuple[str, Any]], indent: str = "  ") -> list[str]:
    width = max((len(label) for label, _ in rows), default=0)
    return [f"{indent}{label.ljust(width)}  {value}" for label, value in rows]


# -- the command group --------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@_shared_options(envvar=True)
@click.pass_context
def main(ctx: click.Context, redis_url: str | None, crawl: str | None) -> None:
    """Operate crawlplug crawls: status, purge, dead letters, the embedded Redis."""
    ctx.obj = Options(redis_url, crawl)


# -- status ---------------------------------------------------------------------


def _node_line(node: dict[str, Any]) -> str:
    age = node["heartbeat_age"]
    beat = f"heartbeat {age:.1f}s ago" if age is not None else "no heartbeat yet"
    parts = [node["id"], beat]
    for name, label in (("pages_per_min", "pages/min"), ("leases", "leases"), ("acked", "acked"), ("pid", "pid")):
        if name in node:
            parts.append(f"{label} {node[name]}")
    if "uptime" in node:
        parts.append(f"up {monitor.duration(node['uptime'])}")
    if not node["alive"]:
        parts.append("SILENT: presumed dead, its leases will be reaped")
    return "   ".join(parts)


def _status_report(target: _Target, keys: CrawlKeys) -> dict[str, Any]:
    snap = monitor.snapshot(target.client, keys)
    nodes = snap["nodes"]
    return {
        "crawl": keys.crawl,
        "redis": target.safe_url,
        "embedded": target.embedded,
        **{k: snap[k] for k in ("run", "paused", "queued", "start_urls", "in_flight", "seen", "done", "failed", "dead", "domains", "shards", "redis_memory",
                                "pages_per_min", "pages_last_min", "net_drain_per_min", "eta_seconds", "history")},
        "stats": snap["counters"],
        "scrapy_stats": snap["scrapy_stats"],
        "sites": siteoutcomes.outcomes(snap["scrapy_stats"]),
        "live_nodes": sum(1 for n in nodes if n["alive"]),
        "nodes": nodes,
        "exists": (exists := runs.exists(target.client, keys)),
        "known_crawls": None if exists else runs.known_crawls(target.client, keys.prefix),
    }  # fmt: skip


def _status_lines(report: dict[str, Any]) -> list[str]:
    where = f"{report['redis']}{' (embedded)' if report['embedded'] else ''}"
    lines = [f"crawl {report['crawl']!r} on {where}"]
    run = report.get("run") or {}
    if run.get("id") is not None:
        when = f", ended {_when(run['ended'])} ({run.get('reason')})" if run.get("ended") else ""
        lines.append(f"run {run['id']}: {run['state']}, started {_when(run.get('started'))}{when}")
    if report.get("paused"):
        lines.append(f"PAUSED by {report['paused'].get('by', '?')} (crawlplug resume to go on)")
    mem = report.get("redis_memory") or {}
    if mem.get("nearly_full"):
        lines.append(f"WARNING: Redis uses {mem['ratio']:.0%} of its maxmemory ({mem['policy']}): when full it "
                     "refuses new requests and the nodes wait")
    if report.get("shards"):
        per = " ".join(f"{sh['queued']}/{sh['in_flight']}" for sh in report["shards"])
        lines.append(f"{len(report['shards'])} shards (CRAWLPLUG_SHARDS), queued/in flight per shard: {per}")
    rows: list[tuple[str, Any]] = [
        ("queued", report["queued"]), ("in flight", report["in_flight"]), ("done", report["done"]),
        ("seen", report["seen"]), ("dead", report["dead"]),
    ]  # fmt: skip
    if report["failed"] is not None:
        rows.append(("failed", report["failed"]))
    if report["start_urls"]:
        rows.append(("start entries", f"{report['start_urls']} waiting"))
    if report["domains"]:
        rows.append(("domains", f"{report['domains']} with queued requests"))
    rows.append(("rate", f"{report['pages_per_min']:g} pages/min over 5 min, {report['pages_last_min']} last minute"))
    eta = report["eta_seconds"]
    if eta == 0:
        rows.append(("ETA", "nothing left"))
    elif eta is not None:
        rows.append(("ETA", f"{monitor.duration(eta)} at the recent rate"))
    elif report["queued"] or report["in_flight"]:
        rows.append(("ETA", "unknown: the queue is not shrinking"))
    lines += _table(rows)
    lines.append("counters")
    lines += _table(list(report["stats"].items())) or ["  (none)"]
    if report.get("sites"):
        lines.append("sites (outcomes of site spiders, crawl-wide)")
        lines += siteoutcomes.status_lines(report["scrapy_stats"])
    lines.append(f"nodes: {report['live_nodes']} live")
    lines += [f"  {_node_line(n)}" for n in report["nodes"]]
    if not any((report["queued"], report["in_flight"], report["seen"], report["dead"], report["stats"],
                report["nodes"], report["start_urls"])):  # fmt: skip
        known = ", ".join(repr(c) for c in report.get("known_crawls") or []) or "none"
        lines.append(f"(nothing is stored for crawl {report['crawl']!r} on this Redis: is --crawl right? "
                     f"Known crawls: {known})")
    return lines


def _spark(values: list[int]) -> str:
    bars = " ▁▂▃▄▅▆▇█"
    top = max(values, default=0)
    return "".join(bars[min(8, round(v * 8 / top))] if top else bars[0] for v in values)


def _status_view(report: dict[str, Any]) -> Any:
    """A rich renderable of the status: counts, progress, rate history, nodes."""
    from rich.console import Group  # noqa: PLC0415 - only for --watch
    from rich.progress_bar import ProgressBar
    from rich.table import Table

    counts = Table.grid(padding=(0, 2))
    for label, key in (("queued", "queued"), ("in flight", "in_flight"), ("done", "done"), ("seen", "seen"),
                       ("dead", "dead"), ("failed", "failed"), ("start entries", "start_urls")):  # fmt: skip
        if report.get(key) is not None:
            counts.add_row(label, str(report[key]))
    total = report["done"] + report["queued"] + report["in_flight"] + report["start_urls"]
    eta = report["eta_seconds"]
    eta_text = "done" if eta == 0 else (monitor.duration(eta) if eta is not None else "unknown")
    head = (f"crawl [bold]{report['crawl']}[/] on {report['redis']}   {report['pages_per_min']:g} pages/min   "
            f"ETA {eta_text}   nodes {report['live_nodes']} live")  # fmt: skip
    bar = Table.grid(padding=(0, 1))
    bar.add_row(ProgressBar(total=max(total, 1), completed=report["done"], width=50),
                f"{report['done']}/{total}")  # fmt: skip
    hist = report["history"]["acked"]
    nodes = Table("node", "host", "pid", "pages/min", "leases", "heartbeat", "state", box=None)
    for n in report["nodes"]:
        age = n["heartbeat_age"]
        nodes.add_row(n["id"], n["host"], str(n.get("pid", "")), str(n.get("pages_per_min", "")),
                      str(n.get("leases", "")), f"{age:.1f}s ago" if age is not None else "-",
                      "live" if n["alive"] else "[red]dead[/]")  # fmt: skip
    return Group(head, bar, counts, f"pages/min, last {len(hist)} min: {_spark(hist)}", nodes)


@main.command()
@_shared_options(envvar=False)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@click.option("--watch", "-w", is_flag=True, help="Redraw live, with progress bars, until Ctrl-C.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=2.0, show_default=True,
              help="Seconds between redraws with --watch.")  # fmt: skip
@click.option("--count", type=click.IntRange(min=1), default=None, help="With --watch: stop after N redraws.")
@_friendly_errors
def status(redis_url: str | None, crawl: str | None, as_json: bool, watch: bool, interval: float,
           count: int | None) -> None:  # fmt: skip
    """Counts, rate, ETA, counters and nodes of the crawl.

    Queued and in-flight requests, pages done, fingerprints seen, dead
    letters, failures (when the crawl keeps its Scrapy stats in Redis),
    pages/min over the last minutes and the ETA at that rate, the counters of
    the crawl, and each node with its rate, leases and heartbeat age (Redis
    clock). --watch redraws it live; --json prints it for scripts.
    """
    opts = _options(redis_url, crawl)
    keys = _keys(opts)
    target = _connect(opts)
    if not watch:
        report = _status_report(target, keys)
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


# -- purge ----------------------------------------------------------------------


@main.command()
@_shared_options(envvar=False)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@_friendly_errors
def purge(redis_url: str | None, crawl: str | None, yes: bool) -> None:
    """Delete every key of the crawl (asks first unless --yes).

    Queue, leases, fingerprints, counters, dead letters, node records and
    the history of runs: the crawl starts from nothing next time. Live nodes
    learn it at their next call to Redis: they drop what they hold of the old
    state and join the crawl afresh (`crawlplug crawls` no longer lists it
    until then).
    """
    opts = _options(redis_url, crawl)
    keys = _keys(opts)
    target = _connect(opts)
    st = open_frontier(target.client, keys).status()
    live = len(_alive(target, st["nodes"]))
    what = (f"crawl {keys.crawl!r} on {target.safe_url} ({st['queued']} queued, {st['in_flight']} in flight, "
            f"{st['seen']} seen, {st['dead']} dead, and the history of its runs)")  # fmt: skip
    if live:
        nodes = (f"{live} node{'s are' if live != 1 else ' is'} live: each drops what it holds of this crawl "
                 "(in-flight pages and their links, its fingerprint cache) at its next call to Redis, and "
                 "stays, joining the crawl afresh (a worker waits for new start entries; others finish "
                 "once nothing is pushed)")  # fmt: skip
    else:
        nodes = "no node is live"
    if yes:
        click.echo(f"Deleting {what}; {nodes}.")
    elif not click.confirm(f"Delete {what}? {nodes[0].upper()}{nodes[1:]}.", default=False):
        click.echo("Nothing deleted.", err=True)
        raise click.exceptions.Exit(1)
    deleted = runs.purge(target.client, keys)
    click.echo(f"Deleted {deleted} keys of crawl {keys.crawl!r} on {target.safe_url}.")


def _alive(target: _Target, deadlines: dict[str, int]) -> list[str]:
    secs, micros = target.client.time()
    now_ms = secs * 1000 + micros // 1000
    return [n for n, deadline in deadlines.items() if deadline > now_ms]


# -- dead letters -------------------------------------------------------------------


@main.group()
def dead() -> None:
    """Dead letters: requests that could not be crawled."""


def _payload_url(letter: DeadLetter) -> str:
    return operations.payload_url(letter.payload)


def _when(ms: Any) -> str:
    if not isinstance(ms, (int, float)) or isinstance(ms, bool):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


@dead.command("list")
@_shared_options(envvar=False)
@click.option("-n", "count", type=click.IntRange(min=0), default=20, show_default=True,
              help="Show the newest N dead letters (0: all).")  # fmt: skip
@click.option("--run", "run", type=click.IntRange(min=1), default=None,
              help="Those an earlier run left (kept when the next run began); default: the current run's.")
@_friendly_errors
def dead_list(redis_url: str | None, crawl: str | None, count: int, run: int | None) -> None:
    """Each dead letter's index, time, URL and reason (oldest first)."""
    opts = _options(redis_url, crawl)
    keys = _keys(opts)
    target = _connect(opts)
    total = operations.dead_count(target.client, keys, run)
    first = 0 if count == 0 else max(0, total - count)
    letters = operations.dead_letters(target.client, keys, first, -1, run) if total else []
    shown = f", showing the newest {len(letters)}" if len(letters) < total else ""
    of_run = f" left by run {run}" if run is not None else ""
    click.echo(f"{total} dead letters{of_run} in crawl {keys.crawl!r} on {target.safe_url}{shown}")
    for index, letter in enumerate(letters, start=first):
        head = letter.header
        extra = f" (deliveries {head['deliveries']})" if "deliveries" in head else ""
        click.echo(
            f"  [{index}] {_when(head.get('at'))}  {_payload_url(letter)}  "
            f"{head.get('reason', '?')}{extra}"
        )


# -- per-domain limits (DomainQueue) -------------------------------------------------


@main.group()
def domains() -> None:
    """The per-domain queue (DomainQueue): queue sizes, delays, concurrency, at runtime."""


@domains.command("list")
@_shared_options(envvar=False)
@click.option("-n", "count", type=click.IntRange(min=1), default=20, show_default=True,
              help="Show the N domains due soonest.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@_friendly_errors
def domains_list(redis_url: str | None, crawl: str | None, count: int, as_json: bool) -> None:
    """Domains with queued requests, soonest due first, and the limits in force.

    Limits come, strongest first, from `crawlplug domains set`, then the nodes'
    settings (CRAWLPLUG_DOMAINS, CRAWLPLUG_DOMAIN_DELAY, ..._CONCURRENCY), then
    robots.txt Crawl-delay (which may only lengthen the default delay).
    """
    opts = _options(redis_url, crawl)
    keys = _keys(opts)
    target = _connect(opts)
    view = open_domains(target.client, keys)
    total = view.scheduled_count()
    rows = view.table(count)
    if as_json:
        click.echo(json.dumps({"crawl": keys.crawl, "domains": total, "limits": view.limits(), "rows": rows},
                              indent=2))  # fmt: skip
        return
    shown = f", showing {len(rows)}" if len(rows) < total else ""
    click.echo(f"{total} domains with queued requests in crawl {keys.crawl!r} on {target.safe_url}{shown}")
    if rows:
        width = max(len(r["domain"]) for r in rows)
        click.echo(f"  {'domain'.ljust(width)}  {'queued':>8}  {'in flight':>9}  {'delay s':>7}  "
                   f"{'concurrency':>11}  next")  # fmt: skip
    for r in rows:
        nxt = "at concurrency limit" if r["at_concurrency"] else f"in {r['ready_in']:.1f}s"
        conc = r["concurrency"] or "no limit"
        click.echo(f"  {r['domain'].ljust(width)}  {r['queued']:>8}  {r['in_flight']:>9}  {r['delay']:>7.2f}  "
                   f"{conc!s:>11}  {nxt}")  # fmt: skip


def _limit_text(value: float | None, scale: int = 1) -> str:
    return "-" if value is None else str(round(value * scale))


@domains.command("set")
@_shared_options(envvar=False)
@click.argument("domain")
@click.option("--delay", type=click.FloatRange(min=0), default=None,
              help="Seconds between two request starts of DOMAIN, crawl-wide.")  # fmt: skip
@click.option("--concurrency", type=click.IntRange(min=0), default=None,
              help="Most requests of DOMAIN in flight, crawl-wide (0: no limit).")  # fmt: skip
@_friendly_errors
def domains_set(redis_url: str | None, crawl: str | None, domain: str, delay: float | None,
                concurrency: int | None) -> None:  # fmt: skip
    """Override DOMAIN's limits while the crawl runs ("*" = every domain's default).

    Takes effect at once on every node and outlives node restarts; a limit
    not given keeps coming from the settings. Undo with `domains reset`.
    """
    if delay is None and concurrency is None:
        _fail("give --delay and/or --concurrency")
    if not domain or any(c in domain for c in "\t|"):
        _fail(f"invalid domain {domain!r}")
    opts = _options(redis_url, crawl)
    keys = _keys(opts)
    target = _connect(opts)
    if _create_if_new(target, keys):
        click.echo(_created_note(keys))
    value = f"{_limit_text(delay, 1000)} {_limit_text(concurrency)}"
    open_domains(target.client, keys).configure({f"o:{domain}": value})
    said = []
    if delay is not None:
        said.append(f"delay {delay:g}s")
    if concurrency is not None:
        said.append(f"concurrency {concurrency or 'unlimited'}")
    click.echo(f"{domain}: {', '.join(said)} in crawl {keys.crawl!r}")


@domains.command("reset")
@_shared_options(envvar=False)
@click.argument("domain")
@_friendly_errors
def domains_reset(redis_url: str | None, crawl: str | None, domain: str) -> None:
    """Drop the runtime override of DOMAIN ("*": of the default): settings rule again."""
    opts = _options(redis_url, crawl)
    keys = _keys(opts)
    target = _connect(opts)
    view = open_domains(target.client, keys)
    existed = target.client.hexists(view.parts[0].dconf, f"o:{domain}")
    view.configure({f"o:{domain}": ""})
    click.echo(f"{domain}: {'override removed' if existed else 'had no override'} in crawl {keys.crawl!r}")


# -- the embedded Redis ---------------------------------------------------------


@main.group("embedded")
def embedded_group() -> None:
    """The project's embedded Redis (under .crawlplug/ by default)."""


def _embedded_url(directory: Path) -> str | None:
    sock = embedded.socket_path(directory.resolve())
    if not sock.exists():
        return None
    client = redis.Redis(unix_socket_path=str(sock), socket_timeout=2, socket_connect_timeout=2)
    try:
        return f"unix://{sock}" if client.ping() else None
    except redis.RedisError:
        return None
    finally:
        client.close()


@embedded_group.command("start")
@_friendly_errors
def embedded_start() -> None:
    """Start it unless it runs; print its URL."""
    directory = _embedded_dir()
    try:
        click.echo(embedded.ensure(directory))
    except OSError as exc:
        _fail(f"could not start the embedded Redis in {directory}: {exc}")


@embedded_group.command("stop")
@_friendly_errors
def embedded_stop() -> None:
    """Shut it down (its data is saved in the project's .crawlplug/)."""
    directory = _embedded_dir()
    if embedded.stop(directory):
        click.echo(f"Stopped the embedded Redis of {directory}.")
    else:
        click.echo(f"The embedded Redis of {directory} was not running.")


@embedded_group.command("url")
def embedded_url() -> None:
    """Print its URL (exit 1 if it is not running)."""
    directory = _embedded_dir()
    url = _embedded_url(directory)
    if url is None:
        _fail(f"the embedded Redis of {directory} is not running; `crawlplug embedded start` starts it")
    click.echo(url)


# commands defined in their own modules register themselves on `main`
from . import cli_feed, cli_items, cli_migrate, cli_runs, cli_sites, cli_transfer, cli_web  # noqa: E402, F401

if __name__ == "__main__":  # pragma: no cover
    # run as `python -m crawlplug.cli`: the commands registered themselves on the
    # group of the imported module crawlplug.cli, not on this __main__ copy
    from crawlplug.cli import main as _main

    sys.exit(_main())
