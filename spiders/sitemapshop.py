"""The demo shop crawled from its sitemap, by Scrapy's SitemapSpider.

    python -m crawlplug.demo.shop --port 8000 &
    scrapy crawl sitemapshop -a base_url=http://127.0.0.1:8000

Reads ``/sitemap.xml`` (a sitemap index), then every category's sitemap, then
every item page. The sitemaps' requests carry SitemapSpider's own callback
``_parse_sitemap``: a private name that crawlplug accepts from Redis because
SitemapSpider puts it on requests itself (see :mod:`crawlplug.serializers.callbacks`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from scrapy.http import Response
from scrapy.spiders import SitemapSpider

from .shop import ShopSpider, _text


class SitemapShopSpider(SitemapSpider):
    name = "sitemapshop"
    base_url: str | None = None
    sitemap_rules = (("/item/", "parse_item"),)

    resolve_base_url = ShopSpider.resolve_base_url

    async def start(self) -> AsyncIterator[Any]:
        self.sitemap_urls = [self.resolve_base_url() + "/sitemap.xml"]
        async for request in super().start():
            yield request

    def parse_item(self, response: Response) -> Iterator[dict[str, Any]]:
        yield {"url": response.url, "sku": _text(response, "span.sku::text"), "name": _text(response, "h1.name::text")}
