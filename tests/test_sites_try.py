"""Trying a site definition on one page (crawlplug.sites.trial, crawlplug.sites.fetch,
`crawlplug sites try`, POST /api/sites/try): the fields it extracts and why a required one
is missing, and the links each discovery step would follow; no crawl's state touched.

The first tests apply definitions to pages of the demo shop and the demo cars rendered in
this process; the others fetch pages the tests serve, through Scrapy, in real processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from scrapy.http import HtmlResponse
from starlette.testclient import TestClient

from crawlplug.demo.cars import DemoCars
from crawlplug.demo.shop import DemoShop
from crawlplug.errors import ConfigError
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.sites.definition import load_file, validate
from crawlplug.sites.extract import CompiledSite
from crawlplug.sites.store import SiteStore
from crawlplug.sites.trial import explain, text_lines
from crawlplug.web import create_app

from .support.nodes import ROOT
from .support.trialproject import MARK, trial_project

SHOP_YAML = ROOT / "spiders" / "sites" / "shop.yaml"
CARS_YAML = ROOT / "spiders" / "sites" / "cars.yaml"
CRAWLPLUG = str(Path(sys.executable).with_name("crawlplug"))
TOKEN = "trial-token-0123456789"
#: the shop's definition with a required field whose selector matches nothing (sku) and one
#: whose text does not convert (price as an integer: "123.02")
BAD = {**yaml.safe_load(SHOP_YAML.read_text()), "name": "shopbad"}
BAD["fields"] = {
    **BAD["fields"],
    "sku": {"css": "span.no-such-class::text", "required": True},
    "price": {**BAD["fields"]["price"], "type": "int"},
}


def page(site: object, path: str, base: str = "http://shop.test") -> HtmlResponse:
    status, body = site.render(path)  # type: ignore[attr-defined]
    assert status == 200
    return HtmlResponse(base + path, body=body, encoding="utf-8")


# -- a page already fetched ---------------------------------------------------------------------


def test_the_fields_of_a_page_and_why_one_is_missing():
    shop = DemoShop(items=50)
    response = page(shop, "/item/3/")
    result = explain(validate(BAD), response)
    fields = {f["name"]: f for f in result["fields"]}
    truth = shop.item(3)
    assert fields["name"]["outcome"] == "filled" and fields["name"]["value"] == truth["name"]
    assert fields["sku"] == {**fields["sku"], "outcome": "missing", "matched": 0, "why": "the selector matched nothing"}
    price = fields["price"]
    assert price["outcome"] == "missing" and price["matched"] == 1
    assert price["why"] == (
        f"matched 1, but the value was refused: Input should be a valid integer, unable to parse "
        f"string as an integer: '{truth['price']:.2f}'"
    )
    assert result["complete"] is False and result["missing"] == ["price", "sku"] and result["dropped"] is True
    # the very item and outcomes a site spider gets from the page
    crawl = CompiledSite(validate(BAD), "", "").extract(response)
    assert result["item"] == crawl.item and result["missing"] == crawl.missing


def test_a_default_says_why_and_each_step_shows_its_links():
    cars = DemoCars()
    on_request = next(p for p, m in cars.truth().items() if m["price"] is None)
    site, _ = load_file(CARS_YAML, pipelines=["spiders.sitesteps.AddSite"])
    result = explain(site, page(cars, on_request))
    price = next(f for f in result["fields"] if f["name"] == "price")
    assert (
        price["outcome"] == "defaulted"
        and price["why"] == "matched 1, but the value was refused: map turns 'on request' into null"
    )
    assert result["complete"] and [b["step"] for b in result["links"]] == ["brand", "series"]

    shop = DemoShop(items=300)  # 30 items a category: two list pages
    listing = explain(load_file(SHOP_YAML)[0], page(shop, "/category/2/"), step="list")
    assert listing["fields"] is None, "a list page: no fields"
    [block] = listing["links"]
    items = [f"http://shop.test/item/{i}/" for i in shop.category_items(2)[: shop.per_page]]
    assert [r["urls"] for r in block["rules"]] == [items, ["http://shop.test/category/2/page/2/"]]
    assert [(x["url"], x["step"]) for x in block["follow"]] == [(u, "item") for u in items] + [
        ("http://shop.test/category/2/page/2/", "list")
    ]
    with pytest.raises(ConfigError, match="has no step 'detail' \\(steps: list, item\\)"):
        explain(load_file(SHOP_YAML)[0], page(shop, "/category/2/"), step="detail")


LAMPS = {
    "name": "lamps",
    "base_url": "http://shop.test",
    "start_urls": ["/cat/list.html"],
    "steps": [
        {
            "name": "list",
            "links": [
                {"region": {"sub_prefix": "<!-- products -->", "sub_suffix": "<!-- /products -->"}, "to": "item"}
            ],
        },
        {"name": "item"},
    ],
    "fields": {
        "name": {"css": "h1::text", "required": True},
        "price": {"css": "span.price::text", "sub_prefix": "<!-- product -->", "type": "float", "required": True},
    },
}
LIST = """<html><body><nav><a href="/p/8">Our favourite</a></nav>
<!-- products --><ul><li><a href="/p/1">Desk lamp</a></li><li><a href="/p/2">Floor lamp</a></li></ul>
<!-- /products --><aside><a href="/p/9">Popular</a></aside></body></html>"""
ITEM = '<html><body><span class="price">1.00</span><!-- product --><h1>Desk lamp</h1><span class="price">10.50</span>'


def tried(body: str, path: str, **kwargs: str) -> tuple[dict, list[str]]:
    """explain() on a page, and the lines `crawlplug sites try` prints for it."""
    result = explain(validate(LAMPS), HtmlResponse("http://shop.test" + path, body=body, encoding="utf-8"), **kwargs)
    json.dumps(result)  # what --json prints
    page = {"url": "http://shop.test" + path, "status": 200, "bytes": len(body), "ms": 1, "content_type": None}
    return result, text_lines({**result, "page": page, "url": page["url"]})


def test_a_region_between_two_strings_found_and_not_found():
    listing, lines = tried(LIST, "/cat/list.html", step="list")
    [rule] = listing["links"][0]["rules"]
    cut = LIST.split("<!-- products -->")[1].split("<!-- /products -->")[0]
    assert rule["urls"] == ["http://shop.test/p/1", "http://shop.test/p/2"], "not the nav bar nor the popular box"
    assert rule["region"] == {
        "sub_prefix": "<!-- products -->",
        "sub_suffix": "<!-- /products -->",
        "prefix_found": True,
        "suffix_found": True,
        "found": True,
        "chars": len(cut),
        "why": None,
    }
    rule_line = (
        "  rule 1 (region from sub_prefix '<!-- products -->' to sub_suffix '<!-- /products -->') -> step item: 2 links"
    )
    assert lines[lines.index(rule_line) + 1] == f"    region: sub_prefix found, sub_suffix found, {len(cut)} characters"

    unclosed, lines = tried(LIST.replace("<!-- /products -->", ""), "/cat/list.html", step="list")
    [rule] = unclosed["links"][0]["rules"]
    assert rule["urls"] == [] and rule["region"]["prefix_found"] is True and rule["region"]["suffix_found"] is False
    why = "sub_suffix '<!-- /products -->' not found after sub_prefix"
    assert rule["region"]["found"] is False and rule["region"]["chars"] == 0 and rule["region"]["why"] == why
    assert lines[lines.index(rule_line.replace("2 links", "0 links")) + 1] == f"    region: empty, {why}"

    item, lines = tried(ITEM, "/p/1")
    price = next(f for f in item["fields"] if f["name"] == "price")
    assert price["value"] == 10.5 and price["texts"] == ["10.50"], "the price before sub_prefix is not taken"
    assert price["region"]["found"] and price["region"]["suffix_found"] is None  # to the page's end
    assert (
        "         region from sub_prefix '<!-- product -->' to the page's end: sub_prefix found, "
        f"{len(ITEM.split('<!-- product -->')[1])} characters"
    ) in lines
    assert next(f for f in item["fields"] if f["name"] == "name")["region"] is None

    missing, lines = tried(ITEM.replace("<!-- product -->", ""), "/p/1")
    price = next(f for f in missing["fields"] if f["name"] == "price")
    assert price["outcome"] == "missing" and price["matched"] == 0
    assert price["why"] == "sub_prefix '<!-- product -->' not found on the page", "not: the selector matched nothing"
    assert price["region"] == {
        "sub_prefix": "<!-- product -->",
        "sub_suffix": None,
        "prefix_found": False,
        "suffix_found": None,
        "found": False,
        "chars": 0,
        "why": "sub_prefix '<!-- product -->' not found on the page",
    }
    assert "  price  MISSING (required): sub_prefix '<!-- product -->' not found on the page" in lines
    assert (
        "         region from sub_prefix '<!-- product -->' to the page's end: empty, sub_prefix '<!-- product -->' "
        "not found on the page"
    ) in lines


# -- through Scrapy, in real processes -----------------------------------------------------------


def run_try(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CRAWLPLUG, "sites", "try", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": str(Path(sys.executable).parent), "HOME": str(project)},
    )


def test_sites_try_fetches_with_the_projects_settings_and_touches_no_crawl(project_copy, shop, r, redis_url):
    project = trial_project(project_copy, redis_url)
    bad = project / "bad.yaml"
    bad.write_text(yaml.safe_dump({**BAD, "base_url": shop.url}))
    res = run_try(project, str(bad), "/item/3/")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("site 'shopbad', definition ") and f"tried on {shop.url}/item/3/: HTTP 200" in lines[0]
    truth = shop.shop.item(3)
    assert f"  name      {truth['name'] + MARK!r}" in lines, "the page came through the project's middleware"
    assert "  sku       MISSING (required): the selector matched nothing" in lines
    assert any(
        line.startswith(
            "  price     MISSING (required): matched 1, but the value was refused: Input should be a valid integer"
        )
        for line in lines
    )
    assert "item: INCOMPLETE, price is null, sku is null; the crawl drops it (incomplete_items: drop)" in lines
    assert lines[-1] == "(nothing was stored: no crawl's state was touched)"
    assert r.dbsize() == 0, "the project's crawlplug (REDIS_URL set) wrote nothing: the trial runs without it"
    assert not (project / ".crawlplug").exists(), "nor started an embedded Redis"

    listing = run_try(project, str(SHOP_YAML), f"{shop.url}/category/1/", "--step", "list", "--json")
    assert listing.returncode == 0, listing.stderr
    got = json.loads(listing.stdout)
    assert got["page"]["status"] == 200 and got["fields"] is None
    follow = [x["url"] for x in got["links"][0]["follow"]]
    assert follow[:-1] == [f"{shop.url}/item/{i}/" for i in shop.shop.category_items(1)[: shop.shop.per_page]]
    assert follow[-1] == f"{shop.url}/category/1/page/2/"
    assert r.dbsize() == 0

    down = run_try(project, str(bad), "http://127.0.0.1:9/item/1/", "--timeout", "5")
    assert down.returncode == 1 and "crawlplug: error: could not fetch http://127.0.0.1:9/item/1/: " in down.stderr
    wrong = run_try(project, str(bad), "/item/1/", "--step", "detail")
    assert wrong.returncode == 1 and "has no step 'detail' (steps: list, item)" in wrong.stderr
    broken = project / "broken.yaml"
    broken.write_text(yaml.safe_dump({**BAD, "steps": []}))
    invalid = run_try(project, str(broken), f"{shop.url}/item/1/")
    assert invalid.returncode == 1 and f"invalid site definition {broken}:" in invalid.stderr


def test_the_dashboard_tries_a_stored_definition(shop, r):
    SiteStore(r).put({**BAD, "base_url": shop.url}, "bad.yaml")
    app = TestClient(create_app(r, CrawlKeys("site-shopbad"), TOKEN), base_url="http://127.0.0.1")
    body = {"site": "shopbad", "url": "/item/5/"}
    assert app.post("/api/sites/try", json=body).status_code == 401, "fetching a URL is an action: the token"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    res = app.post("/api/sites/try", json=body, headers=auth)
    assert res.status_code == 200, res.text
    got = res.json()
    assert got["origin"].startswith("Redis (version ") and got["page"]["url"] == f"{shop.url}/item/5/"
    assert {f["name"]: f["outcome"] for f in got["fields"]}["sku"] == "missing"
    listed = app.get("/api/sites").json()["sites"]
    assert [(s["name"], s["base_url"]) for s in listed] == [("shopbad", shop.url)]
    for bad_body, said in (
        ({"site": "nope", "url": "/x"}, "no site 'nope' stored in Redis (stored: shopbad)"),
        ({"definition": "name: [", "url": "/x"}, "not valid YAML/JSON"),
        ({"site": "shopbad"}, "which page? give its url"),
    ):
        res = app.post("/api/sites/try", json=bad_body, headers=auth)
        assert res.status_code == 400 and said in res.json()["error"], res.text
    res = app.post(
        "/api/sites/try", json={"definition": yaml.safe_dump({**BAD, "steps": []}), "url": "/x"}, headers=auth
    )
    assert res.status_code == 400 and "invalid site definition the definition given:" in res.json()["error"]
