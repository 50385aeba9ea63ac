"""``crawlplug`` commands that feed and steer a crawl: push, peek, seeds, timer,
dead requeue / drop. Registered on the group of :mod:`crawlplug.cli`."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from typing import Any, TextIO

import click

from .. import starts
from ..access import audit
from ..config import start_key
from ..crawl import Crawl, views
from ..errors import ConfigError
from ..frontier.keys import CrawlKeys
from ..frontier.store import redis_ms
from ..serializers import describe_payload
from ..starts.seeds import Seeds, make_seed
from .common import Cli, Target, create_if_new, created_note, fail, main, pass_cli, when

# -- push -------------------------------------------------------------------------


def _lines(urls: tuple[str, ...], file: TextIO | None) -> list[tuple[str, str]]:
    """(where, text) of every entry to push: arguments, then the file's lines."""
    out = [(f"argument {i}", u) for i, u in enumerate(urls, start=1)]
    if file is not None:
        name = "stdin" if file is sys.stdin or getattr(file, "name", "") == "<stdin>" else file.name
        for number, line in enumerate(file, start=1):
            if line.strip() and not line.lstrip().startswith("#"):
                out.append((f"{name}:{number}", line.rstrip("\r\n")))
    return out


@main.command()
@pass_cli()
@click.argument("urls", nargs=-1)
@click.option(
    "--file",
    "-f",
    "file",
    type=click.File("r", encoding="utf-8"),
    default=None,
    help="Read entries from FILE, one per line ('-': standard input).",
)
@click.option("--stdin", "use_stdin", is_flag=True, hidden=True)
@click.option(
    "--strict",
    is_flag=True,
    help="Refuse every JSON key that is not a request attribute (form fields then go under "
    '"formdata"), instead of taking it as a form field as scrapy-redis does.',
)
@click.option(
    "--key",
    "lane",
    default="start_urls",
    show_default=True,
    metavar="KEY",
    help="The crawl's start-entry list to push to: start_urls, or a lane start_urls:<lane> that "
    "the nodes read in CRAWLPLUG_START_KEYS order (e.g. start_urls:high).",
)
def push(cli: Cli, urls: tuple[str, ...], file: TextIO | None, use_stdin: bool, strict: bool, lane: str) -> None:
    """Feed start URLs to a crawl: URL arguments, --file F, or '-' for standard input.

    An entry is a URL or a JSON line: {"url": ..., "method", "headers",
    "body", "meta", "priority", "callback", "cb_kwargs", "dont_filter"}.
    Other keys are form fields (scrapy-redis's format), except a near miss of
    a known key ("callbak"), which is refused; --strict refuses every other key.
    Every entry is validated first: a malformed one is reported with its line
    number and skipped, the rest go in (exit code 1 if any was skipped).
    Start entries are crawled even if their URL was seen before, unless the
    entry says "dont_filter": false. --key pushes to one of the crawl's
    priority-ordered start-entry lists (CRAWLPLUG_START_KEYS): a node takes every
    entry of a list before any of the next.
    """
    try:
        start_key(lane)
    except ConfigError as exc:
        fail(f"--key: {exc}")
    if urls == ("-",):
        urls, file = (), sys.stdin
    if not urls and file is None:
        fail("nothing to push: give URLs, --file FILE, or - for standard input")
    valid, skipped = starts.checked_lines(_lines(urls, file), strict=strict)
    for where, why in skipped:
        click.echo(f"crawlplug: {where}: skipped: {why}", err=True)
    bad = len(skipped)
    keys, target = cli.keys, cli.target  # after the checks of its own arguments
    created = bool(valid) and create_if_new(target, keys)
    waiting = (
        Crawl(target.client, keys).push_starts(valid, lane)
        if valid
        else views.start_entries_waiting(target.client, keys, lane)
    )
    if valid:
        audit.record(target.client, audit.cli_user(), "push", keys.crawl, {"lane": lane, "pushed": len(valid)})
    where = "" if lane == "start_urls" else f" {lane}"
    click.echo(
        f"pushed {len(valid)} start entries to crawl {keys.crawl!r}{where} ({waiting} waiting"
        f"{' there' if where else ''})" + (f"; skipped {bad} malformed" if bad else "")
    )
    if where:
        click.echo(
            f"nodes read {lane} where their CRAWLPLUG_START_KEYS lists it (start_urls first unless "
            "listed); a node that does not list it leaves its entries waiting"
        )
    if created:
        click.echo(created_note(keys))
    if bad:
        raise click.exceptions.Exit(1)


# -- peek -------------------------------------------------------------------------


def _describe(payload: bytes) -> dict[str, Any]:
    data = describe_payload(payload)  # any JSON format version, by long names
    if data is None:
        return {"url": f"<{len(payload)} bytes, not a crawlplug JSON request>"}
    return {k: data[k] for k in ("url", "method", "priority", "callback", "dont_filter") if k in data}


@main.command()
@pass_cli()
@click.option(
    "-n",
    "count",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="How many of the next requests to show.",
)
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of text.")
def peek(keys: CrawlKeys, target: Target, count: int, as_json: bool) -> None:
    """The next requests in the queue (read-only), and the start entries waiting."""
    head = views.head(target.client, keys, count)  # a sharded crawl: each shard's head, shard by shard
    rows = [
        {"id": rid, **(_describe(payload) if payload is not None else {"url": "<payload missing>"})}
        for rid, payload in head.requests
    ]
    queued, entries, waiting = head.queued, head.entries, head.entries_waiting
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        for entry in entries:
            click.echo(json.dumps({"start_entry": entry}))
        return
    click.echo(f"crawl {keys.crawl!r}: {queued} queued, {waiting} start entries waiting")
    for row in rows[:count]:
        extra = "  ".join(f"{k}={row[k]}" for k in ("priority", "callback", "method") if k in row)
        click.echo(f"  {row['id']}  {row['url']}  {extra}".rstrip())
    if entries:
        click.echo("start entries:")
        for entry in entries:
            click.echo(f"  {entry[:200]}")


# -- dead letters: requeue / drop ------------------------------------------------------


# -- recurring seeds and their timer ----------------------------------------------------


@main.group()
def seeds() -> None:
    """Recurring seeds: start URLs injected again on a schedule, bypassing dedup."""


def _utc(ms: int | None) -> str:
    if ms is None:
        return "never"
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


@seeds.command("add")
@pass_cli()
@click.argument("urls", nargs=-1, required=True)
@click.option("--every", default=None, metavar="INTERVAL", help="Run every INTERVAL: 90s, 15m, 6h, 1d, 1h30m.")
@click.option("--cron", default=None, metavar="EXPR", help='A cron schedule, e.g. "10 1 * * *" (01:10 daily).')
@click.option("--tz", default="UTC", show_default=True, help="Time zone of a --cron schedule.")
@click.option(
    "--now/--later", "run_now", default=True, show_default=True, help="First run now, or at the first scheduled time."
)
def seeds_add(cli: Cli, urls: tuple[str, ...], every: str | None, cron: str | None, tz: str, run_now: bool) -> None:
    """Add recurring seeds (URLs or JSON entries); adding one again replaces its schedule.

    The timer runs inside the crawl's nodes (one at a time, under a Redis
    lock) or as `crawlplug timer`. Missed runs are caught up once.
    """
    if (every is None) == (cron is None):
        fail("give exactly one of --every INTERVAL or --cron EXPR")
    try:
        made = [make_seed(u, every=every, cron=cron, tz=tz) for u in urls]
    except ConfigError as exc:
        fail(str(exc))
    keys, target = cli.keys, cli.target  # after the checks of its own arguments
    if create_if_new(target, keys):
        click.echo(created_note(keys))
    book = Seeds(target.client, keys)
    for seed in made:
        first = None
        if not run_now:
            first = seed.next_after(redis_ms(target.client))
        book.add(seed, first_run_ms=first)
        audit.record(
            target.client, audit.cli_user(), "seeds.add", keys.crawl, {"seed": seed.id, "every": every, "cron": cron}
        )
        click.echo(
            f"seed {seed.id}: {starts_url(seed.entry)} ({seed.schedule()}), first run {_utc(first) if first else 'now'}"
        )


def starts_url(entry: str) -> str:
    from ..starts.seeds import _url  # noqa: PLC0415

    return _url(entry)


@seeds.command("list")
@pass_cli()
@click.option("--json", "as_json", is_flag=True, help="JSON instead of text.")
def seeds_list(keys: CrawlKeys, target: Target, as_json: bool) -> None:
    """Every seed, its schedule, last and next run (UTC)."""
    book = Seeds(target.client, keys)
    all_, due = book.all(), book.due_times()
    rows = [
        {
            "id": sid,
            "entry": s.entry,
            "url": starts_url(s.entry),
            "schedule": s.schedule(),
            "every": s.every,
            "cron": s.cron,
            "tz": s.tz,
            "last_run_ms": s.last,
            "next_run_ms": due.get(sid),
        }
        for sid, s in sorted(all_.items(), key=lambda kv: due.get(kv[0], 0))
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"{len(rows)} seeds in crawl {keys.crawl!r}")
    for r in rows:
        click.echo(
            f"  {r['id']}  {r['url']}  {r['schedule']}  last {_utc(r['last_run_ms'])}  next {_utc(r['next_run_ms'])}"
        )


@seeds.command("remove")
@pass_cli()
@click.argument("idents", nargs=-1, required=True)
def seeds_remove(keys: CrawlKeys, target: Target, idents: tuple[str, ...]) -> None:
    """Remove seeds by id or URL."""
    book = Seeds(target.client, keys)
    missing = [i for i in idents if not book.remove(i)]
    if len(missing) < len(idents):
        removed = [i for i in idents if i not in missing]
        audit.record(target.client, audit.cli_user(), "seeds.remove", keys.crawl, {"seeds": removed})
    click.echo(f"removed {len(idents) - len(missing)} seeds from crawl {keys.crawl!r}")
    if missing:
        fail(f"no seed {', '.join(missing)}")


@main.command()
@pass_cli()
@click.option("--once", is_flag=True, help="Fire what is due now and exit.")
@click.option(
    "--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True, help="Seconds between checks."
)
def timer(keys: CrawlKeys, target: Target, once: bool, interval: float) -> None:
    """Run the seed timer for a crawl with no node running (nodes run it themselves).

    Safe beside running nodes: whoever holds the timer's Redis lock fires.
    """
    book = Seeds(target.client, keys)
    while True:
        fired = book.fire_due(owner="crawlplug-timer")
        if fired:
            click.echo(f"{when(int(time.time() * 1000))}  fired {fired} seeds of crawl {keys.crawl!r}")
        if once:
            return
        time.sleep(interval)


# -- pause / resume ----------------------------------------------------------------------


@main.command()
@pass_cli()
def pause(keys: CrawlKeys, target: Target) -> None:
    """Pause the crawl: every node stops taking requests within a heartbeat and
    finishes what it is downloading; prefetched requests go back to the queue."""
    changed = Crawl(target.client, keys).pause(by="crawlplug pause")
    audit.record(target.client, audit.cli_user(), "pause", keys.crawl, {}, "ok" if changed else "already paused")
    click.echo(f"crawl {keys.crawl!r} {'paused' if changed else 'was already paused'}")


@main.command()
@pass_cli()
def resume(keys: CrawlKeys, target: Target) -> None:
    """Resume a paused crawl, or one whose nodes found its data lost by Redis (it
    may then finish again: what was lost is not crawled unless pushed again)."""
    crawl = Crawl(target.client, keys)
    lost = views.lost(target.client, keys)
    paused = crawl.paused_info() is not None
    crawl.resume()
    audit.record(target.client, audit.cli_user(), "resume", keys.crawl, {}, "ok" if paused or lost else "not paused")
    if lost:
        click.echo(f"crawl {keys.crawl!r}: the loss of its data is accepted; it may finish again")
    click.echo(f"crawl {keys.crawl!r} {'resumed' if paused else 'was not paused'}")
