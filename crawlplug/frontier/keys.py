"""Redis key names of one crawl.

Every key of a crawl shares the hash tag ``{<crawl>}`` so that each Lua script,
which touches several of them, runs on one Redis Cluster slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from redis.crc import REDIS_CLUSTER_HASH_SLOTS as SLOTS
from redis.crc import key_slot

from ..config import setting
from ..errors import ConfigError

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

__all__ = ["DEDUP_NAMES", "DEDUP_PREFIXES", "DOMAIN_NAMES", "NAMES", "SHARDED_NAMES", "CrawlKeys", "crawl_keys"]

#: The names of a crawl's keys, in one place (see DESIGN.md, section 2).
NAMES = (
    "queue",  # zset: request id -> score (queue order)
    "requests",  # hash: request id -> payload (crawlplug.serializers: compact JSON v3, v1/v2 read too)
    "seq",  # string: last request id handed out
    "leases",  # zset: request id -> lease deadline (ms, Redis clock)
    "leased",  # hash: request id -> "node|score|deliveries[|domain]"
    "deliveries",  # hash: request id -> times delivered (only for redelivered ones)
    "seen",  # set: raw 20-byte request fingerprints (RedisSetDupeFilter's store of crawls begun before "fph")
    # the compact exact store (crawlplug.frontier.fphash; lua/dedup.lua mode "hash"): hash "spec"
    # (bucketing: split:fill:level, or by generations bits:fill:growth), splitting "level", "next",
    # "count", by generations "gens", "count:<g>"; its buckets are the hashes fph:<level or g>:<bucket
    # hex> (field: the fingerprint less the bytes the bucket fixes, value ""), each kept in Redis's
    # compact encoding (listpack / ziplist)
    "fph",
    "dead",  # list: dead letters (JSON)
    "stats",  # hash: crawl-wide counters
    "counted",  # hash: "<node>|<counter>" -> that node's total the run's counters hold (heartbeat.lua)
    "nodes",  # zset: node id -> heartbeat deadline (ms)
    "producers",  # zset: node id -> deadline; nodes still reading their start requests
    "start_urls",  # list: start entries pushed by operators and the seed timer
    "lanes",  # set: the crawl's other start-entry lists ("start_urls:<lane>"), as pushed or read (readers count them)
    "seeds",  # hash: seed id -> JSON spec (entry, schedule, last run)
    "seeds_due",  # zset: seed id -> next run (ms)
    "seedlock",  # string: the seed timer's lock (redis-py Lock)
    "control",  # hash: crawl-wide switches set by operators ("paused" -> JSON who/when)
    "errors",  # hash: "<kind>" -> count, "<kind>|s" -> JSON list of recent sample URLs
    "series",  # hash: "<counter>:<10 s bucket>" -> count, the last hour (rates, ETA, charts)
    # the per-domain queue (crawlplug.queues.DomainQueue; lua/domains.lua)
    "dq",  # zset: "<domain>\t<rank><request id>", one domain's requests in order
    "domains",  # zset: domain -> when its next request may start (ms); +inf = at its concurrency
    "dstate",  # hash: "b:<domain>" -> requests of it leased now, "l:<domain>" -> last lease (ms),
    # "c:<domain>" -> requests of it admitted in this run (its page cap)
    "dconf",  # hash: "<source>:<domain>" -> "<delay ms> <concurrency>" (runtime limits); "cap:o"/"cap:s" -> page cap
    # crawl-wide Scrapy stats (crawlplug.stats.RedisStatsCollector; lua/stats.lua)
    "crawlstats",  # hash: stat -> value aggregated over every node (summed, earliest start, latest finish)
    "statnodes",  # zset: node id -> its last stats flush (ms); each node's own stats in node:<id>:stats
    "items",  # list or stream: scraped items as JSON (crawlplug.pipelines.RedisItemPipeline)
    "changes",  # hash: run id -> JSON change report of the items stored by key (crawlplug.pipelines.sqlitems)
    "meta",  # hash: the crawl's fixed layout ("shards" -> N), checked by every node at start, and its
    # exact store ("dedup_store" -> "hash" | "set", crawlplug.frontier.fphash.choose_store)
    # crawl runs (crawlplug.crawl.runs; lua/join.lua, runstart.lua, finish.lua, epoch.lua) and their
    # control (crawlplug.crawl.control; lua/runctl.lua)
    "run",  # hash: the current run: id, epoch, state, started, ended, reason, by, incremental; its
    # limits lim_pages, lim_items, lim_errors, lim_timeout (ms since started); drain_by/_at; next
    "runs",  # hash: run id -> JSON summary of each ended run (started, ended, reason, pages, ...)
    "epoch",  # string: the crawl's epoch (in every part); a node's calls from another epoch are refused
    "runfence",  # string: the highest fencing token of a node beginning a run that claimed this part (runclear.lua)
    # nodes found dead by reap.lua, shown as dead until the next run, an hour at most (crawlplug.ops.status): node id ->
    # "<declared dead ms, 0 in a shard> <last change ms> <its leases requeued> <dead-lettered>";
    # per shard, where its leases were reaped (the counts add up across shards)
    "graveyard",
    # nodes started through Scrapyd (crawlplug.scrapyd.store; `crawlplug start`, schedules)
    "jobs",  # zset: Scrapyd job id -> when it was scheduled (ms); each job's record in job:<id>
    # scheduled runs (crawlplug.schedules.store; lua/leader.lua, lua/firing.lua)
    "schedules",  # hash: schedule name -> JSON spec (cron, daemons, settings) and its next and last firing
    "fires",  # list: the last firings of every schedule of the crawl, newest first (JSON)
    "leader",  # string: "<control process id> <fence>", the control process firing this crawl's schedules
    "fence",  # string: the last fencing token handed to a leader (INCR)
    # alert rules (crawlplug.alerts.store; lua/leader.lua, lua/alert.lua)
    "alerts",  # hash: rule id -> JSON rule (when, notify, cooldown)
    "alertstate",  # hash: rule id -> JSON state (ok, pending, firing; since, value, last notified)
    "alertlog",  # list: the crawl's last alert events (fired, cleared), newest first (JSON)
    "alertleader",  # string: "<owner> <fence>", the process evaluating this crawl's alert rules
    "alertfence",  # string: the last fencing token handed to an alert leader (INCR)
    # alert notifications waiting to be sent, retried with backoff (crawlplug.alerts.outbox)
    "alertsend",  # zset: notification id -> when its next attempt is due (ms)
    "alertmsg",  # hash: notification id -> JSON (rule, urls, title, body, attempts, last error)
    "alertfailed",  # list: notifications that still failed after their last attempt, newest first (JSON)
    "schedpause",  # string: JSON {by, at, why}: the crawl's schedules are paused (crawlplug.crawl.control)
)

#: Keys that a sharded crawl (CRAWLPLUG_SHARDS > 1) keeps once per shard, under the
#: shard's own hash tag; every other name stays under the crawl's tag. The crawl's
#: tag keeps its own queue keys too: they hold the leases of start entries.
SHARDED_NAMES = (
    "queue",
    "requests",
    "seq",
    "leases",
    "leased",
    "deliveries",
    "seen",
    "fph",
    "dead",
    "stats",
    "series",
    "dq",
    "domains",
    "dstate",
    "dconf",
    "epoch",
    "graveyard",
    "runfence",
)

#: The per-domain queue's keys, in the order the scripts take them.
DOMAIN_NAMES = ("dq", "domains", "dstate", "dconf")


@dataclass(frozen=True)
class CrawlKeys:
    """Key names for crawl ``crawl`` (``prefix`` defaults to "crawlplug")."""

    crawl: str
    prefix: str = "crawlplug"
    #: which shard of a sharded crawl these keys are (None: the crawl's own keys)
    shard: int | None = None
    #: how many shards the crawl has (with ``shard``)
    shards: int = 1

    def __post_init__(self) -> None:
        if not self.crawl or any(c in self.crawl for c in "{}*?[]\\#~ \n"):
            raise ConfigError(
                f"invalid crawl name {self.crawl!r}: must be non-empty, without braces, "
                "glob characters (*?[]\\), '#', '~' or whitespace"
            )

    @property
    def tag(self) -> str:
        if self.shard is None:
            return f"{self.prefix}:{{{self.crawl}}}"
        return f"{self.prefix}:{{{self.crawl}#{self.shard}~{_spread(self.crawl, self.shard, self.shards)}}}"

    def shard_keys(self, shard: int, shards: int) -> CrawlKeys:
        """The keys of shard ``shard`` of ``shards`` of this crawl."""
        return CrawlKeys(self.crawl, self.prefix, shard, shards)

    @property
    def base(self) -> CrawlKeys:
        """The crawl's own keys (for a shard's keys: the crawl's)."""
        return self if self.shard is None else CrawlKeys(self.crawl, self.prefix)

    def key(self, name: str) -> str:
        return f"{self.tag}:{name}"

    def node(self, node_id: str) -> str:
        """The hash holding one node's live metrics."""
        return f"{self.tag}:node:{node_id}"

    def reply(self, node_id: str) -> str:
        """The string holding one node's last admission reply (admit.lua's replay guard)."""
        return f"{self.tag}:reply:{node_id}"

    def job(self, job_id: str) -> str:
        """The hash holding one Scrapyd job's record (crawlplug.scrapyd.store)."""
        return f"{self.tag}:job:{job_id}"

    def node_stats(self, node_id: str) -> str:
        """The hash holding one node's Scrapy stats (under ``node:`` so purge deletes it)."""
        return f"{self.tag}:node:{node_id}:stats"

    def site_minute(self, minute: int) -> str:
        """The hash of the site spiders' outcomes counted in ``minute`` (ms // 60000, Redis's
        clock): crawlplug.stats writes it, crawlplug.sites.minutes reads it."""
        return f"{self.tag}:sitem:{minute}"

    def domain_keys(self) -> list[str]:
        """The per-domain queue's keys, in the order the scripts take them."""
        return [self.key(n) for n in DOMAIN_NAMES]

    def lane_keys(self, lanes: Sequence[str]) -> list[str]:
        """The keys of the crawl's lanes among ``lanes`` (start-entry list names: start_urls itself
        has a place of its own in every script that takes these)."""
        return [self.key(name) for name in lanes if name != "start_urls"]

    def pattern(self) -> str:
        """A SCAN pattern matching every key of this crawl (of this shard, for a shard's keys)."""
        return f"{self.tag}:*"

    def shards_pattern(self) -> str:
        """A SCAN pattern matching the keys of every shard of this crawl."""
        return f"{self.prefix}:{{{self.crawl}#*~*}}:*"

    def __getattr__(self, name: str) -> str:
        if name in NAMES:
            return self.key(name)
        raise AttributeError(name)


#: Dedup state (key names after a part's ``<tag>:``), kept across runs only by an incremental
#: crawl (crawlplug.crawl.runs), forgotten by name (crawlplug.frontier.forgetting).
DEDUP_NAMES = frozenset({"seen", "seen_ttl", "bf", "bloom", "fph"})
#: Name prefixes of dedup state (Bloom layers and generations, scrapy-redis's fingerprint copy,
#: the compact store's buckets).
DEDUP_PREFIXES = ("bloom:", "seen:", "fph:")


def crawl_keys(settings: BaseSettings, spider_name: str) -> CrawlKeys:
    """The keys of the crawl a node of spider ``spider_name`` joins, as the scheduler
    builds them: CRAWLPLUG_CRAWL_ID (else the spider's name) and CRAWLPLUG_KEY_PREFIX."""
    return CrawlKeys(settings.get("CRAWLPLUG_CRAWL_ID") or spider_name, setting(settings, "CRAWLPLUG_KEY_PREFIX"))


@lru_cache(maxsize=1024)
def _spread(crawl: str, shard: int, shards: int) -> int:
    """A suffix that puts shard ``shard``'s hash slot near the middle of its
    1/``shards`` of the slot space.

    Redis Cluster gives each primary a contiguous range of slots; shards whose
    slots are spread evenly over the range land on min(shards, primaries)
    different primaries of a freshly created cluster, instead of wherever CRC16
    happens to put ``{crawl#0}``, ``{crawl#1}``... The suffix is a pure function
    of the name, so every node computes the same keys.
    """
    width = SLOTS / shards
    target = (shard + 0.5) * width
    for suffix in range(100_000):
        if abs(key_slot(f"{crawl}#{shard}~{suffix}".encode()) - target) <= width / 8:
            return suffix
    raise AssertionError("unreachable: CRC16 covers the slot space")
