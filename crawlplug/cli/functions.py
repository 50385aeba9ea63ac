"""``crawlplug functions list|prune``: crawlplug's Functions libraries on a Redis 7.

On Redis 7 the nodes run crawlplug's scripts as one Functions library named by the hash of
its text (crawlplug.frontier.lualib), so each crawlplug version loads its own and a rolling
upgrade runs both. A library stays in Redis, its snapshots and its replicas until deleted:
``prune`` deletes those of other versions once they are no longer run.
"""

from __future__ import annotations

import json

import click
import redis

from ..frontier.lualib import installed, library, prune
from ..frontier.scripts import NAMES
from .common import Target, fail, main, pass_cli


def _current() -> str:
    return library(NAMES).name


def _listed(target: Target) -> list:
    try:
        return installed(target.client, _current())
    except redis.ResponseError as exc:
        if "unknown command" in str(exc).lower():
            fail(f"{target.safe_url} is a Redis before 7, which has no Functions: crawlplug runs its scripts there")
        raise


@main.group("functions")
def functions_group() -> None:
    """crawlplug's Functions libraries on a Redis 7 (each crawlplug version loads its own)."""


@functions_group.command("list")
@pass_cli(crawl_option=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def functions_list(target: Target, as_json: bool) -> None:
    """crawlplug's libraries on the Redis: name, functions, size of their code, and which
    one this crawlplug runs."""
    libs = _listed(target)
    if as_json:
        rows = [
            {"name": x.name, "functions": x.functions, "code_bytes": x.code_bytes, "current": x.current} for x in libs
        ]
        click.echo(json.dumps({"current": _current(), "libraries": rows}, indent=2))
        return
    click.echo(f"{len(libs)} crawlplug libraries on {target.safe_url} (this crawlplug's: {_current()})")
    for lib in libs:
        mark = "  this crawlplug's" if lib.current else "  another version's"
        click.echo(f"  {lib.name}  {lib.functions} functions  {lib.code_bytes / 1024:.1f} KB of code{mark}")


@functions_group.command("prune")
@pass_cli(crawl_option=False)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def functions_prune(target: Target, yes: bool) -> None:
    """Delete the libraries of other crawlplug versions (asks first unless --yes).

    A node of another version still running loads its own again at its next call (that
    call found no function and did nothing): prune once every node runs this version.
    """
    others = [x for x in _listed(target) if not x.current]
    if not others:
        click.echo(f"nothing to prune: no library of another crawlplug version on {target.safe_url}")
        return
    names = ", ".join(x.name for x in others)
    if not yes and not click.confirm(f"Delete {len(others)} libraries of other crawlplug versions ({names})?"):
        click.echo("Nothing deleted.", err=True)
        raise click.exceptions.Exit(1)
    gone = prune(target.client, _current())
    kb = sum(x.code_bytes for x in gone) / 1024
    click.echo(
        f"deleted {len(gone)} libraries of other crawlplug versions ({kb:.1f} KB of code) from {target.safe_url}"
    )
    for lib in gone:
        click.echo(f"  {lib.name}")
