"""A crawl's history in Redis: a record per minute for a day, per hour for a month.

Every heartbeat samples each part of the crawl (its own keys, each shard's) with
``lua/history.lua``, in the heartbeat's pipeline: the run's counters as they stand
(pages acknowledged, requests admitted, items, errors) and its gauges (queued, in
flight, dead letters, live nodes). The last sample of a minute is the minute's
record, kept in ``hist:m:<hour>`` (a hash per hour, the minute of the hour as the
field) until a day after its hour ended; the last sample of an hour is the hour's
record, in ``hist:h:<day>`` (a hash per UTC day, the hour as the field), kept a
month. Keys expire by themselves: memory is bounded by the retention, not by how
much the crawl did (docs/dashboard.md gives the bytes, measured).

A hash of 60 (24) short fields stays in Redis's compact listpack encoding, about
half the bytes of one big hash of 1,440 fields; the price is that a key's name
depends on the time, so the node names the keys by its estimate of Redis's clock
(the last heartbeat's reply plus the time since) and the script, which reads Redis's
own clock, writes nothing if that estimate is off across an hour's end.

This module names the keys and reads the records back, part by part;
:mod:`crawlplug.history.series` turns them into numbers per minute or hour.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis

from ..frontier.keys import CrawlKeys
from ..frontier.layout import parts
from ..frontier.store import text

if TYPE_CHECKING:
    from ..frontier.calls import Arg, Call

__all__ = [
    "COUNTERS",
    "DAY_MS",
    "GAUGES",
    "HOURS_KEPT_MS",
    "HOUR_MS",
    "MINUTES_KEPT_MS",
    "MINUTE_MS",
    "Record",
    "hour_key",
    "minute_key",
    "parse",
    "records",
    "sample_call",
]

MINUTE_MS = 60_000
HOUR_MS = 3_600_000
DAY_MS = 86_400_000
#: A minute record is kept this long after the end of its hour: the last day, at least.
MINUTES_KEPT_MS = DAY_MS
#: An hour record is kept this long after the end of its (UTC) day: the last month, at least.
HOURS_KEPT_MS = 31 * DAY_MS

#: The counters a record holds, as they stand in the run (cumulative), then the gauges.
COUNTERS = ("acked", "enqueued", "items", "errors")
GAUGES = ("queued", "in_flight", "dead", "nodes")


def minute_key(keys: CrawlKeys, hour: int) -> str:
    """The hash of the minute records of ``hour`` (ms // 3600000)."""
    return keys.key(f"hist:m:{hour}")


def hour_key(keys: CrawlKeys, day: int) -> str:
    """The hash of the hour records of ``day`` (ms // 86400000, UTC)."""
    return keys.key(f"hist:h:{day}")


def sample_call(keys: CrawlKeys, now_ms: int, epoch: str, run: int | None) -> Call:
    """The history.lua call sampling part ``keys`` at ``now_ms`` (the caller's estimate of
    Redis's clock: it names the keys) for run ``run`` (the one the caller joined, None if
    it joined none: its epoch says it is the crawl's current run)."""
    hour, day = now_ms // HOUR_MS, now_ms // DAY_MS
    names = [minute_key(keys, hour), hour_key(keys, day), keys.stats, keys.queue, keys.dq, keys.leases, keys.dead]
    base = keys.shard is None
    if base:
        names.append(keys.nodes)
    names.append(keys.epoch)
    args: list[Arg] = [
        hour,
        day,
        "1" if base else "0",
        "" if run is None else run,
        MINUTES_KEPT_MS,
        HOURS_KEPT_MS,
        epoch,
    ]
    return ("history", names, args)


@dataclass(frozen=True)
class Record:
    """One minute's (hour's) record of one part: the last sample taken in it."""

    at_ms: int  #: when the sample was taken (Redis clock, to the second)
    run: int | None  #: the run it was taken in (None in a shard's records)
    counters: tuple[int, ...]  #: COUNTERS, as they stood in the run
    gauges: tuple[int | None, ...]  #: GAUGES (live nodes None in a shard's records)


def parse(raw: bytes | str, bucket_ms: int) -> Record | None:
    """A record of the bucket starting at ``bucket_ms``; None when it is not one (written by hand)."""
    fields = text(raw).split()
    if len(fields) != 2 + len(COUNTERS) + len(GAUGES):
        return None
    run, second, *numbers = fields
    try:
        values = [None if n == "-" else int(n) for n in numbers]
        at = bucket_ms + int(second) * 1000
        run_id = None if run == "-" else int(run)
    except ValueError:
        return None
    counters = values[: len(COUNTERS)]
    if any(v is None for v in counters):
        return None
    return Record(at, run_id, tuple(counters), tuple(values[len(COUNTERS) :]))  # type: ignore[arg-type]


def records(
    client: redis.Redis, keys: CrawlKeys, step_ms: int, since_ms: int, until_ms: int
) -> list[list[tuple[int, Record]]]:
    """Every part's records of resolution ``step_ms`` (MINUTE_MS or HOUR_MS) whose bucket
    starts in [since_ms, until_ms], as (bucket start ms, record) in the order they were
    taken (a bucket two runs sampled has a record of each), part by part (the crawl's own
    keys first)."""
    if step_ms not in (MINUTE_MS, HOUR_MS):
        raise ValueError(f"history records are per minute or per hour, not per {step_ms} ms")
    span, name = (HOUR_MS, minute_key) if step_ms == MINUTE_MS else (DAY_MS, hour_key)
    groups = list(range(since_ms // span, until_ms // span + 1))
    part_list: Sequence[CrawlKeys] = parts(client, keys)
    pipe = client.pipeline(transaction=False)
    for part in part_list:
        for group in groups:
            pipe.hgetall(name(part, group))
    replies = pipe.execute()
    out: list[list[tuple[int, Record]]] = []
    for i in range(len(part_list)):
        found: list[tuple[int, Record]] = []
        for j, group in enumerate(groups):
            for field, raw in replies[i * len(groups) + j].items():
                slot, _, of_run = text(field).partition(".")  # "<slot>", or "<slot>.<run>" moved aside
                if not slot.isdigit() or int(slot) * step_ms >= span or not (of_run == "" or of_run.isdigit()):
                    continue
                bucket = group * span + int(slot) * step_ms
                record = parse(raw, bucket)
                if record is not None and since_ms <= bucket <= until_ms:
                    found.append((bucket, record))
        out.append(sorted(found, key=lambda br: (br[1].at_ms, br[0])))
    return out
