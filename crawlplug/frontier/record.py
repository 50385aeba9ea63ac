"""What one part of a frontier knows of its node's calls: the ids its admissions carry, the
last one Redis recorded, and the leases it holds (lua/record.lua is the Redis side).

Redis can go back in time: a restart from a snapshot older than its last writes, a failover
to a replica that had not received them, a restored backup. A node's pages may then have
had their children admitted in a call Redis lost, while the page's own lease is back as it
was; the page's ack, sent later, would delete the last trace of those children. So each
admission carries the number of the node's last admission whose reply said it was recorded
(:attr:`CallRecord.confirmed`), and a record older than that refuses the call, having
written nothing (:class:`crawlplug.errors.RolledBack`). The frontier then gives back every
lease the node holds (:attr:`CallRecord.held`): those pages are fetched again, and with them
whatever they produced, instead of being acknowledged.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .results import Admission

__all__ = ["CallRecord", "ResendLog", "call_number"]


class CallRecord:
    """The call ids and the held leases of one frontier part (module docstring)."""

    def __init__(self) -> None:
        #: the caller's token in every call id: unique to this object, so no other caller's
        #: record is ever taken for ours
        self.prefix = uuid.uuid4().hex[:8]
        self._numbers = itertools.count(1)
        #: the number of the last call id handed out (0: none yet)
        self.last = 0
        #: the number of the last admission Redis said it recorded (0: none, or not known)
        self.confirmed = 0
        #: lease ids this part handed to its node and the node has not yet acked, released,
        #: dead-lettered or been told it lost (insertion order: oldest first)
        self.held: dict[str, None] = {}

    # -- call ids ---------------------------------------------------------------------
    def next_call(self) -> str:
        """admit.lua's ARGV[4] for a new admission: "<prefix>:<n> <confirmed>"."""
        self.last = next(self._numbers)
        return f"{self.prefix}:{self.last} {self.confirmed}"

    def check(self) -> str:
        """The check a heartbeat or renewal carries (heartbeat.lua, renew.lua): "" for none."""
        return f"{self.prefix} {self.confirmed}" if self.confirmed else ""

    def recorded(self, call: str) -> None:
        """Redis answered admission ``call`` (an ARGV[4] of :meth:`next_call`) and kept its record."""
        self.confirmed = max(self.confirmed, call_number(call))

    # -- leases held ------------------------------------------------------------------
    def took(self, ids: Iterable[str]) -> None:
        for lease_id in ids:
            self.held[lease_id] = None

    def done(self, ids: Iterable[str]) -> None:
        for lease_id in ids:
            self.held.pop(lease_id, None)

    def forget_all(self) -> list[str]:
        """Every lease held, now forgotten, and the record no longer checked (after a
        rollback, or when the node left a crawl state behind)."""
        ids = list(self.held)
        self.held.clear()
        self.confirmed = 0
        return ids


def call_number(call: str) -> int:
    """The n of a call id "<prefix>:<n>[ <confirmed>]" (0 if it has none)."""
    _, _, number = call.split(" ", 1)[0].rpartition(":")
    return int(number) if number.isdigit() else 0


class ResendLog:
    """The requests a node admitted to one shard of a sharded crawl, kept ``window`` seconds
    (at most ``most`` of them), so that a shard that went back in time gets them again.

    A sharded crawl acknowledges a page in its own shard once every shard stored its
    children: if a children's shard then goes back to a state older than that admission
    (a Redis Cluster primary restarted from its snapshot, or replaced by a replica that
    lagged) while the page's shard does not, no trace of the children is left but this
    log. The node notices at its next call or heartbeat to that shard (lua/record.lua) and
    sends them again (:meth:`since`). A shard that went back further than the log reaches
    may have lost requests: :meth:`since` says so, and the node logs it."""

    def __init__(self, window: float, most: int = 1_000_000) -> None:
        self.window = window
        self.most = most
        self._entries: deque[tuple[int, float, list[Admission]]] = deque()  # (call number, when, items)
        self._count = 0
        #: the highest call number whose requests were dropped from the log (0: none)
        self.dropped_upto = 0

    def add(self, call: str, items: Sequence[Admission]) -> None:
        """Requests admitted (new) by admission ``call``."""
        if not items:
            return
        if self.window <= 0:  # none kept: a shard that goes back past this call may lose them
            self.dropped_upto = max(self.dropped_upto, call_number(call))
            return
        now = time.monotonic()
        self._entries.append((call_number(call), now, list(items)))
        self._count += len(items)
        while self._entries and (now - self._entries[0][1] > self.window or self._count > self.most):
            number, _, dropped = self._entries.popleft()
            self._count -= len(dropped)
            self.dropped_upto = max(self.dropped_upto, number)

    def since(self, found: int) -> tuple[list[Admission], bool]:
        """The requests admitted by calls after number ``found`` (the last one the shard still
        has), and whether the log reaches back that far (False: some may be lost)."""
        items = [item for number, _, batch in self._entries if number > found for item in batch]
        return items, self.dropped_upto <= found

    def clear(self) -> None:
        self._entries.clear()
        self._count = 0
        self.dropped_upto = 0
