"""Start URLs fetched once in a run, however many nodes start.

Scrapy's default ``start()`` yields a request for each of the spider's
``start_urls`` with ``dont_filter=True``: a crawl of one process fetches them once.
In a crawl of many nodes, each node that starts (or starts again after a crash)
yields them again, and every copy would be fetched. This spider middleware, which
the add-on installs, lets them through the duplicate filter instead, marked
:data:`~crawlplug.dupefilters.START_ONCE_META`: the first node of the run to admit
one crawls it, the copies of the others are duplicates (``dupefilter/filtered``).
A crawl that starts each run without fingerprints (the default) dedups them by
their own fingerprint, so a link back to a start URL is a duplicate too; a crawl
that keeps fingerprints across runs (``CRAWLPLUG_INCREMENTAL``) by one of their
run (crawlplug.dupefilters), so each run still fetches them once.

A spider with a ``start()`` (or ``start_requests()``) of its own keeps its requests
as it yields them, per node: a login, a session, a request each node needs. One of
them opts in with ``meta={"crawlplug_start_once": True}``. A request kept out of
the duplicate filter this way keeps the other thing ``dont_filter`` gave it: the
offsite check lets it through (``allow_offsite``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from scrapy import Request, Spider

from ..dupefilters import START_ONCE_META

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["StartOnceMiddleware", "default_start"]


def default_start(spider: Spider) -> bool:
    """Whether ``spider`` yields Scrapy's default start requests: one per start URL (its
    class overrides neither ``start()`` nor, on Scrapy versions that have it,
    ``start_requests()``, which the default ``start()`` then calls)."""
    cls = type(spider)
    if getattr(cls, "start", None) is not getattr(Spider, "start", None):
        return False
    return getattr(cls, "start_requests", None) is getattr(Spider, "start_requests", None)


class StartOnceMiddleware:
    """Spider middleware: the start requests of Scrapy's default ``start()``, and those a
    custom one marks, are fetched once a run across nodes (module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> StartOnceMiddleware:
        return cls(crawler)

    async def process_start(self, start: AsyncIterator[object]) -> AsyncIterator[object]:
        spider = self.crawler.spider
        every = spider is not None and default_start(spider)
        async for entry in start:
            if isinstance(entry, Request) and (every or entry.meta.get(START_ONCE_META)):
                mark(entry)
            yield entry


def mark(request: Request) -> None:
    """Let ``request`` through the duplicate filter, marked as a start request of its run."""
    request.meta[START_ONCE_META] = True
    if request.dont_filter:
        request.dont_filter = False
        request.meta.setdefault("allow_offsite", True)  # what dont_filter gave it besides dedup
