"""The Scrapy Scheduler that keeps the crawl frontier in Redis:
``SCHEDULER = "crawlplug.scheduler.Scheduler"`` (the add-on sets it)."""

from __future__ import annotations

from .core import Scheduler

__all__ = ["Scheduler"]
