"""How the frontier's records are written in Redis, for the Python side: the one place
that knows their formats besides the scripts (crawlplug/frontier/lua/).

* text: Redis replies as text;
* Redis-clock time: every time a crawl shows or compares comes from Redis's TIME;
* one write over keys of several hash slots (:func:`multi`);
* ranks and members of the per-domain queue (``<domain>\\t<rank><id>``, lua/domains.lua);
* lease records (``node|score|deliveries[|domain][|f]``, lua/leases.lua).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeGuard

from redis.cluster import RedisCluster

if TYPE_CHECKING:
    import redis

__all__ = [
    "RANK_OFFSET",
    "DqMember",
    "LeaseRecord",
    "dq_member",
    "is_cluster",
    "json_record",
    "multi",
    "parse_dq_member",
    "parse_lease",
    "rank_of",
    "redis_ms",
    "text",
]

#: lua/domains.lua's RANK_OFFSET: a queue score s is ranked as s + 2^50, 16 digits.
RANK_OFFSET = 2**50


def text(value: object) -> str:
    """A reply as text (bytes decoded, undecodable bytes replaced)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def is_cluster(client: object) -> TypeGuard[RedisCluster]:
    """Whether ``client`` is redis-py's cluster client (whose pipelines refuse some commands,
    and whose transactions stay in one slot)."""
    return isinstance(client, RedisCluster)


def multi(client: redis.Redis) -> redis.client.Pipeline:
    """The pipeline of one write whose keys lie outside one crawl's hash tag (a crawl's key and
    a Redis-wide index, the users and their tokens): a MULTI on one Redis. A Redis Cluster
    refuses a transaction over several slots, so there it is a plain pipeline, each command
    sent to its slot's primary: not atomic, and a write that fails raises (the command that
    made it can be run again)."""
    return client.pipeline(transaction=not is_cluster(client))


def json_record(value: object) -> dict[str, object] | None:
    """A JSON object stored as a hash field (a run's summary, a registry entry): the dict,
    ``{"raw": text}`` when it is not JSON, None when it is empty or not an object."""
    raw = text(value) if value is not None else ""
    if not raw:
        return None
    try:
        decoded = json.loads(raw)
    except ValueError:
        return {"raw": raw}
    return decoded if isinstance(decoded, dict) else None


def redis_ms(client: redis.Redis) -> int:
    """Redis's clock in ms: what every time a crawl shows or compares is measured by."""
    sec, usec = client.time()
    return int(sec) * 1000 + int(usec) // 1000


def rank_of(score: float) -> str:
    """A queue score as lua/domains.lua ranks it in the per-domain queue (16 digits)."""
    s = math.floor(score) if math.isfinite(score) else (RANK_OFFSET if score > 0 else -RANK_OFFSET)
    s = min(max(s, -RANK_OFFSET), RANK_OFFSET - 1)
    return f"{s + RANK_OFFSET:016d}"


def dq_member(domain: str, score: float, request_id: str) -> str:
    """A per-domain queue member: ``<domain>\\t<rank><id>``."""
    return f"{domain}\t{rank_of(score)}{request_id}"


@dataclass(frozen=True)
class DqMember:
    domain: str
    score: float
    id: str


def parse_dq_member(member: bytes | str) -> DqMember:
    """``<domain>\\t<rank><id>`` read back. Never raises: a member written by hand without a
    rank of 16 ASCII digits reads with score 0 and the rest as its id."""
    domain, _, rest = text(member).partition("\t")
    rank = rest[:16]
    if len(rank) == 16 and rank.isascii() and rank.isdigit():
        return DqMember(domain, float(int(rank) - RANK_OFFSET), rest[16:])
    return DqMember(domain, 0.0, rest)


@dataclass(frozen=True)
class LeaseRecord:
    node: str
    score: str  # the queue score, or "start" for a start entry's lease
    deliveries: int
    domain: str = ""
    freed: bool = False  # its download ended (it no longer counts as in flight)


def parse_lease(record: bytes | str) -> LeaseRecord:
    """``node|score|deliveries[|domain][|f]`` (the ``leased`` hash) read back. Never raises: a
    record written by hand reads as what it holds (deliveries 0 unless they are ASCII digits)."""
    parts = text(record).split("|")
    node, score, deliveries = (parts + ["", "", "0"])[:3]
    domain = parts[3] if len(parts) > 3 else ""
    freed = len(parts) > 4 and parts[4] == "f"
    # "²".isdigit() is true and int("²") raises: only ASCII digits count, as in lua/leases.lua
    counted = int(deliveries) if deliveries.isascii() and deliveries.isdigit() and len(deliveries) < 19 else 0
    return LeaseRecord(node, score, counted, domain, freed)
