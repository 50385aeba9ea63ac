"""Spider for the crawlplug demo shop (:mod:`crawlplug.demo.shop`).

Run it against a local demo shop::

    python -m crawlplug.demo.shop --port 8000 &
    scrapy crawl shop -a base_url=http://127.0.0.1:8000 -O items.jsonl

Home and list pages are requested with priority 10 and item pages with
priority 0, so a priority-respecting scheduler finishes the whole catalogue
walk before it fetches products. Callbacks are referenced by method name
because crawlplug stores requests as JSON.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import scrapy
from scrapy.http import Response

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
LIST_PRIORITY = 10
ITEM_PRIORITY = 0

_PRICE_RE = re.compile(r"[-+]?\d+(?:[.,]\d+)?")


class ShopSpider(scrapy.Spider):
    """Crawls every list and item page of the demo shop and yields one dict per item.

    The shop is found from, in order: ``-a base_url=...``, the
    ``DEMO_SHOP_URL`` setting, the ``DEMO_SHOP_URL`` environment variable,
    ``http://127.0.0.1:8000``.
    """

    name = "shop"
    base_url: str | None = None

    def resolve_base_url(self) -> str:
        """The shop's base URL without a trailing slash."""
        url = getattr(self, "base_url", None)
        if not url:
            settings = getattr(self, "settings", None)
            url = settings.get("DEMO_SHOP_URL") if settings is not None else None
        if not url:
            url = os.environ.get("DEMO_SHOP_URL")
        return (url or DEFAULT_BASE_URL).rstrip("/")

    async def start(self) -> AsyncIterator[Any]:
        yield scrapy.Request(
            self.resolve_base_url() + "/",
            callback=self.parse_list,
            priority=LIST_PRIORITY,
        )

    def parse_list(self, response: Response) -> Iterator[scrapy.Request]:
        """Home or list page: follow item links at priority 0, everything else at 10.

        Nav bar and pager links are followed too; the duplicates they create
        are left to the dupefilter.
        """
        for url in self._own_links(response):
            if urlsplit(url).path.startswith("/item/"):
                yield response.follow(url, callback=self.parse_item, priority=ITEM_PRIORITY)
            else:
                yield response.follow(url, callback=self.parse_list, priority=LIST_PRIORITY)

    def _own_links(self, response: Response) -> Iterator[str]:
        """Absolute http(s) URLs of the page's links to its own host (a helper, not a callback)."""
        own_host = urlsplit(response.url).netloc
        for href in response.css("a::attr(href)").getall():
            url = response.urljoin(href)
            parts = urlsplit(url)
            if parts.netloc == own_host and parts.scheme in ("http", "https"):
                yield url

    def parse_item(self, response: Response) -> Iterator[dict[str, Any] | scrapy.Request]:
        """Item page: yield its fields, then follow its ``related`` links at priority 0."""
        price_text = _text(response, "span.price::text")
        price_match = _PRICE_RE.search(price_text)
        if price_match is None:
            logger.warning("no price on %s: %r", response.url, price_text)
        yield {
            "url": response.url,
            "sku": _text(response, "span.sku::text"),
            "name": _text(response, "h1.name::text"),
            "price": float(price_match.group().replace(",", ".")) if price_match else None,
            "category": _text(response, "span.category::text"),
            "in_stock": _text(response, "span.stock::text").lower() == "in stock",
        }
        for href in response.css("a.related::attr(href)").getall():
            yield response.follow(href, callback=self.parse_item, priority=ITEM_PRIORITY)

    def closed(self, reason: str) -> None:
        """Scrapy's close hook (not a callback): says why the crawl ended."""
        logger.info("shop spider closed: %s", reason)


def _text(response: Response, query: str) -> str:
    """Stripped text of the first match of CSS ``query``, or ``""``."""
    return (response.css(query).get() or "").strip()
