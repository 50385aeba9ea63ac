"""What a node calls on a crawl's frontier: the data plane of one crawl (admit, lease, ack,
reap) as :class:`crawlplug.frontier.core.Frontier` implements it, over one part or over N
shards alike.

:class:`CrawlFrontier` is what a node calls on its hot path, fifteen members: who it is
(keys, node id, epoch, run, lanes, dedup strategy, parts) and the calls that return what
they found as result values (crawlplug.frontier.results: a pop's :class:`Leases` with the
next ready time and the queue size seen, a heartbeat's :class:`Beat` with the run's state
and the pause, an idle read's :class:`Idle` with the start entries waiting), so that the
frontier leaves no state for the node to read after a call. The node's setup, the
dupefilters used on their own, the migration and the tests use the class itself. What a
crawl is beside its data plane (status, switches, runs) is :class:`crawlplug.crawl.Crawl`.
:func:`crawlplug.frontier.open_frontier` builds a node's frontier.

Time is Redis's clock in milliseconds throughout (crawlplug.frontier.store.redis_ms), so
nodes with skewed clocks agree on what expired.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .calls import Arg
    from .dedup import Dedup
    from .keys import CrawlKeys
    from .results import Admission, AdmitResult, Beat, Idle, Leases

__all__ = ["CrawlFrontier"]


@runtime_checkable
class CrawlFrontier(Protocol):
    """A crawl's frontier as one node sees it on its hot path: requests in, leases out,
    acks back, dead letters, the heartbeat with the reap, start entries leased, the idle
    read that tells an idle crawl from a done one."""

    keys: CrawlKeys
    #: this node's id (host:pid:random); its record is ``keys.node(node_id)``
    node_id: str
    #: the run's epoch token, the last argument of every node script (lua/epoch.lua)
    epoch: str
    #: the run this node joined (None: none), which its history samples carry (lua/history.lua)
    run_id: int | None
    #: the start-entry lists the node reads besides start_urls (CRAWLPLUG_START_KEYS' lanes)
    lanes: tuple[str, ...]

    @property
    def dedup(self) -> Dedup:
        """The dedup strategy of the crawl's parts (crawlplug.frontier.dedup); read-only."""

    def admit(
        self, items: Sequence[Admission], acks: Sequence[str] = (), events: Sequence[tuple[str, str]] = ()
    ) -> AdmitResult:
        """Deduplicate and store ``items``, then acknowledge ``acks``: one script per part,
        the acks only once every child is stored."""

    def admit_and_pop(
        self, items: Sequence[Admission], acks: Sequence[str], n: int, events: Sequence[tuple[str, str]] = ()
    ) -> tuple[AdmitResult | None, Leases]:
        """:meth:`admit`, then lease up to ``n`` requests, in as few round trips as the parts allow."""

    def record_seen(self, items: Sequence[tuple[bytes, str]]) -> str:
        """Check and record (dedup argument, route) items storing no request, each in one
        step (``lua/seen.lua``): a dupefilter used on its own. A flag per item, "1" new."""

    def release(self, ids: Sequence[str], *, unstarted: bool) -> int:
        """Give leases back to the queue (``unstarted``: without counting a delivery)."""

    def dead_letter(self, lease_id: str, reason: str, **extra: object) -> bool:
        """Move a leased request to the dead letters, with why."""

    def take_starts(
        self, n: int, legacy_key: str | Sequence[str] | None = None, lanes: Sequence[str] = ()
    ) -> list[tuple[str, bytes]]:
        """Lease up to ``n`` start entries from the crawl's ``lanes`` (start_urls alone by
        default), then scrapy-redis's ``legacy_key`` (one or several), in that order."""

    def heartbeat_and_reap(
        self,
        lease_ids: Iterable[str],
        *,
        producing: bool = False,
        metrics: Mapping[str, Arg] | None = None,
        totals: dict[str, int] | None = None,
        limit: int = 1000,
    ) -> Beat:
        """:meth:`heartbeat` and :meth:`reap` in one round trip."""

    def idle_state(self) -> Idle:
        """(queued, leased, start entries) over every part, to tell an idle crawl from a done one."""

    def parts(self) -> list[CrawlKeys]:
        """The key sets holding this crawl's frontier: its own, then each shard's."""
