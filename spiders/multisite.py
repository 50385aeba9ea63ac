"""Generic spider that crawls several hosts, each staying on its own host.

::

    scrapy crawl multisite -a start_urls=http://127.0.0.2:8000/,http://127.0.0.3:8000/ -O pages.jsonl

Yields ``{"url", "host", "status", "title"}`` for each page and follows every
link whose host name equals the host name of the page it is on (scheme and
port may differ; subdomains are other hosts), so a crawl of several sites
never wanders from one to another. Callbacks are referenced by method name
because crawlplug stores requests as JSON.

``-a go_file=PATH`` makes ``start()`` wait until ``PATH`` exists before it
yields the start URLs (it logs ``multisite: waiting for PATH`` first), so
several nodes can be started, wait until all of them are up, and begin the
crawl at the same moment. A node waiting for its go file still counts as
producing work, so the crawl does not end while it waits.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import scrapy
from scrapy.exceptions import CloseSpider
from scrapy.http import Response, TextResponse
from scrapy.linkextractors import LinkExtractor
from scrapy.utils.defer import maybe_deferred_to_future

logger = logging.getLogger(__name__)

GO_POLL = 0.02


def host_of(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


class MultiSiteSpider(scrapy.Spider):
    """Same-host crawler of several sites.

    ``-a start_urls=URL1,URL2,...`` is required; ``-a max_pages=N`` closes
    the spider (reason ``"max_pages"``) after yielding N pages in all;
    ``-a go_file=PATH`` delays the start (see the module docstring).
    """

    name = "multisite"
    # Report broken links instead of silently dropping them.
    handle_httpstatus_list = [404, 410]

    def __init__(
        self,
        start_urls: str | list[str] | None = None,
        max_pages: int | str | None = None,
        go_file: str | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        urls = start_urls.split(",") if isinstance(start_urls, str) else list(start_urls or [])
        urls = [u.strip() for u in urls if u.strip()]
        if not urls:
            raise ValueError(
                "the multisite spider needs start URLs: "
                "scrapy crawl multisite -a start_urls=http://host1/,http://host2/"
            )
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"start URLs must be absolute http(s) URLs, not {url!r}")
        self.start_urls = urls
        self.max_pages = self._parse_max_pages(max_pages)
        self.go_file = go_file or None
        self.pages_seen = 0
        self.link_extractor = LinkExtractor(unique=True)

    @staticmethod
    def _parse_max_pages(value: int | str | None) -> int | None:
        if value is None or value == "":
            return None
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ValueError(f"max_pages must be a whole number, not {value!r}") from None
        if number < 1:
            raise ValueError(f"max_pages must be >= 1, not {number}")
        return number

    @staticmethod
    def is_same_host(url: str, page_url: str) -> bool:
        """Whether ``url`` is http(s) on exactly the host name of ``page_url``."""
        parts = urlsplit(url)
        return parts.scheme in ("http", "https") and (parts.hostname or "").lower() == host_of(page_url)

    async def start(self) -> AsyncIterator[Any]:
        if self.go_file:
            from twisted.internet import reactor, task  # noqa: PLC0415 (the running reactor)

            logger.info("multisite: waiting for %s", self.go_file)
            while not os.path.exists(self.go_file):
                await maybe_deferred_to_future(task.deferLater(reactor, GO_POLL, lambda: None))
            logger.info("multisite: %s exists, starting %d URLs", self.go_file, len(self.start_urls))
        for url in self.start_urls:
            yield scrapy.Request(url, callback=self.parse_page)

    def parse_page(self, response: Response) -> Iterator[dict[str, Any] | scrapy.Request]:
        """Yield the page record, then the page's same-host links (unless ``max_pages`` is reached)."""
        if self.max_pages is not None and self.pages_seen >= self.max_pages:
            return  # in flight when the limit was hit
        self.pages_seen += 1
        is_text = isinstance(response, TextResponse)
        title = (response.css("title::text").get() or "").strip() if is_text else ""
        yield {"url": response.url, "host": host_of(response.url), "status": response.status, "title": title}
        if self.max_pages is not None and self.pages_seen >= self.max_pages:
            raise CloseSpider("max_pages")
        if not is_text or not 200 <= response.status < 300:
            return
        for link in self.link_extractor.extract_links(response):
            if self.is_same_host(link.url, response.url):
                yield response.follow(link.url, callback=self.parse_page)
