"""Offline tests of the demo spiders: callbacks fed with DemoShop pages, no network, no Redis."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import sys
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the project is not installed into the venv
    sys.path.insert(0, str(ROOT))

import scrapy
from scrapy.exceptions import CloseSpider
from scrapy.http import HtmlResponse, Response
from scrapy.utils.request import request_from_dict
from scrapy.utils.test import get_crawler

from crawlplug.demo.shop import DemoShop
from spiders.samesite import SameSiteSpider
from spiders.shop import ShopSpider

BASE = "http://shop.test:8000"
SMALL = {"items": 50, "per_page": 4, "categories": 3, "related": 3, "seed": 3}


def response_for(shop: DemoShop, request: scrapy.Request) -> HtmlResponse:
    path = request.url.removeprefix(BASE)
    status, body = shop.render(path)
    return HtmlResponse(url=request.url, status=status, body=body, encoding="utf-8", request=request)


def page(shop: DemoShop, path: str) -> HtmlResponse:
    return response_for(shop, scrapy.Request(BASE + path))


def requests_of(output: Iterable[Any]) -> list[scrapy.Request]:
    return [r for r in output if isinstance(r, scrapy.Request)]


async def _collect(gen: AsyncIterator[Any]) -> list[Any]:
    return [x async for x in gen]


def start_requests_of(spider: scrapy.Spider) -> list[Any]:
    return asyncio.run(_collect(spider.start()))


@pytest.fixture
def shop() -> DemoShop:
    return DemoShop(**SMALL)


# ---------------------------------------------------------------- ShopSpider


def test_shop_start_url_from_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMO_SHOP_URL", "http://env.test:1")
    spider = ShopSpider(base_url=BASE + "/")
    [req] = start_requests_of(spider)
    assert req.url == BASE + "/"
    assert req.priority == 10 and req.callback == spider.parse_list


def test_shop_start_url_from_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMO_SHOP_URL", "http://env.test:1")
    crawler = get_crawler(ShopSpider, {"DEMO_SHOP_URL": "http://setting.test:2"})
    spider = ShopSpider.from_crawler(crawler)
    assert [r.url for r in start_requests_of(spider)] == ["http://setting.test:2/"]


def test_shop_start_url_from_env_then_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMO_SHOP_URL", "http://env.test:1")
    assert [r.url for r in start_requests_of(ShopSpider())] == ["http://env.test:1/"]
    monkeypatch.delenv("DEMO_SHOP_URL")
    assert [r.url for r in start_requests_of(ShopSpider())] == ["http://127.0.0.1:8000/"]


def test_parse_list_priorities(shop: DemoShop) -> None:
    spider = ShopSpider(base_url=BASE)
    home = requests_of(spider.parse_list(page(shop, "/")))
    assert {r.url for r in home} == {BASE + shop.list_path(c) for c in (1, 2, 3)}
    assert all(r.priority == 10 and r.callback == spider.parse_list for r in home)

    out = list(spider.parse_list(page(shop, "/category/1/page/2/")))
    assert all(isinstance(r, scrapy.Request) for r in out)
    items = [r for r in out if "/item/" in r.url]
    lists = [r for r in out if "/item/" not in r.url]
    assert [r.url for r in items] == [BASE + f"/item/{i}/" for i in (13, 16, 19, 22)]
    assert all(r.priority == 0 and r.callback == spider.parse_item for r in items)
    assert {r.url for r in lists} == {
        BASE + "/",
        BASE + "/category/1/",  # nav and "prev"
        BASE + "/category/2/",
        BASE + "/category/3/",
        BASE + "/category/1/page/3/",  # next
    }
    assert all(r.priority == 10 and r.callback == spider.parse_list for r in lists)


def test_parse_item_yields_exact_truth(shop: DemoShop) -> None:
    spider = ShopSpider(base_url=BASE)
    for item_id in range(1, shop.items + 1):
        out = list(spider.parse_item(page(shop, f"/item/{item_id}/")))
        [item] = [x for x in out if isinstance(x, dict)]
        truth = dict(shop.item(item_id))
        truth["url"] = BASE + truth.pop("url_path")
        assert item == truth
        assert type(item["price"]) is float and type(item["in_stock"]) is bool
        related = requests_of(out)
        assert [r.url for r in related] == [BASE + f"/item/{k}/" for k in shop.related_ids(item_id)]
        assert all(r.priority == 0 and r.callback == spider.parse_item for r in related)


def test_names_with_entities_are_unescaped() -> None:
    shop = DemoShop(items=400, seed=0)
    item_id = next(i for i in range(1, 401) if "&" in shop.item(i)["name"])
    [item] = [x for x in ShopSpider(base_url=BASE).parse_item(page(shop, f"/item/{item_id}/")) if isinstance(x, dict)]
    assert item["name"] == shop.item(item_id)["name"]


def test_requests_serialize_with_callbacks_by_name(shop: DemoShop) -> None:
    spider = ShopSpider(base_url=BASE)
    out = requests_of(spider.parse_list(page(shop, "/category/1/")))
    out += requests_of(spider.parse_item(page(shop, "/item/1/")))
    for req in out:
        data = req.to_dict(spider=spider)
        assert data["callback"] in ("parse_list", "parse_item")
        assert data["errback"] is None and data["body"] == b""
        back = request_from_dict(data, spider=spider)
        assert back.url == req.url and back.priority == req.priority
        assert back.callback == req.callback


def test_offline_crawl_finds_every_item_and_lists_first(shop: DemoShop) -> None:
    """Run the spider's callbacks through a tiny priority scheduler with a dupefilter."""
    spider = ShopSpider(base_url=BASE)
    counter = itertools.count()
    queue: list[tuple[int, int, scrapy.Request]] = []
    seen: set[str] = set()

    def schedule(req: scrapy.Request) -> None:
        if req.url not in seen:
            seen.add(req.url)
            heapq.heappush(queue, (-req.priority, next(counter), req))

    for req in start_requests_of(spider):
        schedule(req)
    fetched: list[str] = []
    items: list[dict[str, Any]] = []
    while queue:
        _, _, req = heapq.heappop(queue)
        resp: Response = response_for(shop, req)
        assert resp.status == 200, req.url
        fetched.append(resp.url.removeprefix(BASE))
        for out in req.callback(resp):
            if isinstance(out, scrapy.Request):
                schedule(out)
            else:
                items.append(out)

    assert set(fetched) == shop.paths() and len(fetched) == len(shop.paths())
    first_item = next(i for i, p in enumerate(fetched) if p.startswith("/item/"))
    assert set(fetched[:first_item]) == {"/"} | shop.list_paths()
    truth = shop.truth()
    assert len(items) == shop.items
    for item in items:
        expected = dict(truth[item["url"].removeprefix(BASE)])
        expected["url"] = BASE + expected.pop("url_path")
        assert item == expected


# ------------------------------------------------------------ SameSiteSpider


def test_samesite_requires_start_url() -> None:
    with pytest.raises(ValueError, match="start_url"):
        SameSiteSpider()
    with pytest.raises(ValueError, match="absolute"):
        SameSiteSpider(start_url="/relative")
    with pytest.raises(ValueError, match="max_pages"):
        SameSiteSpider(start_url=BASE, max_pages="many")


def test_samesite_start_and_parse(shop: DemoShop) -> None:
    spider = SameSiteSpider(start_url=BASE + "/")
    [start] = start_requests_of(spider)
    assert start.url == BASE + "/" and start.callback == spider.parse_page

    out = list(spider.parse_page(page(shop, "/category/2/")))
    [record] = [x for x in out if isinstance(x, dict)]
    assert record == {"url": BASE + "/category/2/", "status": 200, "title": "Category 2, page 1 | Demo Shop"}
    urls = {r.url for r in requests_of(out)}
    assert BASE + "/item/2/" in urls and BASE + "/category/2/page/2/" in urls
    assert all(r.callback == spider.parse_page for r in requests_of(out))
    assert start.to_dict(spider=spider)["callback"] == "parse_page"


def test_samesite_follows_only_same_host() -> None:
    body = b"""<html><head><title> Links </title></head><body>
        <a href="/a">a</a> <a href="http://shop.test:9999/b">other port</a>
        <a href="https://shop.test/c">https</a> <a href="http://other.test/d">other host</a>
        <a href="http://sub.shop.test/e">subdomain</a> <a href="mailto:x@shop.test">mail</a>
        </body></html>"""
    spider = SameSiteSpider(start_url=BASE + "/")
    resp = HtmlResponse(url=BASE + "/", body=body, encoding="utf-8")
    out = list(spider.parse_page(resp))
    assert out[0] == {"url": BASE + "/", "status": 200, "title": "Links"}
    assert {r.url for r in requests_of(out)} == {
        BASE + "/a",
        "http://shop.test:9999/b",
        "https://shop.test/c",
    }


def test_samesite_max_pages(shop: DemoShop) -> None:
    spider = SameSiteSpider(start_url=BASE + "/", max_pages="2")
    assert len(requests_of(spider.parse_page(page(shop, "/")))) == 3
    gen = spider.parse_page(page(shop, "/category/1/"))
    assert next(gen)["url"] == BASE + "/category/1/"
    with pytest.raises(CloseSpider) as info:
        next(gen)
    assert info.value.reason == "max_pages"
    assert list(spider.parse_page(page(shop, "/category/2/"))) == []


def test_samesite_reports_404_without_following(shop: DemoShop) -> None:
    spider = SameSiteSpider(start_url=BASE + "/")
    out = list(spider.parse_page(page(shop, "/missing")))
    assert out == [{"url": BASE + "/missing", "status": 404, "title": "Not found | Demo Shop"}]
