"""The Redis side of a crawl: its frontier (queue, payloads, leases, dedup, per-domain
schedule, runs), knowing nothing of Scrapy's engine."""

from __future__ import annotations

from .domains import Domains
from .interface import CrawlFrontier
from .results import Admission, AdmitResult, DeadLetter, Leased
from .sharded import ShardedFrontier, open_frontier
from .single import Frontier

__all__ = ["Admission", "AdmitResult", "CrawlFrontier", "DeadLetter", "Domains", "Frontier", "Leased", "ShardedFrontier", "open_frontier"]
