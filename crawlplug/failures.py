"""What a failed request is: one definition for every number that counts failures.

A request **failed** when, once Scrapy is done with it (retries and redirects
included), it ended in

* a response with status 400 or more (``http/<status>``),
* a download error (``download/<ExceptionClass>``: DNS, a timeout, a refused
  connection; not ``IgnoreRequest``, which is a request filtered by a middleware:
  robots.txt forbids it, it is offsite),
* or a callback that raised (``spider/<ExceptionClass>``).

A fetch the engine makes for a component is not a page of the crawl, so neither a
page nor a failure: robots.txt, which Scrapy's RobotsTxtMiddleware downloads for
every site (a site without one answers 404, and that is no failed request).

The add-on's downloader middleware next to the engine
(:class:`crawlplug.probes.domainstats.DomainStatsMiddleware`) counts each failure, by kind and
domain, and in the node's Scrapy stat :data:`FAILED`, which every heartbeat adds to the
run's ``errors`` counter: ``crawlplug status`` (failed), ``status --since`` (errors), the
run summaries, the ``error_rate`` alert and the ``crawlplug_requests_failed`` metric read
that counter; ``crawlplug report`` sums the per-domain kinds, and the errors page
(:mod:`crawlplug.probes.errorsamples`, a middleware beside it) samples the same kinds.
"""

from __future__ import annotations

from typing import Any

from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.httpobj import urlparse_cached

__all__ = ["FAILED", "exception_failure", "not_a_page", "response_failure", "spider_failure"]

#: The node's Scrapy stat of failed requests (the run's ``errors`` counter sums it).
FAILED = "crawlplug/failed"


def not_a_page(request: Request) -> bool:
    """Whether ``request`` is a fetch made for a component, not a page of the crawl: the
    robots.txt RobotsTxtMiddleware downloads (no callback, ``dont_obey_robotstxt``)."""
    return (
        request.callback is NO_CALLBACK
        and bool(request.meta.get("dont_obey_robotstxt"))
        and urlparse_cached(request).path == "/robots.txt"
    )


def response_failure(request: Request, response: Response) -> str | None:
    """The kind of failure a response is (``http/404``), None if it is none."""
    if response.status < 400 or not_a_page(request):
        return None
    return f"http/{response.status}"


def exception_failure(request: Request, exception: BaseException) -> str | None:
    """The kind of failure a download error is (``download/TimeoutError``), None if it is none."""
    if isinstance(exception, IgnoreRequest) or not_a_page(request):
        return None
    return f"download/{type(exception).__name__}"


def spider_failure(failure: Any) -> str:
    """The kind of failure of a callback that raised (``spider/ValueError``)."""
    return f"spider/{type(getattr(failure, 'value', failure)).__name__}"
