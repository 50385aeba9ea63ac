"""A site's history per minute in one crawl: pages, items and field outcomes counted in each
minute, over every node, for the last day.

The site spiders count their outcomes as Scrapy stats (:mod:`crawlplug.sites.outcomes`);
crawlplug's stats collector, at each flush, also adds what a node counted since its last
flush to the hash of the minute it is in (``<crawl's tag>:sitem:<minute>``, field
``<site>/<outcome>``, e.g. ``shop/field/price/missing``; :data:`crawlplug.stats.MINUTE_STAT`
names the outcomes kept, lua/stats.lua's "hsum"). A minute's hash expires a day after its
last count: the history never holds more than a day, whatever the crawl did. A flush
resent after a lost reply adds nothing twice (the node's stats hash holds absolute
values, the difference is taken from them). A flush lands in the minute its node was in
when it sent it (up to one stats interval, 5 s by default, after the counts were made).

Bytes: a minute of the demo shop's site (2 steps, 5 fields: 11 outcomes counted) is one hash
in Redis's listpack encoding, 408 bytes by MEMORY USAGE; a day of such minutes took 0.69 MB
of used_memory (478 bytes a minute with the key's expiry; Redis 7.0, docs/sites.md). A
minute that counted nothing for any site has no key.

This module reads it: :func:`series` per minute, :func:`null_rate` over a window (the
alert grammar's ``null_rate(SITE.FIELD, 10m)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import redis

from ..frontier.keys import CrawlKeys
from ..frontier.store import text

__all__ = ["FIELD_OUTCOMES", "MINUTE_MS", "Minutes", "null_rate", "series", "window"]

MINUTE_MS = 60_000
#: The outcomes a field has on an item page (crawlplug.sites.outcomes): each item page counts one.
FIELD_OUTCOMES = ("filled", "missing", "invalid", "default")


@dataclass
class Minutes:
    """A site's counts per minute, oldest first: ``t`` the minutes' starts (ms), and a list of
    counts per outcome (0 in a minute that counted none)."""

    t: list[int]
    pages: list[int]  #: pages of every step parsed
    failed: list[int]  #: requests that failed
    items_ok: list[int]
    items_incomplete: list[int]
    #: field -> outcome (FIELD_OUTCOMES) -> counts
    fields: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    #: step -> pages of it
    steps: dict[str, list[int]] = field(default_factory=dict)

    def null_rates(self) -> dict[str, list[float | None]]:
        """Each field's share of item pages where it was null ("missing"), minute by minute
        (None in a minute with no item page)."""
        out: dict[str, list[float | None]] = {}
        for name, counts in self.fields.items():
            rates: list[float | None] = []
            for i in range(len(self.t)):
                total = sum(counts[o][i] for o in FIELD_OUTCOMES)
                rates.append(_rate(counts["missing"][i], total))
            out[name] = rates
        return out

    def window_rates(self, now_ms: int, window_ms: int) -> dict[str, float | None]:
        """Each field's null rate over the window :func:`null_rate` reads (the minutes held
        here must cover it), as the alert rule ``null_rate(SITE.FIELD, 10m)`` computes it."""
        first, _ = window(now_ms, window_ms)
        inside = [i for i, t in enumerate(self.t) if t // MINUTE_MS >= first]
        return {
            name: _rate(sum(c["missing"][i] for i in inside), sum(c[o][i] for o in FIELD_OUTCOMES for i in inside))
            for name, c in self.fields.items()
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "t": self.t,
            "pages": self.pages,
            "failed": self.failed,
            "items_ok": self.items_ok,
            "items_incomplete": self.items_incomplete,
            "steps": self.steps,
            "fields": self.fields,
            "null_rate": self.null_rates(),
        }


def _raw(client: redis.Redis, keys: CrawlKeys, first: int, last: int) -> list[dict[str, int]]:
    """The hashes of minutes first..last (minute numbers), as {field: count}; a key of another
    type (written by hand) counts nothing, as a field that is no integer."""
    pipe = client.pipeline(transaction=False)
    for minute in range(first, last + 1):
        pipe.hgetall(keys.base.site_minute(minute))
    out = []
    for raw in pipe.execute(raise_on_error=False):
        counts: dict[str, int] = {}
        if not isinstance(raw, dict):
            out.append(counts)
            continue
        for k, v in raw.items():
            try:
                counts[text(k)] = int(v)
            except (TypeError, ValueError):
                continue  # written by hand: counts nothing
        out.append(counts)
    return out


def series(client: redis.Redis, keys: CrawlKeys, site: str, since_ms: int, until_ms: int) -> Minutes:
    """Site ``site``'s counts per minute of crawl ``keys`` for the minutes from the one holding
    ``since_ms`` to the one holding ``until_ms`` (Redis's clock), at most a day."""
    last = until_ms // MINUTE_MS
    first = max(since_ms // MINUTE_MS, last - 24 * 60)
    rows = _raw(client, keys, first, last)
    prefix = f"{site}/"
    out = Minutes([m * MINUTE_MS for m in range(first, last + 1)], [], [], [], [])
    n = len(rows)
    for i, counts in enumerate(rows):
        pages = failed = 0
        for name, value in counts.items():
            if not name.startswith(prefix):
                continue
            parts = name[len(prefix) :].split("/")
            if parts[0] == "step" and len(parts) == 3:
                per = out.steps.setdefault(parts[1], [0] * n)
                if parts[2] == "pages":
                    per[i] += value
                    pages += value
                else:
                    failed += value
            elif parts[0] == "field" and len(parts) == 3 and parts[2] in FIELD_OUTCOMES:
                out.fields.setdefault(parts[1], {o: [0] * n for o in FIELD_OUTCOMES})[parts[2]][i] += value
        out.pages.append(pages)
        out.failed.append(failed)
        out.items_ok.append(counts.get(f"{prefix}items/ok", 0))
        out.items_incomplete.append(counts.get(f"{prefix}items/incomplete", 0))
    return out


def window(now_ms: int, window_ms: int) -> tuple[int, int]:
    """The minutes (first, last, by number) a window of ``window_ms`` ending ``now_ms`` reads:
    whole minutes, the current one included (10 minutes: the minute now and the 10 before)."""
    return (now_ms - window_ms) // MINUTE_MS, now_ms // MINUTE_MS


def _rate(missing: int, total: int) -> float | None:
    return round(missing / total, 4) if total else None


def null_rate(client: redis.Redis, keys: CrawlKeys, site: str, name: str, window_ms: int, now_ms: int) -> float | None:
    """The share of item pages of ``site`` whose field ``name`` was null ("missing") over the
    last ``window_ms`` (:func:`window`); None if no item page was counted in it."""
    first, last = window(now_ms, window_ms)
    totals = dict.fromkeys(FIELD_OUTCOMES, 0)
    for counts in _raw(client, keys, first, last):
        for outcome in FIELD_OUTCOMES:
            totals[outcome] += counts.get(f"{site}/field/{name}/{outcome}", 0)
    return _rate(totals["missing"], sum(totals.values()))
