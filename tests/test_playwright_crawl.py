"""A real crawl of a JavaScript-rendered site through scrapy-playwright and Debian's chromium.

The demo project's ``jsquotes`` spider asks, on every request, for
``PageMethod("wait_for_selector", "div.quote")``: with crawlplug's Scheduler each request
is stored in Redis as JSON and read back before it is downloaded, so a quote in the
items means the page method came back from Redis and ran in the browser (the control
request, rendered without it, finds none: the quotes appear 0.5 s after the page
loads). The request asking for ``evaluate`` is refused before it is stored.

Skipped, saying why, where scrapy-playwright (the ``playwright`` extra) or chromium is
missing: Playwright cannot download its own browsers here, so it drives Debian's
chromium (``executable_path``; ``--no-sandbox``, as the tests run as root).
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.support.jssite import JsSite, chromium

pytestmark = pytest.mark.e2e

FAST = {"CRAWLPLUG_IDLE_CLOSE": 1, "CRAWLPLUG_HEARTBEAT": 0.5, "CRAWLPLUG_LEASE_TIMEOUT": 10}


def test_a_javascript_page_is_crawled_with_its_page_methods_read_back_from_redis(crawl, redis_url):
    if importlib.util.find_spec("scrapy_playwright") is None:
        pytest.skip("scrapy-playwright is not installed (pip install 'crawlplug[playwright]')")
    browser = chromium()
    if browser is None:
        pytest.skip("no chromium (apt-get install chromium): Playwright cannot download its own browser here")
    launch = {"executable_path": browser, "args": ["--no-sandbox"], "headless": True}
    with JsSite(pages=3, per_page=2, delay_ms=500) as site:
        node = crawl("jsquotes", args={"base_url": site.url, "refused": "1", "control": "1"},
                     settings={"REDIS_URL": redis_url, "PLAYWRIGHT_LAUNCH_OPTIONS": json.dumps(launch), **FAST})
        assert node.wait(120) == 0, node.text()[-3000:]
        log = node.text()
        assert "'finish_reason': 'finished'" in log, log[-3000:]
        items = [json.loads(line) for line in node.item_lines()]
        quotes = {item["quote"] for item in items if "quote" in item}
        assert quotes == site.quotes(), f"rendered quotes missing: {site.quotes() - quotes}\n{log[-3000:]}"
        assert [item["quotes"] for item in items if "control" in item] == [0], "without the wait, no quote yet"
        assert set(site.hits) == {"/", "/page/2/", "/page/3/", "/page/1/"}, dict(site.hits)
        assert "'evaluate' is not one a stored request may run" in log
        assert "'crawlplug/unserializable': 1" in log
        assert "'playwright/page_count'" in log, "scrapy-playwright rendered the pages"
