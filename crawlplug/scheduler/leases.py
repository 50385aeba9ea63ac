"""This node's side of leases: which requests it holds, and the crawl-wide
idle check that decides when every node may close.

The Redis side (renewal, reaping, requeue) is in the Lua scripts; this module
keeps the local bookkeeping the heartbeat sends, when a pop is worth a call
(:class:`PopPacing`), and the termination rule:
the crawl is finished when no request is queued, no lease is held anywhere
and no node is still reading its start requests, continuously for the grace
period.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from scrapy import Request

__all__ = ["LEASE_META", "LeaseBook", "PopPacing", "Termination"]

#: Meta key holding the lease id of a request this node took from the queue.
LEASE_META = "_crawlplug_lease"


@dataclass
class LeaseBook:
    """Requests this node holds: handed to the engine, not yet acknowledged."""

    active: dict[str, Request] = field(default_factory=dict)

    def take(self, lease_id: str, request: Request) -> None:
        request.meta[LEASE_META] = lease_id
        self.active[lease_id] = request

    def finish(self, request: Request) -> str | None:
        """The lease id to ack for a request the engine is done with (None if not ours)."""
        lease_id = request.meta.get(LEASE_META)
        if lease_id is not None and self.active.get(lease_id) is request:
            del self.active[lease_id]
            return lease_id
        return None

    def forget(self, lease_ids: list[str]) -> int:
        """Drop leases Redis says we lost (reaped while we stalled)."""
        return sum(1 for i in lease_ids if self.active.pop(i, None) is not None)

    def __len__(self) -> int:
        return len(self.active)


@dataclass
class Termination:
    """The grace-period rule: empty everywhere, continuously, for ``grace`` seconds."""

    grace: float
    empty_since: float | None = None

    def busy(self) -> None:
        """Work or a producer appeared: the grace period starts again when all is empty."""
        self.empty_since = None

    def observe(self, queued: int, leased: int, producers: int, *, local_pending: bool) -> None:
        empty = not (queued or leased or producers or local_pending)
        if not empty:
            self.empty_since = None
        elif self.empty_since is None:
            self.empty_since = time.monotonic()

    @property
    def worker_mode(self) -> bool:
        return self.grace <= 0

    def finished(self) -> bool:
        if self.worker_mode or self.empty_since is None:
            return False
        return time.monotonic() - self.empty_since >= self.grace


class PopPacing:
    """When a pop is worth its round trip. While the downloader is busy and only a slot or two
    are free, one call a moment later leases for several slots and carries the pages finished
    meanwhile (their acks and links coalesced with the next pages'), where a call per freed
    slot costs Redis and the node a round trip each. The next response to finish asks again;
    a freed slot waits :attr:`WAIT` at most, and a downloader with little in flight never."""

    #: seconds a freed downloader slot waits at most for more to free
    WAIT = 0.02

    def __init__(self, prefetch: int, concurrency: int) -> None:
        #: the fewest free slots a pop is made for while the downloader is busy (a quarter of
        #: what a pop may lease: 8 of CRAWLPLUG_PREFETCH 32 at 64 concurrent requests, 4 at
        #: Scrapy's default 16; 1, never waiting, at 7 or fewer)
        self.least = max(1, min(prefetch, concurrency) // 4)
        self.until = float("inf")  # a pop put off is made by then

    def wait(self, free: int, busy: int) -> bool:
        """Whether to put off the pop for ``free`` slots with ``busy`` requests in flight."""
        now = time.monotonic()
        if 0 < free < self.least and busy >= self.least and now < self.until:
            if self.until == float("inf"):
                self.until = now + self.WAIT
            return True
        self.until = float("inf")
        return False
