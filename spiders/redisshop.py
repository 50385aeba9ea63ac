"""The demo shop spider, fed from Redis: its start URLs are pushed, not coded.

    scrapy crawl redisshop &                       # a worker: waits for start URLs
    crawlplug push --crawl redisshop http://127.0.0.1:8000/

Every start entry is crawled with ``parse_list`` unless it names another
callback (``{"url": "...", "callback": "parse_item"}``).
"""

from __future__ import annotations

from collections.abc import Iterable

from scrapy import Request

from crawlplug import starts
from crawlplug.spiders import RedisSpider

from .shop import LIST_PRIORITY, ShopSpider


class RedisShopSpider(RedisSpider, ShopSpider):
    name = "redisshop"

    def make_request_from_data(self, data: bytes) -> Request | Iterable[Request]:
        entry = starts.parse(data)
        if entry.callback is None:
            entry.callback = "parse_list"
            entry.priority = entry.priority or LIST_PRIORITY
        return starts.build(entry, self)
