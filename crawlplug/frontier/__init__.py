"""The Redis side of a crawl: its frontier (queue, payloads, leases, dedup, per-domain
schedule), knowing nothing of Scrapy's engine."""

from __future__ import annotations

from .core import Frontier, open_frontier
from .domains import Domains
from .interface import CrawlFrontier
from .results import Admission, AdmitResult, DeadLetter, Leased

__all__ = ["Admission", "AdmitResult", "CrawlFrontier", "DeadLetter", "Domains", "Frontier", "Leased", "open_frontier"]
