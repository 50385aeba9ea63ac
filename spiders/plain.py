"""A spider as ``scrapy genspider`` writes one: ``start_urls`` and ``parse``, with Scrapy's
default ``start()``. It follows every link of the start URLs' hosts::

    scrapy crawl plain -a start_urls=http://127.0.0.1:8000/ -O pages.jsonl

and yields ``{"url", "status"}`` for each page. With crawlplug, its start URLs are
fetched once in a run, however many nodes start (crawlplug.scheduler.startonce).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import scrapy
from scrapy.http import Response, TextResponse


class PlainSpider(scrapy.Spider):
    """``-a start_urls=URL[,URL...]``: the pages of those hosts."""

    name = "plain"
    start_urls: list[str] = []

    def __init__(self, start_urls: str | list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if start_urls:
            self.start_urls = start_urls.split(",") if isinstance(start_urls, str) else list(start_urls)
        self.allowed_domains = sorted({urlsplit(u).hostname or "" for u in self.start_urls} - {""})

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url, "status": response.status}
        if isinstance(response, TextResponse):
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, callback=self.parse)
