"""``crawlplug migrate from-scrapy-redis SPIDER``: carry a scrapy-redis crawl over.

    crawlplug migrate from-scrapy-redis shop --dry-run     # read and check all, write nothing
    crawlplug migrate from-scrapy-redis shop               # shows what it found, asks, migrates
    crawlplug --redis-url redis://redis.internal:6379/0 migrate from-scrapy-redis shop --yes
    crawlplug migrate from-scrapy-redis shop --source-url redis://old:6379/0 \\
        --queue-key 'myproject:%(spider)s:requests'

Run it in the Scrapy project (the directory of ``scrapy.cfg``, or below): the
project's settings give the Redis (REDIS_URL, or scrapy-redis's REDIS_HOST,
REDIS_PORT...), scrapy-redis's key templates (SCHEDULER_QUEUE_KEY,
SCHEDULER_DUPEFILTER_KEY, REDIS_START_URLS_KEY), the crawl
(CRAWLPLUG_CRAWL_ID), its queue class, dupefilter and
REQUEST_FINGERPRINTER_CLASS, and the spider class, whose callbacks every
migrated request is checked against. ``--redis-url`` (or REDIS_URL) names the
crawl's Redis, where crawlplug writes; the scrapy-redis keys are read from
the same Redis unless ``--source-url`` names another.

Unpickling happens only here, only after a warning and a confirmation
(``--yes`` when not run in a terminal), through
:func:`crawlplug.serializers.safepickle.restricted_loads`. The work is
:class:`crawlplug.compat.migrate.ScrapyRedisMigration`'s; importing this module adds
the command to ``crawlplug.cli.main``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

import click
from scrapy.dupefilters import BaseDupeFilter
from scrapy.settings import Settings
from scrapy.utils.misc import build_from_crawler, load_object

from ..compat.legacy import FINGERPRINT_FUNCTIONS, ScrapyRedisSeen
from ..compat.migrate import Inventory, Report, ScrapyRedisMigration, SourceKeys
from ..compat.names import SCRAPY_REDIS_KEYS
from ..config import setting
from ..crawl import Crawl
from ..crawl.nodes import live_of
from ..dupefilters import ExpiringDupeFilter, RedisSetDupeFilter
from ..frontier.core import open_frontier
from ..frontier.dedup import Dedup
from ..frontier.fpadmin import migrate_set
from ..frontier.fphash import SplitSpec, bind_hash_parts
from ..frontier.interface import CrawlFrontier
from ..frontier.keys import CrawlKeys
from ..frontier.layout import claim_shards, stored_shards
from ..queues import load_queue_class
from ..serializers import serializer_from_settings
from ..server import clients
from .common import META_URL, Cli, Target, fail, main, pass_cli, scrapy_project

logger = logging.getLogger(__name__)

WARNING = (
    "WARNING: scrapy-redis stores requests as pickles, and unpickling data can run code. crawlplug reads "
    "them with a restricted unpickler: dicts, lists, sets, strings, numbers and Scrapy's request classes "
    "only; an entry naming anything else is refused, skipped and reported. Migrate only from a Redis you "
    "trust, once every scrapy-redis node has stopped (gracefully: Ctrl-C or SIGTERM, so that the requests "
    "it held are done or back in the queue)."
)
LIFO_PATHS = ("scrapy_redis.queue.LifoQueue", "scrapy_redis.queue.SpiderStack")
LEGACY_DUPEFILTER = "crawlplug.legacy.ScrapyRedisDupeFilter"


def _frontier(
    crawler: Any, client: Any, keys: CrawlKeys, queue: Any, shards: int, notes: list[str]
) -> tuple[CrawlFrontier, Callable[[], None]]:
    """The crawl's frontier (sharded as the crawl is) with the dedup strategy of the
    project's DUPEFILTER_CLASS, and what binds that dupefilter to it, as a node of the crawl
    would have it (binding may record the crawl's exact store: called only when the
    migration writes, never for a dry run)."""
    path = crawler.settings["DUPEFILTER_CLASS"]
    cls = load_object(path) if isinstance(path, str) else path
    df = None
    if cls is BaseDupeFilter:
        factory: Any = Dedup
    else:
        if not (isinstance(cls, type) and issubclass(cls, RedisSetDupeFilter)):
            notes.append(
                f"DUPEFILTER_CLASS is {path!r}, not crawlplug's: requests are admitted with crawlplug's "
                f"exact store (as {LEGACY_DUPEFILTER} and RedisSetDupeFilter use)"
            )
            cls = RedisSetDupeFilter
        if issubclass(cls, ExpiringDupeFilter):
            notes.append(
                "ExpiringDupeFilter cannot consult scrapy-redis's fingerprints while the crawl runs "
                f"(use {LEGACY_DUPEFILTER} until it ends)"
            )
        df = build_from_crawler(cls, crawler)
        factory = df.make_strategy
    frontier = open_frontier(client, keys, shards=shards, queue=queue, dedup_factory=factory)

    def bind() -> None:
        if isinstance(df, ScrapyRedisSeen):
            df.bind_plain(frontier)
        elif df is not None:
            df.bind(frontier)

    return frontier, bind


def _shards(target: clients.Connection, keys: CrawlKeys, settings: Settings) -> int:
    """The crawl's shard count: as recorded if it has one, else as the project's nodes
    will claim it (CRAWLPLUG_SHARDS)."""
    return stored_shards(target.client, keys) or int(setting(settings, "CRAWLPLUG_SHARDS", "getint"))


def _client(url: str) -> clients.Connection:
    conn = clients.Connection(clients.client_from_url(url), url, embedded=False)
    clients.check(conn)
    return conn


@main.group("migrate")
def migrate_group() -> None:
    """Carry a crawl of another system over to crawlplug."""


@migrate_group.command("from-scrapy-redis")
@pass_cli()
@click.argument("spider")
@click.option(
    "--source-url",
    metavar="URL",
    default=None,
    help="Redis of the scrapy-redis crawl, when it is not the crawl's own Redis (--redis-url).",
)
@click.option(
    "--queue-key",
    metavar="TEMPLATE",
    default=None,
    help="scrapy-redis's queue key. Default: the project's SCHEDULER_QUEUE_KEY, else "
    f"{SCRAPY_REDIS_KEYS['SCHEDULER_QUEUE_KEY']!r}.",
)
@click.option(
    "--dupefilter-key",
    metavar="TEMPLATE",
    default=None,
    help="scrapy-redis's fingerprint set. Default: the project's SCHEDULER_DUPEFILTER_KEY, else "
    f"{SCRAPY_REDIS_KEYS['SCHEDULER_DUPEFILTER_KEY']!r}.",
)
@click.option(
    "--start-urls-key",
    metavar="TEMPLATE",
    default=None,
    help="scrapy-redis's start URLs. Default: the project's REDIS_START_URLS_KEY, else "
    f"{SCRAPY_REDIS_KEYS['REDIS_START_URLS_KEY']!r}.",
)
@click.option(
    "--fingerprints",
    "function",
    type=click.Choice(["auto", *FINGERPRINT_FUNCTIONS]),
    default="auto",
    show_default=True,
    help="scrapy-redis's fingerprint function: json (scrapy-redis >= 0.8), concat (<= 0.7), or "
    "auto: found from the queued requests.",
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask before unpickling (needed when not run in a terminal).")
@click.option("--dry-run", is_flag=True, help="Read, unpickle and check everything; write nothing.")
def from_scrapy_redis(
    cli: Cli,
    spider: str,
    source_url: str | None,
    queue_key: str | None,
    dupefilter_key: str | None,
    start_urls_key: str | None,
    function: str,
    yes: bool,
    dry_run: bool,
) -> None:
    """Move scrapy-redis's crawl of SPIDER into a crawlplug crawl.

    Its queue (pickled requests, re-fingerprinted and stored as crawlplug's
    JSON), its fingerprint set (kept for crawlplug.legacy.ScrapyRedisDupeFilter,
    so pages scrapy-redis fetched are not fetched again) and its start URLs.
    The scrapy-redis queue and start URL keys are renamed to <key>:migrated,
    a backup no scrapy-redis node reads. Asks before it unpickles anything.
    """
    project = scrapy_project(spider)
    s = project.settings
    templates = [
        given or s.get(name) or SCRAPY_REDIS_KEYS[name]
        for given, name in (
            (queue_key, "SCHEDULER_QUEUE_KEY"),
            (dupefilter_key, "SCHEDULER_DUPEFILTER_KEY"),
            (start_urls_key, "REDIS_START_URLS_KEY"),
        )
    ]
    source_keys = SourceKeys.from_templates(spider, *templates)
    target = _client(cli.redis_url) if cli.redis_url else clients.from_settings(s)
    if not cli.redis_url:
        clients.check(target)
    click.get_current_context().meta[META_URL] = target.safe_url
    source = _client(source_url) if source_url else target
    keys = CrawlKeys(cli.crawl or s.get("CRAWLPLUG_CRAWL_ID") or spider, setting(s, "CRAWLPLUG_KEY_PREFIX"))
    shards = _shards(target, keys, s)
    queue = load_queue_class(setting(s, "CRAWLPLUG_QUEUE_CLASS")).from_settings(s)
    frontier, bind = _frontier(project.crawler, target.client, keys, queue, shards, project.notes)
    migration = ScrapyRedisMigration(
        source.client,
        source_keys,
        frontier,
        spider_name=spider,
        fingerprinter=project.crawler.request_fingerprinter,
        serializer=serializer_from_settings(s),
        queue=queue,
        spidercls=project.spidercls,
        lifo=str(s.get("SCHEDULER_QUEUE_CLASS") or "") in LIFO_PATHS,
        function=function,
    )
    inventory = migration.check()
    _show_plan(spider, source, source_keys, inventory, target, frontier)
    for note in project.notes:
        click.echo(f"note: {note}")
    if not (inventory.queued or inventory.fingerprints or inventory.start_entries):
        fail(
            f"nothing to migrate: no scrapy-redis queue, fingerprints or start URLs for spider {spider!r} "
            f"on {source.safe_url} (another spider name, Redis, or key template?)"
        )
    click.echo(WARNING, err=True)
    if not yes:
        if not sys.stdin.isatty():
            fail("not run in a terminal: nothing is unpickled without a confirmation; pass --yes to confirm")
        verb = "Check (dry run)" if dry_run else "Migrate"
        if not click.confirm(f"{verb}: unpickle {inventory.queued} requests from {source_keys.queue}?", default=False):
            click.echo("Nothing migrated.", err=True)
            raise click.exceptions.Exit(1)
    if shards > 1 and not dry_run:
        claim_shards(target.client, keys, shards)  # the layout first, as a node records it
    if not dry_run:
        bind()  # the crawl's exact store, as its nodes will use it
    report = migration.run(dry_run=dry_run)
    _show_report(report, source_keys, keys, target)


def _show_plan(
    spider: str,
    source: clients.Connection,
    sk: SourceKeys,
    inv: Inventory,
    target: clients.Connection,
    frontier: CrawlFrontier,
) -> None:
    names = {"zset": "sorted set", "list": "list", "set": "set", "none": "absent"}
    width = max(len(sk.queue), len(sk.dupefilter), len(sk.start_urls))
    click.echo(f"scrapy-redis crawl of spider {spider!r} on {source.safe_url}:")
    click.echo(f"  {sk.queue.ljust(width)}  {names[inv.queue_type]}, {inv.queued} requests (pickled)")
    click.echo(f"  {sk.dupefilter.ljust(width)}  {inv.fingerprints} fingerprints")
    click.echo(
        f"  {sk.start_urls.ljust(width)}  {names.get(inv.start_type, inv.start_type)}, "
        f"{inv.start_entries} start entries"
    )
    st = Crawl.of(frontier).status()
    click.echo(
        f"into crawlplug crawl {frontier.keys.crawl!r} on {target.safe_url} "
        f"({type(frontier.queue).__name__}, {frontier.dedup.mode} dedup): "
        f"{st['queued']} queued, {st['in_flight']} in flight, {st['seen']} seen now"
    )


def _show_report(report: Report, sk: SourceKeys, keys: CrawlKeys, target: clients.Connection) -> None:
    head = "dry run, nothing written; would migrate" if report.dry_run else "migrated"
    click.echo(f"{head} into crawl {keys.crawl!r} on {target.safe_url}:")
    admitted = (
        f"{report.admitted} to admit"
        if report.dry_run
        else f"{report.admitted} admitted, {report.already_seen} already in the crawl"
    )
    click.echo(f"  requests: {report.requests_read} read, {admitted}, {report.skipped_total} skipped")
    for reason, count in report.skipped.most_common(10):
        click.echo(f"    {count:>6}  {reason}")
    if len(report.skipped) > 10:
        click.echo(f"    ... and {len(report.skipped) - 10} other reasons")
    invalid = f", {report.fingerprints_invalid} not hex SHA-1s (ignored)" if report.fingerprints_invalid else ""
    click.echo(
        f"  fingerprints: {report.fingerprints_copied} copied{invalid}, function {report.function!r} "
        f"({report.function_evidence}); {report.fingerprints_total} in the crawl's scrapy-redis set"
    )
    click.echo(f"  start entries: {report.start_entries}")
    for key, backup in report.backups.items():
        click.echo(
            f"  backup: {key} renamed to {backup}"
            + (" (the skipped entries are there)" if key == sk.queue and report.skipped_total else "")
        )
    for key, count in report.late_writes.items():
        click.echo(
            f"crawlplug: warning: {count} entries were written to {key} while migrating: a scrapy-redis "
            "node is still running? Stop it, then migrate again (nothing is admitted twice)",
            err=True,
        )
    if report.refused_globals:
        click.echo(
            f"crawlplug: warning: {sum(report.refused_globals.values())} entries named globals outside the "
            f"allow-list ({', '.join(sorted(report.refused_globals))}); nothing of them was run",
            err=True,
        )
    if not report.dry_run and report.fingerprints_total:
        click.echo(
            f"next: crawl with DUPEFILTER_CLASS = {LEGACY_DUPEFILTER!r} until this crawl ends, so that "
            "pages scrapy-redis already scheduled are not fetched again (docs/migrating.md)"
        )


@migrate_group.command("seen-to-hash")
@pass_cli()
@click.option(
    "--capacity",
    type=int,
    default=None,
    help="URLs the compact store is begun with buckets for (it splits buckets as it grows). Default: the set's size.",
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask (needed when not run in a terminal).")
@click.option("--dry-run", is_flag=True, help="Say what would be moved; change nothing.")
def seen_to_hash(keys: CrawlKeys, target: Target, capacity: int | None, yes: bool, dry_run: bool) -> None:
    """Move a crawl's fingerprint set (`seen`, RedisSetDupeFilter's store before the compact
    one) into the compact store (about a third of the memory), in every shard.

    Stop the crawl's nodes first (a node still running keeps writing to the set). Copied
    through the admission's own check; stopped part-way, the crawl keeps its whole set and
    running the command again finishes the move. Nodes started afterwards use the compact
    store whatever their CRAWLPLUG_DEDUP_STORE says."""
    client = target.client
    frontier = open_frontier(client, keys)
    parts = frontier.dedup_parts()
    size = sum(int(p.client.scard(p.keys.seen)) for p in parts)
    if not size:
        fail(f"crawl {keys.crawl!r} has no fingerprint set (`seen`): nothing to move")
    now_ms = int(client.time()[0]) * 1000
    live = live_of(Crawl.of(frontier).status()["nodes"], now_ms)
    if live:
        fail(f"crawl {keys.crawl!r} has {len(live)} live node(s) ({', '.join(sorted(live)[:3])}): stop them first")
    spec = SplitSpec.for_capacity(capacity or size)
    click.echo(
        f"crawl {keys.crawl!r}: {size} fingerprints in its set, in {len(parts)} part(s); compact store "
        f"begun with {1 << spec.level} buckets (split as it grows)"
    )
    if dry_run:
        click.echo("dry run: nothing changed")
        return
    if not yes and not click.confirm("Move them into the compact store?", default=False):
        fail("nothing moved")
    bind_hash_parts(frontier, spec)
    done = migrate_set(frontier)
    click.echo(
        f"crawl {keys.crawl!r}: {done['copied']} fingerprints moved into the compact store "
        f"({done['already']} were there already); its set deleted"
    )
