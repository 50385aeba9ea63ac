"""Prometheus metrics of crawls: what ``/metrics`` serves (the dashboard, ``crawlplug control``).

Every value is read from Redis at scrape time by the snapshot that ``crawlplug status``
and the dashboard show (:func:`crawlplug.ops.status.snapshot`): one definition of each
number, never a second one here. Names follow Prometheus's conventions (base units,
``_total`` on counters); every series carries the labels ``crawl`` and ``run``.

* Per domain, the labels are capped: the ``top_domains`` domains with the most
  requests leased so far, and the rest summed under ``domain="other"``.
* Per node: the nodes the snapshot lists (live, silent, dead within the hour).
* ``crawlplug_redis_commands_processed_total`` is the Redis server's own count of
  the commands it ran (INFO stats, every client's): the round trips of the crawl's
  nodes are most of it on a Redis that serves one crawl.

The names and what each one is are in :data:`METRICS` (and docs/metrics.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from ..alerts import store as stored_alerts
from ..errors import REDIS_ERRORS
from ..frontier.core import open_domains
from ..frontier.keys import CrawlKeys
from ..ops import status
from ..stats import node_stats

logger = logging.getLogger(__name__)

#: Domains with labels of their own, by default; the rest are "other".
TOP_DOMAINS = 20
#: Domains read from the per-domain queue's table to choose the top ones from.
DOMAIN_SCAN = 1000

#: name -> (kind, help). Counters are given without ``_total`` (prometheus_client adds it).
METRICS: dict[str, tuple[str, str]] = {
    "crawlplug_queued_requests": ("gauge", "Requests waiting in the queue"),
    "crawlplug_start_entries": ("gauge", "Start entries waiting in start_urls"),
    "crawlplug_in_flight_requests": ("gauge", "Requests leased to a node now"),
    "crawlplug_requests_done": ("counter", "Requests finished (acknowledged) in the run"),
    "crawlplug_requests_failed": (
        "counter",
        "Failures in the crawl-wide Scrapy stats (download exceptions, "
        "spider exceptions, dropped items, 4xx/5xx responses)",
    ),
    "crawlplug_requests_filtered": ("counter", "Requests the duplicate filter turned away"),
    "crawlplug_lease_reaps": ("counter", "Leases of dead nodes put back in the queue"),
    "crawlplug_dead_letters": ("gauge", "Requests in the dead letters (it drops when they are requeued)"),
    "crawlplug_seen_fingerprints": ("gauge", "Fingerprints the duplicate filter holds"),
    "crawlplug_live_nodes": ("gauge", "Nodes whose heartbeat is on time"),
    "crawlplug_node_up": (
        "gauge",
        "1 for a live node, 0 for a silent or dead one (listed until the next run, an hour at most)",
    ),
    "crawlplug_node_pages": ("counter", "Requests this node finished since it started"),
    "crawlplug_node_items": ("counter", "Items this node scraped (its Scrapy stats in Redis)"),
    "crawlplug_domain_queued_requests": ("gauge", "Requests of the domain waiting in the per-domain queue"),
    "crawlplug_domain_in_flight_requests": ("gauge", "Requests of the domain leased now"),
    "crawlplug_domain_leased_requests": ("counter", "Requests of the domain leased so far (fetches started)"),
    "crawlplug_redis_outage_seconds": (
        "counter",
        "Seconds the nodes waited for Redis to come back (summed over nodes, from their Scrapy stats in Redis)",
    ),
    "crawlplug_redis_commands_processed": ("counter", "Commands the Redis server ran (every client's)"),
    "crawlplug_redis_memory_used_bytes": ("gauge", "Memory the Redis server uses"),
    "crawlplug_redis_memory_max_bytes": ("gauge", "maxmemory of the Redis server (0: no limit)"),
    "crawlplug_paused": ("gauge", "1 while an operator paused the crawl"),
    "crawlplug_alert_firing": ("gauge", "1 while the alert rule fires"),
}


def _family(name: str, labels: list[str]) -> Metric:
    kind, doc = METRICS[name]
    if kind == "counter":
        return CounterMetricFamily(name, doc, labels=labels)
    return GaugeMetricFamily(name, doc, labels=labels)


def top_domains(rows: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The ``n`` domains with the most requests leased so far, then one row "other" summing
    the rest (when there is a rest)."""
    ranked = sorted(rows, key=lambda row: (-row["leased_total"], row["domain"]))
    out = [{k: row[k] for k in ("domain", "queued", "in_flight", "leased_total")} for row in ranked[:n]]
    rest = ranked[n:]
    if rest:
        out.append(
            {"domain": "other", **{k: sum(row[k] for row in rest) for k in ("queued", "in_flight", "leased_total")}}
        )
    return out


def crawl_families(client: redis.Redis, keys: CrawlKeys, top_n: int = TOP_DOMAINS) -> list[Metric]:
    """The metrics of one crawl, from its snapshot (see the module docstring)."""
    snap = status.snapshot(client, keys, history_minutes=1)
    run = str(snap["run"].get("id") or 0)
    base = [keys.crawl, run]
    labels = ["crawl", "run"]
    fams: dict[str, Metric] = {}

    def add(name: str, value: float | None, extra: dict[str, str] | None = None) -> None:
        if value is None:
            return
        extra = extra or {}
        fam = fams.get(name)
        if fam is None:
            fam = fams[name] = _family(name, labels + list(extra))
        fam.add_metric(base + list(extra.values()), float(value))

    counters = snap["counters"]
    add("crawlplug_queued_requests", snap["queued"])
    add("crawlplug_start_entries", snap["start_urls"])
    add("crawlplug_in_flight_requests", snap["in_flight"])
    add("crawlplug_requests_done", snap["done"])
    add("crawlplug_requests_failed", snap["failed"])
    add("crawlplug_requests_filtered", counters.get("filtered", 0))
    add("crawlplug_lease_reaps", counters.get("reaped", 0))
    add("crawlplug_dead_letters", snap["dead"])
    add("crawlplug_seen_fingerprints", snap["seen"])
    add("crawlplug_live_nodes", snap["live_nodes"])
    add("crawlplug_paused", 1 if snap["paused"] else 0)
    scrapy_stats = snap["scrapy_stats"] or {}
    if scrapy_stats:
        add("crawlplug_redis_outage_seconds", int(scrapy_stats.get("crawlplug/outage_ms", 0) or 0) / 1000)
    per_node_stats = node_stats(client, keys) if scrapy_stats else {}
    for node in snap["nodes"]:
        who = {"node": node["id"]}
        add("crawlplug_node_up", 1 if node["state"] == "live" else 0, who)
        if isinstance(node.get("acked"), int):
            add("crawlplug_node_pages", node["acked"], who)
        items = per_node_stats.get(node["id"], {}).get("item_scraped_count")
        if isinstance(items, int):
            add("crawlplug_node_items", items, who)
    for row in top_domains(open_domains(client, keys).table(DOMAIN_SCAN), top_n):
        where = {"domain": row["domain"]}
        add("crawlplug_domain_queued_requests", row["queued"], where)
        add("crawlplug_domain_in_flight_requests", row["in_flight"], where)
        add("crawlplug_domain_leased_requests", row["leased_total"], where)
    memory = snap["redis_memory"]
    if memory:
        add("crawlplug_redis_memory_used_bytes", memory.get("used"))
        add("crawlplug_redis_memory_max_bytes", memory.get("max"))
    states = stored_alerts.states(client, keys)
    for rule_id in stored_alerts.rules(client, keys):
        add("crawlplug_alert_firing", 1 if states.get(rule_id, {}).get("state") == "firing" else 0, {"rule": rule_id})
    return list(fams.values())


def _commands_processed(client: redis.Redis) -> int | None:
    try:
        info = client.info("stats")
    except REDIS_ERRORS:
        return None
    if isinstance(info, dict) and "total_commands_processed" in info:
        return int(info["total_commands_processed"])
    # a cluster client answers per node: the sum
    total = (
        [
            int(v["total_commands_processed"])
            for v in info.values()
            if isinstance(v, dict) and "total_commands_processed" in v
        ]
        if isinstance(info, dict)
        else []
    )
    return sum(total) if total else None


class CrawlCollector(Collector):
    """A prometheus_client collector: the metrics of the crawls ``crawls()`` names, read
    from Redis at each scrape. A crawl whose read fails is left out (logged), not the scrape."""

    def __init__(
        self, client: redis.Redis, crawls: Callable[[], Iterable[CrawlKeys]], top_n: int = TOP_DOMAINS
    ) -> None:
        self.client = client
        self.crawls = crawls
        self.top_n = top_n

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for keys in self.crawls():
            try:
                fams = crawl_families(self.client, keys, self.top_n)
            except REDIS_ERRORS as exc:
                logger.warning("crawlplug metrics: crawl %r left out of this scrape: %s", keys.crawl, exc)
                continue
            for fam in fams:
                have = merged.get(fam.name)
                if have is None:
                    merged[fam.name] = fam
                else:
                    have.samples.extend(fam.samples)
        commands = _commands_processed(self.client)
        if commands is not None:
            fam = _family("crawlplug_redis_commands_processed", [])
            fam.add_metric([], float(commands))
            merged[fam.name] = fam
        yield from merged.values()

    def describe(self) -> list[Metric]:
        return []  # read at scrape time only: registering reads nothing from Redis


def registry(
    client: redis.Redis, crawls: Callable[[], Iterable[CrawlKeys]], top_n: int = TOP_DOMAINS
) -> CollectorRegistry:
    """A registry of its own (one per process) holding :class:`CrawlCollector`."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(CrawlCollector(client, crawls, top_n))
    return reg
