"""Export a crawl's Redis state as JSON lines, and import it into another Redis.

``crawlplug export`` / ``crawlplug import`` are thin layers over
:func:`export_crawl` and :func:`import_crawl`: a backup of a crawl, or a move
of a crawl from one Redis server to another (or to another crawl name).

The file is UTF-8 JSON lines, pure ASCII in practice (``\\u`` escapes). Every
byte string is a JSON string when it is valid UTF-8, else ``{"b64": "..."}``.
Line 1 is the header, the last line the end record (an import refuses a file
without it: a truncated file is never taken for a whole one)::

    {"type": "crawlplug-export", "version": 1, "crawl": "shop", "exported_at": "2025-...Z",
     "exported_at_ms": 1748779200000, "queue": "plain" | "domain", "dedup": "set" | ..., "seq": 1234}
    {"type": "request", "id": "0000000000000012", "score": -10.0, "payload": "{...}"}
    {"type": "request", "id": "...", "domain": "example.com", "rank": "1125899906842614", "payload": ...}
        (+ "deliveries": n when the request was delivered before, "leased": true when it was in flight)
    {"type": "start", "entry": "https://example.com/"}          start_urls, in list order
    {"type": "start", "entry": "...", "lane": "start_urls:high"}  a lane's (the crawl's lanes set)
    {"type": "dead", "letter": "<JSON header>\\n<payload>"}
    {"type": "seed", "id": "...", "spec": "{...}", "due": 1748779200000 | null}
    {"type": "dconf" | "dstate" | "stats" | "crawlstats" | "run" | "runs", "fields": [[field, value], ...]}
    {"type": "domain", "domain": "example.com", "next": <ms> | null}   the per-domain schedule
    {"type": "seen", "hex": ["<40 hex digits>", ...]}             set dedup, up to 1000 per line; the
                                                                  compact store's add "hash_spec": its bucketing
    {"type": "seen_ttl", "entries": [["<hex>", <expiry ms>], ...]}  expiring dedup
    {"type": "bloom", "key": "bloom:1:0", "kind": "string", "size": <bytes>, "expire_at": <ms> | null}
    {"type": "bloom_chunk", "key": "bloom:1:0", "offset": <bytes>, "data": "<base64>"}
    {"type": "bloom", "key": "bloom:meta", "kind": "hash", "fields": [...], "expire_at": null}
    {"type": "bf", "iter": <n>, "data": "<base64>"}                 native BF.* filter (BF.SCANDUMP)
    {"type": "end", "records": <records between header and end>, "counts": {...}}

What becomes of what:

* queued requests keep their id and their place (score, or domain and rank);
* leased (in-flight) requests are exported as queued ones: on import the work
  goes back to the queue, its delivery count kept (as when a lease is reaped);
  a leased start entry goes back to the head of the list it came from
  (``start_urls`` or its lane);
* ``seq`` becomes the larger of the exported ``seq`` and the largest id, so
  new ids continue above every imported one;
* the per-domain schedule (``domains``) is restored for domains that were
  waiting on a time; domains parked at their concurrency limit (their leases
  are queued again now) are rescheduled by ``lua/domainconf.lua``; of
  ``dstate`` only the time each domain's last request was sent (``l:``) is
  kept: nothing is in flight on the target;
* Bloom filter keys are copied byte for byte (all-zero stretches of a layer
  are not written out), with their expiry time.

Not exported: live nodes, their metrics, Scrapy stats and last admission
replies (``nodes``, ``producers``, ``node:*``, ``statnodes``, ``reply:*``), the nodes
found dead in the last hour (``graveyard``), the seed timer's lock, the rate series
(``series``), the history of minutes and hours (``hist:*``), the node stats kept of ended runs
(``runstats:*``), scraped items (``items``: ``crawlplug items export``), the Scrapyd
jobs (``jobs``, ``job:*``) and the schedules with their firings (``schedules``,
``fires``: add them on the target with ``crawlplug schedule``).
:func:`export_crawl` lists which of these the crawl has in ``counts["not_exported"]``.

An export reads with SCAN-family commands, a batch at a time: memory stays
bounded by the batch, not the crawl. It is a consistent snapshot only of a
crawl no node is working on (stop the nodes first; a graceful stop hands their
leases back). An import reads the whole file once to validate it (spooled to
a temporary file when it is a stream) and writes nothing unless every line is
valid; then it writes in pipelines of about 1000 commands.
"""

from __future__ import annotations

from ...errors import TransferError
from .export import export_crawl
from .load import import_crawl, read_header

__all__ = ["TransferError", "export_crawl", "import_crawl", "read_header"]
