"""StaleOutputMiddleware: what a page leased before a reset yields is dropped and counted."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from scrapy import Request, Spider
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

from crawlplug.scheduler.staleoutput import StaleOutputMiddleware


class Scheduler:
    """The one thing the middleware asks of crawlplug's Scheduler: whether a page's request is stale."""

    def __init__(self, stale: set[str]) -> None:
        self.stale = stale
        self.asked = 0

    def is_stale(self, request: Request) -> bool:
        self.asked += 1
        return request.url in self.stale


def run(mw: StaleOutputMiddleware, url: str, outputs: list[Any]) -> list[Any]:
    async def result():
        for output in outputs:
            yield output

    async def collect() -> list[Any]:
        response = HtmlResponse(url, request=Request(url), body=b"")
        return [x async for x in mw.process_spider_output_async(response, result())]

    return asyncio.run(collect())


def test_a_stale_page_yields_nothing_and_is_counted_and_the_others_pass():
    crawler = get_crawler(Spider)
    crawler.stats.open_spider()
    mw = StaleOutputMiddleware.from_crawler(crawler)
    crawler.engine = SimpleNamespace(scheduler=None)  # not open yet: nothing is stale
    assert run(mw, "http://a.test/1", [1]) == [1]
    scheduler = Scheduler({"http://a.test/old"})
    crawler.engine = SimpleNamespace(scheduler=scheduler)
    outputs = [Request("http://a.test/2"), {"item": 1}]
    assert run(mw, "http://a.test/new", outputs) == outputs
    assert run(mw, "http://a.test/old", outputs) == []
    assert run(mw, "http://a.test/new", outputs) == outputs
    assert scheduler.asked == 3
    assert crawler.stats.get_value("crawlplug/stale_output") == 2
    assert (
        list(
            mw.process_spider_output(
                HtmlResponse("http://a.test/old", request=Request("http://a.test/old"), body=b""), iter([1, 2])
            )
        )
        == []
    )
    assert crawler.stats.get_value("crawlplug/stale_output") == 4
