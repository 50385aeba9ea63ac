"""``crawlplug forget``: remove URLs' fingerprints from a crawl's dedup, so they are crawled again.

    crawlplug forget --crawl shop https://shop.example/item/7/ https://shop.example/item/9/
    crawlplug forget --crawl shop -f failed.txt --pattern 'https://shop.example/item/*'
    crawlplug forget --crawl shop --from-dead --pattern '*/item/*'
    crawlplug forget --crawl shop --roll --yes          # every fingerprint: a new generation

Run it in the Scrapy project (like ``migrate``): a fingerprint is computed as the crawl's
nodes compute it, with the project's REQUEST_FINGERPRINTER_CLASS, and routed to its
shard with the project's queue class. The work is :mod:`crawlplug.frontier.forgetting`'s.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import sys
from typing import Any, TextIO

import click
from scrapy import Request

from .. import starts
from ..config import setting
from ..crawl import Crawl
from ..errors import DecodeError
from ..frontier import forgetting
from ..queues import load_queue_class, route
from ..serializers import JsonSerializer, metakeys
from .common import Cli, fail, main, pass_cli, scrapy_project
from .feed import _lines

#: What running nodes still do after a forget (said after every change).
LOCAL_CACHE_NOTE = (
    "running nodes still filter the URLs they saw recently (their CRAWLPLUG_FP_CACHE) until "
    "they restart; a start entry (`crawlplug push`) is crawled even if seen"
)


def _given(urls: tuple[str, ...], file: TextIO | None) -> list[tuple[str, Request]]:
    """(where, request) of each URL or JSON entry given, callbacks left out (they do not
    change a fingerprint); a malformed one is a Fail naming where it is."""
    out = []
    for where, line in _lines(urls, file):
        try:
            entry = starts.parse(line)
            # meta keys naming code do not change a fingerprint, and no spider here allows them
            entry = dataclasses.replace(entry, callback=None, errback=None, meta=metakeys.strip(entry.meta))
            out.append((where, starts.build(entry, None)))
        except DecodeError as exc:
            fail(f"{where}: {exc}")
    return out


def _dead(crawl: Crawl) -> tuple[list[tuple[str, Request]], int]:
    """(where, request) of each dead letter whose payload is a JSON request, and how many are not."""
    reader = JsonSerializer(max_payload_bytes=0)
    out, unreadable = [], 0
    for i, letter in enumerate(crawl.dead_letters()):
        try:
            out.append((f"dead letter {i}", reader.loads_unbound(letter.payload)))
        except DecodeError:
            unreadable += 1
    return out, unreadable


@main.command()
@pass_cli()
@click.argument("urls", nargs=-1)
@click.option(
    "--file",
    "-f",
    "file",
    type=click.File("r", encoding="utf-8"),
    default=None,
    help="Read URLs (or JSON entries, as push takes them) from FILE, one per line ('-': standard input).",
)
@click.option(
    "--pattern",
    "patterns",
    multiple=True,
    metavar="GLOB",
    help="Only the URLs matching GLOB (*, ?, [...]; repeatable), of those given and of the dead "
    "letters with --from-dead. Fingerprints are one-way hashes: no pattern can be matched "
    "against them, only against URLs crawlplug can read.",
)
@click.option("--from-dead", is_flag=True, help="Also the URLs of the crawl's dead letters.")
@click.option(
    "--roll",
    is_flag=True,
    help="Forget every fingerprint at once: a new generation of the dedup in which every URL is new "
    "(the only way a Bloom filter forgets).",
)
@click.option("--dry-run", is_flag=True, help="Say what would be forgotten; change nothing.")
@click.option("--yes", "-y", is_flag=True, help="--roll: do not ask for confirmation.")
def forget(
    cli: Cli,
    urls: tuple[str, ...],
    file: TextIO | None,
    patterns: tuple[str, ...],
    from_dead: bool,
    roll: bool,
    dry_run: bool,
    yes: bool,
) -> None:
    """Remove URLs' fingerprints from a crawl's dedup, so that they are crawled again when
    they are met again (found as links, pushed, or in the next run of an incremental crawl).

    Exact dedup only (RedisSetDupeFilter, ExpiringDupeFilter): a Bloom filter cannot
    forget one URL, and is refused with the reason; --roll forgets everything, for any
    dedup. Exit code 1 if nothing given was found to forget.
    """
    if urls == ("-",):
        urls, file = (), sys.stdin
    if roll and (urls or file or from_dead or patterns):
        fail("--roll forgets every fingerprint: give it alone, without URLs, --file, --pattern or --from-dead")
    if not roll and not (urls or file or from_dead):
        fail("nothing to forget: give URLs, --file FILE, --from-dead (with --pattern), or --roll for everything")
    keys, target = cli.keys, cli.target  # after the checks of its own arguments
    if roll:
        _roll(target.client, keys, dry_run, yes)
        return
    kind = forgetting.bloom_kind(target.client, keys)
    if kind:
        fail(forgetting.BLOOM_CANNOT_FORGET.format(crawl=keys.crawl, kind=kind))
    project = scrapy_project(keys.crawl)
    for note in project.notes:
        click.echo(f"crawlplug: note: {note}", err=True)
    candidates = _given(urls, file)
    if from_dead:
        dead, unreadable = _dead(Crawl(target.client, keys))
        candidates += dead
        if unreadable:
            click.echo(f"crawlplug: note: {unreadable} dead letters are not JSON requests: left out", err=True)
    chosen = [(w, r) for w, r in candidates if not patterns or any(fnmatch.fnmatchcase(r.url, p) for p in patterns)]
    if not chosen:
        fail(
            f"no URL to forget ({len(candidates)} given or read, none matching {' or '.join(patterns)})"
            if patterns
            else "no URL to forget"
        )
    settings = project.settings
    queue = load_queue_class(setting(settings, "CRAWLPLUG_QUEUE_CLASS")).from_settings(settings)
    fingerprint = project.crawler.request_fingerprinter.fingerprint
    items = [(fingerprint(r), route(r, queue.domain(r))) for _, r in chosen]
    if dry_run:
        for _, request in chosen:
            click.echo(f"  would forget {request.method} {request.url}")
        click.echo(f"crawl {keys.crawl!r}: {len(chosen)} URLs would be forgotten (dry run: nothing changed)")
        return
    done = forgetting.forget(target.client, keys, items)
    if done.bloom:
        fail(forgetting.BLOOM_CANNOT_FORGET.format(crawl=keys.crawl, kind=done.bloom))
    for (_, request), flag in zip(chosen, done.flags):
        click.echo(f"  {'forgot' if flag == '1' else 'not recorded'}  {request.method} {request.url}")
    click.echo(
        f"crawl {keys.crawl!r}: forgot {done.removed} of {len(chosen)} URLs"
        + (f" ({len(chosen) - done.removed} were not recorded)" if done.removed < len(chosen) else "")
    )
    if done.removed:
        click.echo(f"crawlplug: {LOCAL_CACHE_NOTE}")
    else:
        raise click.exceptions.Exit(1)


def _roll(client: Any, keys: Any, dry_run: bool, yes: bool) -> None:
    if dry_run:
        click.echo(f"crawl {keys.crawl!r}: --roll would forget every fingerprint (dry run: nothing changed)")
        return
    if not yes and not click.confirm(
        f"Forget every fingerprint of crawl {keys.crawl!r}? Every URL will be crawled again when met.", default=False
    ):
        fail("nothing forgotten")
    deleted = forgetting.roll(client, keys)
    if not deleted:
        click.echo(f"crawl {keys.crawl!r} had no fingerprints: nothing to forget")
        return
    click.echo(f"crawl {keys.crawl!r}: forgot every fingerprint ({deleted} dedup keys deleted): a new generation")
    click.echo(f"crawlplug: {LOCAL_CACHE_NOTE}")
