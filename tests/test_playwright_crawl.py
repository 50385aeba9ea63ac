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
from pathlib import Path

import pytest
import redis

from crawlplug.crawl import Crawl
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from tests.support.importmarker import MARKER_ENV
from tests.support.jssite import JsSite, chromium

pytestmark = pytest.mark.e2e

FAST = {"CRAWLPLUG_IDLE_CLOSE": 1, "CRAWLPLUG_HEARTBEAT": 0.5, "CRAWLPLUG_LEASE_TIMEOUT": 10}


def _launch_options() -> dict[str, object]:
    if importlib.util.find_spec("scrapy_playwright") is None:
        pytest.skip("scrapy-playwright is not installed (pip install 'crawlplug[playwright]')")
    browser = chromium()
    if browser is None:
        pytest.skip("no chromium (apt-get install chromium): Playwright cannot download its own browser here")
    return {"executable_path": browser, "args": ["--no-sandbox"], "headless": True}


def test_a_javascript_page_is_crawled_with_its_page_methods_read_back_from_redis(crawl, redis_url):
    launch = _launch_options()
    # the quotes come 2 s after the page: a control page read without the wait has none yet, even
    # when a loaded machine renders slowly (at 0.5 s, one read on the suite's workers had both)
    with JsSite(pages=3, per_page=2, delay_ms=2000) as site:
        node = crawl(
            "jsquotes",
            args={"base_url": site.url, "refused": "1", "control": "1"},
            settings={"REDIS_URL": redis_url, "PLAYWRIGHT_LAUNCH_OPTIONS": json.dumps(launch), **FAST},
        )
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


def test_planted_meta_keys_that_name_code_or_paths_run_nothing_and_are_dead_letters(crawl, redis_url, tmp_path):
    """Whoever writes to the crawl's Redis plants requests asking scrapy-playwright to import
    and call a module by its path, to attach a spider attribute to a page event, to record a
    HAR file where it says, and a PageMethod whose kwargs name PageMethod's own argument:
    the jsquotes spider opted in to none of them, so each is a dead letter with its reason
    at its first delivery, no module is imported, no file is written, and the site is
    crawled all the same."""
    launch = _launch_options()
    marker, har = tmp_path / "imported", tmp_path / "planted.har"
    with JsSite(pages=1, per_page=1, delay_ms=100) as site:

        def planted(path: str, meta: dict[str, object], xmeta: dict[str, object] | None = None) -> bytes:
            fields = {"v": 3, "u": f"{site.url}{path}", "c": "parse", "m": {"playwright": True, **meta}}
            return json.dumps({**fields, **({"x": xmeta} if xmeta else {})}).encode()

        queue = {  # planted payload -> words its dead letter's reason must hold
            planted(
                "/page/91/", {"playwright_page_init_callback": "tests.support.importmarker.init_page"}
            ): "meta['playwright_page_init_callback'] is refused: it imports a function by the path it names",
            planted(
                "/page/92/", {"playwright_page_event_handlers": {"load": "parse"}}
            ): "meta['playwright_page_event_handlers'] is refused",
            planted(
                "/page/93/",
                {"playwright_context": "planted", "playwright_context_kwargs": {"record_har_path": str(har)}},
            ): "meta['playwright_context'] is refused",
            planted(
                "/page/94/",
                {},
                {
                    "playwright_page_methods": [
                        {
                            "$crawlplug": "playwright.PageMethod",
                            "data": {"method": "wait_for_selector", "args": ["body"], "kwargs": {"method": "x"}},
                        }
                    ]
                },
            ): "kwargs name 'method', which is PageMethod's own argument",
        }
        frontier = Frontier(redis.Redis.from_url(redis_url), CrawlKeys("jsquotes"))
        frontier.admit([(b"", -100.0, payload) for payload in queue])
        node = crawl(
            "jsquotes",
            args={"base_url": site.url},
            settings={"REDIS_URL": redis_url, "PLAYWRIGHT_LAUNCH_OPTIONS": json.dumps(launch), **FAST},
            env={MARKER_ENV: str(marker)},
        )
        assert node.wait(120) == 0, node.text()[-3000:]
        log = node.text()
        assert "'finish_reason': 'finished'" in log, log[-3000:]
        assert not marker.exists() and not Path(f"{marker}.called").exists(), "a payload's module was imported"
        assert not har.exists(), "a payload's context options wrote a file"
        assert not {"/page/91/", "/page/92/", "/page/93/", "/page/94/"} & set(site.hits), dict(site.hits)
        assert {item["quote"] for item in map(json.loads, node.item_lines()) if "quote" in item} == site.quotes()
        dead = {d.payload: (d.header["reason"], d.header.get("deliveries")) for d in Crawl.of(frontier).dead_letters()}
        assert len(dead) == len(queue), dead
        for payload, words in queue.items():
            reason, deliveries = dead[payload]
            assert words in reason, (payload[:120], reason)
            assert deliveries in (1, "1"), f"dead-lettered at its first delivery, not after retries: {deliveries}"
        assert f"'crawlplug/undecodable': {len(queue)}" in log
