"""A node joining its crawl: reaching Redis, joining the run, building the frontier.

:func:`join_crawl` does what a node does before it takes a request: it checks the
Redis (reachable, the grants crawlplug needs, an eviction policy that may delete
crawl keys, its memory), joins the crawl's run (crawlplug.crawl.runs: join,
resume, or begin the next one), builds the frontier through the one factory
(:func:`crawlplug.frontier.open_frontier`) with the run's epoch, and refuses a
queue class that does not match the crawl's. :func:`log_join` says which run the
node is in, and how it got there, in its first log lines.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..config import setting
from ..crawl import Crawl, runs
from ..errors import ConfigError, RunEnded
from ..frontier import open_frontier
from ..frontier.dedup import Dedup
from ..frontier.keys import CrawlKeys
from ..frontier.layout import claim_shards
from ..frontier.results import process_node_id
from ..frontier.store import redis_ms
from ..history import store as history_store
from ..server import clients, memory
from .politeness import Choice

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.dupefilters import BaseDupeFilter
    from scrapy.settings import BaseSettings

    from ..config import SchedulerConfig
    from ..crawl.crawl import CrawlStatus
    from ..frontier.interface import CrawlFrontier
    from ..queues import BaseQueue

__all__ = [
    "NEW_RUN_AFTER_LIMIT",
    "AfterLimit",
    "Joined",
    "incremental",
    "join_args",
    "join_crawl",
    "log_join",
    "log_politeness",
    "log_where",
    "new_run_after_limit",
]

logger = logging.getLogger(__name__)


@dataclass
class Joined:
    """What a node has once it joined its crawl."""

    conn: clients.Connection
    frontier: CrawlFrontier
    joined: runs.Joined
    join_args: runs.JoinArgs
    started: float  #: when the node joined (Redis clock, seconds)
    queue: BaseQueue  #: the queue the node uses (the politeness fallback if the crawl was queued by it)
    crawl: Crawl  #: the crawl's control plane over the frontier's parts (status, totals, the end of a run)


def join_args(config: SchedulerConfig, dupefilter: BaseDupeFilter) -> runs.JoinArgs:
    """The arguments of crawlplug.crawl.runs.join for this node (also when it joins again)."""
    return {
        "node_id": process_node_id(),
        "ttl_ms": int(3 * config.heartbeat * 1000),  # dead after 3 missed heartbeats (as the frontier's)
        "incremental": incremental(config, dupefilter),
        "worker": config.idle_close <= 0,
        "lanes": config.start_keys,  # its lanes hold work too (start entries)
        "for_run": config.for_run,  # started for a run (crawlplug start): it begins none after it
    }


def incremental(config: SchedulerConfig, dupefilter: BaseDupeFilter) -> bool:
    """CRAWLPLUG_INCREMENTAL; unset, True for dedup that forgets by itself (it decides re-crawls)."""
    if config.incremental is not None:
        return bool(config.incremental)
    strategy = getattr(dupefilter, "strategy", None)
    return getattr(strategy, "mode", "") == "ttl" or bool(getattr(strategy, "generations", 0))


def join_crawl(
    crawler: Crawler,
    spider_name: str,
    config: SchedulerConfig,
    *,
    queue: BaseQueue,
    dupefilter: BaseDupeFilter,
    fallback: BaseQueue | None = None,
) -> Joined:
    """Reach Redis, join the crawl's run, build the frontier (module docstring). ``fallback``:
    the plain queue to use instead of the per-domain ``queue`` (chosen for politeness, not
    named by the settings) when the crawl's requests wait in a plain queue. Raises
    RedisUnavailable, ConfigError, RunEnded or a Redis error, with the reason."""
    conn = clients.from_settings(crawler.settings)
    clients.check(conn)
    started = redis_ms(conn.client) / 1000
    _warn_about_memory(conn.client)
    keys = CrawlKeys(config.crawl_id or spider_name, config.key_prefix)
    shards = setting(crawler.settings, "CRAWLPLUG_SHARDS", "getint")
    claim_shards(conn.client, keys, shards)
    args = join_args(config, dupefilter)
    after_limit = new_run_after_limit(crawler)
    want = "new" if config.flush_on_start else "after-limit" if after_limit.begins else "auto"
    try:
        joined = runs.join(conn.client, keys, want=want, **args)
    except RunEnded as exc:
        if exc.run_state != "limit":
            raise
        raise RunEnded(f"{exc}; {after_limit.said_on_exit()}", exc.state, exc.run_state) from None
    if joined.action == "new" and (joined.previous or {}).get("state") == "limit" and after_limit.begins:
        # log_join says why this node began a run (one an operator began, `crawlplug new-run`
        # or a schedule, and this node took up, is not this node's doing: nothing to say)
        joined.why = after_limit.said_on_begin()

    def build(q: BaseQueue) -> CrawlFrontier:
        return open_frontier(
            conn.client,
            keys,
            shards=shards,
            queue=q,
            lease_timeout=config.lease_timeout,
            heartbeat=config.heartbeat,
            max_deliveries=config.max_deliveries,
            node_id=args["node_id"],
            epoch=joined.epoch,
            dedup_factory=getattr(dupefilter, "make_strategy", None) or Dedup,
            resend_window=setting(crawler.settings, "CRAWLPLUG_RESEND_WINDOW", "getfloat"),
            sampler=history_store.sample_call,  # the heartbeat samples the crawl's history
        )

    frontier = build(queue)
    if fallback is not None and _crawl(conn, frontier).queued_elsewhere(True):
        queue, frontier = fallback, build(fallback)  # the crawl's requests wait in a plain queue: finish it so
    frontier.run_id = joined.run  # the history samples it sends carry the run (crawlplug.history.store)
    if crawler.stats is not None:  # the run this node works for, for pipelines (crawlplug.pipelines.sqlitems)
        crawler.stats.set_value(runs.RUN_STAT, joined.run)
    frontier.lanes = tuple(name for name in config.start_keys if name != "start_urls")
    crawl = _crawl(conn, frontier)
    crawl.add_lanes(frontier.lanes)  # readers (status, peek, crawls) count the lanes a node reads
    bind = getattr(dupefilter, "bind", None)
    if bind is not None:
        bind(frontier)
    if hasattr(dupefilter, "per_run_starts"):  # start URLs once a run, whatever earlier runs recorded
        dupefilter.per_run_starts = joined.incremental
    _check_queue_kind(frontier, crawl, queue)
    return Joined(conn, frontier, joined, args, started, queue, crawl)


def _crawl(conn: clients.Connection, frontier: CrawlFrontier) -> Crawl:
    """The control plane of the crawl ``frontier`` is part of, over the same parts."""
    return Crawl(conn.client, frontier.keys, parts=frontier.parts(), scripts=getattr(frontier, "scripts", None))


#: The setting that lets a node begin a new run after a run ended by a limit.
NEW_RUN_AFTER_LIMIT = "CRAWLPLUG_NEW_RUN_AFTER_LIMIT"


@dataclass(frozen=True)
class AfterLimit:
    """Whether this node begins a new run after a run ended by a limit, and why (said in its
    first lines, or in its exit line)."""

    begins: bool
    why: str  #: "CRAWLPLUG_NEW_RUN_AFTER_LIMIT=True", "started at a terminal", "it is a Scrapyd job", ...

    def said_on_begin(self) -> str:
        if self.why.startswith(NEW_RUN_AFTER_LIMIT):
            return f"as {self.why}"
        return f"as this node was {self.why} ({NEW_RUN_AFTER_LIMIT} unset)"

    def said_on_exit(self) -> str:
        return (
            f"a node begins one itself when started at a terminal, or with -s {NEW_RUN_AFTER_LIMIT}=True "
            f"(this one: {self.why})"
        )


def new_run_after_limit(crawler: Crawler) -> AfterLimit:
    """CRAWLPLUG_NEW_RUN_AFTER_LIMIT as set; unset, True for a node started interactively:
    standard input and standard error are terminals (a person typed `scrapy crawl`), and it
    is not a Scrapyd job (CRAWLPLUG_SCRAPYD_JOB, Scrapyd's ``_job`` spider argument, or the
    SCRAPY_JOB variable older Scrapyd versions set). A supervisor, a schedule or Scrapyd
    restarting nodes keeps the run's end (docs/runs.md)."""
    value = crawler.settings.get(NEW_RUN_AFTER_LIMIT)
    if value is not None and value != "":
        begins = crawler.settings.getbool(NEW_RUN_AFTER_LIMIT)
        return AfterLimit(begins, f"{NEW_RUN_AFTER_LIMIT}={begins}")
    spider = getattr(crawler, "spider", None)
    if crawler.settings.get("CRAWLPLUG_SCRAPYD_JOB") or getattr(spider, "_job", None) or os.environ.get("SCRAPY_JOB"):
        return AfterLimit(False, "it is a Scrapyd job")
    for name, stream in (("standard input", sys.stdin), ("standard error", sys.stderr)):
        if not _isatty(stream):
            return AfterLimit(False, f"its {name} is not a terminal")
    return AfterLimit(True, "started at a terminal")


def _isatty(stream: Any) -> bool:
    try:
        return stream is not None and os.isatty(stream.fileno())
    except (AttributeError, OSError, ValueError):  # replaced by a test runner, or closed
        return False


def _warn_about_memory(client: Any) -> None:
    mem = memory.memory(client)
    if mem is None:
        return
    risk = memory.eviction_risk(mem["policy"])
    if risk:
        logger.warning("crawlplug: %s", risk)
    if mem["nearly_full"]:
        logger.warning(
            "crawlplug: Redis uses %.0f%% of its maxmemory (%d bytes); when it is full it "
            "refuses new requests and this node waits",
            mem["ratio"] * 100,
            mem["max"],
        )


def _check_queue_kind(frontier: CrawlFrontier, crawl: Crawl, queue: BaseQueue) -> None:
    """Refuse to run one crawl with the per-domain queue and a plain one at once:
    requests waiting in the other kind would never be crawled."""
    domains = queue.order == "domain"
    waiting = crawl.queued_elsewhere(domains)
    if waiting:
        used, ours = ("a plain queue", "DomainQueue") if domains else ("DomainQueue", "a plain queue")
        raise ConfigError(
            f"crawl {frontier.keys.crawl!r} has {waiting} requests queued by {used}, and this node uses "
            f"{ours} (CRAWLPLUG_QUEUE_CLASS; a node takes DomainQueue by itself when its settings set a "
            f"per-domain DOWNLOAD_DELAY or CONCURRENT_REQUESTS_PER_DOMAIN, unless CRAWLPLUG_POLITENESS='node'): "
            f"give every node of the crawl the same settings, or start afresh (CRAWLPLUG_FLUSH_ON_START=True, "
            f"or `crawlplug purge`)"
        )


def log_where(conn: clients.Connection, keys: CrawlKeys, settings: BaseSettings) -> None:
    """The node's first line: crawlplug's version, the crawl, the Redis."""
    if conn.embedded:
        logger.info(
            "crawlplug %s: crawl %r on the embedded Redis %s (data in %s). To share this crawl "
            "with other machines, run one Redis they can all reach and set "
            "REDIS_URL='redis://<host>:6379/0' on every node.",
            __version__,
            keys.crawl,
            conn.safe_url,
            clients.embedded_dir(settings),
        )
    else:
        logger.info("crawlplug %s: crawl %r on Redis %s", __version__, keys.crawl, conn.safe_url)


def log_politeness(frontier: CrawlFrontier, choice: Choice | ConfigError | None, queue: BaseQueue) -> None:
    """The node's one line on politeness: per node, or for the whole crawl (scheduler.politeness)."""
    if not isinstance(choice, Choice):  # none, or a ConfigError open() raised
        return
    line = choice.line
    if choice.queue.order == "domain" and queue.order != "domain":
        line = (
            f"politeness: per node: crawl {frontier.keys.crawl!r} has requests waiting in a plain queue "
            "(queued before crawl-wide politeness), so this node finishes them with it and the per-domain "
            "limits hold in each node; the next run (once this one ends, or CRAWLPLUG_FLUSH_ON_START) makes "
            "them hold for the crawl"
        )
    logger.info("crawlplug: %s", line)


def log_join(frontier: CrawlFrontier, j: runs.Joined, status: CrawlStatus, config: SchedulerConfig) -> None:
    """The node's first words on the run: which one, and whether it joined, resumed or began it."""
    crawl, node = frontier.keys.crawl, frontier.node_id
    counts = f"{status['queued']} queued, {status['in_flight']} in flight"
    if j.action == "join":
        others = f"{j.live_nodes} other node{'s' if j.live_nodes != 1 else ''}" if j.live_nodes else "no other node"
        logger.info("crawlplug: node %s joining run %d of crawl %r (%s, %s)", node, j.run, crawl, counts, others)
    elif j.action == "resume":
        logger.info(
            "crawlplug: node %s resuming run %d of crawl %r (%s; no node was running)", node, j.run, crawl, counts
        )
    else:
        prev = j.previous
        if prev is None:
            before = "its first run"
        elif prev.get("state") == "reset":
            before = f"run {prev.get('id')} reset by CRAWLPLUG_FLUSH_ON_START"
        elif prev.get("id"):
            when = prev.get("ended")
            at = f" at {time.strftime('%H:%M', time.localtime(when / 1000))}" if isinstance(when, int) else ""
            state = prev.get("state")
            said = {"limit": "ended by a limit", "stopped": "stopped"}
            ended = said.get(state, state) if isinstance(state, str) else state
            before = f"run {prev.get('id')} {ended or 'finished'}{at}"
        else:
            before = "the crawl finished before runs were recorded"
        if prev is None:
            kept = ""
        elif j.cleared:
            kept = ", fingerprints cleared"
        else:
            why = "CRAWLPLUG_INCREMENTAL" if config.incremental else "its dedup forgets them by itself"
            kept = f", fingerprints kept ({why})"
        why = f", {j.why}; what run {prev.get('id')} left queued is dropped" if j.why and prev else ""
        logger.info("crawlplug: node %s starting run %d of crawl %r (%s%s)%s", node, j.run, crawl, before, kept, why)
    if j.waited > 1:
        logger.info("crawlplug: waited %.1fs for another node to begin the run", j.waited)
