"""A node's pops off the reactor thread, for a Redis far away (``CRAWLPLUG_ASYNC_CALLS``).

Each frontier call blocks Scrapy's reactor for its round trip. On loopback that is a tenth
of a millisecond; to a Redis 1 ms away each way it is 2.5 ms, in which the node parses
nothing: at 0.18 calls a page, such a node crawled at 0.88x its loopback pages/s
(bench/redis_cpu.py --remote-delay-ms 1; docs/scaling.md). With
async calls on, the pop a ``next_request`` makes (it carries the admissions and acks
waiting, as always) runs in one worker thread: ``next_request`` returns at once, and the
engine is woken when the leases land.

One call at a time, as before. Any other use of the frontier by the node (a flush of its
own, a heartbeat, an idle poll, a give-back, a close) first waits for the call in flight and
lands it (:meth:`Flights.settle`; the other parts reach the frontier through
:class:`Settled`), so Redis receives the node's calls in the order the reactor made them,
and what a call's answer changes (leases taken, acks made, a rollback found) is in place
before the next call is made: the lease, ack-after-children and rollback rules hold
unchanged. The worker thread only makes the call; what it answered is applied by the
reactor thread.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AUTO_MS", "Flight", "Flights", "Settled", "round_trip_ms"]

#: "auto" turns async calls on when Redis's round trip, measured at start, is at least this
#: (loopback: 0.05-0.3 ms on these machines; a Redis on another machine of the same rack: 0.2-0.5)
AUTO_MS = 0.5


def round_trip_ms(ping: Callable[[], object], samples: int = 5) -> float:
    """The fastest of ``samples`` PINGs, in milliseconds (the least a call can take)."""
    best = float("inf")
    for _ in range(samples):
        began = time.perf_counter()
        ping()
        best = min(best, (time.perf_counter() - began) * 1000)
    return best


@dataclass(eq=False)
class Flight:
    """One call on its way: what lands it, and its outcome once the worker is done."""

    land: Callable[[object, BaseException | None], None]
    future: Future[object] = field(default_factory=Future)


class Flights:
    """The one call a node may have in flight, made by a worker thread and landed by the reactor."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._wake = wake
        self.flying: Flight | None = None
        self.landed = 0  # calls landed (a test reads it)

    def start(self, call: Callable[[], object], land: Callable[[object, BaseException | None], None]) -> None:
        """Make ``call`` in the worker thread; ``land(result, error)`` runs in the reactor thread
        when it is done, or earlier at a :meth:`settle`, exactly once."""
        self.settle()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crawlplug-calls")
        flight = Flight(land)
        flight.future = self._pool.submit(call)
        self.flying = flight
        flight.future.add_done_callback(lambda _: self._done(flight))

    def _done(self, flight: Flight) -> None:
        """In the worker thread: have the reactor land ``flight`` (if nothing settled it meanwhile)."""
        from twisted.internet import reactor  # noqa: PLC0415 - the one Scrapy installed

        reactor.callFromThread(self._landed, flight)

    def _landed(self, flight: Flight) -> None:
        if self.flying is flight:  # else a settle landed it already
            self.settle()

    def settle(self) -> None:
        """Wait for the call in flight, if any, and land it here (the reactor thread)."""
        flight = self.flying
        if flight is None:
            return
        self.flying = None
        error: BaseException | None = None
        result: object = None
        try:
            result = flight.future.result()
        except Exception as exc:  # noqa: BLE001 - the call's own error: land() handles it or raises it
            error = exc
        self.landed += 1
        try:
            flight.land(result, error)
        finally:
            # the engine takes what landed now, whoever landed it (a heartbeat, a flush, the
            # reactor's callback): else it waits for its own next heartbeat, 5 s
            self._wake()

    def close(self) -> None:
        self.settle()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class Settled:
    """The frontier as the node's other parts reach it while async calls are on: each method
    call first lands the call in flight (:meth:`Flights.settle`); attributes are the frontier's."""

    __slots__ = ("_frontier", "_settle")
    _frontier: object
    _settle: Callable[[], None]

    def __init__(self, frontier: object, settle: Callable[[], None]) -> None:
        object.__setattr__(self, "_frontier", frontier)
        object.__setattr__(self, "_settle", settle)

    def __getattr__(self, name: str) -> object:
        value = getattr(self._frontier, name)
        if not inspect.ismethod(value):
            return value
        settle = self._settle

        def settled(*args: Any, **kwargs: Any) -> Any:
            settle()
            return value(*args, **kwargs)

        return settled

    def __setattr__(self, name: str, value: object) -> None:
        self._settle()
        setattr(self._frontier, name, value)
