"""What the other parts of the Scheduler tell a node's :class:`~crawlplug.scheduler.batch.Batch`:
whether it may lease (a pause, a drain, the end of a run), when to ask Redis again, what
Redis held as last seen. They read these and set them only through these methods
(tests/test_shape.py holds it)."""

from __future__ import annotations

__all__ = ["Switches"]


class Switches:
    """The flags a Batch leases by, set by the other parts."""

    def __init__(self) -> None:
        self._paused = False  # an operator paused the crawl: no new leases
        self._draining = False  # an operator drains the run: no new requests admitted (runcontrol)
        self._closing = False  # the run ended (a limit, a stop): no new leases, the node closes
        self.nothing_until = 0.0  # after an empty pop: when to ask Redis again (others: wake())
        #: requests waiting in Redis as the last pop or idle poll saw them (this node's
        #: has_pending_requests and len, with no call of their own; others: saw_queued())
        self.queued_seen = 0

    @property
    def paused(self) -> bool:
        """An operator paused the crawl: no new leases (set by the liveness part's heartbeat)."""
        return self._paused

    @property
    def draining(self) -> bool:
        """The run drains (`crawlplug stop --drain`): no new requests admitted (runcontrol)."""
        return self._draining

    @property
    def closing(self) -> bool:
        """The run ended (a limit, a stop): no new leases, the node closes (runcontrol)."""
        return self._closing

    def pause(self, paused: bool) -> None:
        self._paused = paused
        if not paused:
            self.wake()

    def drain(self, draining: bool) -> None:
        self._draining = draining

    def close_run(self) -> None:
        self._closing = True

    def new_run(self) -> None:
        """The node joined a run (again): it neither drains nor closes."""
        self._draining = self._closing = False

    def wake(self) -> None:
        """Work may wait in Redis now (an idle poll saw it, start entries were pushed, a
        pause ended): the next request asks Redis at once, not after an empty pop's pause."""
        self.nothing_until = 0.0

    def saw_queued(self, queued: int) -> None:
        """``queued`` requests wait in Redis, as a status read or an idle poll saw them."""
        self.queued_seen = queued
