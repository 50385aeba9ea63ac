"""A RedisSpider that is slow to turn start entries into requests (for the kill tests).

    scrapy crawl slowstart -a sleep=5 &
    crawlplug push --crawl slowstart http://127.0.0.1:8000/item/1/

``make_request_from_data`` sleeps ``sleep`` seconds (a spider argument,
default 0) before it builds each entry's request, so a node holds start
leases for a while after it took them: a SIGKILL then catches it with start
entries leased and no request made from them yet. Each pushed URL is fetched
and nothing else: ``parse`` follows no link.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

from scrapy import Request
from scrapy.http import Response

from crawlplug import starts
from crawlplug.spiders import RedisSpider


class SlowStartSpider(RedisSpider):
    name = "slowstart"
    sleep: str | float = 0

    def make_request_from_data(self, data: bytes) -> Request | Iterable[Request]:
        time.sleep(float(self.sleep))
        return starts.build(starts.parse(data), self)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[dict[str, Any]]:
        yield {"url": response.url, "status": response.status}
