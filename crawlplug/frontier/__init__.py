"""The Redis side of a crawl: its frontier (queue, payloads, leases, dedup, per-domain
schedule, runs), knowing nothing of Scrapy's engine."""

from __future__ import annotations

from .interface import CrawlFrontier
from .sharded import ShardedFrontier, open_frontier
from .single import Admission, AdmitResult, DeadLetter, Domains, Frontier, Leased

__all__ = ["Admission", "AdmitResult", "CrawlFrontier", "DeadLetter", "Domains", "Frontier", "Leased", "ShardedFrontier", "open_frontier"]
