"""The node log's key: ``node:<node id>:log``, a list of JSON records, the oldest first
(see :mod:`crawlplug.nodelog`). Nothing else writes it."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

import redis

from ..frontier.keys import CrawlKeys
from ..frontier.store import text

__all__ = ["KEEP_MS", "MAX_TEXT", "Record", "append", "kept", "key", "read", "summary"]

#: characters of a record's text kept (its message, then its traceback): a record is at most
#: about this many bytes (more for characters outside ASCII), so a node's log at most
#: CRAWLPLUG_NODE_LOG times it
MAX_TEXT = 2000
#: how long a node's log is kept after its last record (as the node's metrics hash)
KEEP_MS = 3_600_000


class Record(TypedDict):
    """One log record: its number in its node's process (a record sent twice, its reply
    lost, is read once), when (Unix ms), its level's name, its logger, its text."""

    n: int
    t: int
    level: str
    logger: str
    text: str


def key(keys: CrawlKeys, node_id: str) -> str:
    return f"{keys.node(node_id)}:log"


def kept(client: redis.Redis, keys: CrawlKeys) -> list[str]:
    """The nodes of the crawl that have a log kept, by name."""
    head, tail = keys.node(""), ":log"
    names = (text(k) for k in client.scan_iter(match=key(keys, "*"), count=1000))
    return sorted(name[len(head) : -len(tail)] for name in names)


def append(client: redis.Redis, keys: CrawlKeys, node_id: str, records: Sequence[Record], keep: int) -> None:
    """Add ``records`` to the node's log and keep its last ``keep``: one round trip."""
    if not records or keep <= 0:
        return
    name = key(keys, node_id)
    pipe = client.pipeline(transaction=True)
    pipe.rpush(name, *(json.dumps(r, separators=(",", ":")) for r in records))
    pipe.ltrim(name, -keep, -1)
    pipe.pexpire(name, KEEP_MS)
    pipe.execute()


def _parse(raw: Any) -> Record | None:
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return None  # a value written by hand: left out, never executed
    if not isinstance(value, dict):
        return None
    try:
        return Record(
            n=int(value.get("n", 0)),
            t=int(value["t"]),
            level=str(value["level"]),
            logger=str(value["logger"]),
            text=str(value["text"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def read(
    client: redis.Redis,
    keys: CrawlKeys,
    node_ids: Iterable[str],
    *,
    level: str | None = None,
    search: str | None = None,
    limit: int = 200,
) -> list[dict[str, Any]]:
    """The records of ``node_ids``' logs, oldest first, each with its ``node``: those of
    ``level`` (a level's name, e.g. ERROR) and above, whose text or logger holds ``search``
    (case-insensitive), the last ``limit``; each once (a batch sent again after its reply
    was lost is in the list twice). A key of another type reads as empty."""
    nodes = list(node_ids)
    pipe = client.pipeline(transaction=False)
    for node in nodes:
        pipe.lrange(key(keys, node), 0, -1)
    floor = _LEVELS.get(level.upper(), 0) if level else 0
    needle = search.lower() if search else None
    out: list[dict[str, Any]] = []
    for node, raws in zip(nodes, pipe.execute(raise_on_error=False)):
        if isinstance(raws, Exception):  # WRONGTYPE: a key written by hand
            continue
        seen: set[tuple[int, int]] = set()
        for raw in raws:
            record = _parse(raw)
            if record is None or (record["n"], record["t"]) in seen:
                continue
            seen.add((record["n"], record["t"]))
            if _LEVELS.get(record["level"], 0) < floor:
                continue
            if needle and needle not in record["text"].lower() and needle not in record["logger"].lower():
                continue
            out.append({"node": text(node), **record})
    out.sort(key=lambda r: (r["t"], r["node"]))
    return out[-limit:] if limit > 0 else out


def summary(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """How many records by level and by logger (most first), as ScrapydWeb's log analysis
    counts a job's log."""
    records = list(records)
    levels = Counter(r["level"] for r in records)
    loggers = Counter(r["logger"] for r in records)
    return {"levels": dict(levels.most_common()), "loggers": dict(loggers.most_common())}


_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}
