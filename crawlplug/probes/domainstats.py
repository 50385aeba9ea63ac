"""Each node's numbers per domain, as Scrapy stats: the rows of the node x domain report.

A downloader middleware that the add-on puts next to the engine (order 25: it sees a
request's outcome once retries and redirects are done with it) and two signals count,
under ``domain/<host>/``:

=====================================  ===============================================
``domain/<host>/pages``                responses (any status) to pages of the crawl
``domain/<host>/ok``                   responses with a status below 400
``domain/<host>/latency_ms``           the sum of their download times (ms)
``domain/<host>/items``                items scraped from its pages
``domain/<host>/error/<kind>``         ``http/<status>`` (400 and more),
                                       ``download/<Exception>`` (after the retries),
                                       ``spider/<Exception>`` (a callback raised)
=====================================  ===============================================

and every failure once more in ``crawlplug/failed`` (:data:`crawlplug.failures.FAILED`,
the run's ``errors`` counter). What a failure is, and that a robots.txt fetch is no page,
is :mod:`crawlplug.failures`' definition, the one every view counts by.

So a domain's success rate is ``ok / (pages + download errors)`` and its mean
response time ``latency_ms / pages`` (crawlplug.reports.report does the sums). With
:class:`crawlplug.stats.RedisStatsCollector` they reach Redis with the node's other
stats, every CRAWLPLUG_STATS_INTERVAL seconds: no round trip of their own. A node
counts at most CRAWLPLUG_REPORT_DOMAINS hosts by name; pages of further hosts count
under ``(other)``, so a broad crawl cannot grow its stats without bound.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy import Request, Spider, signals
from scrapy.http import Response
from scrapy.utils.httpobj import urlparse_cached

from ..config import setting
from ..failures import FAILED, exception_failure, not_a_page, response_failure, spider_failure

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["OTHER", "PREFIX", "DomainStatsMiddleware"]

PREFIX = "domain/"
#: Where the hosts past CRAWLPLUG_REPORT_DOMAINS are counted.
OTHER = "(other)"
#: Most netlocs whose counted host a node remembers (a broad crawl meets more; those are parsed each time).
_NETLOCS_KEPT = 10_000


class DomainStatsMiddleware:
    """Counts pages, items, errors and download time per host (see the module docstring)."""

    def __init__(self, crawler: Crawler, max_domains: int) -> None:
        self.stats = crawler.stats
        self.max_domains = max_domains
        self.domains: set[str] = set()
        #: URL netloc -> the host it counts under (``.hostname`` is parsed once per netloc)
        self._by_netloc: dict[str, str] = {}
        crawler.signals.connect(self.item_scraped, signal=signals.item_scraped)
        crawler.signals.connect(self.spider_error, signal=signals.spider_error)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DomainStatsMiddleware:
        return cls(crawler, int(setting(crawler.settings, "CRAWLPLUG_REPORT_DOMAINS", "getint")))

    def domain(self, target: Request | Response) -> str:
        """The host counted for ``target``; OTHER once this node counts max_domains of them.

        Give it the request where there is one: the downloader's middlewares have parsed its
        URL already (urlparse_cached keeps it), a response's would be parsed for this alone."""
        parts = urlparse_cached(target)
        counted = self._by_netloc.get(parts.netloc)
        if counted is not None:
            return counted
        host = (parts.hostname or "").lower() or "(none)"
        if host in self.domains:
            counted = host
        elif len(self.domains) >= self.max_domains:
            counted = OTHER  # for good: the set of hosts counted by name only grows
        else:
            self.domains.add(host)
            counted = host
        if len(self._by_netloc) < _NETLOCS_KEPT:
            self._by_netloc[parts.netloc] = counted
        return counted

    def _inc(self, domain: str, what: str, count: int = 1) -> None:
        self.stats.inc_value(f"{PREFIX}{domain}/{what}", count)

    # -- the downloader's side ---------------------------------------------------------
    def _failed(self, domain: str, kind: str) -> None:
        self._inc(domain, f"error/{kind}")
        self.stats.inc_value(FAILED)

    def process_response(self, request: Request, response: Response, spider: Spider | None = None) -> Response:
        if not_a_page(request):
            return response  # robots.txt: not a page of the crawl
        domain = self.domain(request)  # the response's URL is the request's
        self._inc(domain, "pages")
        failed = response_failure(request, response)
        if failed is None:
            self._inc(domain, "ok")
        else:
            self._failed(domain, failed)
        latency = request.meta.get("download_latency")
        if isinstance(latency, (int, float)) and latency >= 0:
            self._inc(domain, "latency_ms", round(latency * 1000))
        return response

    def process_exception(self, request: Request, exception: BaseException, spider: Spider | None = None) -> None:
        failed = exception_failure(request, exception)  # None: filtered (robots.txt, offsite), or robots.txt's own
        if failed is not None:
            self._failed(self.domain(request), failed)

    # -- the spider's side ---------------------------------------------------------------
    def item_scraped(self, item: Any, response: Response | None, spider: Spider) -> None:
        if isinstance(response, Response):
            self._inc(self.domain(response.request or response), "items")

    def spider_error(self, failure: Any, response: Response | None, spider: Spider) -> None:
        if isinstance(response, Response):
            self._failed(self.domain(response.request or response), spider_failure(failure))
