"""The Scrapy Scheduler that keeps the crawl frontier in Redis.

Life of a request (docs/architecture.md):

* ``enqueue_request`` serializes the request and buffers it (:mod:`.batch`);
* the buffer is admitted in one script call (dedup + store + enqueue,
  atomically) together with the acks of every request the engine finished
  since the last call: a parent's children are stored while its callback runs,
  its ack goes with the first call after the engine is done with it, never
  before them (when Redis went back in time and lost one of those earlier
  calls, the ack's call is refused and the node gives back what it holds:
  :mod:`.batch`);
* ``next_request`` leases a batch of requests (as many as the downloader has
  free slots) in the same round trip, and hands them out one by one;
* when the engine is done with a request (downloaded, callback or errback
  run, outputs stored, items through the pipelines) its lease id joins the
  next admission call (:mod:`.enginehooks` tells when);
* a heartbeat renews this node's leases and requeues the expired leases of
  nodes that died (:mod:`.liveness`); a closing node gives back what it did not
  finish.

This class only wires the parts together; each part owns its state: the batch
(:mod:`.batch`), start entries (:mod:`.entries`), liveness (:mod:`.liveness`),
outages (:mod:`.outage`), politeness and per-domain limits (:mod:`.politeness`), the
run's crawl-wide limits, stop and drain (:mod:`.runcontrol`), and joining the crawl
(:mod:`.joining`).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any, cast

from scrapy import Request, Spider, signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.dupefilters import BaseDupeFilter
from scrapy.exceptions import DontCloseSpider
from scrapy.utils.misc import build_from_crawler, load_object
from twisted.internet.task import LoopingCall

from ..config import SchedulerConfig, setting
from ..dupefilters import RedisSetDupeFilter
from ..errors import REDIS_ERRORS, ConfigError, RedisUnavailable, RunEnded, RunOver, StaleEpoch
from ..queues import BaseQueue, DomainQueue, PriorityQueue
from ..serializers import serializer_from_settings
from ..starts.seeds import Seeds
from . import calls, enginehooks, gcfreeze, joining, runcontrol
from .batch import Batch
from .entries import START_META, StartEntries
from .liveness import Liveness
from .outage import Outage
from .politeness import Choice, Politeness, choose
from .reporter import Reporter

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from ..crawl import Crawl
    from ..frontier.interface import CrawlFrontier
    from ..serializers import JsonSerializer
    from ..server import clients

logger = logging.getLogger(__name__)

__all__ = ["START_META", "Scheduler"]


class Scheduler(BaseScheduler):
    """A Scrapy scheduler whose queue, dedup and leases are shared in Redis."""

    def __init__(
        self,
        crawler: Crawler,
        *,
        dupefilter: BaseDupeFilter,
        queue: BaseQueue,
        serializer: JsonSerializer | ConfigError,
        config: SchedulerConfig | ConfigError | None = None,
        politeness: Choice | ConfigError | None = None,
    ) -> None:
        self.crawler = crawler
        self.df = dupefilter
        self.queue = queue
        self.politeness = politeness
        self.serializer = serializer
        #: a setting's value crawlplug cannot read: open() says it in one line (as the serializer's)
        self._config_error = config if isinstance(config, ConfigError) else None
        self.config = config if isinstance(config, SchedulerConfig) else SchedulerConfig()
        self.report = Reporter(crawler.stats)
        #: the frontier and the control plane over its parts (joining.Joined.crawl): None until
        #: open() has joined the crawl
        self.frontier: CrawlFrontier | None = None
        self.crawl: Crawl | None = None
        self.conn: clients.Connection | None = None
        self.batch: Batch | None = None
        self.entries: StartEntries | None = None
        self.liveness: Liveness | None = None
        self.outage: Outage | None = None
        self._politeness: Politeness | None = None
        self._limits: tuple[runcontrol.Limits, bool] = (runcontrol.Limits(), True)
        self._loops: list[LoopingCall] = []
        self._calls_note = ""  # what _build says of async calls, logged after the first lines
        self._frozen = False  # open() froze the objects alive at start (gcfreeze); close() releases them

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
            serializer: JsonSerializer | ConfigError = serializer_from_settings(s)
        except ConfigError as exc:  # raised by open() instead: one clear line, not a traceback
            serializer = exc
        try:
            choice: Choice | ConfigError = choose(s)  # the queue, and whether a site's limits hold crawl-wide
        except ConfigError as exc:  # raised by open(), as above
            choice = exc
        try:
            config: SchedulerConfig | ConfigError = SchedulerConfig.from_settings(s)
        except ConfigError as exc:  # raised by open(), as above
            config = exc
        return cls(
            crawler,
            dupefilter=dupefilter,
            queue=choice.queue if isinstance(choice, Choice) else PriorityQueue(),
            serializer=serializer,
            config=config,
            politeness=choice,
        )

    # -- open / close -----------------------------------------------------------
    def open(self, spider: Spider) -> None:
        try:
            for error in (self._config_error, self.serializer, self.politeness):  # e.g. pickle without CRAWLPLUG_SECRET
                if isinstance(error, ConfigError):
                    raise error
            self._limits = runcontrol.from_settings(self.crawler.settings)
            fallback = self.politeness.fallback if isinstance(self.politeness, Choice) else None
            node = joining.join_crawl(
                self.crawler, spider.name, self.config, queue=self.queue, dupefilter=self.df, fallback=fallback
            )
        except RunOver as exc:  # started late for a run that ended: nothing to do, no failure
            logger.warning("crawlplug: %s: this node exits", exc)
            enginehooks.fail_at_start(self.crawler, exc.state, failed=False)
            return
        except RunEnded as exc:
            logger.error("crawlplug: %s: this node exits", exc)
            enginehooks.fail_at_start(self.crawler, exc.state)
            return
        except (RedisUnavailable, ConfigError, *REDIS_ERRORS) as exc:
            # One clear line and a clean close (CloseSpider is Scrapy's way for a
            # component that cannot start), instead of a traceback per component.
            reason = "config_error" if isinstance(exc, ConfigError) else "redis_unavailable"
            logger.error("crawlplug: %s", exc)
            enginehooks.fail_at_start(self.crawler, reason)
            return
        self.conn, self.frontier, self.queue, self.crawl = node.conn, node.frontier, node.queue, node.crawl
        self._build(spider, node)
        assert self.batch is not None and self.liveness is not None
        joining.log_where(self.conn, self.frontier.keys, self.crawler.settings)
        try:
            status = self.crawl.status()
        except REDIS_ERRORS as exc:  # the heartbeat below says what is wrong, once
            status = {
                "corrupt": {},
                "queued": 0,
                "start_urls": 0,
                "domains": 0,
                "in_flight": 0,
                "seen": 0,
                "dead": 0,
                "stats": {},
                "nodes": {},
            }
            logger.debug("crawlplug: could not read the crawl's status at start: %s", exc)
        for key, problem in status.get("corrupt", {}).items():
            if key == self.frontier.keys.start_urls:
                # what it holds and what to do with its entries (idle.lua tells the kind), said once
                with contextlib.suppress(*REDIS_ERRORS):
                    self.liveness.note_idle(self.frontier.idle_state())
                    self.liveness.check_lost()
            self.report.once(
                f"corrupt:{key}",
                logging.ERROR,
                "crawlplug: crawl key %s cannot be read (%s): repair or delete it (docs/faults.md); "
                "this node goes on with the rest of the crawl",
                key,
                problem,
            )
        self.batch.saw_queued(int(status.get("queued", 0)))  # has_pending_requests before the first pop
        joining.log_join(self.frontier, node.joined, status, self.config)
        joining.log_politeness(self.frontier, self.politeness, self.queue)
        if self._calls_note:
            logger.info("%s", self._calls_note)
        try:
            self.liveness.control.apply(node.joined.run)  # the run's crawl-wide limits, said in these first lines
        except REDIS_ERRORS as exc:
            self.report.once("limits", logging.ERROR, "crawlplug: could not apply the run's limits: %s", exc)
        enginehooks.on_request_done(self.crawler, self.batch.finished)
        self.crawler.signals.connect(self._on_idle, signal=signals.spider_idle)
        self.liveness.heartbeat()
        for func, interval in (
            (self.liveness.heartbeat, self.config.heartbeat),
            (self.liveness.tick, self.config.flush_interval),
        ):
            loop = LoopingCall(func)
            loop.start(interval, now=False)
            self._loops.append(loop)
        if self.config.gc_freeze:
            frozen = gcfreeze.hold()  # last: what open() built lives until close
            self.crawler.stats.set_value("crawlplug/gc_frozen_objects", frozen)
            self._frozen = True

    def _build(self, spider: Spider, node: joining.Joined) -> None:
        """The parts of a node that joined its crawl, each owning its state."""
        settings = self.crawler.settings
        frontier = node.frontier  # self.frontier, set by open() just before
        serializer = cast("JsonSerializer", self.serializer)  # open() raised it if it was a ConfigError
        # or scrapy's BaseDupeFilter: the frontier's dedup is then Dedup ("none"), and Batch asks it nothing
        dupefilter = cast(RedisSetDupeFilter, self.df)
        stale: list[Any] = []  # the liveness part rejoins; it is built after the outage part
        self.outage = outage = Outage(
            self.crawler,
            self.report,
            timeout=setting(settings, "CRAWLPLUG_REDIS_OUTAGE_TIMEOUT", "getfloat"),
            safe_url=node.conn.safe_url,
            start_urls=frontier.keys.start_urls,
            on_stale=lambda exc: stale[0](exc),
            on_back=lambda: batch.recent.clear(),
        )
        batch = self.batch = Batch(
            self.crawler,
            frontier,
            dupefilter=dupefilter,
            serializer=serializer,
            queue=self.queue,
            config=self.config,
            outage=outage,
            reporter=self.report,
            spider=spider,
        )
        if self.config.async_calls != "off":
            # a Redis far away: pops in a worker thread, the other parts reach the frontier through
            # Settled, which lands the pop in flight before each of their calls (scheduler.calls)
            rtt: float | None = None
            if self.config.async_calls == "auto":
                try:
                    rtt = calls.round_trip_ms(node.conn.client.ping)
                except REDIS_ERRORS as exc:  # the heartbeat that follows says what is wrong
                    logger.debug("crawlplug: could not time Redis's round trip (%s): pops stay on the reactor", exc)
                    rtt = 0.0
            if rtt is None or rtt >= calls.AUTO_MS:
                batch.async_calls()
                self.frontier = frontier = cast("CrawlFrontier", calls.Settled(frontier, batch.settle))
                # said by open() after the node's first lines (its version, its crawl, its run)
                ping = "" if rtt is None else f"; Redis answers a PING in {rtt:.2f} ms"
                self._calls_note = (
                    f"crawlplug: pops run off the reactor (CRAWLPLUG_ASYNC_CALLS={self.config.async_calls}{ping})"
                )
            else:
                logger.debug("crawlplug: Redis answers a PING in %.2f ms: pops stay on the reactor", rtt)
        seeds = Seeds(node.conn.client, frontier.keys) if self.config.seeds else None
        self.entries = StartEntries(
            self.crawler,
            frontier,
            batch,
            crawl=node.crawl,
            serializer=serializer,
            config=self.config,
            outage=outage,
            reporter=self.report,
            seeds=seeds,
            spider=spider,
        )
        limits, crawl_wide = self._limits
        control = runcontrol.RunControl(
            self.crawler, frontier, batch, crawl=node.crawl, reporter=self.report, limits=limits, crawl_wide=crawl_wide
        )
        control.take_over()  # before spider_opened: Scrapy's CloseSpider counts no limit the run counts
        self.liveness = Liveness(
            self.crawler,
            frontier,
            batch,
            self.entries,
            crawl=node.crawl,
            config=self.config,
            outage=outage,
            reporter=self.report,
            joined=node.joined,
            join_args=node.join_args,
            started=node.started,
            enqueue=self.enqueue_request,
            control=control,
        )
        stale.append(self.liveness.rejoin)
        if self.queue.order == "domain":
            if not settings.getbool("AUTOTHROTTLE_ENABLED"):
                enginehooks.no_local_delay(self.crawler)  # the per-domain queue spaces the crawl's requests
            queue = cast(DomainQueue, self.queue)  # the order "domain" is DomainQueue's (its host or domain key)
            politeness = Politeness(
                self.crawler, frontier, queue, crawl=node.crawl, outage=outage, reporter=self.report
            )
            politeness.configure()
            self.crawler.signals.connect(batch.sent, signal=signals.request_reached_downloader)
            self.crawler.signals.connect(batch.downloaded, signal=signals.request_left_downloader)
            if settings.getbool("ROBOTSTXT_OBEY") and hasattr(signals, "robots_parsed"):
                self.crawler.signals.connect(politeness.robots_parsed, signal=signals.robots_parsed)
            self._politeness = politeness  # signals hold weak references

    def close(self, reason: str) -> None:
        if self._frozen:
            self._frozen = False
            gcfreeze.release()
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self._loops.clear()
        if self.frontier is None:
            return
        assert self.batch is not None and self.entries is not None and self.liveness is not None
        assert self.outage is not None and self.crawl is not None  # open() set them with the frontier
        self.outage.last_attempt()
        try:
            self.batch.flush()
            released = self.batch.give_back_prefetched()
            released += self.frontier.release(self.entries.give_back(), unstarted=True)  # head of start_urls
            released += self.frontier.release(list(self.batch.book.active), unstarted=False)
            self.batch.book.active.clear()
            if released:
                self.report.count("crawlplug/released", released)
                logger.info("crawlplug: gave %d unfinished requests back to the queue", released)
            self.liveness.record_end_on_close(reason)
            self.crawl.leave(self.frontier.node_id)
        except StaleEpoch:
            logger.info("crawlplug: the crawl was reset while this node closed: it had nothing to give back")
            with contextlib.suppress(*REDIS_ERRORS):
                self.crawl.leave(self.frontier.node_id)
        except REDIS_ERRORS as exc:
            logger.error(
                "crawlplug: could not hand back this node's leases (%s); they return to the queue "
                "when they expire in %.0fs",
                exc,
                self.config.lease_timeout,
            )
        finally:
            if self.batch.flights is not None:
                self.batch.flights.close()
            self.df.close(reason)
            if self.conn is not None:
                self.conn.client.close()

    def _on_idle(self, spider: Spider) -> None:
        """spider_idle: close only when the whole crawl is done, never on local idleness."""
        if self.liveness is not None and not self.liveness.may_close():
            raise DontCloseSpider

    # -- Scheduler interface ------------------------------------------------------
    def has_pending_requests(self) -> bool:
        return self.batch is not None and self.batch.has_requests()

    def enqueue_request(self, request: Request) -> bool:
        if self.batch is None:
            return False
        try:
            return self.batch.enqueue(request)
        finally:
            assert self.entries is not None
            self.entries.enqueued(request)

    def next_request(self) -> Request | None:
        return self.batch.next_request() if self.batch is not None else None

    def __len__(self) -> int:
        """Requests that will be crawled, as this node last saw them (no call to Redis)."""
        return len(self.batch) if self.batch is not None else 0

    # -- what RedisSpider and StaleOutputMiddleware ask ---------------------------------
    def take_start_requests(self, n: int, legacy_key: str | list[str] | None = None) -> list[tuple[str, list[Request]]]:
        """Lease up to ``n`` start entries and make their requests: [(lease id, requests)]
        (crawlplug.scheduler.entries); call :meth:`start_done` for each once enqueued."""
        return self.entries.take(n, legacy_key) if self.entries is not None else []

    def start_done(self, lease_id: str) -> None:
        if self.entries is not None:
            self.entries.done(lease_id)

    def start_idle(self) -> bool:
        """RedisSpider.start() found no entry: True once the whole crawl is finished."""
        return self.liveness.start_idle() if self.liveness is not None else False

    def is_stale(self, request: Request) -> bool:
        """Whether a response's request was leased in a crawl state since reset (its links are dropped)."""
        return self.liveness is not None and self.liveness.is_stale(request)
