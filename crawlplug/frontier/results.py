"""What the frontier's calls return, and the ids it names nodes by: plain values, no Redis."""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .store import text

__all__ = [
    "Admission",
    "AdmitResult",
    "Beat",
    "DeadLetter",
    "Idle",
    "Leased",
    "Leases",
    "joined",
    "leased_from",
    "new_node_id",
    "process_node_id",
]

#: One request to admit: fingerprint (b"" = never deduplicated), score, payload,
#: optionally its domain ("" or absent = the plain queue; DomainQueue sets it), the
#: request's URL (or host), which routes it to a shard of a sharded crawl (the frontier's
#: own choice: crawlplug.frontier.core.route_key; an unsharded crawl's ignores it), and
#: True for a request no lease stands behind (a spider's start request): if Redis goes
#: back in time past its admission, no restored lease makes it again, so the frontier
#: keeps it to send again (crawlplug.frontier.record.ResendLog).
Admission = (
    tuple[bytes, float, bytes]
    | tuple[bytes, float, bytes, str]
    | tuple[bytes, float, bytes, str, str]
    | tuple[bytes, float, bytes, str, str, bool]
)


def new_node_id() -> str:
    """host:pid:random, unique per process start."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


_process_node: tuple[int, str] | None = None


def process_node_id() -> str:
    """This process's node id: the same for its scheduler, stats and pipelines (new after fork)."""
    global _process_node
    if _process_node is None or _process_node[0] != os.getpid():
        _process_node = (os.getpid(), new_node_id())
    return _process_node[1]


@dataclass
class AdmitResult:
    flags: str  # one char per request: "1" admitted, "0" duplicate, "c" over its domain's page cap
    acked: int
    stale: int

    @property
    def admitted(self) -> int:
        return self.flags.count("1")

    @property
    def filtered(self) -> int:
        return self.flags.count("0")

    @property
    def capped(self) -> int:
        """Requests not admitted because their domain reached its page cap (CRAWLPLUG_DOMAIN_PAGES)."""
        return self.flags.count("c")


@dataclass
class Leased:
    id: str
    payload: bytes
    deliveries: int
    #: what to report to Redis about it (per-domain queue): "s" sent, "r" download ended
    report: str = ""


@dataclass
class DeadLetter:
    header: dict[str, object]
    payload: bytes = field(repr=False)

    @classmethod
    def parse(cls, raw: bytes) -> DeadLetter:
        head, _, payload = raw.partition(b"\n")
        try:
            header = json.loads(head)
            if not isinstance(header, dict):
                raise ValueError  # noqa: TRY004 - handled below as every unparseable header
        except ValueError:
            header = {"reason": "unparseable dead letter"}
            payload = raw
        return cls(header, payload)


def joined(first: AdmitResult | None, then: AdmitResult) -> AdmitResult:
    """One result for an admission sent in two calls (crawlplug.frontier.part.Part.settle)."""
    if first is None:
        return then
    return AdmitResult(first.flags + then.flags, first.acked + then.acked, first.stale + then.stale)


def leased_from(raw: Sequence[bytes | int]) -> list[Leased]:
    """A pop's reply, (id, payload, deliveries) flat, as leases."""
    return [
        # a flat reply's every second of three is a payload (bytes): no type says that
        Leased(text(raw[i]), raw[i + 1], int(raw[i + 2]))  # type: ignore[arg-type]
        for i in range(0, len(raw), 3)
    ]


class Leases(list[Leased]):
    """A pop's leases, with what the pop saw of the queue: a result value, so that the node
    keeps what it needs of it (crawlplug.scheduler.batch.Batch) and the frontier keeps none.

    ``next_ready_ms``: the per-domain queue's ms until its next domain is due (-1: none
    waiting, or another queue order); ``queued_seen``: requests waiting as the pop saw them
    (-1: no part was asked)."""

    def __init__(self, leased: Iterable[Leased] = (), *, next_ready_ms: int = -1, queued_seen: int = -1) -> None:
        super().__init__(leased)
        self.next_ready_ms = next_ready_ms
        self.queued_seen = queued_seen


class Beat(tuple):
    """What a heartbeat (with its reap) answers: ``(lost, (requeued, dead))``, unpacked as
    before, plus the crawl's state it read: ``paused`` (an operator's pause), ``run_state``
    (crawlplug.crawl.runs; "" before a run), ``data_lost`` (a node found the crawl's data lost)."""

    lost: list[str]
    reaped: tuple[int, int]
    paused: bool
    run_state: str
    data_lost: bool

    def __new__(  # noqa: PYI034
        cls,
        lost: list[str],
        reaped: tuple[int, int],
        *,
        paused: bool,
        run_state: str,
        data_lost: bool,
    ) -> Beat:
        self = super().__new__(cls, (lost, reaped))
        self.lost, self.reaped = lost, reaped
        self.paused, self.run_state, self.data_lost = paused, run_state, data_lost
        return self


class Idle(tuple):
    """What idle.lua reads over every part: ``(queued, leased, producers)``, unpacked as
    before, plus ``start_entries`` (waiting in start_urls and the lanes), ``data_lost`` and
    ``start_urls_kind`` (the type start_urls holds when it is not a list, else "")."""

    queued: int
    leased: int
    producers: int
    start_entries: int
    data_lost: bool
    start_urls_kind: str

    def __new__(  # noqa: PYI034
        cls,
        queued: int,
        leased: int,
        producers: int,
        *,
        start_entries: int,
        data_lost: bool,
        start_urls_kind: str,
    ) -> Idle:
        self = super().__new__(cls, (queued, leased, producers))
        self.queued, self.leased, self.producers = queued, leased, producers
        self.start_entries, self.data_lost, self.start_urls_kind = start_entries, data_lost, start_urls_kind
        return self
