"""``crawlplug export`` / ``crawlplug import``: a crawl's Redis state as JSON lines.

    crawlplug export --crawl shop -o shop.jsonl          # backup (stdout without -o)
    crawlplug --redis-url redis://new:6379/0 import shop.jsonl      # the crawl named in the file
    crawlplug import shop.jsonl --crawl shop2 --replace --yes       # another name, over an old one

Thin commands over :func:`crawlplug.crawl.transfer.export_crawl` and
:func:`~crawlplug.crawl.transfer.import_crawl` (the format is described there).
Importing this module adds the commands to ``crawlplug.cli.main``.
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path
from typing import Any, TextIO

import click

from ..crawl import views
from ..crawl.transfer import export_crawl, import_crawl, read_header
from ..errors import ConfigError
from ..frontier.keys import CrawlKeys
from .common import Cli, fail, main, pass_cli


def _crawl_keys(name: str) -> CrawlKeys:
    try:
        return CrawlKeys(name)
    except ConfigError as exc:
        fail(str(exc))


def _summary(counts: dict[str, Any]) -> str:
    parts = [f"{counts['requests']} requests"]
    if counts.get("leased"):
        parts[0] += f" ({counts['leased']} in flight, queued again on import)"
    for name, label in (
        ("start_entries", "start entries"),
        ("dead", "dead letters"),
        ("seeds", "seeds"),
        ("domains", "domains"),
        ("fingerprints", "fingerprints"),
        ("bloom_keys", "Bloom keys"),
        ("bf_chunks", "native Bloom chunks"),
    ):
        if counts.get(name):
            parts.append(f"{counts[name]} {label}")
    return ", ".join(parts)


@main.command("export")
@pass_cli()
@click.option(
    "--output",
    "-o",
    metavar="FILE",
    default="-",
    show_default=True,
    help="Write to FILE ('-': standard output). Written whole or not at all.",
)
def export_command(cli: Cli, output: str) -> None:
    """Write the crawl's queue, leases, dedup state, start entries, seeds, dead
    letters, per-domain limits and counters as JSON lines (a summary goes to stderr).

    Requests in flight are exported as queued ones: they go back to the queue
    on import. Stop the crawl's nodes first for a consistent snapshot (a
    graceful stop hands their leases back); live nodes are warned about.
    """
    if not cli.crawl:
        fail("which crawl? give --crawl NAME (or set CRAWLPLUG_CRAWL); it is the spider's name by default")
    keys = _crawl_keys(cli.crawl)
    target = cli.target
    path = Path(output)
    if output == "-":
        counts = export_crawl(target.client, keys, sys.stdout)
        where = "standard output"
    elif path.exists() and not path.is_file():  # a device or a pipe (/dev/stdout): write to it as it is
        try:
            with path.open("w", encoding="utf-8") as out:
                counts = export_crawl(target.client, keys, out)
        except OSError as exc:
            fail(f"cannot write {output}: {exc}")
        where = output
    else:  # a regular file: written beside it, then renamed, so it is whole or absent
        path = path.resolve()  # through a symlink: replace its target, not the link
        part = path.with_name(path.name + ".part")
        try:
            with part.open("w", encoding="utf-8") as out:
                counts = export_crawl(target.client, keys, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(part, path)
        except OSError as exc:
            part.unlink(missing_ok=True)
            fail(f"cannot write {output}: {exc}")
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        where = output
    click.echo(f"exported crawl {keys.crawl!r} from {target.safe_url} to {where}: {_summary(counts)}", err=True)
    if counts["live_nodes"]:
        click.echo(
            f"crawlplug: warning: {counts['live_nodes']} node(s) of crawl {keys.crawl!r} are live: this "
            "export is not a consistent snapshot; stop them first (a graceful stop hands their leases "
            "back)",
            err=True,
        )
    if counts["not_exported"]:
        click.echo(
            f"not exported: {', '.join(counts['not_exported'])}"
            + (" (scraped items: use `crawlplug items export`)" if "items" in counts["not_exported"] else ""),
            err=True,
        )


@main.command("import")
@pass_cli()
@click.argument("file", type=click.File("r", encoding="utf-8"))
@click.option("--replace", is_flag=True, help="Delete the target crawl's keys first (else it must be empty).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask before --replace deletes.")
def import_command(cli: Cli, file: TextIO, replace: bool, yes: bool) -> None:
    """Load an export (FILE, or '-' for standard input) into an empty crawl.

    The crawl is the one named in the file unless --crawl says otherwise. The
    whole file is validated before anything is written: a bad line is reported
    with its number and nothing is imported. In-flight requests of the export
    are queued; request ids, the dedup state and the schedule carry over.
    """
    try:
        _import(cli, file, replace, yes)
    except UnicodeDecodeError as exc:
        fail(f"{getattr(file, 'name', 'the input')} is not UTF-8 text ({exc}): not a crawlplug export")


def _import(cli: Cli, file: TextIO, replace: bool, yes: bool) -> None:
    head: list[str] = []  # up to the header line (blank lines kept: line numbers stay right)
    for line in file:
        head.append(line)
        if line.strip():
            break
    header = read_header(head[-1] if head else "")
    keys = _crawl_keys(cli.crawl or header["crawl"])
    target = cli.target
    stdin = file is sys.stdin or getattr(file, "name", "") == "<stdin>"
    if replace and not yes:
        existing = views.key_count(target.client, keys)
        if existing:
            if stdin:
                fail("--replace with standard input needs --yes (the confirmation would read the input)")
            question = (
                f"Delete crawl {keys.crawl!r} on {target.safe_url} ({existing} keys) and replace it with {file.name}?"
            )
            if not click.confirm(question, default=False):
                click.echo("Nothing imported.", err=True)
                raise click.exceptions.Exit(1)
    counts = import_crawl(target.client, keys, itertools.chain(head, file), replace=replace)
    source = "standard input" if stdin else file.name
    renamed = f" (exported as {header['crawl']!r})" if header["crawl"] != keys.crawl else ""
    click.echo(f"imported {source} into crawl {keys.crawl!r}{renamed} on {target.safe_url}: {_summary(counts)}")
