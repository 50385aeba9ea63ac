"""``crawlplug`` commands that feed and steer a crawl: push, peek, seeds, timer,
dead requeue / drop. Registered on the group of :mod:`crawlplug.cli`."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from typing import Any, TextIO

import click

from . import starts
from .cli import _connect, _fail, _friendly_errors, _keys, _options, _shared_options, _when, dead, main
from .errors import ConfigError, DecodeError
from .frontier import DeadLetter, Frontier
from .queues import DomainQueue, PriorityQueue
from .seeds import Seeds, make_seed

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
@_shared_options(envvar=False)
@click.argument("urls", nargs=-1)
@click.option("--file", "-f", "file", type=click.File("r", encoding="utf-8"), default=None,
              help="Read entries from FILE, one per line ('-': standard input).")  # fmt: skip
@click.option("--stdin", "use_stdin", is_flag=True, hidden=True)
@_friendly_errors
def push(redis_url: str | None, crawl: str | None, urls: tuple[str, ...], file: TextIO | None,
         use_stdin: bool) -> None:  # fmt: skip
    """Feed start URLs to a crawl: URL arguments, --file F, or '-' for standard input.

    An entry is a URL or a JSON line: {"url": ..., "method", "headers",
    "body", "meta", "priority", "callback", "cb_kwargs", "dont_filter"}.
    Every entry is validated first: a malformed one is reported with its line
    number and skipped, the rest go in (exit code 1 if any was skipped).
    Start entries are crawled even if their URL was seen before, unless the
    entry says "dont_filter": false.
    """
    if urls == ("-",):
        urls, file = (), sys.stdin
    if not urls and file is None:
        _fail("nothing to push: give URLs, --file FILE, or - for standard input")
    valid: list[str] = []
    bad = 0
    for where, text in _lines(urls, file):
        try:
            valid.append(starts.to_line(starts.parse(text)))
        except DecodeError as exc:
            bad += 1
            click.echo(f"crawlplug: {where}: skipped: {exc}", err=True)
    opts = _options(redis_url, crawl)
    keys = _keys(opts)
    target = _connect(opts)
    waiting = Frontier(target.client, keys).push_starts(valid) if valid else target.client.llen(keys.start_urls)
    click.echo(f"pushed {len(valid)} start entries to crawl {keys.crawl!r} ({waiting} waiting)"
               + (f"; skipped {bad} malformed" if bad else ""))  # fmt: skip
    if bad:
        raise click.exceptions.Exit(1)


# -- peek -------------------------------------------------------------------------


def _describe(payload: bytes) -> dict[str, Any]:
    try:
        data = json.loads(payload)
    except (UnicodeDecodeError, ValueError):
        return {"url": f"<{len(payload)} bytes, not a crawlplug JSON request>"}
    if not isinstance(data, dict):
        return {"url": "<not a JSON object>"}
    return {k: data[k] for k in ("url", "method", "priority", "callback", "dont_filter") if k in data}


@main.command()
@_shared_options(envvar=False)
@click.option("-n", "count", type=click.IntRange(min=1), default=10, show_default=True,
              help="How many of the next requests to show.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of text.")
@_friendly_errors
def peek(redis_url: str | None, crawl: str | None, count: int, as_json: bool) -> None:
    """The next requests in the queue (read-only), and the start entries waiting."""
    opts = _options(redis_url, crawl)
    keys = _keys(opts)
    target = _connect(opts)
    client = target.client
    rows: list[dict[str, Any]] = []
    ids = [(x.decode(), score) for x, score in client.zrange(keys.queue, 0, count - 1, withscores=True)]
    for member in client.zrange(keys.dq, 0, count - 1):  # per-domain queue: "<domain>\t<rank><id>"
        domain, _, rest = member.decode().partition("\t")
        ids.append((rest[16:], None))
    payloads = client.hmget(keys.requests, [i for i, _ in ids]) if ids else []
    for (rid, score), payload in zip(ids, payloads):
        row = {"id": rid, **(_describe(payload) if payload is not None else {"url": "<payload missing>"})}
        rows.append(row)
    entries = [x.decode(errors="replace") for x in client.lrange(keys.start_urls, 0, count - 1)]
    waiting = client.llen(keys.start_urls)
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        for entry in entries:
            click.echo(json.dumps({"start_entry": entry}))
        return
    queued = client.zcard(keys.queue) + client.zcard(keys.dq)
    click.echo(f"crawl {keys.crawl!r}: {queued} queued, {waiting} start entries waiting")
    for row in rows[:count]:
        extra = "  ".join(f"{k}={row[k]}" for k in ("priority", "callback", "method") if k in row)
        click.echo(f"  {row['id']}  {row['url']}  {extra}".rstrip())
    if entries:
        click.echo("start entries:")
        for entry in entries:
            click.echo(f"  {entry[:200]}")


# -- dead letters: requeue / drop ------------------------------------------------------

_TOMBSTONE = "__crawlplug_removed__"


def _pick(client: Any, key: str, indexes: tuple[int, ...], all_: bool) -> list[tuple[int, bytes]]:
    if all_ == bool(indexes):
        _fail("give dead-letter INDEXes (as `crawlplug dead list` shows them) or --all")
    raw = client.lrange(key, 0, -1)
    wanted = range(len(raw)) if all_ else indexes
    out = []
    for i in wanted:
        if not 0 <= i < len(raw):
            _fail(f"no dead letter at index {i} (there are {len(raw)})")
        out.append((i, raw[i]))
    return out


def _remove(client: Any, key: str, picked: list[tuple[int, bytes]]) -> int:
    """Remove exactly these entries, safe against concurrent appends (tombstone, then LREM)."""
    pipe = client.pipeline(transaction=True)
    for i, _ in picked:
        pipe.lset(key, i, _TOMBSTONE)
    pipe.lrem(key, 0, _TOMBSTONE)
    return int(pipe.execute()[-1])


@dead.command("requeue")
@_shared_options(envvar=False)
@click.argument("indexes", nargs=-1, type=int)
@click.option("--all", "all_", is_flag=True, help="Every dead letter.")
@_friendly_errors
def dead_requeue(redis_url: str | None, crawl: str | None, indexes: tuple[int, ...], all_: bool) -> None:
    """Put dead letters back in the queue (delivery count reset, dedup bypassed).

    Only entries that are valid crawlplug requests go back; invalid start
    entries and undecodable payloads stay dead and are listed.
    """
    opts = _options(redis_url, crawl)
    keys = _keys(opts)
    target = _connect(opts)
    client = target.client
    picked = _pick(client, keys.dead, indexes, all_)
    domain_mode = bool(client.exists(keys.dconf))
    queue = DomainQueue(_domain_key(client, keys)) if domain_mode else None
    frontier = Frontier(client, keys, queue=queue or PriorityQueue)
    items, keep = [], []
    for i, raw in picked:
        letter = DeadLetter.parse(raw)
        domain = ""
        try:
            data = json.loads(letter.payload)
            url = data["url"]
            if not isinstance(url, str):
                raise TypeError
        except (ValueError, TypeError, KeyError, UnicodeDecodeError):
            keep.append((i, "not a crawlplug request (a start entry? push it again with `crawlplug push`)"))
            continue
        if queue is not None:
            from scrapy import Request  # noqa: PLC0415

            try:
                domain = queue.domain(Request(url))
            except ValueError:
                keep.append((i, f"invalid URL {url!r:.100}"))
                continue
        score = -int(data.get("priority", 0)) if isinstance(data.get("priority", 0), int) else 0
        items.append((i, (b"", float(score), letter.payload, domain)))
    if items:
        frontier.admit([item for _, item in items])
        _remove(client, keys.dead, [(i, b"") for i, _ in items])
    click.echo(f"requeued {len(items)} dead letters of crawl {keys.crawl!r}")
    for i, why in keep:
        click.echo(f"  [{i}] kept: {why}", err=True)


def _domain_key(client: Any, keys: Any) -> str:
    key = client.hget(keys.dconf, "key")
    return key.decode() if key else "host"


@dead.command("drop")
@_shared_options(envvar=False)
@click.argument("indexes", nargs=-1, type=int)
@click.option("--all", "all_", is_flag=True, help="Every dead letter.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@_friendly_errors
def dead_drop(redis_url: str | None, crawl: str | None, indexes: tuple[int, ...], all_: bool, yes: bool) -> None:
    """Delete dead letters for good (asks first unless --yes)."""
    opts = _options(redis_url, crawl)
    keys = _keys(opts)
    target = _connect(opts)
    picked = _pick(target.client, keys.dead, indexes, all_)
    if not yes and not click.confirm(f"Delete {len(picked)} dead letters of crawl {keys.crawl!r}?", default=False):
        click.echo("Nothing deleted.", err=True)
        raise click.exceptions.Exit(1)
    removed = _remove(target.client, keys.dead, picked)
    click.echo(f"dropped {removed} dead letters of crawl {keys.crawl!r}")


# -- recurring seeds and their timer ----------------------------------------------------


@main.group()
def seeds() -> None:
    """Recurring seeds: start URLs injected again on a schedule, bypassing dedup."""


def _utc(ms: int | None) -> str:
    if ms is None:
        return "never"
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


@seeds.command("add")
@_shared_options(envvar=False)
@click.argument("urls", nargs=-1, required=True)
@click.option("--every", default=None, metavar="INTERVAL", help="Run every INTERVAL: 90s, 15m, 6h, 1d, 1h30m.")
@click.option("--cron", default=None, metavar="EXPR", help='A cron schedule, e.g. "10 1 * * *" (01:10 daily).')
@click.option("--tz", default="UTC", show_default=True, help="Time zone of a --cron schedule.")
@click.option("--now/--later", "run_now", default=True, show_default=True,
              help="First run now, or at the first scheduled time.")  # fmt: skip
@_friendly_errors
def seeds_add(redis_url: str | None, crawl: str | None, urls: tuple[str, ...], every: str | None,
              cron: str | None, tz: str, run_now: bool) -> None:  # fmt: skip
    """Add recurring seeds (URLs or JSON entries); adding one again replaces its schedule.

    The timer runs inside the crawl's nodes (one at a time, under a Redis
    lock) or as `crawlplug timer`. Missed runs are caught up once.
    """
    if (every is None) == (cron is None):
        _fail("give exactly one of --every INTERVAL or --cron EXPR")
    try:
        made = [make_seed(u, every=every, cron=cron, tz=tz) for u in urls]
    except ConfigError as exc:
        _fail(str(exc))
    opts = _options(redis_url, crawl)
    keys = _keys(opts)
    target = _connect(opts)
    book = Seeds(target.client, keys)
    for seed in made:
        first = None
        if not run_now:
            sec, usec = target.client.time()
            first = seed.next_after(sec * 1000 + usec // 1000)
        book.add(seed, first_run_ms=first)
        click.echo(f"seed {seed.id}: {starts_url(seed.entry)} ({seed.schedule()}), "
                   f"first run {_utc(first) if first else 'now'}")  # fmt: skip


def starts_url(entry: str) -> str:
    from .seeds import _url  # noqa: PLC0415

    return _url(entry)


@seeds.command("list")
@_shared_options(envvar=False)
@click.option("--json", "as_json", is_flag=True, help="JSON instead of text.")
@_friendly_errors
def seeds_list(redis_url: str | None, crawl: str | None, as_json: bool) -> None:
    """Every seed, its schedule, last and next run (UTC)."""
    opts = _options(redis_url, crawl)
    keys = _keys(opts)
    target = _connect(opts)
    book = Seeds(target.client, keys)
    all_, due = book.all(), book.due_times()
    rows = [{"id": sid, "entry": s.entry, "url": starts_url(s.entry), "schedule": s.schedule(), "every": s.every,
             "cron": s.cron, "tz": s.tz, "last_run_ms": s.last, "next_run_ms": due.get(sid)}
            for sid, s in sorted(all_.items(), key=lambda kv: due.get(kv[0], 0))]  # fmt: skip
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"{len(rows)} seeds in crawl {keys.crawl!r}")
    for r in rows:
        click.echo(f"  {r['id']}  {r['url']}  {r['schedule']}  last {_utc(r['last_run_ms'])}  "
                   f"next {_utc(r['next_run_ms'])}")  # fmt: skip


@seeds.command("remove")
@_shared_options(envvar=False)
@click.argument("idents", nargs=-1, required=True)
@_friendly_errors
def seeds_remove(redis_url: str | None, crawl: str | None, idents: tuple[str, ...]) -> None:
    """Remove seeds by id or URL."""
    opts = _options(redis_url, crawl)
    keys = _keys(opts)
    target = _connect(opts)
    book = Seeds(target.client, keys)
    missing = [i for i in idents if not book.remove(i)]
    click.echo(f"removed {len(idents) - len(missing)} seeds from crawl {keys.crawl!r}")
    if missing:
        _fail(f"no seed {', '.join(missing)}")


@main.command()
@_shared_options(envvar=False)
@click.option("--once", is_flag=True, help="Fire what is due now and exit.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True,
              help="Seconds between checks.")  # fmt: skip
@_friendly_errors
def timer(redis_url: str | None, crawl: str | None, once: bool, interval: float) -> None:
    """Run the seed timer for a crawl with no node running (nodes run it themselves).

    Safe beside running nodes: whoever holds the timer's Redis lock fires.
    """
    opts = _options(redis_url, crawl)
    keys = _keys(opts)
    target = _connect(opts)
    book = Seeds(target.client, keys)
    while True:
        fired = book.fire_due(owner="crawlplug-timer")
        if fired:
            click.echo(f"{_when(int(time.time() * 1000))}  fired {fired} seeds of crawl {keys.crawl!r}")
        if once:
            return
        time.sleep(interval)
