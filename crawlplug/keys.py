"""Redis key names of one crawl.

Every key of a crawl shares the hash tag ``{<crawl>}`` so that each Lua script,
which touches several of them, runs on one Redis Cluster slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .config import setting
from .errors import ConfigError

#: The names of a crawl's keys, in one place (see DESIGN.md, section 2).
NAMES = (
    "queue",  # zset: request id -> score (queue order)
    "requests",  # hash: request id -> serialized request
    "seq",  # string: last request id handed out
    "leases",  # zset: request id -> lease deadline (ms, Redis clock)
    "leased",  # hash: request id -> "node|score|deliveries[|domain]"
    "deliveries",  # hash: request id -> times delivered (only for redelivered ones)
    "seen",  # set: raw 20-byte request fingerprints
    "dead",  # list: dead letters (JSON)
    "stats",  # hash: crawl-wide counters
    "nodes",  # zset: node id -> heartbeat deadline (ms)
    "producers",  # zset: node id -> deadline; nodes still reading their start requests
    "start_urls",  # list: start entries pushed by operators and the seed timer
    "seeds",  # hash: seed id -> JSON spec (entry, schedule, last run)
    "seeds_due",  # zset: seed id -> next run (ms)
    "seedlock",  # string: the seed timer's lock (redis-py Lock)
    "control",  # hash: crawl-wide switches set by operators ("paused" -> JSON who/when)
    "errors",  # hash: "<kind>" -> count, "<kind>|s" -> JSON list of recent sample URLs
    "series",  # hash: "<counter>:<10 s bucket>" -> count, the last hour (rates, ETA, charts)
    # the per-domain queue (crawlplug.queues.DomainQueue; lua/domains.lua)
    "dq",  # zset: "<domain>\t<rank><request id>", one domain's requests in order
    "domains",  # zset: domain -> when its next request may start (ms); +inf = at its concurrency
    "dstate",  # hash: "b:<domain>" -> requests of it leased now, "l:<domain>" -> last lease (ms)
    "dconf",  # hash: "<source>:<domain>" -> "<delay ms> <concurrency>" (runtime limits)
    # crawl-wide Scrapy stats (crawlplug.stats.RedisStatsCollector; lua/stats.lua)
    "crawlstats",  # hash: stat -> value aggregated over every node (summed, earliest start, latest finish)
    "statnodes",  # zset: node id -> its last stats flush (ms); each node's own stats in node:<id>:stats
    "items",  # list or stream: scraped items as JSON (crawlplug.pipelines.RedisItemPipeline)
)

#: The per-domain queue's keys, in the order the scripts take them.
DOMAIN_NAMES = ("dq", "domains", "dstate", "dconf")


@dataclass(frozen=True)
class CrawlKeys:
    """Key names for crawl ``crawl`` (``prefix`` defaults to "crawlplug")."""

    crawl: str
    prefix: str = "crawlplug"

    def __post_init__(self) -> None:
        if not self.crawl or any(c in self.crawl for c in "{}*?[]\\ \n"):
            raise ConfigError(
                f"invalid crawl name {self.crawl!r}: must be non-empty, without braces, "
                "glob characters (*?[]\\) or whitespace"
            )

    @property
    def tag(self) -> str:
        return f"{self.prefix}:{{{self.crawl}}}"

    def key(self, name: str) -> str:
        return f"{self.tag}:{name}"

    def node(self, node_id: str) -> str:
        """The hash holding one node's live metrics."""
        return f"{self.tag}:node:{node_id}"

    def node_stats(self, node_id: str) -> str:
        """The hash holding one node's Scrapy stats (under ``node:`` so purge deletes it)."""
        return f"{self.tag}:node:{node_id}:stats"

    def domain_keys(self) -> list[str]:
        """The per-domain queue's keys, in the order the scripts take them."""
        return [self.key(n) for n in DOMAIN_NAMES]

    def pattern(self) -> str:
        """A SCAN pattern matching every key of this crawl."""
        return f"{self.prefix}:{{{self.crawl}}}:*"

    def __getattr__(self, name: str) -> str:
        if name in NAMES:
            return self.key(name)
        raise AttributeError(name)


def crawl_keys(settings: Any, spider_name: str) -> CrawlKeys:
    """The keys of the crawl a node of spider ``spider_name`` joins, as the scheduler
    builds them: CRAWLPLUG_CRAWL_ID (else the spider's name) and CRAWLPLUG_KEY_PREFIX."""
    return CrawlKeys(settings.get("CRAWLPLUG_CRAWL_ID") or spider_name, setting(settings, "CRAWLPLUG_KEY_PREFIX"))
