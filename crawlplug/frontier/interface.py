"""What a crawl frontier offers its users: the one interface the single frontier
(:class:`crawlplug.frontier.single.Frontier`) and the sharded one
(:class:`crawlplug.frontier.sharded.ShardedFrontier`) both implement.

The Scheduler's parts, the dupefilters, the operator library and the CLI are typed
against :class:`CrawlFrontier` and never ask which of the two they hold (what a crawl is
beside its data plane, its status, switches and runs, is :class:`crawlplug.crawl.Crawl`):
:func:`crawlplug.frontier.open_frontier` builds the right one, :meth:`~CrawlFrontier.parts`
names the key sets a crawl's frontier spans and :meth:`~CrawlFrontier.dedup_parts` the
frontiers holding its dedup state. tests/unit/test_shape.py checks that both classes have
every member with the same parameters.

Time is Redis's clock in milliseconds throughout (crawlplug.frontier.store.redis_ms), so
nodes with skewed clocks agree on what expired.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import redis

    from ..queues import BaseQueue
    from .dedup import Dedup
    from .keys import CrawlKeys
    from .results import Admission, AdmitResult, Leased
    from .single import Frontier


@runtime_checkable
class CrawlFrontier(Protocol):
    """A crawl's frontier as one node sees it: the queue, payloads, leases, dedup,
    per-domain schedule and run of one crawl, through Lua scripts that each run whole."""

    client: redis.Redis
    keys: CrawlKeys
    #: this node's id (host:pid:random); its record is ``keys.node(node_id)``
    node_id: str
    queue: BaseQueue
    lease_ms: int
    max_deliveries: int
    #: what the last pop or heartbeat learnt: Redis-clock ms at which the next
    #: per-domain request is due (-1: none waiting), start entries waiting, the
    #: crawl paused, the run's state, data lost since the run began, start URLs' key type
    next_ready_ms: int
    #: requests waiting in the queue as the last pop saw them (-1: none seen yet)
    queued_seen: int
    #: the start-entry lists the node reads besides start_urls (CRAWLPLUG_START_KEYS' lanes)
    lanes: tuple[str, ...]
    start_entries: int
    paused: bool
    run_state: str
    data_lost: bool
    start_urls_kind: str
    #: the run's epoch token, the last argument of every node script (lua/epoch.lua)
    epoch: str
    #: the run this node joined (None: none), which its history samples carry (lua/history.lua)
    run_id: int | None
    dedup: Dedup
    #: True for a frontier split into shards (CRAWLPLUG_SHARDS > 1)
    sharded: bool

    # -- requests in, leases out ----------------------------------------------------
    def admit(self, items: Sequence[Admission], acks: Sequence[str] = (),
              events: Sequence[tuple[str, str]] = ()) -> AdmitResult:  # fmt: skip
        """Deduplicate and store ``items``, then acknowledge ``acks``: one script per part,
        the acks only once every child is stored."""

    def admit_and_pop(self, items: Sequence[Admission], acks: Sequence[str], n: int,
                      events: Sequence[tuple[str, str]] = ()) -> tuple[AdmitResult | None, list[Leased]]:  # fmt: skip
        """:meth:`admit`, then lease up to ``n`` requests, in as few round trips as the parts allow."""

    def record_seen(self, items: Sequence[tuple[bytes, str]]) -> str:
        """Check and record (dedup argument, route) items storing no request, each in one
        step (``lua/seen.lua``): a dupefilter used on its own. A flag per item, "1" new."""

    def pop(self, n: int) -> list[Leased]:
        """Lease up to ``n`` requests due now."""

    def push(self, items: Iterable[tuple[bytes, Any, bytes]]) -> AdmitResult:
        """Admit requests made outside a crawl (the CLI's push, an import)."""

    def release(self, ids: Sequence[str], *, unstarted: bool) -> int:
        """Give leases back to the queue (``unstarted``: without counting a delivery)."""

    def dead_letter(self, lease_id: str, reason: str, **extra: Any) -> bool:
        """Move a leased request to the dead letters, with why."""

    # -- start entries ----------------------------------------------------------------
    def take_starts(self, n: int, legacy_key: str | Sequence[str] | None = None,
                    lanes: Sequence[str] = ()) -> list[tuple[str, bytes]]:  # fmt: skip
        """Lease up to ``n`` start entries from the crawl's ``lanes`` (start_urls alone by
        default), then scrapy-redis's ``legacy_key`` (one or several), in that order."""

    # -- liveness -----------------------------------------------------------------------
    def heartbeat(self, lease_ids: Iterable[str], *, producing: bool = False,
                  metrics: dict[str, Any] | None = None, totals: dict[str, int] | None = None) -> list[str]:  # fmt: skip
        """Renew this node's record and its leases; the ids it no longer holds."""

    def reap(self, limit: int = 1000) -> tuple[int, int]:
        """Give back the leases of nodes that stopped renewing: (requests, start entries)."""

    def heartbeat_and_reap(self, lease_ids: Iterable[str], *, producing: bool = False,
                           metrics: dict[str, Any] | None = None, totals: dict[str, int] | None = None,
                           limit: int = 1000) -> tuple[list[str], tuple[int, int]]:  # fmt: skip
        """:meth:`heartbeat` and :meth:`reap` in one round trip."""

    def idle_state(self) -> tuple[int, int, int]:
        """(queued, leased, start entries) over every part, to tell an idle crawl from a done one."""

    # -- the crawl as a whole (its control plane is crawlplug.crawl: status, switches, runs) --
    def purge(self) -> int:
        """Delete every key of the crawl's frontier; how many."""

    # -- its shape ---------------------------------------------------------------------
    def parts(self) -> list[CrawlKeys]:
        """The key sets holding this crawl's frontier: its own, then each shard's."""

    def dedup_parts(self) -> list[Frontier]:
        """The frontiers holding this crawl's dedup state, each with its strategy."""

    def forget_dedup_layers(self) -> None:
        """The crawl was reset: forget what was known of a Bloom filter's layers."""
