"""What a node does when Redis does not answer as it should.

Every part of the Scheduler hands the Redis errors it meets to :class:`Outage`,
which tells them apart:

* the crawl was reset or began a new run (:class:`~crawlplug.errors.StaleEpoch`):
  the liveness part joins again (``on_stale``);
* a corrupt crawl key (:class:`~crawlplug.errors.CorruptKey`): said once per key,
  not an outage (waiting would not repair it);
* a refused grant (NOPERM): the node closes at once with ``config_error``;
* anything else is an outage: logged once, Redis is left alone between attempts
  (0.5 s up to 5 s, since each attempt blocks the reactor for as long as the client
  takes to fail), and after ``CRAWLPLUG_REDIS_OUTAGE_TIMEOUT`` of Redis not reached
  at all the node closes with ``redis_unavailable``. A Redis that answers but refuses
  writes (full, read-only: :attr:`Outage.refused`) is waited for as long as it takes,
  and the heartbeat keeps its pace meanwhile (it renews the leases there).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import redis

from ..errors import CorruptKey, RedisForbidden, RedisFull, StaleEpoch, failure_kind
from ..server import clients
from . import enginehooks

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from .reporter import Reporter

__all__ = ["Outage"]

logger = logging.getLogger(__name__)


class Outage:
    """The node's view of Redis's health, and its reaction to each error."""

    def __init__(
        self,
        crawler: Crawler,
        reporter: Reporter,
        *,
        timeout: float,
        safe_url: str,
        start_urls: str,
        on_stale: Callable[[StaleEpoch], None],
        on_back: Callable[[], None],
    ) -> None:
        self.crawler = crawler
        self.report = reporter
        self.timeout = timeout
        self.safe_url = safe_url
        self.start_urls = start_urls  # the crawl's start_urls key: of the wrong type, said with what to do
        self.on_stale = on_stale  # the crawl's state changed: join again
        self.on_back = on_back  # Redis answers again after an outage: drop what it may have lost
        self.down_since: float | None = None
        self.next_probe = 0.0  # during an outage: when to ask Redis again
        self.backoff = 0.0
        #: the outage's last error was Redis refusing a write (full, read-only): it answers,
        #: so heartbeats go on at their pace (they renew leases on a full Redis), and only an
        #: admission of new requests says the refusal is over
        self.refused = False
        self.unreachable_since: float | None = None  # since when no call reached Redis (the outage timeout)
        self.closing = False
        self._back_done = True

    def waiting(self) -> bool:
        """During an outage, between two attempts: leave Redis alone (and the reactor free)."""
        return self.down_since is not None and time.monotonic() < self.next_probe

    def last_attempt(self) -> None:
        """A closing node tries once more, whatever the backoff says."""
        self.next_probe = 0.0

    def heartbeat_waiting(self) -> bool:
        """:meth:`waiting`, for the heartbeat: held back only while Redis cannot be reached.
        One that answers (refusing admissions while full) gets every heartbeat, which renews
        the leases there; held back for the outage's backoff (5 s), shorter leases expired."""
        return self.waiting() and not self.refused

    def ok(self, confirmed: bool = False) -> None:
        """A call went through. ``confirmed`` (a heartbeat after Redis could not be reached,
        an admission that stored new requests): the outage is over. Else calls resume at
        once, but a Redis that still refuses some writes (a full one takes deletions, acks
        and lease renewals, not new requests) is not reported back."""
        self.unreachable_since = None
        if self.down_since is None:
            return
        self.backoff = 0.0
        self.next_probe = 0.0
        if not self._back_done:
            # A Redis that comes back may have lost its last writes (a failover to a
            # replica that lagged, an AOF everysec crash): what the node cached of them
            # (fingerprints it saw admitted) may be gone
            self.on_back()
            self._back_done = True
        if confirmed:
            down = time.monotonic() - self.down_since
            logger.info("crawlplug: Redis is back after %.1fs", down)
            self.report.count("crawlplug/outage_ms", round(down * 1000))  # /metrics: outage seconds
            self.down_since = None
            self.refused = False

    def error(self, exc: BaseException) -> None:
        """React to an error a Redis call raised (see the module docstring)."""
        if isinstance(exc, StaleEpoch):
            self.on_stale(exc)
            return
        if isinstance(exc, CorruptKey):
            self.report.count("crawlplug/corrupt_key_refusals")
            if exc.key == self.start_urls:
                held = re.search(r"holds an? (\w+)", str(exc))
                self.report.wrong_start_urls(exc.key, held.group(1) if held else "value of another type")
                return
            self.report.once(
                f"corrupt:{exc.key}",
                logging.ERROR,
                "crawlplug: %s. This is not an outage: this node keeps what it could not store, "
                "goes on with what does not need that key, and tries again",
                exc,
            )
            return
        self.report.count("crawlplug/redis_errors")
        kind = failure_kind(exc)
        if kind is RedisForbidden and not self.closing:
            # waiting would not help: the Redis user lacks a grant (an ACL), e.g. on a key
            # outside the crawl's prefix such as scrapy-redis's <spider>:start_urls
            self.closing = True
            logger.error(
                "crawlplug: Redis at %s refused a command to this node's user: %s. Grant it (the "
                "ACL crawlplug needs: %s); closing this node (finish_reason 'config_error')",
                self.safe_url,
                exc,
                clients.ACL_DOC,
            )
            enginehooks.close(self.crawler, "config_error", failed=True)
            return
        now = time.monotonic()
        # the server answered (full, read-only, busy): LOADING (a Redis reading its snapshot)
        # is redis-py's ConnectionError, and counts as unreachable, as a node waiting it out should
        self.refused = isinstance(exc, redis.ResponseError)
        if self.refused:
            self.unreachable_since = None
        elif self.unreachable_since is None:
            self.unreachable_since = now
        if self.down_since is None:
            self.down_since = now
            self._back_done = False
            wait = f"up to {self.timeout:g}s" if self.timeout > 0 else "as long as it takes"
            if kind is RedisFull:
                logger.error(
                    "crawlplug: Redis is out of memory (%s): it refuses to store new requests. This "
                    "node keeps them, and does not acknowledge the pages they came from, and asks "
                    "again every few seconds, as long as it takes; its heartbeats go on renewing its "
                    "leases meanwhile: free memory or raise maxmemory",
                    exc,
                )
            else:
                logger.error(
                    "crawlplug: Redis error (%s); keeping this node's requests and acks and "
                    "asking again every few seconds, %s",
                    exc,
                    wait,
                )
        self.backoff = min(5.0, max(0.5, self.backoff * 2))
        self.next_probe = now + self.backoff
        # the timeout counts the time Redis could not be reached: a Redis that answers
        # (refusing writes while full) is waited for, the node renewing its leases
        down = now - self.unreachable_since if self.unreachable_since is not None else 0.0
        if 0 < self.timeout < down and not self.closing:
            self.closing = True
            logger.error(
                "crawlplug: Redis unreachable for %.0fs (CRAWLPLUG_REDIS_OUTAGE_TIMEOUT=%gs): closing this node "
                "(finish_reason 'redis_unavailable'). Its unacknowledged requests return to the queue when "
                "their leases expire; start it again once Redis is back.",
                down,
                self.timeout,
            )
            enginehooks.close(self.crawler, "redis_unavailable", failed=True)
