"""Forgetting fingerprints, so that requests seen before are admitted, and crawled, again
(``crawlplug forget``; scrapy-redis users asked for it in its issue #302).

* :func:`forget` removes given fingerprints from an exact dedup state (the set or the
  compact store of RedisSetDupeFilter, the expiring set of ExpiringDupeFilter), each from
  the part its request is routed to in a sharded crawl, one ``lua/forget.lua`` call per
  part (and one transaction per part for the compact store, crawlplug.frontier.fphash).
* A Bloom filter cannot do that: a URL's bits are shared with other URLs, and clearing
  them would make those look new too (or, left set, the URL still looks seen). What it
  can do is :func:`roll`: the whole dedup state deleted at once, a new generation in
  which every URL is new. :func:`forget` refuses a crawl with a Bloom filter, saying so.

Nodes that are running keep their own cache of the fingerprints they saw recently
(CRAWLPLUG_FP_CACHE) and filter those without asking Redis until they restart; the
dupefilters of the ``scrapy-redis`` migration keep their copy of scrapy-redis's
fingerprints in memory likewise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from .fpadmin import forget_hashed
from .keys import DEDUP_NAMES, DEDUP_PREFIXES, CrawlKeys
from .layout import parts, shard_of
from .scripts import Scripts
from .store import text

if TYPE_CHECKING:
    from .calls import Call

__all__ = ["BLOOM_CANNOT_FORGET", "Forgotten", "bloom_kind", "forget", "roll"]

#: What a refusal says about a Bloom filter (the CLI prints it).
BLOOM_CANNOT_FORGET = (
    "crawl {crawl!r} deduplicates with a Bloom filter ({kind}), which cannot forget one URL: its bits are "
    "shared with other URLs, so clearing them would let those be crawled again too. Nothing was removed. "
    "What a Bloom filter can do is start a new generation, forgetting every URL at once: "
    "`crawlplug forget --roll` (or, going forward, CRAWLPLUG_BLOOM_GENERATIONS, which forgets by age)"
)


@dataclass
class Forgotten:
    """What :func:`forget` did: a flag per fingerprint ("1" removed, "0" not recorded), or
    nothing and the kind of Bloom filter ("bloom": Lua, "bf": the server's) that refused."""

    flags: str = ""
    bloom: str = ""

    @property
    def removed(self) -> int:
        return self.flags.count("1")


def _dedup_parts(client: redis.Redis, keys: CrawlKeys) -> list[CrawlKeys]:
    found = parts(client, keys)
    return found[1:] or found  # a sharded crawl's dedup state is in its shards


def bloom_kind(client: redis.Redis, keys: CrawlKeys) -> str:
    """ "bloom" or "bf" if a part of the crawl holds a Bloom filter, else ""."""
    pipe = client.pipeline(transaction=False)
    for part in _dedup_parts(client, keys):
        pipe.exists(part.key("bloom"), part.key("bloom:meta"))  # its sizing (every node records it), its layers
        pipe.exists(part.key("bf"))
    found = pipe.execute()
    for i, exists in enumerate(found):
        if exists:
            return "bloom" if i % 2 == 0 else "bf"
    return ""


def forget(
    client: redis.Redis, keys: CrawlKeys, items: Sequence[tuple[bytes, str]], scripts: Scripts | None = None
) -> Forgotten:
    """Remove each (raw fingerprint, route) from the exact dedup state: the route (the
    request's domain or host, crawlplug.queues.route) picks the shard of a sharded crawl.
    Refuses, removing nothing, a crawl whose dedup is a Bloom filter."""
    kind = bloom_kind(client, keys)
    if kind:
        return Forgotten(bloom=kind)
    targets = _dedup_parts(client, keys)
    by_part: dict[int, list[int]] = {}
    for i, (_, route) in enumerate(items):
        by_part.setdefault(shard_of(route, len(targets)) if len(targets) > 1 else 0, []).append(i)
    scripts = scripts or Scripts(client)
    order = list(by_part)
    calls: list[Call] = [
        (
            "forget",
            [targets[p].seen, targets[p].key("seen_ttl"), targets[p].key("bloom"), targets[p].key("bf")],
            [items[i][0] for i in by_part[p]],
        )
        for p in order
    ]
    flags = ["0"] * len(items)
    raw: Any  # forget.lua's reply
    for p, raw in zip(order, scripts.run_many(calls)):
        if isinstance(raw, Exception):
            raise raw
        if text(raw[0]) == "BLOOM":  # a Bloom filter appeared since the check: this part removed nothing
            return Forgotten("".join(flags), text(raw[1]))
        for i, flag in zip(by_part[p], text(raw[0])):
            flags[i] = flag
    for p in order:  # the compact store (crawlplug.frontier.fphash), where the part has one
        for i, flag in zip(by_part[p], forget_hashed(client, targets[p], [items[i][0] for i in by_part[p]])):
            if flag == "1":
                flags[i] = "1"
    return Forgotten("".join(flags))


def roll(client: redis.Redis, keys: CrawlKeys) -> int:
    """Delete the crawl's whole dedup state, in every part (what a new run of a crawl that
    is not incremental starts without): every URL is new again. How many keys went."""
    deleted = 0
    for part in _dedup_parts(client, keys):
        doomed = []
        for raw in client.scan_iter(match=part.pattern(), count=1000):
            name = text(raw)[len(part.tag) + 1 :]
            if name in DEDUP_NAMES or name.startswith(DEDUP_PREFIXES):
                doomed.append(raw)
        for i in range(0, len(doomed), 500):
            deleted += int(client.unlink(*doomed[i : i + 500]))
    return deleted
