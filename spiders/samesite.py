"""Generic spider that crawls every page of one host.

::

    scrapy crawl samesite -a start_url=http://127.0.0.1:8000/ -a max_pages=500 -O pages.jsonl

Yields ``{"url", "status", "title"}`` for each page and follows every link
whose host name equals the start URL's (scheme and port may differ;
subdomains are other hosts). Callbacks are referenced by method name because
crawlplug stores requests as JSON.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import scrapy
from scrapy.exceptions import CloseSpider
from scrapy.http import Response, TextResponse
from scrapy.linkextractors import LinkExtractor

logger = logging.getLogger(__name__)


class SameSiteSpider(scrapy.Spider):
    """Same-host crawler; ``-a start_url=URL`` is required, ``-a max_pages=N`` optional.

    With ``max_pages`` the spider closes (reason ``"max_pages"``) after
    yielding N pages; responses already in flight at that moment are dropped.
    """

    name = "samesite"
    # Report broken links instead of silently dropping them.
    handle_httpstatus_list = [404, 410]

    def __init__(
        self,
        start_url: str | None = None,
        max_pages: int | str | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if not start_url:
            raise ValueError(
                "the samesite spider needs a start URL: scrapy crawl samesite -a start_url=http://host/path"
            )
        parts = urlsplit(start_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"start_url must be an absolute http(s) URL, not {start_url!r}")
        self.start_url = start_url
        self.host = parts.hostname.lower()
        self.max_pages = self._parse_max_pages(max_pages)
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

    def is_same_site(self, url: str) -> bool:
        """Whether ``url`` is http(s) on exactly the start URL's host name."""
        parts = urlsplit(url)
        return parts.scheme in ("http", "https") and (parts.hostname or "").lower() == self.host

    async def start(self) -> AsyncIterator[Any]:
        yield scrapy.Request(self.start_url, callback=self.parse_page)

    def parse_page(self, response: Response) -> Iterator[dict[str, Any] | scrapy.Request]:
        """Yield the page record, then same-site links (unless ``max_pages`` is reached)."""
        if self.max_pages is not None and self.pages_seen >= self.max_pages:
            return  # in flight when the limit was hit
        self.pages_seen += 1
        is_text = isinstance(response, TextResponse)
        title = (response.css("title::text").get() or "").strip() if is_text else ""
        yield {"url": response.url, "status": response.status, "title": title}
        if self.max_pages is not None and self.pages_seen >= self.max_pages:
            raise CloseSpider("max_pages")
        if not is_text or not 200 <= response.status < 300:
            return
        for link in self.link_extractor.extract_links(response):
            if self.is_same_site(link.url):
                yield response.follow(link.url, callback=self.parse_page)
