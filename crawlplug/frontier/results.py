"""What the frontier's calls return, and the ids it names nodes by: plain values, no Redis."""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .store import text

#: One request to admit: fingerprint (b"" = never deduplicated), score, payload,
#: optionally its domain ("" or absent = the plain queue; DomainQueue sets it), and for a
#: sharded crawl the domain or host that routes it to a shard (crawlplug.frontier.sharded).
Admission = tuple[bytes, float, bytes] | tuple[bytes, float, bytes, str] | tuple[bytes, float, bytes, str, str]


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
    header: dict[str, Any]
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
    """One result for an admission sent in two calls (crawlplug.frontier.single.Frontier._settle)."""
    if first is None:
        return then
    return AdmitResult(first.flags + then.flags, first.acked + then.acked, first.stale + then.stale)


def leased_from(raw: Sequence[Any]) -> list[Leased]:
    return [
        Leased(text(raw[i]), raw[i + 1], int(raw[i + 2])) for i in range(0, len(raw), 3)
    ]
