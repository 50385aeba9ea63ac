"""``crawlplug items``: the items RedisItemPipeline stored (a list or a stream).

    crawlplug items count --crawl shop               # prints the number of items
    crawlplug items export --crawl shop -o items.jsonl [-n 100]
    crawlplug items export --key 'myspider:items'   # a CRAWLPLUG_ITEMS_KEY of your own

Thin commands over :func:`crawlplug.pipelines.count_items` and
:func:`~crawlplug.pipelines.iter_items`; ``--redis-url`` and ``--crawl`` as
for every ``crawlplug`` command. Importing this module adds the group to
``crawlplug.cli.main`` (crawlplug.cli imports it).
"""

from __future__ import annotations

from typing import BinaryIO

import click

from ..pipelines import count_items, iter_items
from .common import Cli, Target, fail, main, pass_cli

_KEY_HELP = "Read this Redis key instead of the crawl's items key (when CRAWLPLUG_ITEMS_KEY is set)."


def _items_key(cli: Cli, key: str | None) -> tuple[str, Target]:
    if key:  # --key needs no --crawl (a pipeline may write one without a crawl)
        return key, cli.server
    return cli.keys.items, cli.target  # an unknown crawl is refused, naming the known ones


@click.group("items")
def items() -> None:
    """Scraped items stored by crawlplug.pipelines.RedisItemPipeline."""


@items.command("count")
@pass_cli()
@click.option("--key", default=None, metavar="KEY", help=_KEY_HELP)
def items_count(cli: Cli, key: str | None) -> None:
    """Print how many items are stored (0 when there is no items key yet)."""
    name, target = _items_key(cli, key)
    _, count = count_items(target.client, name)
    click.echo(count)


@items.command("export")
@pass_cli()
@click.option("--key", default=None, metavar="KEY", help=_KEY_HELP)
@click.option(
    "--output",
    "-o",
    default="-",
    metavar="FILE",
    show_default=True,
    help="Write the JSON lines to FILE ('-': standard output).",
)
@click.option(
    "-n",
    "limit",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Export the first (oldest) N items only; 0: all.",
)
@click.option(
    "--chunk",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Items read per round trip (LRANGE / XRANGE).",
)
def items_export(cli: Cli, key: str | None, output: str, limit: int, chunk: int) -> None:
    """Write the items as JSON lines, one item per line, oldest first.

    Items are written as stored: the compact JSON of RedisItemPipeline. A
    summary goes to standard error.
    """
    name, target = _items_key(cli, key)
    kind, total = count_items(target.client, name)
    try:
        out: BinaryIO = click.open_file(output, "wb")  # "-": standard output, left open
    except OSError as exc:
        fail(f"cannot write {output}: {exc}")
    written = 0
    with out:
        for raw in iter_items(target.client, name, limit=limit, chunk=chunk):
            out.write(raw)
            out.write(b"\n")
            written += 1
    where = "" if output == "-" else f" to {output}"
    what = "no items key" if kind == "none" else f"{total} in the {kind}"
    click.echo(f"exported {written} items from {name} ({what}){where}", err=True)


main.add_command(items)
