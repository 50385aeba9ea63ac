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

import sys
from typing import Any, TextIO

import click
from scrapy import Request

from ..access import audit
from ..errors import ConfigError
from ..ops.forget import LOCAL_CACHE_NOTE, forget_requests, given_requests
from ..ops.forget import roll as roll_fingerprints
from .common import Cli, fail, main, pass_cli
from .feed import _lines


def _given(urls: tuple[str, ...], file: TextIO | None) -> list[tuple[str, Request]]:
    try:
        return given_requests(_lines(urls, file))
    except ConfigError as exc:
        fail(str(exc))


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
    try:
        done = forget_requests(
            target.client, keys, _given(urls, file), from_dead=from_dead, patterns=patterns, dry_run=dry_run
        )
    except ConfigError as exc:
        fail(str(exc))
    for note in done.notes:
        click.echo(f"crawlplug: note: {note}", err=True)
    if done.dry_run:
        for request in done.chosen:
            click.echo(f"  would forget {request.method} {request.url}")
        click.echo(f"crawl {keys.crawl!r}: {len(done.chosen)} URLs would be forgotten (dry run: nothing changed)")
        return
    for request, flag in zip(done.chosen, done.flags):
        click.echo(f"  {'forgot' if flag == '1' else 'not recorded'}  {request.method} {request.url}")
    chosen = len(done.chosen)
    click.echo(
        f"crawl {keys.crawl!r}: forgot {done.removed} of {chosen} URLs"
        + (f" ({chosen - done.removed} were not recorded)" if done.removed < chosen else "")
    )
    audit.record(target.client, audit.cli_user(), "forget", keys.crawl, {"urls": chosen, "forgot": done.removed})
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
    deleted = roll_fingerprints(client, keys)
    audit.record(client, audit.cli_user(), "forget.roll", keys.crawl, {"dedup_keys_deleted": deleted})
    if not deleted:
        click.echo(f"crawl {keys.crawl!r} had no fingerprints: nothing to forget")
        return
    click.echo(f"crawl {keys.crawl!r}: forgot every fingerprint ({deleted} dedup keys deleted): a new generation")
    click.echo(f"crawlplug: {LOCAL_CACHE_NOTE}")
