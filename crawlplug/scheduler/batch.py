"""A node's traffic with the frontier: requests in, leases out, acks back.

:class:`Batch` owns the node's admission buffer (requests the spider produced,
not yet stored), its local fingerprint cache, the acks of requests the engine
finished, the per-domain queue's reports, the prefetched leases and the book of
requests handed to the engine. One frontier call (``admit_and_pop``) stores the
buffer, acks the finished parents and leases the next requests. A parent's children
are stored as its callback yields them (by the tick, a full buffer, the next
``next_request``), its ack goes with the first call after Scrapy is done with it:
never before its children, often in a later call. When Redis went back in time and
lost one of those earlier calls, the frontier refuses the ack's call and gives back
every lease the node holds (:meth:`Batch.rolled_back`), so those pages are fetched
again instead.

With a Redis far away (``CRAWLPLUG_ASYNC_CALLS``) the pop of :meth:`Batch.next_request` is
made by a worker thread: a call is taken out of the node's lists (``_take``), sent
(``_send``) and landed (``_land``), and on the reactor those three run in a row; the
threading and the one-call-at-a-time rule are in calls.py.

Its size: one class whose state moves together in each frontier call; its ``__all__`` and
checked types (issue 38) took it past 420 lines, and the take/send/land split of a call to
550. The flags the other parts set on it (a pause, a drain, the end of a run, when to ask
Redis again) are in switches.py.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from scrapy import Request, Spider, signals

from ..errors import (
    REDIS_ERRORS,
    AdmissionIncomplete,
    ConfigError,
    DecodeError,
    RolledBack,
    SerializationError,
)
from ..frontier import Admission, AdmitResult, Leased
from . import enginehooks
from .calls import Flights
from .leases import LEASE_META, LeaseBook, PopPacing
from .switches import Switches

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from ..config import SchedulerConfig
    from ..dupefilters import RedisSetDupeFilter
    from ..frontier.interface import CrawlFrontier
    from ..queues import BaseQueue
    from ..serializers import JsonSerializer
    from .outage import Outage
    from .reporter import Reporter

__all__ = ["RECORD_FP_META", "START_META", "Batch", "Buffered", "unrooted"]

#: Meta flag of requests made from start entries: admitted even if seen, fingerprint recorded.
RECORD_FP_META = "_crawlplug_record_fp"

#: Meta key of requests made from a start entry: the entry's lease id.
START_META = "_crawlplug_start"


def unrooted(request: Request) -> bool:
    """Whether no lease stands behind ``request``: a spider's start request (Scrapy marks
    them ``is_start_request``) not made from a start entry. A request made by a leased
    page's callback is made again when Redis loses it (the page's restored lease is
    fetched again), and one made from a start entry with the entry; such a one only if
    the frontier sends it again (crawlplug.frontier.core: the resend log)."""
    meta = request.meta
    return bool(meta.get("is_start_request")) and START_META not in meta


#: (request, dedup argument, score, payload, domain): one request waiting to be admitted
Buffered = tuple[Request, bytes, float, bytes, str]

#: one frontier call: (buffer, acks, reports, admissions, pop) as taken out of the node's lists
_Call = tuple[list[Buffered], list[str], list[tuple[str, str]], list[Admission], int]


class Batch(Switches):
    """Admission buffer, acks, reports and prefetched leases of one node (module docstring)."""

    def __init__(
        self,
        crawler: Crawler,
        frontier: CrawlFrontier,
        *,
        dupefilter: RedisSetDupeFilter,
        serializer: JsonSerializer,
        queue: BaseQueue,
        config: SchedulerConfig,
        outage: Outage,
        reporter: Reporter,
        spider: Spider | None = None,
    ) -> None:
        Switches.__init__(self)
        self.crawler = crawler
        self.frontier = frontier
        self.df = dupefilter
        self.serializer = serializer
        self.queue = queue
        self.domain_queue = queue.order == "domain"
        self.config = config
        self.outage = outage
        self.report = reporter
        self.spider = spider
        self.book = LeaseBook()
        self.buffer: list[Buffered] = []
        self.buffered: set[bytes] = set()  # the dedup arguments in the buffer (a second one is a duplicate)
        self.acks: list[str] = []
        self.events: list[tuple[str, str]] = []  # (lease id, "s"/"r") for the per-domain queue
        self.reports: dict[str, tuple[Request, str]] = {}  # lease id -> (request, reports still due)
        self.prefetched: deque[Leased] = deque()
        self.recent: OrderedDict[bytes, None] = OrderedDict()  # fingerprints seen admitted or known
        self.since = 0.0  # when the oldest thing waiting in buffer/acks/events came
        self.acked_total = 0
        self.idle = False  # the last next_request found nothing
        self.pacing = PopPacing(config.prefetch, crawler.settings.getint("CONCURRENT_REQUESTS"))
        #: ms until the per-domain queue's next domain is due, as the last pop saw it (-1: none waiting)
        self.next_ready_ms = -1
        self._wake_call: Any = None
        #: other holders of this node's leases (start entries), told what Redis no longer lets it keep
        self.lease_holders: list[Callable[[set[str]], None]] = []
        #: pops made by a worker thread (crawlplug.scheduler.calls; None: every call on the reactor)
        self.flights: Flights | None = None
        self.sending: set[bytes] = set()  # the dedup arguments of the admission in flight

    def async_calls(self) -> None:
        """Make this node's pops in a worker thread from now on (CRAWLPLUG_ASYNC_CALLS)."""
        self.flights = Flights(lambda: enginehooks.wake(self.crawler))

    def settle(self) -> None:
        """Land the call in flight, if any: before any other use of the frontier."""
        if self.flights is not None:
            self.flights.settle()

    # -- what the node holds ---------------------------------------------------
    def pending(self) -> bool:
        """Anything not yet sent to Redis, or leased and not yet handed to the engine."""
        return bool(
            self.prefetched or self.buffer or self.acks or self.events or (self.flights and self.flights.flying)
        )

    def has_requests(self) -> bool:
        """Scrapy's ``has_pending_requests``: this node's own work, or requests waiting in Redis
        as the last pop or idle poll saw them (a node that opens a crawl Redis holds work for
        must not be taken for idle)."""
        return self.pending() or self.queued_seen > 0

    def held(self) -> list[str]:
        """Every lease this node holds, acks not yet sent included (the heartbeat renews them:
        while admissions fail and heartbeats go through, finished pages must not expire)."""
        self.settle()
        return list(dict.fromkeys([*self.book.active, *(x.id for x in self.prefetched), *self.acks]))

    def __len__(self) -> int:
        """Requests that will be crawled, as this node knows them: prefetched, buffered (not
        known here as duplicates; a start entry's fingerprint record is no request) and
        waiting in Redis as last seen."""
        return len(self.prefetched) + sum(1 for entry in self.buffer if entry[3]) + self.queued_seen

    def _touch(self) -> None:
        if not (self.buffer or self.acks or self.events):
            self.since = time.monotonic()

    # -- requests in -------------------------------------------------------------
    def enqueue(self, request: Request) -> bool:
        """Buffer ``request`` (False: a duplicate known locally, a request that cannot be stored, or
        any request while the run drains)."""
        if self._draining:
            self.report.once(
                "drained",
                logging.WARNING,
                "crawlplug: the run is draining (`crawlplug stop --drain`): new requests are not "
                "admitted (counted in crawlplug/drained), e.g. %s",
                request,
            )
            self.report.count("crawlplug/drained")
            return False
        arg = b""
        if not request.dont_filter and self.frontier.dedup.mode != "none":
            try:
                arg = self.df.argument(request)
            except (ConfigError, ValueError) as exc:
                self.report.once(f"dedup:{exc}", logging.ERROR, "crawlplug: request %s refused: %s", request, exc)
                self.report.count("crawlplug/unserializable")
                return False
            if arg in self.recent or arg in self.buffered or arg in self.sending:
                if arg in self.recent:
                    self.recent.move_to_end(arg)
                self.df.log(request, self.spider)
                self.report.count("crawlplug/filtered_locally")
                return False
        # serialized after the local duplicate check: most links of a page are known ones
        try:
            payload = self.serializer.dumps(request, self.spider)
        except SerializationError as exc:
            self.report.once(f"unserializable:{exc}", logging.ERROR, "crawlplug: request %s refused: %s", request, exc)
            self.report.count("crawlplug/unserializable")
            return False
        if not self.buffer and not self.acks:
            self.since = time.monotonic()
        if request.dont_filter and request.meta.get(RECORD_FP_META):
            # a start entry is crawled even if seen before, and recorded, so the
            # links that lead back to it later are duplicates (same admission call)
            with contextlib.suppress(ConfigError, ValueError):
                if self.frontier.dedup.mode != "none":
                    record = self.df.argument(request)
                    self.buffer.append((request, record, 0.0, b"", ""))
                    self.buffered.add(record)
        self.buffer.append((request, arg, self.queue.score(request), payload, self.queue.domain(request)))
        if arg:
            self.buffered.add(arg)
        self.nothing_until = 0.0
        if len(self.buffer) >= self.config.batch_size:
            self.flush()
        return True

    def ack(self, lease_id: str) -> None:
        """Acknowledge ``lease_id`` with the next admission (a start entry whose requests are buffered)."""
        self._touch()
        self.acks.append(lease_id)

    def flush(self, pop: int = 0) -> None:
        """Admit the buffer, ack finished leases and (if ``pop``) lease more: one round trip."""
        self.settle()
        call = self._take(pop)
        if call is None:
            return
        try:
            outcome, error = self._send(call), None
        except Exception as exc:  # noqa: BLE001 - _land raises what it does not handle, as before
            outcome, error = None, exc
        self._land(call, outcome, error)

    def _pop_in_flight(self, pop: int) -> None:
        """The same call as ``flush(pop)``, made by the worker thread (async calls)."""
        assert self.flights is not None
        call = self._take(pop)
        if call is not None:
            self.flights.start(lambda: self._send(call), lambda outcome, error: self._landed_pop(call, outcome, error))

    def _landed_pop(self, call: _Call, outcome: Any, error: BaseException | None) -> None:
        self._land(call, outcome, error)
        if not self.prefetched:  # nothing ready: as after a pop on the reactor (next_request)
            self.nothing_until = time.monotonic() + self._pause()

    def _take(self, pop: int) -> _Call | None:
        """What the next call sends, taken out of the buffer, the acks and the reports."""
        if not (self.buffer or self.acks or self.events or pop) or self.outage.waiting():
            return None
        batch, acks, events = self.buffer, self.acks, self.events
        if acks:
            for error in enginehooks.flush_feeds(self.crawler):
                self.report.once(
                    f"feedflush:{error}", logging.WARNING, "crawlplug: could not flush a feed file: %s", error
                )
        # the URL rides along: a sharded crawl's frontier routes by it (crawlplug.frontier.core.route_key)
        items: list[Admission] = [
            (fp, score, payload, domain, request.url, True)
            if unrooted(request)
            else (fp, score, payload, domain, request.url)
            for request, fp, score, payload, domain in batch
        ]
        self.buffer, self.acks, self.events = [], [], []
        self.sending, self.buffered = self.buffered, set()
        return (batch, acks, events, items, pop)

    def _send(self, call: _Call) -> tuple[AdmitResult | None, Any]:
        """The frontier call itself (the reactor's thread, or the worker's)."""
        _, acks, events, items, pop = call
        if pop:
            return self.frontier.admit_and_pop(items, acks, pop, events)
        # no pop: a plain list, whose queue fields are read only after a pop
        return self.frontier.admit(items, acks, events), []

    def _land(self, call: _Call, outcome: tuple[AdmitResult | None, Any] | None, error: BaseException | None) -> None:
        """Apply what a call answered; on a failure put back in front what it was to send."""
        batch, acks, events, _, pop = call
        self.sending = set()
        if error is not None:
            self._unsent(call)
            if isinstance(error, AdmissionIncomplete):
                # part of the batch is stored, part of the acks made (other shards): account
                # for them and keep only the rest, so a retry counts none of it twice
                exc = error
                done = [(entry, flag) for entry, flag in zip(batch, exc.flags) if flag != "-"]
                kept = len(batch)
                self.buffer = [entry for entry, flag in zip(batch, exc.flags) if flag == "-"] + self.buffer[kept:]
                self.buffered = {entry[1] for entry in self.buffer if entry[1]}
                made = set(exc.acks_done)
                self.acks = [lease_id for lease_id in self.acks if lease_id not in made]
                self._account(
                    [entry for entry, _ in done], AdmitResult("".join(f for _, f in done), exc.acked, exc.stale)
                )
                if isinstance(exc.cause, RolledBack):
                    self.rolled_back(exc.cause.given_back)
                else:
                    self.outage.error(exc.cause)
                return
            if isinstance(error, RolledBack):  # nothing written: the buffer is sent again, the leases are given back
                self.rolled_back(error.given_back)
                return
            if isinstance(error, REDIS_ERRORS):
                self.outage.error(error)
                return
            raise error
        assert outcome is not None
        result, leased = outcome
        if batch or acks or events or leased:
            # a write went through (a pop that found nothing wrote nothing: a full
            # Redis still answers those, and is not back yet); new requests stored: it is
            self.outage.ok(confirmed=result is not None and result.admitted > 0)
        if result is not None:
            self._account(batch, result)
        if pop and leased.queued_seen >= 0:  # what the pop saw (crawlplug.frontier.results.Leases)
            self.queued_seen, self.next_ready_ms = leased.queued_seen, leased.next_ready_ms
        if leased:
            self.prefetched.extend(leased)
            self.report.count("crawlplug/leased", len(leased))

    def _unsent(self, call: _Call) -> None:
        """A call that failed: what it was to send goes back in front of what came meanwhile."""
        batch, acks, events, _, _ = call
        self.buffer = batch + self.buffer
        self.buffered = {entry[1] for entry in self.buffer if entry[1]}
        self.acks = acks + self.acks
        self.events = events + self.events

    def _account(self, batch: list[Buffered], result: AdmitResult) -> None:
        admitted = filtered = capped = 0
        for (request, fp, _, payload, _), flag in zip(batch, result.flags):
            if flag == "c":  # over its domain's page cap (CRAWLPLUG_DOMAIN_PAGES): its fingerprint is not recorded
                capped += 1
                self._dropped(request)
                continue
            if fp:
                self._remember(fp)
            if not payload:
                continue  # only recorded a start entry's fingerprint
            if flag == "0":
                filtered += 1
                self.df.log(request, self.spider)
                self._dropped(request)
            else:
                admitted += 1
        if admitted:
            # as stock Scrapy's scheduler counts: the requests stored, not those filtered after
            self.report.count("scheduler/enqueued/redis", admitted)
            self.report.count("scheduler/enqueued", admitted)
            self.report.count("crawlplug/admitted", admitted)
        if filtered:
            self.report.count("crawlplug/filtered", filtered)
        if capped:
            self.report.once(
                "capped",
                logging.INFO,
                "crawlplug: a domain reached its page cap for this run (CRAWLPLUG_DOMAIN_PAGES): its "
                "further links are not crawled (counted in crawlplug/capped)",
            )
            self.report.count("crawlplug/capped", capped)
        if result.acked:
            self.acked_total += result.acked
            self.report.count("crawlplug/acked", result.acked)
        if result.stale:
            self.report.count("crawlplug/stale_acks", result.stale)

    def _dropped(self, request: Request) -> None:
        """Scrapy's request_dropped, for a request Redis filtered (a duplicate, over its domain's
        cap): the engine sends it for those the scheduler refuses at once, this one came later."""
        self.crawler.signals.send_catch_log(signal=signals.request_dropped, request=request, spider=self.spider)

    def _remember(self, fp: bytes) -> None:
        # an expiring fingerprint may become new again: never cache those
        if self.config.fp_cache <= 0 or self.frontier.dedup.mode == "ttl":
            return
        self.recent[fp] = None
        if len(self.recent) > self.config.fp_cache:
            self.recent.popitem(last=False)

    # -- leases out ------------------------------------------------------------------
    def next_request(self) -> Request | None:
        if self._paused or self._closing:
            self.idle = True
            return None
        if not self.prefetched and self.flights is not None and self.flights.flying:
            self.idle = False  # leases are on their way: the engine is woken when they land
            return None
        if not self.prefetched and time.monotonic() >= self.nothing_until:
            free, busy = enginehooks.download_slots(self.crawler, self.config.prefetch)
            if self.pacing.wait(free, busy):  # a slot or two free of a busy downloader: wait for more
                self.report.count("crawlplug/pops_deferred")
                return None
            if self.flights is not None:
                self._pop_in_flight(max(1, min(self.config.prefetch, free)))
                self.idle = False
                return None
            self.flush(pop=max(1, min(self.config.prefetch, free)))
            if not self.prefetched:
                # nothing ready: let the idle poll find new work instead of
                # asking Redis on every engine tick; the per-domain queue says
                # when its next domain may start, and is asked again just then
                self.nothing_until = time.monotonic() + self._pause()
        while self.prefetched:
            leased = self.prefetched.popleft()
            try:
                request = self.serializer.loads(leased.payload, self.spider)
            except DecodeError as exc:
                self._dead_letter(leased, str(exc))
                continue
            self.book.take(leased.id, request)
            if leased.report:
                self.reports[leased.id] = (request, leased.report)
            self.idle = False
            self.report.count("scheduler/dequeued/redis")
            self.report.count("scheduler/dequeued")
            if leased.deliveries > 1:
                self.report.count("crawlplug/redelivered")
            return request
        self.idle = True
        return None

    def _pause(self) -> float:
        """Seconds before asking Redis for work again after an empty pop."""
        poll = self.config.poll_interval
        wait = self.next_ready_ms / 1000 if self.domain_queue else -1.0
        if wait < 0 or wait >= poll:
            return poll
        if self._wake_call is None or not self._wake_call.active():
            from twisted.internet import reactor  # noqa: PLC0415 - the one Scrapy installed, imported after it did

            # zope's interfaces declare methods without self: mypy reads ``wait`` as it (no mypy-zope)
            self._wake_call = reactor.callLater(wait, enginehooks.wake, self.crawler)  # type: ignore[arg-type]
        return wait

    def _dead_letter(self, leased: Leased, reason: str) -> None:
        self.report.once(
            f"undecodable:{reason}",
            logging.ERROR,
            "crawlplug: queue entry %s cannot be crawled (%s); moved to the dead letters",
            leased.id,
            reason,
        )
        self.report.count("crawlplug/undecodable")
        try:
            self.frontier.dead_letter(leased.id, reason, deliveries=leased.deliveries)
            self.report.count("crawlplug/dead")
        except REDIS_ERRORS as exc:
            self.outage.error(exc)  # the lease expires and the entry comes back later

    # -- the engine's news ----------------------------------------------------------------
    def finished(self, request: Request) -> None:
        """The engine is done with ``request``: its ack joins the next admission."""
        lease_id = self.book.finish(request)
        if lease_id is None:
            return
        # No round trip of its own: the engine asks for the next request right
        # after this (a free download slot), and that call admits the children,
        # acks this request and leases the next one in one round trip. The tick
        # flushes what waits longer than CRAWLPLUG_FLUSH_INTERVAL.
        self.ack(lease_id)
        self.reports.pop(lease_id, None)
        if self.domain_queue:
            # its domain may have room again: ask Redis at the next engine call
            self.nothing_until = 0.0
            enginehooks.wake(self.crawler)

    def _report(self, request: Request, kind: str) -> bool:
        """Queue a report on a per-domain-queue request this node leased; False if none was due."""
        lease_id: str = request.meta.get(LEASE_META, "")  # a lease id is never ""
        entry = self.reports.get(lease_id)
        if entry is None or entry[0] is not request or kind not in entry[1]:
            return False  # not ours, a copy (redirect, retry), or already reported
        left = entry[1].replace(kind, "")
        if left:
            self.reports[lease_id] = (request, left)
        else:
            del self.reports[lease_id]
        self._touch()
        self.events.append((lease_id, kind))
        return True

    def sent(self, request: Request) -> None:
        """A request of a domain with a delay goes out: its domain's delay starts now, crawl-wide."""
        if self._report(request, "s"):
            self.flush()  # the other nodes wait for this

    def downloaded(self, request: Request) -> None:
        """A download ended: the domain's concurrency slot is free (sent with the next call)."""
        if self._report(request, "r"):
            self.nothing_until = 0.0
            enginehooks.wake(self.crawler)

    # -- losing and giving back ----------------------------------------------------------
    def rolled_back(self, given_back: Iterable[str]) -> None:
        """Redis went back in time (crawlplug.errors.RolledBack): the frontier gave back every
        lease this node held, so they are no longer its own (their pages are fetched again,
        with what they produce); the fingerprints it knew may have been lost with the calls
        that recorded them, so a link met again is sent to Redis, not dropped here. What the
        buffer holds is sent again with the next call."""
        given = set(given_back)
        self.forget(given)
        for forget in self.lease_holders:
            forget(given)
        self.acks = [lease_id for lease_id in self.acks if lease_id not in given]
        self.events = [event for event in self.events if event[0] not in given]
        self.recent.clear()
        self.nothing_until = 0.0
        self.report.count("crawlplug/rollbacks")
        if given:
            self.report.count("crawlplug/given_back", len(given))

    def forget(self, lost: set[str]) -> None:
        """Leases Redis says this node lost (reaped while it stalled): never ack or release them."""
        self.prefetched = deque(x for x in self.prefetched if x.id not in lost)
        for lease_id in lost:
            self.reports.pop(lease_id, None)
        self.book.forget(list(lost))

    def give_back_prefetched(self) -> int:
        """Prefetched leases back to the queue (a pause, a close); returns how many."""
        self.settle()
        unstarted = [x.id for x in self.prefetched]
        self.prefetched.clear()
        return self.frontier.release(unstarted, unstarted=True) if unstarted else 0

    def drop(self) -> tuple[set[str], int]:
        """Forget everything of a crawl state that is gone: (leases in flight, things waiting)."""
        self.settle()
        in_flight = set(self.book.active)
        waiting = len(self.buffer) + len(self.prefetched) + len(self.acks)
        self.book.active.clear()
        self.prefetched.clear()
        self.buffer, self.acks, self.events = [], [], []
        self.buffered.clear()
        self.reports.clear()
        self.recent.clear()
        self.nothing_until = 0.0
        return in_flight, waiting
