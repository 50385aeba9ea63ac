"""Start entries (``crawlplug push``, the seed timer, scrapy-redis's key) as a node takes them.

An entry is leased like a request: :class:`StartEntries` turns it into requests for
the spider, and acks its lease with the admission that stores them (through the
batch), so an entry taken by a node that dies first returns to the head of
``start_urls`` when its lease expires. A ``RedisSpider`` reads entries itself
(``start()`` calls :meth:`take`); other spiders get them from the node's heartbeat
and idle polls (:meth:`drain`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from scrapy import Request, Spider

from .. import starts
from ..errors import REDIS_ERRORS, ConfigError, DecodeError, SerializationError
from . import enginehooks
from .batch import RECORD_FP_META, START_META

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from ..config import SchedulerConfig
    from ..crawl import Crawl
    from ..frontier.interface import CrawlFrontier
    from ..serializers import JsonSerializer
    from ..starts.seeds import Seeds
    from .batch import Batch
    from .outage import Outage
    from .reporter import Reporter

__all__ = ["START_META", "StartEntries"]

logger = logging.getLogger(__name__)


class StartEntries:
    """The start entries this node holds, and the seed timer it runs."""

    def __init__(
        self,
        crawler: Crawler,
        frontier: CrawlFrontier,
        batch: Batch,
        *,
        crawl: Crawl,
        serializer: JsonSerializer,
        config: SchedulerConfig,
        outage: Outage,
        reporter: Reporter,
        seeds: Seeds | None = None,
        spider: Spider | None = None,
    ) -> None:
        self.crawler = crawler
        self.frontier = frontier
        self.crawl = crawl
        self.batch = batch
        self.serializer = serializer
        self.config = config
        self.outage = outage
        self.report = reporter
        self.seeds = seeds
        self.spider = spider
        self.leases: set[str] = set()  # entries taken, their requests not yet stored
        self.pending: dict[str, int] = {}  # lease id -> its requests not yet enqueued
        self.waiting = False  # RedisSpider.start() is waiting for entries
        batch.lease_holders.append(self.forget)  # leases Redis no longer lets the node keep (a rollback)

    def wait_for_entries(self) -> None:
        """RedisSpider.start() found no entry and waits for some (the liveness part's idle check)."""
        self.waiting = True

    def take(self, n: int, legacy_key: str | list[str] | None = None) -> list[tuple[str, list[Request]]]:
        """Lease up to ``n`` entries and make their requests: [(lease id, requests)], from the
        crawl's start-entry lists in CRAWLPLUG_START_KEYS order, then scrapy-redis's
        ``legacy_key`` (one or several, in order).

        A malformed entry goes to the dead letters with its reason. Call :meth:`done`
        for each lease once its requests are enqueued.
        """
        if self.batch.paused or self.batch.draining or self.batch.closing:
            return []
        try:
            taken = self.frontier.take_starts(n, legacy_key, self.config.start_keys)
        except REDIS_ERRORS as exc:
            self.outage.error(exc)
            return []
        self.outage.ok()
        out: list[tuple[str, list[Request]]] = []
        for lease_id, raw in taken:
            self.leases.add(lease_id)
            try:
                requests = self._requests(raw)
                for request in requests:  # one a node cannot store: a dead letter, not a refusal that acks it
                    self.serializer.dumps(request, self.spider)
            except (DecodeError, SerializationError) as exc:
                self.report.once(
                    f"badstart:{exc}",
                    logging.ERROR,
                    "crawlplug: start entry %r cannot be crawled (%s); moved to the dead letters",
                    raw[:200],
                    exc,
                )
                self.report.count("crawlplug/start_entries_invalid")
                self.leases.discard(lease_id)
                try:
                    self.frontier.dead_letter(lease_id, f"invalid start entry: {exc}")
                except REDIS_ERRORS as rexc:
                    self.outage.error(rexc)  # the lease expires and the entry returns
                continue
            for request in requests:
                request.meta[RECORD_FP_META] = True
                request.meta[START_META] = lease_id
            if requests:
                self.pending[lease_id] = len(requests)
            out.append((lease_id, requests))
        if taken:
            self.waiting = False
            self.report.count("crawlplug/start_entries", len(taken))
        return out

    def _requests(self, raw: bytes) -> list[Request]:
        maker = getattr(self.spider, "make_request_from_data", None)
        if maker is None:
            return [starts.build(starts.parse(raw), self.spider)]
        try:
            result = maker(raw)
        except DecodeError:
            raise
        except Exception as exc:  # noqa: BLE001 - the spider's own parser: its error becomes the reason
            raise DecodeError(f"make_request_from_data failed: {type(exc).__name__}: {exc}") from None
        if result is None:
            return []
        if isinstance(result, Request):
            return [result]
        return [r for r in result if isinstance(r, Request)]

    def enqueued(self, request: Request) -> None:
        """A request went through the scheduler: if it is an entry's last, the entry is acked
        with it, even if the node stops before its start() resumes."""
        lease_id = request.meta.get(START_META)
        if lease_id is not None and lease_id in self.pending:
            self.pending[lease_id] -= 1
            if self.pending[lease_id] <= 0:
                self.done(lease_id)

    def done(self, lease_id: str) -> None:
        """The requests made from an entry are enqueued (or dropped on the way): ack it with
        their admission. Calling it twice is harmless."""
        self.pending.pop(lease_id, None)
        if lease_id in self.leases:
            self.leases.discard(lease_id)
            self.batch.ack(lease_id)

    def drain(self, enqueue: Callable[[Request], bool]) -> None:
        """Spiders that do not read entries themselves get them from here (``enqueue``:
        the scheduler's enqueue_request)."""
        if self.spider is None or getattr(self.spider, "crawlplug_reads_start_entries", False):
            return
        for lease_id, requests in self.take(self.config.start_batch):
            for request in requests:
                enqueue(request)
            self.done(lease_id)
            self.batch.wake()

    def fire_seeds(self, enqueue: Callable[[Request], bool]) -> None:
        """The seed timer: due seeds become start entries (one node at a time, under a lock)."""
        if self.seeds is None:
            return
        try:
            fired = self.seeds.fire_due()
        except (*REDIS_ERRORS, ConfigError) as exc:
            self.report.once(f"seeds:{exc}", logging.ERROR, "crawlplug: seed timer failed: %s", exc)
            return
        if fired:
            self.report.count("crawlplug/seeds_fired", fired)
            self.drain(enqueue)

    def forget(self, lost: set[str]) -> None:
        self.leases -= lost
        for lease_id in lost:
            self.pending.pop(lease_id, None)

    def give_back(self) -> list[str]:
        """The entries taken and not stored: their leases, to release (back to the head of start_urls)."""
        out = sorted(self.leases)
        self.leases.clear()
        return out

    def drop(self) -> None:
        self.leases.clear()
        self.pending.clear()

    def nothing_pushed(self, termination_grace: float, enqueued_total: int) -> bool:
        """A crawl fed by start entries that never got one is not finished: said so once, closed."""
        keys = self.frontier.keys
        try:
            taken = self.crawl.counter("start_taken")
        except REDIS_ERRORS:
            return False
        if taken or enqueued_total:
            return False
        logger.warning(
            "crawlplug: nothing was pushed to crawl %r for %ss, so there is nothing to crawl: push start URLs "
            "with `crawlplug push --crawl %s URL...` (or RPUSH %s, or scrapy-redis's key); closing this node "
            "(finish_reason 'nothing_pushed'; the run is not finished)",
            keys.crawl,
            termination_grace,
            keys.crawl,
            keys.start_urls,
        )
        enginehooks.close(self.crawler, "nothing_pushed")
        return True
