"""A node alive in a crawl's run: heartbeat, reaping, pause, the end of the run.

:class:`Liveness` owns what decides whether a node goes on: the run it joined (crawlplug.crawl.runs), the
termination rule (the whole crawl empty for the grace period, then the end recorded in Redis in the step that
lets every node close), an operator's pause, the counts the run sums up, and what the node does when the crawl
was reset under it (join again, dropping the old state's work). The run's limits, stop and drain, as each
heartbeat reports them, are the part of crawlplug.scheduler.runcontrol. The heartbeat renews every lease the
node holds, publishes its metrics, and reaps the expired leases of nodes that died, in one round trip.

Its size: it keeps what each heartbeat and idle read answered (crawlplug.frontier.results.Beat and Idle,
state the frontier no longer holds) beside the rule that ends a run; the end of a run (``crawl_done``,
``record_end_on_close``, ``_observe``) is the part to cut out next.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from scrapy import Request

from ..crawl import runs
from ..errors import REDIS_ERRORS, ConfigError, RolledBack, RunEnded, StaleEpoch
from ..failures import FAILED
from ..frontier.results import Idle
from . import enginehooks
from .leases import LEASE_META, Termination
from .runcontrol import RunControl

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from ..config import SchedulerConfig
    from ..crawl import Crawl
    from ..frontier.interface import CrawlFrontier
    from .batch import Batch
    from .entries import StartEntries
    from .outage import Outage
    from .reporter import Reporter

__all__ = ["DRAIN_GRACE", "LOST_BY_STALLING", "LOST_IN_REDIS", "Liveness"]

logger = logging.getLogger(__name__)

LOST_BY_STALLING = "crawlplug: %d leases of this node expired (stalled longer than CRAWLPLUG_LEASE_TIMEOUT=%ss) and were given to other nodes"
LOST_IN_REDIS = (
    "crawlplug: Redis no longer holds %d leases of this node, though it renewed them in time (within "
    "%ss): it lost the calls that made them (a restart, a failover). Their requests are back in the "
    "queue and fetched again; this node does not acknowledge them"
)

DRAIN_GRACE = 3.0  #: seconds a draining run must stay empty before it ends, for workers (CRAWLPLUG_IDLE_CLOSE = 0)


class Liveness:
    """Heartbeat, run, termination and pause of one node (module docstring)."""

    #: Scrapy stats added to the run's counters with each heartbeat (crawlplug.crawl.runs summaries)
    #: (errors: failed requests as crawlplug.failures defines them, robots.txt none; spider_errors:
    #: what CLOSESPIDER_ERRORCOUNT counts)
    RUN_COUNTS: ClassVar[dict[str, tuple[str, ...]]] = {
        "items": ("item_scraped_count",),
        "errors": (FAILED,),
        "spider_errors": ("spider_exceptions/count",),
    }

    def __init__(
        self,
        crawler: Crawler,
        frontier: CrawlFrontier,
        batch: Batch,
        entries: StartEntries,
        *,
        crawl: Crawl,
        config: SchedulerConfig,
        outage: Outage,
        reporter: Reporter,
        joined: runs.Joined,
        join_args: runs.JoinArgs,
        started: float,
        enqueue: Callable[[Request], bool],
        control: RunControl,
    ) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.frontier = frontier
        self.crawl = crawl
        self.batch = batch
        self.entries = entries
        self.config = config
        self.outage = outage
        self.report = reporter
        self.joined = joined
        self.join_args = join_args
        self.started = started  # Redis's clock: uptimes compare across nodes
        self.enqueue = enqueue
        self.control = control
        self.termination = Termination(config.idle_close)
        self.producing = True  # the spider's start() may still yield requests
        self.stale_leases: set[str] = set()  # leases of a crawl state reset under this node
        #: this node's counts when it joined the run: what it reports is its total since (heartbeat.lua
        #: counts what is new of it, so a beat sent again counts nothing twice)
        self.base: dict[str, int] = {}
        self.run_ended = False  # the run's end is recorded (finished): the node may close
        #: what the last heartbeat or idle read said: the crawl's data found lost; what idle.lua read
        self.data_lost = False
        self.idle = Idle(0, 0, 0, start_entries=0, data_lost=False, start_urls_kind="")
        self._pages: deque[tuple[float, int]] = deque()  # (time, acked total), for pages/min
        self._beat_ok = time.monotonic()  # when the last heartbeat went through
        self._last_poll = 0.0

    # -- the heartbeat --------------------------------------------------------------
    def heartbeat(self) -> None:
        # held back between attempts only while Redis cannot be reached: one that answers
        # (refusing admissions while full) gets every heartbeat, which renews the leases there
        if self.outage.heartbeat_waiting():
            return
        try:
            lease_ids = list(dict.fromkeys([*self.batch.held(), *self.entries.leases]))
            totals = {name: value - self.base.get(name, 0) for name, value in self.counts().items()}
            # the reap rides with the heartbeat (one round trip: each one blocks the reactor)
            beat = self.frontier.heartbeat_and_reap(
                lease_ids,
                producing=self.still_producing(),
                metrics={
                    "pid": os.getpid(),
                    "started": int(self.started * 1000),
                    "leases": len(lease_ids),
                    "acked": self.batch.acked_total,
                    "pages_per_min": self._pages_per_min(),
                    "paused": int(self.batch.paused),
                },
                totals=totals,
            )
            lost, (requeued, dead) = beat
            self.data_lost = beat.data_lost
            self._follow_pause(beat.paused)
            self._follow_run(self.control.follow(beat.run_state))
            if beat.run_state == "finished" and not self.run_ended:
                self.run_ended = True  # another node recorded the end: close with it
                enginehooks.wake(self.crawler)
            self.check_lost()
            beat_before, self._beat_ok = self._beat_ok, time.monotonic()
            if lost:
                lost_set = set(lost)
                self.batch.forget(lost_set)
                self.entries.forget(lost_set)
                self.report.count("crawlplug/lost_leases", len(lost))
                # renewed in time, they were reaped by no node: Redis lost the calls that made them
                logger.warning(
                    LOST_IN_REDIS if self._beat_ok - beat_before < self.config.lease_timeout else LOST_BY_STALLING,
                    len(lost),
                    self.config.lease_timeout,
                )
            self.entries.drain(self.enqueue)
            self.entries.fire_seeds(self.enqueue)
            if requeued:
                self.report.count("crawlplug/reaped", requeued)
                logger.info(
                    "crawlplug: put %d leases of stopped nodes back (requests in the queue, "
                    "start entries at the head of start_urls)",
                    requeued,
                )
                enginehooks.wake(self.crawler)
            if dead:
                self.report.count("crawlplug/dead", dead)
                logger.warning("crawlplug: %d requests exceeded CRAWLPLUG_MAX_DELIVERIES; see the dead letters", dead)
            self.outage.ok(confirmed=not self.outage.refused)  # it goes through on a full Redis too
        except RolledBack as exc:  # Redis went back in time: the frontier gave back what the node held
            self.batch.rolled_back(exc.given_back)
        except REDIS_ERRORS as exc:
            self.outage.error(exc)
        except Exception:  # a failing heartbeat must never stop the loop silently
            logger.exception("crawlplug: heartbeat failed")

    def counts(self) -> dict[str, int]:
        """This node's counts the run sums up: items scraped, errors, spider errors, and in a
        sharded crawl the pages it acknowledged (the shards' own counters are not in the crawl's
        keys, where the run's page limit is checked)."""
        get = self.stats.get_value if self.stats is not None else (lambda *_: 0)
        out = {}
        for name, stats in self.RUN_COUNTS.items():
            total = 0
            for stat in stats:
                value = get(stat, 0)
                total += int(value) if isinstance(value, (int, float)) else 0
            out[name] = total
        if len(self.frontier.parts()) > 1:
            out["shard_acked"] = self.batch.acked_total
        return out

    def _pages_per_min(self) -> int:
        """Requests this node finished per minute, over the last minute."""
        now = time.monotonic()
        self._pages.append((now, self.batch.acked_total))
        while len(self._pages) > 1 and now - self._pages[0][0] > 60:
            self._pages.popleft()
        t0, a0 = self._pages[0]
        return round((self.batch.acked_total - a0) * 60 / (now - t0)) if now - t0 >= 1 else 0

    def still_producing(self) -> bool:
        """Whether this node may still add work the other nodes cannot see yet."""
        if self.batch.draining:
            return False  # whatever it makes is not admitted
        if self.batch.buffer:
            return True  # not yet admitted
        if self.entries.waiting:
            return False  # RedisSpider.start() waits for entries: it adds nothing meanwhile
        return self.producing and enginehooks.start_running(self.crawler)

    def _follow_pause(self, paused: bool) -> None:
        """Start or end a pause an operator asked for (seen at each heartbeat)."""
        if paused == self.batch.paused:
            return
        self.batch.pause(paused)
        with contextlib.suppress(*REDIS_ERRORS):  # shown at once, not at the next heartbeat
            self.crawl.publish(self.frontier.node_id, paused=int(paused))
        if paused:
            given = self.batch.give_back_prefetched()
            logger.warning(
                "crawlplug: crawl %r paused by an operator: this node takes no new requests and "
                "finishes the %d it is downloading (%d prefetched given back)",
                self.frontier.keys.crawl,
                len(self.batch.book),
                given,
            )
            self.report.count("crawlplug/paused")
        else:
            logger.warning("crawlplug: crawl %r resumed", self.frontier.keys.crawl)
            enginehooks.wake(self.crawler)

    def _follow_run(self, change: str) -> None:
        """A drain began (workers then end too, once the queue has run out) or was continued."""
        if change == "drain" and self.termination.worker_mode:
            self.termination = Termination(DRAIN_GRACE)
        elif change == "continue":
            self.termination = Termination(self.config.idle_close)

    # -- the end of the run -----------------------------------------------------------
    def _observe(self, queued: int, leased: int, producers: int, local: bool) -> None:
        """Feed the termination rule; a crawl whose data Redis lost never reads as finished.
        While the run drains, start entries waiting are no work: no node takes them."""
        self.check_lost()
        if self.batch.draining:
            queued = max(0, queued - self.idle.start_entries)
        waiting = self.termination.empty_since is not None
        self.termination.observe(queued, leased, producers, local_pending=local or self.data_lost)
        if self.termination.empty_since is not None and not waiting and not self.termination.worker_mode:
            logger.info(
                "crawlplug: nothing queued or in flight in crawl %r; closing in %.4g s unless work "
                "comes (CRAWLPLUG_IDLE_CLOSE: time for other nodes' requests to arrive)",
                self.frontier.keys.crawl,
                self.termination.grace,
            )

    def note_idle(self, idle: Idle) -> Idle:
        """Keep what an idle read (idle.lua) said beside its counts: start entries waiting, data lost."""
        self.idle, self.data_lost = idle, idle.data_lost
        return idle

    def check_lost(self) -> None:
        """Redis lost the crawl's data, or start_urls is of the wrong type: say so once."""
        if self.data_lost:
            self.report.once(
                "data-lost",
                logging.ERROR,
                "crawlplug: Redis lost crawl %r's data (its keys vanished: a restart without "
                "persistence, a flush, a failover to an empty replica). What was queued or in "
                "flight then is gone; the crawl will not end as 'finished' while this stands. Push "
                "its start URLs again, then `crawlplug resume --crawl %s` to accept the loss",
                self.frontier.keys.crawl,
                self.frontier.keys.crawl,
            )
        kind = self.idle.start_urls_kind
        if kind:
            self.report.wrong_start_urls(self.frontier.keys.start_urls, kind)

    def crawl_done(self) -> bool:
        """The termination rule held for the grace period, or another node recorded the end:
        record the run's end (lua/finish.lua) and let this node close with it."""
        if self.run_ended:
            return True
        if not self.termination.finished():
            return False
        state, _ = self.finish_run()
        if state == "finished":
            self.run_ended = True
            return True
        if state in ("limit", "stopped"):
            self.control.ended_by_finish(state)  # a drain that ran out, or a limit: close with it
            return False
        if state == "gone":  # the run was replaced: join the current one
            self.rejoin(StaleEpoch(f"STALE_EPOCH {self.frontier.epoch} {self.frontier.epoch} run replaced"))
        self.termination.busy()  # work or a producer appeared
        return False

    def tick(self) -> None:
        """Flush old buffers, and while idle look for new work and for the end of the crawl."""
        if self.outage.waiting():
            return
        batch = self.batch
        try:
            now = time.monotonic()
            if (batch.buffer or batch.acks or batch.events) and now - batch.since >= self.config.flush_interval:
                batch.flush()
            if (
                batch.idle
                and not batch.paused
                and not batch.pending()
                and now - self._last_poll >= self.config.poll_interval
            ):
                self._last_poll = now
                queued, leased, producers = self.note_idle(self.frontier.idle_state())
                batch.saw_queued(max(0, queued - self.idle.start_entries))  # requests, not entries
                if self.idle.start_entries:
                    self.entries.drain(self.enqueue)
                self._observe(queued, leased, producers, bool(batch.book) or bool(self.entries.leases))
                if batch.draining:
                    queued = max(0, queued - self.idle.start_entries)  # waiting entries: not taken now
                if queued:
                    batch.wake()
                    enginehooks.wake(self.crawler)
                elif self.termination.finished() or self.run_ended:
                    enginehooks.wake(self.crawler)  # the engine's idle check will now let the spider close
        except REDIS_ERRORS as exc:
            self.outage.error(exc)
        except Exception:
            logger.exception("crawlplug: scheduler tick failed")

    def _flushed_idle_state(self) -> tuple[int, int, int] | None:
        """Send what waits, then read the crawl-wide (queued, leased, producers); None when
        Redis did not answer (the outage rule decides what follows)."""
        try:
            self.batch.flush()
            return self.note_idle(self.frontier.idle_state())
        except REDIS_ERRORS as exc:
            self.outage.error(exc)
            return None

    def may_close(self) -> bool:
        """spider_idle: whether the whole crawl is done (never on local idleness alone)."""
        self.producing = False
        if self.termination.worker_mode or self.outage.waiting() or self.control.ending:
            return False
        state = self._flushed_idle_state()
        if state is None:
            return False
        queued, leased, producers = state
        self._observe(queued, leased, producers, self.batch.pending())
        if queued:
            self.batch.wake()
        already = self.run_ended
        try:
            done = self.crawl_done()
        except REDIS_ERRORS as exc:
            self.outage.error(exc)
            return False
        if done:
            logger.info(
                "crawlplug: run %d of crawl %r is finished (nothing queued or leased on any node for %ss)%s",
                self.joined.run,
                self.frontier.keys.crawl,
                self.termination.grace,
                "; another node recorded it" if already else "",
            )
        return done

    def start_idle(self) -> bool:
        """RedisSpider.start() found no entry. True once the whole crawl is finished
        (never in worker mode): then start() may end and the node close."""
        self.entries.wait_for_entries()
        if self.termination.worker_mode:
            return False
        state = self._flushed_idle_state()
        if state is None:
            return False
        queued, leased, producers = state
        local = self.batch.pending() or bool(self.batch.book) or bool(self.entries.leases)
        self._observe(queued, leased, producers, local)
        try:
            if self.termination.finished() and not self.run_ended:
                enqueued = self.batch.acked_total or self.crawl.totals()["enqueued"]
                if self.entries.nothing_pushed(self.termination.grace, enqueued):
                    self.run_ended = True  # no end recorded, but nothing more to do here
                    return False
            return self.crawl_done()
        except REDIS_ERRORS as exc:
            self.outage.error(exc)
            return False

    def finish_run(self) -> tuple[str, int | None]:
        """Record the end of the run this node joined if the whole crawl is done (lua/finish.lua)."""
        return self.crawl.finish_run(
            self.joined.run, node_id=self.frontier.node_id, epoch=self.frontier.epoch, lanes=self.frontier.lanes
        )

    def record_end_on_close(self, reason: str) -> None:
        """Stopped (Ctrl-C, SIGTERM) while waiting out the idle grace with the whole crawl done:
        the run is finished, or the next node would resume a run with nothing left in it."""
        if self.control.ending:
            self.control.closed()
            return
        if (
            self.run_ended
            or self.termination.worker_mode
            or self.termination.empty_since is None
            or reason == "finished"
        ):
            return
        queued, leased, producers = self.note_idle(self.frontier.idle_state())
        if queued or leased or producers or self.batch.pending():
            return
        state, _ = self.finish_run()
        if state == "finished":
            logger.info(
                "crawlplug: run %d of crawl %r is finished (this node stopped while the whole crawl "
                "was done, waiting out its idle grace)",
                self.joined.run,
                self.frontier.keys.crawl,
            )

    # -- a crawl reset under the node --------------------------------------------------
    def rejoin(self, exc: StaleEpoch) -> None:
        """The crawl was reset (purge, CRAWLPLUG_FLUSH_ON_START elsewhere, import), began a
        new run, or Redis lost its data while this node ran: join again, and drop what
        belongs to the old state. (An epoch key deleted by hand is put back by runs.rejoin:
        the node is still in its run and keeps everything.)"""
        before = self.joined
        try:
            # a purge or a loss took the crawl's shard count with it: claimed again
            shards = max(1, len(self.frontier.parts()) - 1)
            joined, lost = runs.rejoin(
                self.crawl.client, self.frontier.keys, exc, self.joined, shards=shards, **self.join_args
            )
        except RunEnded as rexc:
            logger.error("crawlplug: %s: this node closes", rexc)
            enginehooks.close(self.crawler, rexc.state)
            return
        except ConfigError as cexc:  # e.g. the crawl was started again with another shard count
            logger.error("crawlplug: %s; closing this node (finish_reason 'config_error')", cexc)
            enginehooks.close(self.crawler, "config_error", failed=True)
            return
        except REDIS_ERRORS as rexc:
            # the join met a fault itself (a corrupt key, an outage): still of the old epoch,
            # this node is refused again at its next call and tries again then
            self.outage.error(rexc)
            return
        self.joined = joined
        if (joined.run, joined.epoch) == (before.run, before.epoch) and not lost:
            return  # the same run and state: what this node holds is still its own
        stale, waiting = self.batch.drop()
        self.stale_leases |= stale
        self.entries.drop()
        self.termination.busy()
        self.run_ended = False
        self.base = self.counts()  # what this node did before belongs to the old state
        self.frontier.epoch = joined.epoch  # (the frontier forgets what it knew of a Bloom filter's layers)
        self.frontier.run_id = joined.run
        self.crawler.stats.set_value(runs.RUN_STAT, joined.run)
        self.data_lost = self.data_lost or lost
        self.termination = Termination(self.config.idle_close)
        try:
            self.control.apply(self.joined.run)
        except REDIS_ERRORS as error:
            self.outage.error(error)
        self.report.count("crawlplug/epoch_changes")
        self.report.count("crawlplug/stale_dropped", len(stale) + waiting)
        what = (
            "Redis lost the crawl's data (a restart without persistence, a flush, a failover to an empty replica)"
            if lost
            else "the crawl was reset or began a new run (`crawlplug purge`, "
            "CRAWLPLUG_FLUSH_ON_START or `crawlplug import`)"
        )
        logger.warning(
            "crawlplug: crawl %r: %s while this node ran: dropped %d requests in flight (their links too) "
            "and %d waiting, and its fingerprint cache; now in run %d",
            self.frontier.keys.crawl,
            what,
            len(stale),
            waiting,
            joined.run,
        )
        self.check_lost()
        enginehooks.wake(self.crawler)

    def is_stale(self, request: Request) -> bool:
        """Whether ``request`` (a response's request) was leased in a crawl state since reset."""
        return bool(self.stale_leases) and request.meta.get(LEASE_META) in self.stale_leases
