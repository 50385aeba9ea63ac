"""Payloads written by an older crawlplug, for the tests that read them with today's.

:data:`REQUESTS` builds the requests a crawl queues (the demo shop spider's links: a
callback, a priority, DepthMiddleware's ``depth``, RefererMiddleware's ``Referer``; and
what other spiders add: cb_kwargs, errbacks, flags, retries, redirects, forms, JSON
bodies, binary headers and bodies, cookies, page methods). :func:`capture` encodes each
with whatever crawlplug is importable and describes the request, so that, in a git
archive of d7f69e2 (bench/common.py ``baseline_tree()``, here ``$TREE``)::

    cd $TREE && PYTHONPATH=$TREE python -c "import runpy; runpy.run_path(
        '<repo>/tests/support/oldpayloads.py', run_name='__main__')" > <repo>/tests/data/payloads_d7f69e2.json

wrote the fixed payloads that tests/test_payload_upgrade.py reads (crawlplug and the
demo spider from that tree). Only the standard library, Scrapy and the demo
spider are imported at the top: the crawlplug encoding them is the old one.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Callable
from typing import Any

from scrapy import FormRequest, Request
from scrapy.http import JsonRequest

SHOP = "http://127.0.0.1:8000"


def _page_methods() -> dict[str, Any]:
    from scrapy_playwright.page import PageMethod

    return {
        "playwright": True,
        "playwright_page_methods": [
            PageMethod("wait_for_selector", "div.quote"),
            PageMethod("click", "a.more", timeout=500),
        ],
    }


def _requests(spider: Any) -> dict[str, Callable[[], Request]]:
    ref = {"Referer": f"{SHOP}/category/4/page/3/"}
    return {
        "shop-start": lambda: Request(f"{SHOP}/", callback=spider.parse_list, priority=10),
        "shop-list": lambda: Request(
            f"{SHOP}/category/4/page/2/",
            callback=spider.parse_list,
            priority=10,
            meta={"depth": 1},
            headers={"Referer": f"{SHOP}/"},
        ),
        "shop-item": lambda: Request(f"{SHOP}/item/464/", callback=spider.parse_item, meta={"depth": 4}, headers=ref),
        "other-origin-referer": lambda: Request(
            "https://shop.example.com/item/7/?colour=red",
            callback=spider.parse_item,
            meta={"depth": 2},
            headers={"Referer": f"{SHOP}/"},
        ),
        "cb-kwargs-errback-flags": lambda: Request(
            f"{SHOP}/item/9/",
            callback=spider.parse_item,
            errback=spider.parse_list,
            priority=-3,
            cb_kwargs={"category": 4, "page": "2", "tags": ["a", "é"]},
            flags=["seed"],
            meta={"depth": 1},
            headers=ref,
        ),
        "retried": lambda: Request(
            f"{SHOP}/item/12/",
            callback=spider.parse_item,
            priority=-1,
            dont_filter=True,
            meta={"depth": 3, "retry_times": 1, "download_timeout": 30.5},
            headers=ref,
        ),
        "redirected": lambda: Request(
            f"{SHOP}/item/13/",
            callback=spider.parse_item,
            meta={
                "depth": 3,
                "redirect_times": 1,
                "redirect_ttl": 19,
                "redirect_urls": [f"{SHOP}/old/13/"],
                "redirect_reasons": [301],
            },
            headers=ref,
        ),
        "headers-binary-body": lambda: Request(
            f"{SHOP}/upload",
            method="PUT",
            body=bytes(range(256)),
            encoding="latin-1",
            headers={
                "Accept": ["text/html", "application/xml"],
                "X-Bin": [b"\x00\xff\x80"],
                "User-Agent": "crawlplug-test/1.0",
                "Referer": f"{SHOP}/a/",
            },
        ),
        "form-cookies": lambda: FormRequest(
            f"{SHOP}/search",
            formdata={"q": "lamp", "page": "2"},
            cookies={"session": "abc"},
            callback=spider.parse_list,
        ),
        "json-body": lambda: JsonRequest(
            f"{SHOP}/api/items", data={"ids": [1, 2, 3], "name": "Kettle ☕"}, callback=spider.parse_item
        ),
        "unicode-meta": lambda: Request(
            f"{SHOP}/item/14/", callback=spider.parse_item, meta={"depth": 2, "name": "Théière ☕ \u2028"}
        ),
        "page-methods": lambda: Request(f"{SHOP}/js/", callback=spider.parse_item, meta=_page_methods()),
    }


def describe(request: Request) -> dict[str, Any]:
    """What a request holds, in JSON: enough to check one decoded from its payload."""
    cls = type(request)
    meta = {k: v for k, v in request.meta.items() if k != "playwright_page_methods"}
    methods = request.meta.get("playwright_page_methods")
    return {
        "class": f"{cls.__module__}.{cls.__name__}",
        "url": request.url,
        "method": request.method,
        "headers": [
            [base64.b64encode(bytes(k)).decode(), [base64.b64encode(bytes(v)).decode() for v in vs]]
            for k, vs in request.headers.items()
        ],
        "body": base64.b64encode(request.body).decode(),
        "cookies": request.cookies,
        "meta": meta,
        "page_methods": None if methods is None else [[m.method, list(m.args), m.kwargs] for m in methods],
        "encoding": request.encoding,
        "priority": request.priority,
        "dont_filter": request.dont_filter,
        "flags": request.flags,
        "cb_kwargs": request.cb_kwargs,
        "callback": getattr(request.callback, "__name__", None),
        "errback": getattr(request.errback, "__name__", None),
    }


def capture() -> dict[str, Any]:
    """Each request of :func:`_requests`, as the importable crawlplug encodes it, and described."""
    import crawlplug
    from crawlplug.serializers import JsonSerializer
    from spiders.shop import ShopSpider

    spider, serializer = ShopSpider(), JsonSerializer()
    cases = {}
    for name, make in _requests(spider).items():
        request = make()
        cases[name] = {"payload": serializer.dumps(request, spider).decode("utf-8"), "request": describe(request)}
    return {"crawlplug": crawlplug.__file__.rsplit("/crawlplug/", 1)[0], "cases": cases}


if __name__ == "__main__":
    out = capture()
    out.pop("crawlplug")  # a machine path: not committed
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False, sort_keys=True)
    sys.stdout.write("\n")
