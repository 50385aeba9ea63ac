"""Redis going back in time, on a live server: every key (or every key of one part of a
crawl) put back as an earlier snapshot had it, values and time-to-live alike.

DUMP/RESTORE is what an RDB file holds, key by key: restoring a snapshot is what a Redis
restarted from that file, or a replica that had received only that much, serves to the
nodes that reconnect to it. Done on the server the test already has, it needs no restart
(the restart from a real RDB file is tests/test_outage.py's, and the model test's).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis


@dataclass(frozen=True)
class Snapshot:
    """Every key matching ``match`` at one moment: (name, DUMP, PTTL in ms or -1)."""

    match: str
    keys: tuple[tuple[bytes, bytes, int], ...]


def snapshot(client: redis.Redis, match: str = "crawlplug:*") -> Snapshot:
    names = sorted(client.scan_iter(match=match, count=1000))
    pipe = client.pipeline(transaction=True)  # one moment: MULTI/EXEC
    for name in names:
        pipe.dump(name)
        pipe.pttl(name)
    out = pipe.execute()
    keys = tuple((name, out[2 * i], int(out[2 * i + 1])) for i, name in enumerate(names) if out[2 * i] is not None)
    return Snapshot(match, keys)


def restore(client: redis.Redis, snap: Snapshot) -> None:
    """Put every key ``snap`` covers back as it was: those made since are gone, those changed
    hold their old values (one MULTI/EXEC: no call sees a half-restored state)."""
    pipe = client.pipeline(transaction=True)
    for name in client.scan_iter(match=snap.match, count=1000):
        pipe.delete(name)
    for name, dump, ttl in snap.keys:
        pipe.restore(name, max(ttl, 0), dump, replace=True)
    pipe.execute()
