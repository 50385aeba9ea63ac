"""What ``crawlplug start`` and ``crawlplug schedule add`` share: the nodes to start on
Scrapyd daemons, as options (:func:`plan_options`) and as the launch plan they make
(:func:`make_plan`, a :class:`crawlplug.scrapyd.launch.Plan`)."""

from __future__ import annotations

from typing import Any

import click

from .common import F, Target, fail


def _pairs(values: tuple[str, ...], flag: str) -> dict[str, str]:
    out = {}
    for value in values:
        name, eq, text_value = value.partition("=")
        if not eq or not name.strip():
            fail(f"{flag} {value!r}: give NAME=VALUE")
        out[name.strip()] = text_value
    return out


def plan_options(func: F) -> F:
    """--scrapyd, --nodes-per-host, --spider, --project, -s, -a, --incremental/--full, --node-redis-url."""
    for option in reversed(
        [
            click.argument("more_daemons", metavar="[URL ...]", nargs=-1),
            click.option(
                "--scrapyd",
                "daemons",
                metavar="URL",
                multiple=True,
                required=True,
                help="A Scrapyd daemon (http://host:6800; user:password@ for its basic auth). Several: "
                "--scrapyd URL URL ..., or the option repeated, or separated by commas.",
            ),
            click.option(
                "--nodes-per-host",
                type=int,
                default=1,
                show_default=True,
                help="Nodes (Scrapyd jobs) started on each daemon (its max_proc bounds how many run at once).",
            ),
            click.option("--spider", default=None, help="The spider to run (default: the crawl's name)."),
            click.option(
                "--project",
                default="default",
                show_default=True,
                help="The Scrapyd project: 'default' for a daemon started in the project's directory, "
                "the [deploy] project of scrapy.cfg for an egg deployed with scrapyd-deploy.",
            ),
            click.option(
                "-s",
                "--set",
                "settings",
                metavar="NAME=VALUE",
                multiple=True,
                help="A Scrapy setting for every node (repeatable).",
            ),
            click.option(
                "-a",
                "--arg",
                "args",
                metavar="NAME=VALUE",
                multiple=True,
                help="A spider argument for every node (repeatable).",
            ),
            click.option(
                "--incremental/--full",
                "incremental",
                default=None,
                help="The run these nodes begin keeps the crawl's fingerprints (--incremental: pages "
                "seen in earlier runs are skipped) or clears them (--full: every page is fetched again). "
                "Default: as the nodes' -s CRAWLPLUG_INCREMENTAL says, and for a new run begun here, as "
                "the last run did.",
            ),
            click.option(
                "--node-redis-url",
                metavar="URL",
                default=None,
                help="The Redis URL as the nodes reach it, when it differs from --redis-url (default: --redis-url).",
            ),
        ]
    ):
        func = option(func)
    return func


def make_plan(target: Target, crawl: str, kw: dict[str, Any], *, new_run: bool = False) -> Any:
    """The launch plan (crawlplug.scrapyd.launch.Plan) from plan_options' values."""
    from ..scrapyd.launch import Plan  # noqa: PLC0415 - keep --help fast

    given = [*kw["daemons"], *kw.get("more_daemons", ())]
    daemons = [d.strip() for value in given for d in value.split(",") if d.strip()]
    node_url = kw.get("node_redis_url")
    return Plan(
        crawl=crawl,
        daemons=daemons,
        spider=kw.get("spider"),
        project=kw.get("project") or "default",
        nodes_per_host=kw.get("nodes_per_host") or 1,
        settings=_pairs(kw.get("settings", ()), "-s"),
        args=_pairs(kw.get("args", ()), "-a"),
        redis_url=node_url or target.url,
        embedded=target.embedded and not node_url,
        new_run=new_run,
        incremental=kw.get("incremental"),
    )
