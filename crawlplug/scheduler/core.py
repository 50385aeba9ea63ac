"""The Scrapy Scheduler that keeps the crawl frontier in Redis.

Life of a request (DESIGN.md, section 3):

* ``enqueue_request`` serializes the request and buffers it locally;
* the buffer is admitted in one script call (dedup + store + enqueue,
  atomically) together with the acks of every request the engine finished
  since the last call, so a parent is acknowledged only in the same step
  that stores what its callback produced;
* ``next_request`` leases a batch of requests (as many as the downloader has
  free slots) in the same round trip, and hands them out one by one;
* when the engine is done with a request (downloaded, callback or errback
  run, outputs stored, items through the pipelines) its lease id joins the
  next admission call;
* a heartbeat renews this node's leases and requeues the expired leases of
  nodes that died; a closing node gives back what it did not finish.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any, ClassVar

import redis
from scrapy import Request, Spider, signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.dupefilters import BaseDupeFilter
from scrapy.exceptions import DontCloseSpider
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import build_from_crawler, load_object
from twisted.internet.task import LoopingCall

from .. import __version__, connection, memory, starts
from . import enginehooks
from ..frontier import runs
from ..config import SchedulerConfig, setting
from ..frontier.dedup import BloomDedup, Dedup
from ..dupefilters import RedisSetDupeFilter
from ..errors import (
    REDIS_ERRORS,
    AdmissionIncomplete,
    ConfigError,
    CorruptKey,
    DecodeError,
    RedisUnavailable,
    RunEnded,
    SerializationError,
    StaleEpoch,
)
from ..frontier.single import Admission, AdmitResult, Domains, Frontier, Leased, process_node_id
from ..frontier.keys import CrawlKeys
from .leases import LEASE_META, LeaseBook, Termination
from ..queues import BaseQueue, domain_limits, load_queue_class
from ..seeds import Seeds
from ..serializers import serializer_from_settings
from ..frontier.sharded import ShardedFrontier, claim_shards

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: Meta flag of requests made from start entries: admitted even if seen, fingerprint recorded.
RECORD_FP_META = "_crawlplug_record_fp"
#: Meta key of requests made from a start entry: the entry's lease id.
START_META = "_crawlplug_start"


class Scheduler(BaseScheduler):
    """A Scrapy scheduler whose queue, dedup and leases are shared in Redis."""

    def __init__(
        self,
        crawler: Crawler,
        *,
        dupefilter: BaseDupeFilter,
        queue: BaseQueue,
        serializer: Any,
        config: SchedulerConfig | None = None,
    ) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.df = dupefilter
        self.queue = queue
        self._domains = queue.order == "domain"
        self.serializer = serializer
        self.config = config = config or SchedulerConfig()
        self.prefetch = config.prefetch
        self.termination = Termination(config.idle_close)

        self.spider: Spider | None = None
        self.frontier: Frontier | None = None
        self.conn: connection.Connection | None = None
        self.book = LeaseBook()
        self._buffer: list[tuple[Request, bytes, float, bytes, str]] = []
        self._buffer_since = 0.0
        self._acks: list[str] = []
        self._prefetched: deque[Leased] = deque()
        self._recent: OrderedDict[bytes, None] = OrderedDict()
        self._producing = True
        self._idle = False
        self._nothing_until = 0.0
        self._last_poll = 0.0
        self._redis_down_since: float | None = None
        self._next_probe = 0.0  # during an outage: when to ask Redis again
        self._probe_backoff = 0.0
        self._closing = False
        self._cache_cleared = True
        self._outage_timeout = setting(crawler.settings, "CRAWLPLUG_REDIS_OUTAGE_TIMEOUT", "getfloat")
        self._logged: set[str] = set()
        self._loops: list[LoopingCall] = []
        self._started = time.time()
        self._acked_total = 0
        self._wake_call: Any = None
        self._events: list[tuple[str, str]] = []  # (lease id, "s"/"r") for the per-domain queue
        self._reports: dict[str, tuple[Request, str]] = {}  # lease id -> (request, reports still due)
        self._start_leases: set[str] = set()  # start entries taken, their requests not yet stored
        self._start_pending: dict[str, int] = {}  # start lease id -> its requests not yet enqueued
        self._start_waiting = False  # RedisSpider.start() is waiting for entries
        self._pages: deque[tuple[float, int]] = deque()  # (time, acked total), for pages/min
        self.seeds: Any = None
        self._paused = False  # an operator paused the crawl (crawlplug pause, the dashboard)
        self.domains: Domains | None = None
        self.joined: runs.Joined | None = None  # the run this node is in (crawlplug.frontier.runs)
        self._stale_leases: set[str] = set()  # leases of a crawl state reset under this node
        self._counted: dict[str, int] = {}  # Scrapy stats last added to the run's counters
        self._run_ended = False  # the run's end is recorded (finished): the node may close

    # -- construction ---------------------------------------------------------
    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Scheduler:
        s = crawler.settings
        df_cls = load_object(s["DUPEFILTER_CLASS"])
        dupefilter = build_from_crawler(df_cls, crawler)
        if not isinstance(dupefilter, RedisSetDupeFilter) and type(dupefilter) is not BaseDupeFilter:
            raise ConfigError(
                f"crawlplug's Scheduler needs a crawlplug dupefilter "
                f"(DUPEFILTER_CLASS = 'crawlplug.dupefilters.RedisSetDupeFilter'), "
                f"or scrapy.dupefilters.BaseDupeFilter for none; got {s['DUPEFILTER_CLASS']!r}"
            )
        try:
            serializer: Any = serializer_from_settings(s)
        except ConfigError as exc:  # raised by open() instead: one clear line, not a traceback
            serializer = exc
        return cls(
            crawler,
            dupefilter=dupefilter,
            queue=load_queue_class(setting(s, "CRAWLPLUG_QUEUE_CLASS")).from_settings(s),
            serializer=serializer,
            config=SchedulerConfig.from_settings(s),
        )

    # -- open / close -----------------------------------------------------------
    def open(self, spider: Spider) -> None:
        self.spider = spider
        try:
            self._connect(spider)
        except RunEnded as exc:
            logger.error("crawlplug: %s: this node exits", exc)
            self.frontier = None
            enginehooks.fail_at_start(self.crawler, exc.state)
            return
        except (RedisUnavailable, ConfigError, *REDIS_ERRORS) as exc:
            # One clear line and a clean close (CloseSpider is Scrapy's way for a
            # component that cannot start), instead of a traceback per component.
            reason = "config_error" if isinstance(exc, ConfigError) else "redis_unavailable"
            logger.error("crawlplug: %s", exc)
            self.frontier = None
            enginehooks.fail_at_start(self.crawler, reason)
            return
        assert self.frontier is not None and self.conn is not None
        keys = self.frontier.keys
        if self.conn.embedded:
            logger.info(
                "crawlplug %s: crawl %r on the embedded Redis %s (data in %s). To share this crawl "
                "with other machines, run one Redis they can all reach and set "
                "REDIS_URL='redis://<host>:6379/0' on every node.",
                __version__, keys.crawl, self.conn.safe_url, connection.embedded_dir(self.crawler.settings),
            )  # fmt: skip
        else:
            logger.info("crawlplug %s: crawl %r on Redis %s", __version__, keys.crawl, self.conn.safe_url)
        try:
            status = self.frontier.status()
        except REDIS_ERRORS as exc:  # the heartbeat below says what is wrong, once
            status = {"queued": 0, "in_flight": 0, "seen": 0, "nodes": {}, "corrupt": {}}
            logger.debug("crawlplug: could not read the crawl's status at start: %s", exc)
        for key, error in status.get("corrupt", {}).items():
            self._log_once(f"corrupt:{key}", logging.ERROR,
                           "crawlplug: crawl key %s cannot be read (%s): repair or delete it (docs/faults.md); "
                           "this node goes on with the rest of the crawl", key, error)  # fmt: skip
        self._log_join(status)
        enginehooks.on_request_done(self.crawler, self._finished)
        self.crawler.signals.connect(self._on_idle, signal=signals.spider_idle)
        self._heartbeat()
        for func, interval in ((self._heartbeat, self.config.heartbeat), (self._tick, self.config.flush_interval)):
            loop = LoopingCall(func)
            loop.start(interval, now=False)
            self._loops.append(loop)

    def _connect(self, spider: Spider) -> None:
        if isinstance(self.serializer, ConfigError):  # e.g. pickle without CRAWLPLUG_SECRET
            raise self.serializer
        self.conn = connection.from_settings(self.crawler.settings)
        connection.check(self.conn)
        sec, usec = self.conn.client.time()
        self._started = int(sec) + int(usec) / 1e6  # Redis's clock: uptimes compare across nodes
        mem = memory.memory(self.conn.client)
        if mem is not None:
            risk = memory.eviction_risk(mem["policy"])
            if risk:
                logger.warning("crawlplug: %s", risk)
            if mem["nearly_full"]:
                logger.warning("crawlplug: Redis uses %.0f%% of its maxmemory (%d bytes); when it is full it "
                               "refuses new requests and this node waits", mem["ratio"] * 100, mem["max"])  # fmt: skip
        keys = CrawlKeys(self.config.crawl_id or spider.name, self.config.key_prefix)
        shards = setting(self.crawler.settings, "CRAWLPLUG_SHARDS", "getint")
        common: dict[str, Any] = {
            "queue": self.queue,
            "lease_timeout": self.config.lease_timeout,
            "heartbeat": self.config.heartbeat,
            "max_deliveries": self.config.max_deliveries,
            "node_id": process_node_id(),
        }
        claim_shards(self.conn.client, keys, shards)
        self.joined = self._join(keys, "new" if self.config.flush_on_start else "auto")
        common["epoch"] = self.joined.epoch
        if shards > 1:
            self.frontier = ShardedFrontier(
                self.conn.client, keys, shards=shards, **common,
                dedup_factory=self.df.make_strategy if isinstance(self.df, RedisSetDupeFilter) else Dedup,
            )  # fmt: skip
        else:
            self.frontier = Frontier(
                self.conn.client, keys, **common,
                dedup=self.df.strategy if isinstance(self.df, RedisSetDupeFilter) else Dedup(),
            )  # fmt: skip
        if isinstance(self.df, RedisSetDupeFilter):
            self.df.bind(self.frontier)
        self._check_queue_kind()
        if self.config.seeds:
            self.seeds = Seeds(self.conn.client, keys)
        if self._domains:
            self.domains = Domains(self.conn.client, keys, self._parts()[1:] or [keys])
            # "key": how hosts map to domains, for tools that requeue (crawlplug dead requeue)
            try:
                self.domains.configure({**domain_limits(self.crawler.settings), "key": self.queue.key})
            except CorruptKey as exc:  # the scripts refuse until it is repaired; said once here
                self._corrupt(exc)
            self.crawler.signals.connect(self._on_sent, signal=signals.request_reached_downloader)
            self.crawler.signals.connect(self._on_downloaded, signal=signals.request_left_downloader)
            if self.crawler.settings.getbool("ROBOTSTXT_OBEY") and hasattr(signals, "robots_parsed"):
                self.crawler.signals.connect(self._on_robots, signal=signals.robots_parsed)

    def _join(self, keys: CrawlKeys, want: str) -> runs.Joined:
        """Join the crawl's run, resume it or begin the next one (crawlplug.frontier.runs)."""
        assert self.conn is not None
        return runs.join(self.conn.client, keys, want=want, **self._join_args())

    def _join_args(self) -> dict[str, Any]:
        return {
            "node_id": process_node_id(),
            "ttl_ms": int(max(self.config.lease_timeout, 3 * self.config.heartbeat) * 1000),
            "incremental": self._incremental(),
            "worker": self.termination.worker_mode,
        }

    def _incremental(self) -> bool:
        """CRAWLPLUG_INCREMENTAL; unset, True for dedup that forgets by itself (it decides re-crawls)."""
        if self.config.incremental is not None:
            return bool(self.config.incremental)
        strategy = getattr(self.df, "strategy", None)
        return getattr(strategy, "mode", "") == "ttl" or bool(getattr(strategy, "generations", 0))

    def _log_join(self, status: dict[str, Any]) -> None:
        """The node's first words on the run: which one, and whether it joined, resumed or began it."""
        assert self.frontier is not None and self.joined is not None
        j, crawl, node = self.joined, self.frontier.keys.crawl, self.frontier.node_id
        counts = f"{status['queued']} queued, {status['in_flight']} in flight"
        if j.action == "join":
            others = f"{j.live_nodes} other node{'s' if j.live_nodes != 1 else ''}" if j.live_nodes else "no other node"
            logger.info("crawlplug: node %s joining run %d of crawl %r (%s, %s)", node, j.run, crawl, counts, others)
        elif j.action == "resume":
            logger.info("crawlplug: node %s resuming interrupted run %d of crawl %r (%s; no node was running)",
                        node, j.run, crawl, counts)  # fmt: skip
        else:
            prev = j.previous
            if prev is None:
                before = "its first run"
            elif prev.get("state") == "reset":
                before = f"run {prev.get('id')} reset by CRAWLPLUG_FLUSH_ON_START"
            elif prev.get("id"):
                when = prev.get("ended")
                at = f" at {time.strftime('%H:%M', time.localtime(when / 1000))}" if isinstance(when, int) else ""
                before = f"run {prev.get('id')} {prev.get('state', 'finished')}{at}"
            else:
                before = "the crawl finished before runs were recorded"
            if prev is None:
                kept = ""
            elif j.cleared:
                kept = ", fingerprints cleared"
            else:
                why = "CRAWLPLUG_INCREMENTAL" if self.config.incremental else "its dedup forgets them by itself"
                kept = f", fingerprints kept ({why})"
            logger.info("crawlplug: node %s starting run %d of crawl %r (%s%s)", node, j.run, crawl, before, kept)
        if j.waited > 1:
            logger.info("crawlplug: waited %.1fs for another node to begin the run", j.waited)

    def _check_queue_kind(self) -> None:
        """Refuse to run one crawl with the per-domain queue and a plain one at once:
        requests waiting in the other kind would never be crawled."""
        assert self.frontier is not None
        keys = self.frontier.keys
        waiting = 0
        for k in self._parts():
            try:
                waiting += int(self.frontier.client.zcard(k.queue if self._domains else k.dq))
            except redis.ResponseError:  # a key of the wrong type: the scripts name it
                pass
        if waiting:
            used, ours = ("a plain queue", "DomainQueue") if self._domains else ("DomainQueue", "a plain queue")
            raise ConfigError(
                f"crawl {keys.crawl!r} has {waiting} requests queued by {used}, and this node uses "
                f"{ours} (CRAWLPLUG_QUEUE_CLASS): finish the crawl with the queue class it was "
                f"started with, or start afresh (CRAWLPLUG_FLUSH_ON_START=True, or `crawlplug purge`)"
            )

    def _parts(self) -> list[CrawlKeys]:
        """The key sets of this crawl's frontier: its own, then each shard's."""
        assert self.frontier is not None
        shards = getattr(self.frontier, "shards", [])
        return [self.frontier.keys, *(f.keys for f in shards)]

    def _on_robots(self, robotparser: Any, request: Request) -> None:
        """robots.txt parsed: its Crawl-delay becomes the domain's minimum delay, crawl-wide."""
        s = self.crawler.settings
        agent = s.get("ROBOTSTXT_USER_AGENT") or request.headers.get(b"User-Agent") or s.get("USER_AGENT")
        try:
            delay = robotparser.crawl_delay(agent)
        except Exception:  # a parser without Crawl-delay support, or a broken robots.txt
            return
        if not delay or delay <= 0:
            return
        domain = self.queue.domain(request)
        try:
            self.domains.configure({f"r:{domain}": f"{round(float(delay) * 1000)} -"})
        except REDIS_ERRORS as exc:
            self._redis_error(exc)
            return
        logger.info("crawlplug: robots.txt of %s asks for Crawl-delay %ss; applied crawl-wide", domain, delay)
        self._inc("crawlplug/robots_crawl_delay")

    def close(self, reason: str) -> None:
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self._loops.clear()
        if self.frontier is None:
            return
        self._next_probe = 0.0  # one last attempt, even during an outage
        try:
            self._flush()
            unstarted = [x.id for x in self._prefetched]
            self._prefetched.clear()
            unstarted += sorted(self._start_leases)  # back to the head of start_urls
            self._start_leases.clear()
            released = self.frontier.release(unstarted, unstarted=True)
            released += self.frontier.release(list(self.book.active), unstarted=False)
            self.book.active.clear()
            if released:
                self._inc("crawlplug/released", released)
                logger.info("crawlplug: gave %d unfinished requests back to the queue", released)
            self._record_end_on_close(reason)
            self.frontier.leave()
        except StaleEpoch:
            logger.info("crawlplug: the crawl was reset while this node closed: it had nothing to give back")
            with contextlib.suppress(*REDIS_ERRORS):
                self.frontier.leave()
        except REDIS_ERRORS as exc:
            logger.error(
                "crawlplug: could not hand back this node's leases (%s); they return to the queue "
                "when they expire in %.0fs",
                exc, self.config.lease_timeout,
            )  # fmt: skip
        finally:
            self.df.close(reason)
            if self.conn is not None:
                self.conn.client.close()

    def _record_end_on_close(self, reason: str) -> None:
        """Stopped (Ctrl-C, SIGTERM) while waiting out the idle grace with the whole crawl done:
        the run is finished, or the next node would resume a run with nothing left in it."""
        if (self._run_ended or self.termination.worker_mode or self.termination.empty_since is None
                or self.joined is None or reason == "finished"):  # fmt: skip
            return
        assert self.frontier is not None and self.conn is not None
        queued, leased, producers = self.frontier.idle_state()
        if queued or leased or producers or self.has_pending_requests():
            return
        state, _ = runs.finish(self.conn.client, self.frontier.keys, node_id=self.frontier.node_id,
                               run_id=self.joined.run, epoch=self.frontier.epoch)  # fmt: skip
        if state == "finished":
            logger.info("crawlplug: run %d of crawl %r is finished (this node stopped while the whole crawl "
                        "was done, waiting out its idle grace)", self.joined.run, self.frontier.keys.crawl)  # fmt: skip

    # -- Scheduler interface ------------------------------------------------------
    def has_pending_requests(self) -> bool:
        return bool(self._prefetched or self._buffer or self._acks or self._events)

    def enqueue_request(self, request: Request) -> bool:
        try:
            return self._enqueue(request)
        finally:
            start_lease = request.meta.get(START_META)
            if start_lease is not None and start_lease in self._start_pending:
                self._start_pending[start_lease] -= 1
                if self._start_pending[start_lease] <= 0:
                    # the entry's last request is buffered (or refused): ack the entry
                    # with it, even if the node stops before its start() resumes
                    self.start_done(start_lease)

    def _enqueue(self, request: Request) -> bool:
        arg = b""
        if not request.dont_filter and self.frontier is not None and self.frontier.dedup.mode != "none":
            try:
                arg = self.df.argument(request)
            except (ConfigError, ValueError) as exc:
                self._log_once(f"dedup:{exc}", logging.ERROR, "crawlplug: request %s refused: %s", request, exc)
                self._inc("crawlplug/unserializable")
                return False
            if arg in self._recent:
                self._recent.move_to_end(arg)
                self.df.log(request, self.spider)
                self._inc("crawlplug/filtered_locally")
                return False
        # serialized after the local duplicate check: most links of a page are known ones
        try:
            payload = self.serializer.dumps(request, self.spider)
        except SerializationError as exc:
            self._log_once(f"unserializable:{exc}", logging.ERROR,
                           "crawlplug: request %s refused: %s", request, exc)  # fmt: skip
            self._inc("crawlplug/unserializable")
            return False
        if not self._buffer and not self._acks:
            self._buffer_since = time.monotonic()
        if request.dont_filter and request.meta.get(RECORD_FP_META) and self.frontier is not None:
            # a start entry is crawled even if seen before, and recorded, so the
            # links that lead back to it later are duplicates (same admission call)
            with contextlib.suppress(ConfigError, ValueError):
                if self.frontier.dedup.mode != "none":
                    self._buffer.append((request, self.df.argument(request), 0.0, b"", ""))
        self._buffer.append((request, arg, self.queue.score(request), payload, self.queue.domain(request)))
        self._inc("scheduler/enqueued/redis")
        self._inc("scheduler/enqueued")
        self._nothing_until = 0.0
        if len(self._buffer) >= self.config.batch_size:
            self._flush()
        return True

    def next_request(self) -> Request | None:
        if self._paused:
            self._idle = True
            return None
        if not self._prefetched and time.monotonic() >= self._nothing_until:
            self._flush(pop=enginehooks.free_download_slots(self.crawler, self.prefetch))
            if not self._prefetched:
                # nothing ready: let the idle poll find new work instead of
                # asking Redis on every engine tick; the per-domain queue says
                # when its next domain may start, and is asked again just then
                self._nothing_until = time.monotonic() + self._pause()
        while self._prefetched:
            leased = self._prefetched.popleft()
            try:
                request = self.serializer.loads(leased.payload, self.spider)
            except DecodeError as exc:
                self._dead_letter(leased, str(exc))
                continue
            self.book.take(leased.id, request)
            if leased.report:
                self._reports[leased.id] = (request, leased.report)
            self._idle = False
            self._inc("scheduler/dequeued/redis")
            self._inc("scheduler/dequeued")
            if leased.deliveries > 1:
                self._inc("crawlplug/redelivered")
            return request
        self._idle = True
        return None

    def _pause(self) -> float:
        """Seconds before asking Redis for work again after an empty pop."""
        poll = self.config.poll_interval
        wait = self.frontier.next_ready_ms / 1000 if self._domains and self.frontier is not None else -1.0
        if wait < 0 or wait >= poll:
            return poll
        if self._wake_call is None or not self._wake_call.active():
            from twisted.internet import reactor

            self._wake_call = reactor.callLater(wait, enginehooks.wake, self.crawler)
        return wait

    def __len__(self) -> int:
        queued = 0
        if self.frontier is not None:
            try:
                queued = len(self.frontier)
            except REDIS_ERRORS:
                pass
        return queued + len(self._prefetched) + len(self._buffer)

    # -- internals --------------------------------------------------------------------
    def _finished(self, request: Request) -> None:
        lease_id = self.book.finish(request)
        if lease_id is None:
            return
        if not self._acks and not self._buffer:
            self._buffer_since = time.monotonic()
        # No round trip of its own: the engine asks for the next request right
        # after this (a free download slot), and that call admits the children,
        # acks this request and leases the next one in one round trip. The tick
        # flushes what waits longer than CRAWLPLUG_FLUSH_INTERVAL.
        self._acks.append(lease_id)
        self._reports.pop(lease_id, None)
        if self._domains:
            # its domain may have room again: ask Redis at the next engine call
            self._nothing_until = 0.0
            enginehooks.wake(self.crawler)

    def _report(self, request: Request, kind: str) -> bool:
        """Queue a report on a per-domain-queue request this node leased; False if none was due."""
        lease_id = request.meta.get(LEASE_META)
        entry = self._reports.get(lease_id) if lease_id is not None else None
        if entry is None or entry[0] is not request or kind not in entry[1]:
            return False  # not ours, a copy (redirect, retry), or already reported
        left = entry[1].replace(kind, "")
        if left:
            self._reports[lease_id] = (request, left)
        else:
            del self._reports[lease_id]
        if not (self._buffer or self._acks or self._events):
            self._buffer_since = time.monotonic()
        self._events.append((lease_id, kind))
        return True

    def _on_sent(self, request: Request, spider: Spider) -> None:
        """A request of a domain with a delay goes out: its domain's delay starts now, crawl-wide."""
        if self._report(request, "s"):
            self._flush()  # the other nodes wait for this

    def _on_downloaded(self, request: Request, spider: Spider) -> None:
        """A download ended: the domain's concurrency slot is free (sent with the next call)."""
        if self._report(request, "r"):
            self._nothing_until = 0.0
            enginehooks.wake(self.crawler)

    def _flush(self, pop: int = 0) -> None:
        """Admit the buffer, ack finished leases and (if ``pop``) lease more: one round trip."""
        assert self.frontier is not None
        if not (self._buffer or self._acks or self._events or pop) or self._waiting_for_redis():
            return
        batch, acks, events = self._buffer, self._acks, self._events
        if acks:
            for error in enginehooks.flush_feeds(self.crawler):
                self._log_once(f"feedflush:{error}", logging.WARNING,
                               "crawlplug: could not flush a feed file: %s", error)  # fmt: skip
        if self._sharded:
            # routed by domain (DomainQueue's key), else by host: one site, one shard
            items: list[Admission] = [
                (fp, score, payload, domain, domain or urlparse_cached(request).hostname or request.url)
                for request, fp, score, payload, domain in batch
            ]  # type: ignore[misc]
        else:
            items = [(fp, score, payload, domain) for _, fp, score, payload, domain in batch]
        try:
            if pop:
                result, leased = self.frontier.admit_and_pop(items, acks, pop, events)
            else:
                result, leased = self.frontier.admit(items, acks, events), []
        except AdmissionIncomplete as exc:
            # part of the batch is stored (other shards): account for it and keep only
            # the rest, so a retry counts none of it as a duplicate; the acks wait
            done = [(entry, flag) for entry, flag in zip(batch, exc.flags) if flag != "-"]
            self._buffer = [entry for entry, flag in zip(batch, exc.flags) if flag == "-"]
            self._account([entry for entry, _ in done], AdmitResult("".join(f for _, f in done), 0, 0))
            self._redis_error(exc.cause)
            return
        except REDIS_ERRORS as exc:
            self._redis_error(exc)
            return
        if batch or acks or events or leased:
            # a write went through (a pop that found nothing wrote nothing: a full
            # Redis still answers those, and is not back yet)
            self._redis_ok()
        self._buffer, self._acks, self._events = [], [], []
        if result is not None:
            self._account(batch, result)
        if leased:
            self._prefetched.extend(leased)
            self._inc("crawlplug/leased", len(leased))

    @property
    def _sharded(self) -> bool:
        return isinstance(self.frontier, ShardedFrontier)

    def _account(self, batch: list[tuple[Request, bytes, float, bytes, str]], result: Any) -> None:
        admitted = filtered = 0
        for (request, fp, _, payload, _), flag in zip(batch, result.flags):
            if fp:
                self._remember(fp)
            if not payload:
                continue  # only recorded a start entry's fingerprint
            if flag == "0":
                filtered += 1
                self.df.log(request, self.spider)
            else:
                admitted += 1
        if admitted:
            self._inc("crawlplug/admitted", admitted)
        if filtered:
            self._inc("crawlplug/filtered", filtered)
        if result.acked:
            self._acked_total += result.acked
            self._inc("crawlplug/acked", result.acked)
        if result.stale:
            self._inc("crawlplug/stale_acks", result.stale)

    def _remember(self, fp: bytes) -> None:
        # an expiring fingerprint may become new again: never cache those
        if self.config.fp_cache <= 0 or self.frontier is None or self.frontier.dedup.mode == "ttl":
            return
        self._recent[fp] = None
        if len(self._recent) > self.config.fp_cache:
            self._recent.popitem(last=False)

    def _dead_letter(self, leased: Leased, reason: str) -> None:
        assert self.frontier is not None
        self._log_once(f"undecodable:{reason}", logging.ERROR,
                       "crawlplug: queue entry %s cannot be crawled (%s); moved to the dead letters",
                       leased.id, reason)  # fmt: skip
        self._inc("crawlplug/undecodable")
        try:
            self.frontier.dead_letter(leased.id, reason, deliveries=leased.deliveries)
            self._inc("crawlplug/dead")
        except REDIS_ERRORS as exc:
            self._redis_error(exc)  # the lease expires and the entry comes back later

    def _heartbeat(self) -> None:
        if self.frontier is None or self._waiting_for_redis():
            return
        try:
            # acks not yet sent are renewed too: while admissions fail (a full Redis, a
            # corrupt key) and heartbeats go through, finished pages must not expire
            lease_ids = list(dict.fromkeys([
                *self.book.active, *(x.id for x in self._prefetched), *self._start_leases, *self._acks,
            ]))  # fmt: skip
            counts = self._counts()
            # the reap rides with the heartbeat (one round trip: each one blocks the reactor)
            lost, (requeued, dead) = self.frontier.heartbeat_and_reap(
                lease_ids,
                producing=self._still_producing(),
                metrics={
                    "pid": os.getpid(),
                    "started": int(self._started * 1000),
                    "leases": len(lease_ids),
                    "acked": self._acked_total,
                    "pages_per_min": self._pages_per_min(),
                    "paused": int(self._paused),
                },
                counts={name: value - self._counted.get(name, 0) for name, value in counts.items()},
            )
            self._counted = counts
            self._follow_pause(self.frontier.paused)
            if self.frontier.run_state == "finished" and not self._run_ended:
                self._run_ended = True  # another node recorded the end: close with it
                enginehooks.wake(self.crawler)
            self._check_lost()
            if lost:
                lost_set = set(lost)
                self._prefetched = deque(x for x in self._prefetched if x.id not in lost_set)
                self._start_leases -= lost_set
                for lease_id in lost_set:
                    self._start_pending.pop(lease_id, None)
                for lease_id in lost_set:
                    self._reports.pop(lease_id, None)
                self.book.forget(lost)
                self._inc("crawlplug/lost_leases", len(lost))
                logger.warning(
                    "crawlplug: %d leases of this node expired (stalled longer than "
                    "CRAWLPLUG_LEASE_TIMEOUT=%ss) and were given to other nodes",
                    len(lost), self.config.lease_timeout,
                )  # fmt: skip
            self._drain_starts()
            self._fire_seeds()
            if requeued:
                self._inc("crawlplug/reaped", requeued)
                logger.info("crawlplug: put %d leases of stopped nodes back (requests in the queue, "
                            "start entries at the head of start_urls)", requeued)  # fmt: skip
                enginehooks.wake(self.crawler)
            if dead:
                self._inc("crawlplug/dead", dead)
                logger.warning("crawlplug: %d requests exceeded CRAWLPLUG_MAX_DELIVERIES; see the dead letters", dead)
            self._redis_ok(confirmed=True)
        except REDIS_ERRORS as exc:
            self._redis_error(exc)
        except Exception:  # a failing heartbeat must never stop the loop silently
            logger.exception("crawlplug: heartbeat failed")

    #: Scrapy stats added to the run's counters with each heartbeat (crawlplug.frontier.runs summaries)
    RUN_COUNTS: ClassVar[dict[str, tuple[str, ...]]] = {"items": ("item_scraped_count",),
                  "errors": ("spider_exceptions/count", "downloader/exception_count")}  # fmt: skip

    def _counts(self) -> dict[str, int]:
        """This node's Scrapy counts the run sums up: items scraped, errors."""
        get = self.stats.get_value if self.stats is not None else (lambda *_: 0)
        out = {}
        for name, stats in self.RUN_COUNTS.items():
            total = 0
            for stat in stats:
                value = get(stat, 0)
                total += int(value) if isinstance(value, (int, float)) else 0
            out[name] = total
        return out

    def _rejoin(self, exc: StaleEpoch) -> None:
        """The crawl was reset (purge, CRAWLPLUG_FLUSH_ON_START elsewhere, import), began a
        new run, or Redis lost its data while this node ran: drop what belongs to the old
        state and join again."""
        assert self.frontier is not None and self.conn is not None and self.joined is not None
        in_flight, waiting = len(self.book.active), len(self._buffer) + len(self._prefetched) + len(self._acks)
        self._stale_leases |= set(self.book.active)
        self.book.active.clear()
        self._prefetched.clear()
        self._buffer, self._acks, self._events = [], [], []
        self._start_leases.clear()
        self._start_pending.clear()
        self._reports.clear()
        self._recent.clear()
        self.termination.empty_since = None
        self._run_ended = False
        self._counted = self._counts()  # what this node did before belongs to the old state
        _forget_bloom_layers(self.frontier)
        try:
            self.joined, lost = runs.rejoin(self.conn.client, self.frontier.keys, exc, self.joined,
                                            **self._join_args())  # fmt: skip
        except RunEnded as rexc:
            logger.error("crawlplug: %s: this node closes", rexc)
            enginehooks.close(self.crawler, rexc.state)
            return
        self.frontier.epoch = self.joined.epoch
        self.frontier.data_lost = self.frontier.data_lost or lost
        self._inc("crawlplug/epoch_changes")
        self._inc("crawlplug/stale_dropped", in_flight + waiting)
        what = ("Redis lost the crawl's data (a restart without persistence, a flush, a failover to an empty "
                "replica)" if lost else "the crawl was reset or began a new run (`crawlplug purge`, "
                "CRAWLPLUG_FLUSH_ON_START or `crawlplug import`)")  # fmt: skip
        logger.warning(
            "crawlplug: crawl %r: %s while this node ran: dropped %d requests in flight (their links too) "
            "and %d waiting, and its fingerprint cache; now in run %d",
            self.frontier.keys.crawl, what, in_flight, waiting, self.joined.run,
        )  # fmt: skip
        self._check_lost()
        self._nothing_until = 0.0
        enginehooks.wake(self.crawler)

    def is_stale(self, request: Request) -> bool:
        """Whether ``request`` (a response's request) was leased in a crawl state since reset:
        the links of its page are dropped (crawlplug.scheduler.staleoutput)."""
        return bool(self._stale_leases) and request.meta.get(LEASE_META) in self._stale_leases

    def _crawl_done(self) -> bool:
        """The termination rule held for the grace period, or another node recorded the end:
        record the run's end (lua/finish.lua) and let this node close with it."""
        if self._run_ended:
            return True
        if not self.termination.finished() or self.frontier is None or self.joined is None:
            return False
        assert self.conn is not None
        state, _ = runs.finish(self.conn.client, self.frontier.keys, node_id=self.frontier.node_id,
                               run_id=self.joined.run, epoch=self.frontier.epoch)  # fmt: skip
        if state == "finished":
            self._run_ended = True
            return True
        if state in ("limit", "stopped"):
            enginehooks.close(self.crawler, state)
        elif state == "gone":  # the run was replaced: join the current one
            self._rejoin(StaleEpoch(f"STALE_EPOCH {self.frontier.epoch} {self.frontier.epoch} run replaced"))
        self.termination.empty_since = None  # "busy": work or a producer appeared
        return False

    def _follow_pause(self, paused: bool) -> None:
        """Start or end a pause an operator asked for (seen at each heartbeat)."""
        if paused == self._paused or self.frontier is None:
            return
        self._paused = paused
        with contextlib.suppress(*REDIS_ERRORS):  # shown at once, not at the next heartbeat
            self.frontier.client.hset(self.frontier.keys.node(self.frontier.node_id), "paused", int(paused))
        if paused:
            unstarted = [x.id for x in self._prefetched]
            self._prefetched.clear()
            given = self.frontier.release(unstarted, unstarted=True) if unstarted else 0
            logger.warning(
                "crawlplug: crawl %r paused by an operator: this node takes no new requests and "
                "finishes the %d it is downloading (%d prefetched given back)",
                self.frontier.keys.crawl, len(self.book.active), given,
            )  # fmt: skip
            self._inc("crawlplug/paused")
        else:
            logger.warning("crawlplug: crawl %r resumed", self.frontier.keys.crawl)
            self._nothing_until = 0.0
            enginehooks.wake(self.crawler)

    def _pages_per_min(self) -> int:
        """Requests this node finished per minute, over the last minute."""
        now = time.monotonic()
        self._pages.append((now, self._acked_total))
        while len(self._pages) > 1 and now - self._pages[0][0] > 60:
            self._pages.popleft()
        t0, a0 = self._pages[0]
        return round((self._acked_total - a0) * 60 / (now - t0)) if now - t0 >= 1 else 0

    def _fire_seeds(self) -> None:
        if self.seeds is None:
            return
        try:
            fired = self.seeds.fire_due()
        except (*REDIS_ERRORS, ConfigError) as exc:
            self._log_once(f"seeds:{exc}", logging.ERROR, "crawlplug: seed timer failed: %s", exc)
            return
        if fired:
            self._inc("crawlplug/seeds_fired", fired)
            self._drain_starts()

    def _still_producing(self) -> bool:
        """Whether this node may still add work the other nodes cannot see yet."""
        if self._buffer:
            return True  # not yet admitted
        if self._start_waiting:
            return False  # RedisSpider.start() waits for entries: it adds nothing meanwhile
        return self._producing and enginehooks.start_running(self.crawler)

    # -- start entries: crawlplug push, the seed timer, RedisSpider ------------------
    def take_start_requests(self, n: int, legacy_key: str | None = None) -> list[tuple[str, list[Request]]]:
        """Lease up to ``n`` start entries and make their requests: [(lease id, requests)].

        A malformed entry goes to the dead letters with its reason. Call
        :meth:`start_done` for each lease once its requests are enqueued: the
        lease is acked in the admission call that stores them, so an entry
        taken by a node that dies before is not lost (it returns to the head
        of start_urls when its lease expires).
        """
        if self.frontier is None or self._paused:
            return []
        try:
            taken = self.frontier.take_starts(n, legacy_key)
        except REDIS_ERRORS as exc:
            self._redis_error(exc)
            return []
        self._redis_ok()
        out: list[tuple[str, list[Request]]] = []
        for lease_id, raw in taken:
            self._start_leases.add(lease_id)
            try:
                requests = self._requests_from_entry(raw)
                for request in requests:  # one a node cannot store: a dead letter, not a refusal that acks it
                    self.serializer.dumps(request, self.spider)
            except (DecodeError, SerializationError) as exc:
                self._log_once(f"badstart:{exc}", logging.ERROR,
                               "crawlplug: start entry %r cannot be crawled (%s); moved to the dead letters",
                               raw[:200], exc)  # fmt: skip
                self._inc("crawlplug/start_entries_invalid")
                self._start_leases.discard(lease_id)
                try:
                    self.frontier.dead_letter(lease_id, f"invalid start entry: {exc}")
                except REDIS_ERRORS as rexc:
                    self._redis_error(rexc)  # the lease expires and the entry returns
                continue
            for request in requests:
                request.meta[RECORD_FP_META] = True
                request.meta[START_META] = lease_id
            if requests:
                self._start_pending[lease_id] = len(requests)
            out.append((lease_id, requests))
        if taken:
            self._start_waiting = False
            self._inc("crawlplug/start_entries", len(taken))
        return out

    def _requests_from_entry(self, raw: bytes) -> list[Request]:
        maker = getattr(self.spider, "make_request_from_data", None)
        if maker is None:
            return [starts.build(starts.parse(raw), self.spider)]
        try:
            result = maker(raw)
        except DecodeError:
            raise
        except Exception as exc:  # the spider's own parser: its error becomes the reason
            raise DecodeError(f"make_request_from_data failed: {type(exc).__name__}: {exc}") from None
        if result is None:
            return []
        if isinstance(result, Request):
            return [result]
        return [r for r in result if isinstance(r, Request)]

    def start_done(self, lease_id: str) -> None:
        """The requests made from a start entry are enqueued (or dropped on the way):
        ack it with their admission. Calling it twice is harmless."""
        self._start_pending.pop(lease_id, None)
        if lease_id in self._start_leases:
            self._start_leases.discard(lease_id)
            if not self._acks and not self._buffer:
                self._buffer_since = time.monotonic()
            self._acks.append(lease_id)

    def start_idle(self) -> bool:
        """RedisSpider.start() found no entry. True once the whole crawl is finished
        (never in worker mode): then start() may end and the node close."""
        self._start_waiting = True
        if self.frontier is None or self.termination.worker_mode:
            return False
        try:
            self._flush()
            queued, leased, producers = self.frontier.idle_state()
        except REDIS_ERRORS as exc:
            self._redis_error(exc)
            return False
        local = self.has_pending_requests() or bool(self.book.active) or bool(self._start_leases)
        self._observe(queued, leased, producers, local)
        if self.termination.finished() and not self._run_ended and self._nothing_pushed():
            return False
        try:
            return self._crawl_done()
        except REDIS_ERRORS as exc:
            self._redis_error(exc)
            return False

    def _nothing_pushed(self) -> bool:
        """A crawl fed by start entries that never got one: not finished, said so once, closed."""
        assert self.frontier is not None
        keys = self.frontier.keys
        try:
            taken = int(self.frontier.client.hget(keys.stats, "start_taken") or 0)
        except REDIS_ERRORS:
            return False
        if taken or self._acked_total or runs.totals(self.frontier.client, self._parts())["enqueued"]:
            return False
        logger.warning(
            "crawlplug: nothing was pushed to crawl %r for %ss, so there is nothing to crawl: push start URLs "
            "with `crawlplug push --crawl %s URL...` (or RPUSH %s, or scrapy-redis's key); closing this node "
            "(finish_reason 'nothing_pushed'; the run is not finished)",
            keys.crawl, self.termination.grace, keys.crawl, keys.start_urls,
        )  # fmt: skip
        enginehooks.close(self.crawler, "nothing_pushed")
        self._run_ended = True  # no finish recorded, but nothing more to do here
        return True

    def _drain_starts(self) -> None:
        """Spiders that do not read start entries themselves get them from the scheduler."""
        if self.spider is None or getattr(self.spider, "crawlplug_reads_start_entries", False):
            return
        for lease_id, requests in self.take_start_requests(self.config.start_batch):
            for request in requests:
                self.enqueue_request(request)
            self.start_done(lease_id)
            self._nothing_until = 0.0

    def _tick(self) -> None:
        """Flush old buffers, and while idle look for new work and for the end of the crawl."""
        if self.frontier is None or self._waiting_for_redis():
            return
        try:
            now = time.monotonic()
            if (self._buffer or self._acks or self._events) and now - self._buffer_since >= self.config.flush_interval:
                self._flush()
            if (self._idle and not self._paused and not self.has_pending_requests()
                    and now - self._last_poll >= self.config.poll_interval):  # fmt: skip
                self._last_poll = now
                queued, leased, producers = self.frontier.idle_state()
                if self.frontier.start_entries:
                    self._drain_starts()
                local = bool(self.book.active) or bool(self._start_leases)
                self._observe(queued, leased, producers, local)
                if queued:
                    self._nothing_until = 0.0
                    enginehooks.wake(self.crawler)
                elif self.termination.finished() or self._run_ended:
                    enginehooks.wake(self.crawler)  # the engine's idle check will now let the spider close
        except REDIS_ERRORS as exc:
            self._redis_error(exc)
        except Exception:
            logger.exception("crawlplug: scheduler tick failed")

    def _on_idle(self, spider: Spider) -> None:
        """spider_idle: close only when the whole crawl is done, never on local idleness."""
        self._producing = False
        if self.frontier is None:
            return
        if self.termination.worker_mode or self._waiting_for_redis():
            raise DontCloseSpider
        try:
            self._flush()
            queued, leased, producers = self.frontier.idle_state()
        except REDIS_ERRORS as exc:
            self._redis_error(exc)
            raise DontCloseSpider from None
        self._observe(queued, leased, producers, self.has_pending_requests())
        if queued:
            self._nothing_until = 0.0
        already = self._run_ended
        try:
            done = self._crawl_done()
        except REDIS_ERRORS as exc:
            self._redis_error(exc)
            raise DontCloseSpider from None
        if not done:
            raise DontCloseSpider
        assert self.joined is not None
        logger.info(
            "crawlplug: run %d of crawl %r is finished (nothing queued or leased on any node for %ss)%s",
            self.joined.run, self.frontier.keys.crawl, self.termination.grace,
            "; another node recorded it" if already else "",
        )  # fmt: skip

    def _corrupt(self, exc: CorruptKey) -> None:
        """A script refused a corrupt crawl key: not an outage, said once per key."""
        self._inc("crawlplug/corrupt_key_refusals")
        self._log_once(f"corrupt:{exc.key}", logging.ERROR,
                       "crawlplug: %s. This is not an outage: this node keeps what it could not store, "
                       "goes on with what does not need that key, and tries again", exc)  # fmt: skip

    def _check_lost(self) -> None:
        """Redis lost the crawl's data (seen by a heartbeat, or at idle checks): say so once."""
        assert self.frontier is not None
        if self.frontier.data_lost:
            self._log_once("data-lost", logging.ERROR,
                           "crawlplug: Redis lost crawl %r's data (its keys vanished: a restart without "
                           "persistence, a flush, a failover to an empty replica). What was queued or in flight "
                           "then is gone; the crawl will not end as 'finished' while this stands. Push its "
                           "start URLs again, then `crawlplug resume --crawl %s` to accept the loss",
                           self.frontier.keys.crawl, self.frontier.keys.crawl)  # fmt: skip
        kind = getattr(self.frontier, "start_urls_kind", "")
        if kind:
            self._log_once(f"corrupt:{self.frontier.keys.start_urls}", logging.ERROR,
                           "crawlplug: crawl key %s holds a %s, not a list: its entries are not read. Push start "
                           "URLs with `crawlplug push` (a list), or move them there and delete the key "
                           "(docs/faults.md); the rest of the crawl goes on",
                           self.frontier.keys.start_urls, kind)  # fmt: skip

    def _observe(self, queued: int, leased: int, producers: int, local: bool) -> None:
        """Feed the termination rule; a crawl whose data Redis lost never reads as finished."""
        self._check_lost()
        assert self.frontier is not None
        self.termination.observe(queued, leased, producers, local_pending=local or self.frontier.data_lost)

    def _redis_error(self, exc: Exception) -> None:
        if isinstance(exc, StaleEpoch):
            self._rejoin(exc)
            return
        if isinstance(exc, CorruptKey):
            self._corrupt(exc)
            return
        self._inc("crawlplug/redis_errors")
        if isinstance(exc, redis.exceptions.NoPermissionError) and not self._closing:
            # waiting would not help: the Redis user lacks a grant (an ACL), e.g. on a key
            # outside the crawl's prefix such as scrapy-redis's <spider>:start_urls
            self._closing = True
            assert self.conn is not None
            logger.error("crawlplug: Redis at %s refused a command to this node's user: %s. Grant it (the "
                         "ACL crawlplug needs: %s); closing this node (finish_reason 'config_error')",
                         self.conn.safe_url, exc, connection.ACL_DOC)  # fmt: skip
            enginehooks.close(self.crawler, "config_error", failed=True)
            return
        now = time.monotonic()
        if self._redis_down_since is None:
            self._redis_down_since = now
            self._cache_cleared = False
            wait = f"up to {self._outage_timeout:g}s" if self._outage_timeout > 0 else "as long as it takes"
            if isinstance(exc, redis.exceptions.OutOfMemoryError) or "maxmemory" in str(exc):
                logger.error("crawlplug: Redis is out of memory (%s): it refuses to store new requests. This "
                             "node keeps them, and does not acknowledge the pages they came from, and asks "
                             "again every few seconds, %s: free memory or raise maxmemory", exc, wait)  # fmt: skip
            else:
                logger.error("crawlplug: Redis error (%s); keeping this node's requests and acks and "
                             "asking again every few seconds, %s", exc, wait)  # fmt: skip
        # ask again after 0.5 s, 1 s, 2 s... 5 s at most: each attempt blocks the
        # reactor for as long as the client takes to fail
        self._probe_backoff = min(5.0, max(0.5, self._probe_backoff * 2))
        self._next_probe = now + self._probe_backoff
        down = now - self._redis_down_since
        if 0 < self._outage_timeout < down and not self._closing:
            self._closing = True
            logger.error(
                "crawlplug: Redis unreachable for %.0fs (CRAWLPLUG_REDIS_OUTAGE_TIMEOUT=%gs): closing this node "
                "(finish_reason 'redis_unavailable'). Its unacknowledged requests return to the queue when "
                "their leases expire; start it again once Redis is back.",
                down, self._outage_timeout,
            )  # fmt: skip
            enginehooks.close(self.crawler, "redis_unavailable", failed=True)

    def _waiting_for_redis(self) -> bool:
        """During an outage, between two attempts: leave Redis alone (and the reactor free)."""
        return self._redis_down_since is not None and time.monotonic() < self._next_probe

    def _redis_ok(self, confirmed: bool = False) -> None:
        """A call went through. ``confirmed`` (the heartbeat, which always writes): the
        outage is over. Else calls resume at once, but a Redis that still refuses some
        writes (a full one takes deletions, not new requests) is not reported back."""
        if self._redis_down_since is None:
            return
        self._probe_backoff = 0.0
        self._next_probe = 0.0
        if not self._cache_cleared:
            # A Redis that comes back may have lost its last writes (a failover to a
            # replica that lagged, an AOF everysec crash): fingerprints this node saw
            # admitted may be gone, and trusting them would filter pages never crawled.
            self._recent.clear()
            self._cache_cleared = True
        if confirmed:
            logger.info("crawlplug: Redis is back after %.1fs", time.monotonic() - self._redis_down_since)
            self._redis_down_since = None

    def _log_once(self, key: str, level: int, msg: str, *args: Any) -> None:
        if key in self._logged or len(self._logged) > 1000:
            return
        self._logged.add(key)
        logger.log(level, msg, *args)

    def _inc(self, key: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(key, count)



def _forget_bloom_layers(frontier: Any) -> None:
    """After a reset, a Bloom strategy's knowledge of the filter's layers is wrong (it only grows)."""
    for part in getattr(frontier, "shards", None) or [frontier]:
        dedup = getattr(part, "dedup", None)
        if isinstance(dedup, BloomDedup):
            dedup.known = {}
