"""The per-domain queue's schedule and limits of one crawl, for the operators who read and
steer it (``crawlplug domains``, the dashboard, an import). The queue itself is
lua/domains.lua's; this module only calls scripts that read or change it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import redis

from ..errors import ConfigError
from .keys import CrawlKeys
from .scripts import Scripts
from .store import text

if TYPE_CHECKING:
    from .calls import Arg

__all__ = ["DomainRow", "Domains"]


class DomainRow(TypedDict):
    """One scheduled domain of :meth:`Domains.table`."""

    domain: str
    queued: int
    in_flight: int
    #: its requests leased so far (lua/domaintable.lua)
    leased_total: int
    #: seconds between its requests, and how many may be in flight at once
    delay: float
    concurrency: int
    #: seconds until its next request may start; None while parked at its concurrency
    ready_in: float | None
    at_concurrency: bool


class Domains:
    """The per-domain queue's schedule and limits of one crawl (read and steer).

    ``parts``: the key sets holding the schedule, the shards' for a sharded crawl
    (crawlplug.frontier.core.open_domains); each shard keeps its own copy of the limits.
    """

    def __init__(self, client: redis.Redis, keys: CrawlKeys, parts: Sequence[CrawlKeys] | None = None) -> None:
        self.client = client
        self.keys = keys
        self.parts = list(parts or [keys])
        self.scripts = Scripts(client)

    def configure(self, fields: dict[str, str]) -> int:
        """Write dconf fields ({"o:example.com": "2000 1", "s:*": "- 4"}; "" deletes) and
        reschedule the domains they touch; returns how many were rescheduled."""
        if not fields:
            return 0
        args: list[Arg] = []
        for field_, value in fields.items():
            args += [field_, value]
        total = 0
        raw: Any  # a script's reply, read by its shape
        for raw in self.scripts.run_many([("domainconf", k.domain_keys(), args) for k in self.parts]):
            if isinstance(raw, Exception):
                raise raw
            total += int(raw)
        return total

    def override(self, domain: str, *, delay: float | None = None, concurrency: float | None = None) -> None:
        """An operator's limits for ``domain`` ("*": every domain's default), crawl-wide and at
        once: ``delay`` seconds between two request starts, ``concurrency`` requests in flight
        (0: no limit); one not given keeps coming from the settings. ConfigError for a domain
        or a value that is not one (the one rule of the CLI, the dashboard and the console)."""
        if not domain or any(c in domain for c in "\t| "):
            raise ConfigError(f"invalid domain {domain!r}")
        if delay is None and concurrency is None:
            raise ConfigError("give a delay and/or a concurrency")
        for name, value in (("delay", delay), ("concurrency", concurrency)):
            if value is not None and (isinstance(value, bool) or not math.isfinite(value) or value < 0):
                raise ConfigError(f"{name} must be a finite number >= 0, not {value!r}")
        if concurrency is not None and int(concurrency) != concurrency:
            raise ConfigError(f"concurrency must be a whole number, not {concurrency!r}")
        delay_ms = "-" if delay is None else str(round(delay * 1000))
        conc = "-" if concurrency is None else str(int(concurrency))
        self.configure({f"o:{domain}": f"{delay_ms} {conc}"})

    def reset(self, domain: str) -> bool:
        """Drop the operator's limits for ``domain``: the settings rule again. Whether it had some."""
        had = bool(self.client.hexists(self.parts[-1].dconf, f"o:{domain}"))
        self.configure({f"o:{domain}": ""})
        return had

    def limits(self) -> dict[str, str]:
        """Every dconf field: "<source>:<domain>" -> "<delay ms> <concurrency>"."""
        return {text(a): text(b) for a, b in self.client.hgetall(self.parts[0].dconf).items()}

    def queued_count(self) -> int:
        return sum(int(self.client.zcard(k.dq)) for k in self.parts)

    def scheduled_count(self) -> int:
        return sum(int(self.client.zcard(k.domains)) for k in self.parts)

    def table(self, limit: int = 20) -> list[DomainRow]:
        """The scheduled domains, soonest first (parked ones last), with their queue size,
        requests in flight, limits in force (lua/domains.lua's rule, read by
        lua/domaintable.lua) and next start time."""
        out: list[tuple[float, DomainRow]] = []
        raw: Any  # a script's reply, read by its shape
        for raw in self.scripts.read([("domaintable", k.domain_keys(), [limit]) for k in self.parts]):
            if isinstance(raw, Exception):
                raise raw
            now = int(raw[0])
            for i in range(1, len(raw), 7):
                score = float(raw[i + 1])
                out.append(
                    (
                        score,
                        {
                            "domain": text(raw[i]),
                            "queued": int(raw[i + 2]),
                            "in_flight": int(raw[i + 3]),
                            "leased_total": int(raw[i + 4]),
                            "delay": float(raw[i + 5]) / 1000,
                            "concurrency": int(raw[i + 6]),
                            "ready_in": None if score == float("inf") else max(0.0, (score - now) / 1000),
                            "at_concurrency": score == float("inf"),
                        },
                    )
                )
        out.sort(key=lambda scored: scored[0])
        return [row for _, row in out[:limit]]
