"""Spider stubs for tests that encode and decode requests without crawling: a spider whose
callbacks exist by name (the serializers resolve callbacks by name on the spider)."""

from __future__ import annotations

import scrapy


class ShopSpider(scrapy.Spider):
    """The demo shop's callback names: parse, parse_item, on_error (never called here)."""

    name = "shop"

    def parse(self, response):  # pragma: no cover - never called
        pass

    def parse_item(self, response, **kwargs):  # pragma: no cover
        pass

    def on_error(self, failure):  # pragma: no cover
        pass
