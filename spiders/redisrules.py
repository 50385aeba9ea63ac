"""The demo shop crawled by CrawlSpider rules, with start URLs pushed through Redis.

    scrapy crawl redisrules &
    crawlplug push --crawl redisrules http://127.0.0.1:8000/

Shows crawlplug.spiders.RedisCrawlSpider: the rules follow list pages and
send item pages to ``parse_item``; the start URLs come from Redis.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scrapy.http import Response
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import Rule

from crawlplug.spiders import RedisCrawlSpider

from .shop import _text


class RedisRulesSpider(RedisCrawlSpider):
    name = "redisrules"
    rules = (
        Rule(LinkExtractor(allow=r"/item/\d+/$"), callback="parse_item", follow=False),
        Rule(LinkExtractor(allow=r"/category/"), follow=True),
    )

    def parse_item(self, response: Response) -> Iterator[dict[str, Any]]:
        yield {"url": response.url, "sku": _text(response, "span.sku::text"), "name": _text(response, "h1.name::text")}
