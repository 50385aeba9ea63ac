"""A spider of a JavaScript-rendered site through scrapy-playwright (tests/support/jssite.py).

    scrapy crawl jsquotes -a base_url=http://127.0.0.1:8000 \\
        -s 'PLAYWRIGHT_LAUNCH_OPTIONS={"executable_path": "/usr/lib/chromium/chromium", "args": ["--no-sandbox"]}'

Every request asks scrapy-playwright to render the page and wait for its quotes
(``PageMethod("wait_for_selector", "div.quote")``), so with crawlplug's Scheduler the
page methods travel through the JSON payload in Redis and come back as PageMethods on
whichever node downloads the page. ``-a refused=1`` also yields one request with a
``PageMethod("evaluate", ...)``, which the spider does not allow
(``crawlplug_page_methods``): crawlplug refuses to store it, and the page is never fetched.
``-a control=1`` also renders the first page without waiting for its quotes: the item
it yields (``{"control": ..., "quotes": 0}``) shows what a request whose page methods
were lost on the way would find.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.http import Response

try:
    from scrapy_playwright.page import PageMethod
except ImportError:  # the playwright extra is not installed: the spider says so when it starts
    PageMethod = None


class JsQuotesSpider(scrapy.Spider):
    name = "jsquotes"
    base_url = "http://127.0.0.1:8000"
    refused = ""
    control = ""
    custom_settings = {
        "DOWNLOAD_HANDLERS": {
            "http": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler",
            "https": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler",
        },
        "PLAYWRIGHT_BROWSER_TYPE": "chromium",
        "CONCURRENT_REQUESTS": 2,
    }

    def rendered(self, url: str, **kwargs: Any) -> scrapy.Request:
        if PageMethod is None:
            raise RuntimeError("the jsquotes spider needs scrapy-playwright: pip install 'crawlplug[playwright]'")
        return scrapy.Request(
            url,
            callback=self.parse,
            meta={
                "playwright": True,
                "playwright_page_methods": [PageMethod("wait_for_selector", "div.quote")],
            },
            **kwargs,
        )

    async def start(self) -> AsyncIterator[Any]:
        yield self.rendered(self.base_url.rstrip("/") + "/")
        if self.control:
            yield scrapy.Request(
                self.base_url.rstrip("/") + "/page/1/?control=1", callback=self.parse_control, meta={"playwright": True}
            )
        if self.refused:
            yield scrapy.Request(
                self.base_url.rstrip("/") + "/page/99/",
                callback=self.parse,
                meta={
                    "playwright": True,
                    "playwright_page_methods": [PageMethod("evaluate", "document.title")],
                },
            )

    def parse_control(self, response: Response) -> Iterator[dict[str, Any]]:
        yield {"control": response.url, "quotes": len(response.css("div.quote"))}

    def parse(self, response: Response) -> Iterator[dict[str, Any] | scrapy.Request]:
        for quote in response.css("div.quote::text").getall():
            yield {"url": response.url, "quote": quote}
        next_page = response.css("li.next a::attr(href)").get()
        if next_page:
            yield self.rendered(response.urljoin(next_page))
