"""Site definitions: the schema and its error paths, start URLs, extraction on real pages
of the two demo sites, the Redis store and a node's switch to a changed definition."""

from __future__ import annotations

import asyncio
import copy
import json
import sys
from pathlib import Path

import pytest
import yaml
from scrapy.exceptions import DropItem
from scrapy.http import HtmlResponse, Response, TextResponse
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from crawlplug.demo.cars import DemoCars
from crawlplug.demo.shop import DemoShop
from crawlplug.errors import ConfigError
from crawlplug.sites import outcomes as siteoutcomes
from crawlplug.sites.definition import (
    expand_start_urls,
    load_file,
    parse_text,
    validate,
    version_of,
)
from crawlplug.sites.extract import CompiledSite
from crawlplug.sites.spider import SiteItem, SitePipeline, SiteSpider
from crawlplug.sites.store import SiteStore

from .support.nodes import ROOT

SITES = ROOT / "spiders" / "sites"
BASE = "http://site.test"
#: the pipeline steps these tests' definitions name, listed as CRAWLPLUG_SITE_PIPELINES lists them
STEPS = ("spiders.sitesteps.AddSite", "tests.test_sites_def.Upper", "tests.test_sites_def.Explode")


def doc_of(name: str) -> dict:
    return yaml.safe_load((SITES / f"{name}.yaml").read_text())


def page(site, path: str) -> HtmlResponse:
    status, body = site.render(path)
    assert status == 200, path
    return HtmlResponse(BASE + path, body=body, encoding="utf-8")


def errors_of(doc: dict, **kwargs) -> list[str]:
    with pytest.raises(ConfigError) as info:
        validate(doc, "test.yaml", **{"pipelines": STEPS, **kwargs})
    lines = str(info.value).splitlines()
    assert lines[0] == "invalid site definition test.yaml:"
    return [line.strip() for line in lines[1:]]


# -- the schema, and every bad key reported with its path ---------------------------------


def test_the_shipped_definitions_are_valid():
    for name in ("shop", "cars"):
        site, doc = load_file(SITES / f"{name}.yaml", pipelines=STEPS)
        assert site.name == name and doc["name"] == name
    cars, _ = load_file(SITES / "cars.yaml", pipelines=STEPS)
    assert [s.name for s in cars.steps] == ["brand", "series", "model"]
    assert cars.detail_step == "model"
    assert [cars.priority(s) for s in ("brand", "series", "model")] == [20, 10, 0]


def test_schema_errors_name_the_path_of_each_bad_key():
    doc = doc_of("cars")
    doc["steps"][1]["links"][0]["region"] = {"css": "table[", "xpath": "//x"}
    doc["steps"][1]["links"][1]["match"] = {"prefix": "/a", "regex": "("}
    doc["steps"][2]["prio"] = 3
    doc["fields"]["price"]["type"] = "decimal"
    doc["fields"]["year"]["requried"] = True
    doc["fields"]["seats"]["regex"] = "(unclosed"
    doc["start_urls"].append({"url": 5})
    doc["incomplete_items"] = "maybe"
    errors = errors_of(doc)
    assert errors == [
        "start_urls[1].url: Input should be a valid string",
        "steps[1].links[0].region.css: invalid CSS selector 'table[': Expected ident or '*', got <EOF at 6>",
        "steps[1].links[1].match.regex: invalid regular expression '(': missing ), unterminated subpattern at position 0",
        "steps[2].prio: Extra inputs are not permitted",
        "fields.year.requried: Extra inputs are not permitted",
        "fields.price.type: Input should be 'str', 'int', 'float' or 'bool'",
        "fields.seats.regex: invalid regular expression '(unclosed': missing ), unterminated subpattern at position 0",
        "incomplete_items: Input should be 'drop' or 'keep'",
    ]


def test_cross_reference_errors_have_paths_too():
    doc = doc_of("cars")
    doc["steps"][1]["links"][0]["to"] = "modle"
    doc["steps"][2]["links"] = [{"match": {"contains": "/model/"}}]  # the last step: no next step
    doc["last_step"] = "detail"
    doc["start_urls"] = [{"url": "/brand/{brand}.html", "vars": {"brand": "one..six"}}, {"url": "/x", "step": "home"}]
    doc["pipelines"] = ["spiders.nosuchmodule.Step", "scrapy.Spider"]
    errors = errors_of(doc, pipelines=doc["pipelines"])
    assert errors == [
        "last_step: no step named 'detail' (steps: brand, series, model)",
        "steps[1].links[0].to: no step named 'modle' (steps: brand, series, model)",
        "steps[2].links[0].to: the last step's links need 'to' (there is no next step)",
        "start_urls[0].vars.brand: 'one..six' is neither a range like '1..100' (or '0..100..10') nor a list of values",
        "start_urls[1].step: no step named 'home' (steps: brand, series, model)",
        "pipelines[0]: cannot import 'spiders.nosuchmodule.Step': No module named 'spiders.nosuchmodule'",
        "pipelines[1]: 'scrapy.Spider' is not an item pipeline class (a class with process_item)",
    ]


def test_required_fields_and_exactly_one_selector():
    doc = doc_of("shop")
    doc["fields"]["name"] = {"css": "h1", "xpath": "//h1", "required": True}
    doc["fields"]["sku"] = {"css": "span.sku::text", "required": True, "default": "?"}
    doc["fields"]["url"] = {"css": "a::attr(href)"}
    errors = errors_of(doc)
    assert errors == [
        "fields.name: give exactly one of css or xpath",
        "fields.sku: a required field takes no default (a page without it is an error, not a default)",
    ]
    doc = doc_of("shop")
    doc["fields"]["url"] = {"css": "a::attr(href)"}
    assert errors_of(doc) == ["fields: 'url' is reserved: every item has the URL of its page"]


PRODUCTS = {"sub_prefix": "<!-- products -->", "sub_suffix": "<!-- /products -->"}


def test_a_region_between_two_strings_for_links_and_fields():
    doc = doc_of("shop")
    doc["steps"][0]["links"][0]["region"] = PRODUCTS
    doc["steps"][0]["links"][1]["region"] = {"sub_suffix": "<!-- /pager -->"}  # from the page's start
    doc["fields"]["sku"]["sub_prefix"] = "<!-- product -->"  # to the page's end
    doc["fields"]["price"] |= {"sub_prefix": "<h1", "sub_suffix": "</body>"}  # and its prefix/suffix stay
    site = validate(doc)
    [products, pager] = site.steps[0].links
    assert products.region is not None and products.region.bounds == ("<!-- products -->", "<!-- /products -->")
    assert pager.region is not None and pager.region.bounds == (None, "<!-- /pager -->")
    assert site.fields["sku"].bounds == ("<!-- product -->", None) and site.fields["name"].bounds is None
    price = site.fields["price"]
    assert price.bounds == ("<h1", "</body>") and (price.prefix, price.suffix) == ("Price:", "USD")

    bad = doc_of("shop")
    bad["steps"][0]["links"][0]["region"] = {"css": "ul.products", "sub_prefix": "<!-- products -->"}
    bad["steps"][0]["links"][1]["region"] = {}
    bad["steps"][1]["links"] = [
        {"region": {"sub_prefix": "", "sub_suffix": "<!-- /related -->"}, "to": "item"},
        {"region": {"xpath": "//ul", "sub_suffix": "<!-- /related -->"}, "to": "item"},
        {"region": {"sub_prefix": "<!-- related -->", "sub_suffix": 5}, "to": "item"},
        {"region": {"sub_prefix": "<!-- related -->", "sub_sufix": "<!-- /related -->"}, "to": "item"},
    ]
    bad["fields"]["name"]["sub_suffix"] = ""
    bad["fields"]["sku"] = {"sub_prefix": "<!-- product -->", "sub_suffix": "<!-- /product -->"}
    assert errors_of(bad) == [
        "steps[0].links[0].region: give exactly one of css, xpath, or sub_prefix/sub_suffix",
        "steps[0].links[1].region: give exactly one of css, xpath, or sub_prefix/sub_suffix",
        "steps[1].links[0].region.sub_prefix: an empty sub_prefix cuts nothing: leave it out to cut from the "
        "page's start",
        "steps[1].links[1].region: give exactly one of css, xpath, or sub_prefix/sub_suffix",
        "steps[1].links[2].region.sub_suffix: Input should be a valid string",
        "steps[1].links[3].region.sub_sufix: Extra inputs are not permitted",
        "fields.name.sub_suffix: an empty sub_suffix cuts nothing: leave it out to cut to the page's end",
        "fields.sku: give exactly one of css or xpath",
    ]


def test_relative_start_urls_need_base_url_and_yaml_errors_say_where():
    doc = doc_of("shop")
    del doc["base_url"]
    assert errors_of(doc) == [
        "start_urls: '/category/1/' is not an absolute http(s) URL (relative start URLs need base_url)"
    ]
    with pytest.raises(ConfigError, match=r"x.yaml: not valid YAML/JSON \(line 3, column 1\): expected .,. or .\]."):
        parse_text("name: a\nsteps: [unclosed\n", "x.yaml")
    with pytest.raises(ConfigError, match="the top level must be a mapping"):
        validate(["a"], "list.yaml")


def test_load_file_names_a_definition_after_its_file(tmp_path: Path):
    doc = doc_of("shop")
    del doc["name"]
    path = tmp_path / "myshop.json"
    path.write_text(json.dumps(doc))
    site, stored = load_file(path)
    assert site.name == "myshop" and stored["name"] == "myshop"
    assert version_of(stored) == version_of(json.loads(json.dumps(stored)))  # formatting-independent


# -- start URLs -------------------------------------------------------------------------------


def test_start_urls_ranges_templates_and_padding():
    doc = {
        "name": "t",
        "base_url": BASE,
        "steps": [{"name": "a"}, {"name": "b"}],
        "fields": {"x": {"css": "x"}},
        "start_urls": [
            "/p/{1..3}",
            "/q/{08..10}/{0..4..2}",
            {"url": "/brand/{b}.html?page={page}", "vars": {"b": ["x", "y"], "page": "2..1"}, "step": "b"},
            "https://other.test/{3..1}",
            "/p/2",  # a duplicate: once
        ],
    }
    urls = expand_start_urls(validate(doc))
    assert urls == [
        (f"{BASE}/p/1", "a"),
        (f"{BASE}/p/2", "a"),
        (f"{BASE}/p/3", "a"),
        (f"{BASE}/q/08/0", "a"),
        (f"{BASE}/q/08/2", "a"),
        (f"{BASE}/q/08/4", "a"),
        (f"{BASE}/q/09/0", "a"),
        (f"{BASE}/q/09/2", "a"),
        (f"{BASE}/q/09/4", "a"),
        (f"{BASE}/q/10/0", "a"),
        (f"{BASE}/q/10/2", "a"),
        (f"{BASE}/q/10/4", "a"),
        (f"{BASE}/brand/x.html?page=2", "b"),
        (f"{BASE}/brand/x.html?page=1", "b"),
        (f"{BASE}/brand/y.html?page=2", "b"),
        (f"{BASE}/brand/y.html?page=1", "b"),
        ("https://other.test/3", "a"),
        ("https://other.test/2", "a"),
        ("https://other.test/1", "a"),
    ]
    doc["start_urls"] = ["/p/{1..200000}"]
    assert errors_of(doc) == ["start_urls: range 1..200000 has 200000 values (at most 100000)"]
    doc["start_urls"] = [{"url": "/p/{nope}"}]
    assert errors_of(doc) == ["start_urls: no vars for {nope}"]


# -- extraction on real pages of the demo sites -------------------------------------------------


def compiled(name: str, doc: dict | None = None) -> CompiledSite:
    doc = doc if doc is not None else doc_of(name)
    return CompiledSite(validate(doc, pipelines=STEPS).with_base_url(BASE), version_of(doc), "test")


def test_cars_definition_extracts_the_ground_truth_and_follows_only_its_regions():
    cars = DemoCars(brands=3)
    site = compiled("cars")
    links = site.links(page(cars, "/brand/1.html"), "brand")
    assert [(link.url, link.step, link.priority) for link in links] == [
        (f"{BASE}/series/1-{s}.html", "series", 10) for s in range(1, cars.series_count(1) + 1)
    ], "the nav bar, the popular models and the footer are not followed"
    series = site.links(page(cars, "/series/1-1.html"), "series")
    models = [f"{BASE}/model/{i}.html" for i in range(1, 5)]
    assert [link.url for link in series if link.step == "model"] == models[
        : len([x for x in series if x.step == "model"])
    ]
    assert all(link.priority == 0 for link in series if link.step == "model")
    compare = page(cars, "/series/1-1.html").css("aside.compare a::attr(href)").getall()
    assert compare and not {BASE + href for href in compare} & {link.url for link in series}
    for path, truth in cars.truth().items():
        result = site.extract(page(cars, path))
        assert result.complete and not result.invalid and not result.errors, (path, result)
        assert result.item == {"url": BASE + path, **{k: v for k, v in truth.items() if k != "url_path"}}
        assert result.defaulted == (["price"] if truth["price"] is None else [])


def test_shop_definition_extracts_the_ground_truth():
    shop = DemoShop(items=40, per_page=3, categories=2)
    site = compiled("shop")
    links = site.links(page(shop, "/category/1/"), "list")
    assert [(link.url, link.step) for link in links] == [
        *((f"{BASE}/item/{i}/", "item") for i in (1, 3, 5)),
        (f"{BASE}/category/1/page/2/", "list"),
    ]
    for path, truth in shop.truth().items():
        result = site.extract(page(shop, path))
        assert result.complete and result.item == {
            "url": BASE + path,
            **{k: v for k, v in truth.items() if k != "url_path"},
        }


def test_broken_selectors_are_data_not_exceptions():
    doc = doc_of("cars")
    doc["fields"]["year"]["xpath"] = "//table[@class='spec']//tr[th='Yr']/td/text()"
    doc["fields"]["seats"] = {"xpath": "//tr[th='Seats']/td/text()", "type": "int"}  # "5 seats": not an int
    doc["fields"]["broken"] = {"xpath": "nosuchfunction()"}
    doc["fields"]["many"] = {"css": "table.spec td::text", "multiple": True}
    site = compiled("cars", doc)
    cars = DemoCars(brands=1)
    result = site.extract(page(cars, "/model/1.html"))
    assert result.missing == ["year"] and not result.complete
    why = f"Input should be a valid integer, unable to parse string as an integer: '{cars.model(1)['seats']} seats'"
    assert result.invalid == [("seats", why)]
    assert [(name, type(exc).__name__) for name, exc in result.errors] == [("broken", "ValueError")]
    assert result.item["year"] is None and result.item["seats"] is None and result.item["broken"] is None
    assert len(result.item["many"]) == 4
    # a page that is not HTML at all
    binary = TextResponse(BASE + "/x.json", body=b'{"a": 1}', encoding="utf-8")
    with pytest.raises(Exception):  # noqa: B017 - the spider counts whatever this raises
        site.links(binary, "series")


LAMPS = """<html><head><meta charset="latin-1"><base href="/shop/"><title>Lamps</title></head><body>
<nav><a href="p/8">Our favourite</a> <span class="price">1.00</span></nav>
<!-- products --><ul>
  <li><a href="p/1">Desk lamp</a> <span class="price">10.50</span></li>
  <li><a href="/shop/p/2?colour=crème">Floor lamp</a></li>
</ul><!-- /products -->
<aside><a href="p/9">Popular</a></aside>
<!-- products --><a href="p/10">a second region: only the first is cut</a><!-- /products -->
</body></html>"""


def test_a_region_between_two_strings_on_a_page():
    doc = doc_of("shop")
    doc["steps"][0]["links"] = [{"region": PRODUCTS, "to": "item"}]
    doc["fields"] = {
        "price": {"css": "span.price::text", **PRODUCTS, "type": "float"},
        "first_price": {"css": "span.price::text", "type": "float"},
        "count": {"xpath": "count(//a)", "sub_suffix": "<!-- /products -->"},
    }
    site = compiled("shop", doc)
    lamps = HtmlResponse(BASE + "/cat/lamps.html", body=LAMPS.encode("latin-1"), encoding="latin-1")
    links = [link.url for link in site.links(lamps, "list")]
    # relative links resolve against the <base href> outside the cut; the query in the page's encoding
    assert links == [f"{BASE}/shop/p/1", f"{BASE}/shop/p/2?colour=cr%E8me"]
    by_css = copy.deepcopy(doc)
    by_css["steps"][0]["links"] = [{"region": {"css": "ul"}, "to": "item"}]
    css = compiled("shop", by_css)
    assert [link.url for link in css.links(lamps, "list")] == links, "what a selector of the same region gives"
    result = site.extract(lamps)
    assert result.item["price"] == 10.5 and result.item["first_price"] == 1.0, "the price outside is not taken"
    assert result.item["count"] == "3.0", "the cut from the page's start: the nav and the two products"

    # a bound not found: the region is empty, never the whole page
    for body in (LAMPS.replace("<!-- products -->", ""), LAMPS.replace("<!-- /products -->", "")):
        page_without = HtmlResponse(BASE + "/cat/lamps.html", body=body.encode("latin-1"), encoding="latin-1")
        assert site.links(page_without, "list") == []
        assert site.extract(page_without).item["price"] is None
    no_suffix = HtmlResponse(BASE + "/x", body=LAMPS.replace("<!-- /products -->", "").encode(), encoding="utf-8")
    assert site.extract(no_suffix).item["count"] is None, "not even count() runs on a region not found"
    # nor does a page without text raise: a field with a region is null (the one without fails selecting)
    binary = site.extract(Response(BASE + "/x.bin", body=b"\x00\x01"))
    assert binary.item["price"] is None and [name for name, _ in binary.errors] == ["first_price"]


def test_outcome_names_and_the_status_section():
    stats = {
        "site/cars/steps": "brand,series,model",
        "site/cars/step/brand/pages": 6,
        "site/cars/step/series/pages": 30,
        "site/cars/step/model/pages": 100,
        "site/cars/step/series/links": 120,
        "site/cars/items/ok": 90,
        "site/cars/items/incomplete": 10,
        "site/cars/field/year/missing": 10,
        "site/cars/field/seats/invalid": 4,
        "site/cars/errors/ValueError": 2,
        "site/cars/version/abc": 2,
        "response_received_count": 136,
    }
    assert siteoutcomes.outcomes(stats)["cars"]["field/year/missing"] == 10
    assert siteoutcomes.describe("field/year/missing") == "year is null"
    lines = siteoutcomes.status_lines(stats)
    assert lines[0] == "  cars  (definition abc on 2 nodes)"
    assert "    pages    brand 6, series 30, model 100" in lines
    assert "    items    ok 90, incomplete 10" in lines
    assert any(line.split() == ["year", "is", "null", "10"] for line in lines), lines
    assert any(line.split() == ["error", "ValueError", "2"] for line in lines), lines


# -- the store, a node's switch to a changed definition, pipeline steps ------------------------


class Explode:
    def process_item(self, item):
        raise RuntimeError("boom")


class Upper:
    def __init__(self) -> None:
        self.opened = False

    def open_spider(self, spider):
        self.opened = True

    async def process_item(self, item):
        item["name"] = item["name"].upper()
        return item


def spider_for(redis_url: str, site: str = "cars", **settings) -> SiteSpider:
    crawler = get_crawler(
        SiteSpider,
        settings_dict={
            "REDIS_URL": redis_url,
            "CRAWLPLUG_SITES_REFRESH": 0,
            "CRAWLPLUG_SITES_DIR": str(SITES),
            "CRAWLPLUG_SITE_PIPELINES": list(STEPS),
            **settings,
        },
    )
    crawler.spider = spider = SiteSpider.from_crawler(crawler, site=site)
    return spider


def test_the_site_pipeline_is_added_once_and_a_project_can_turn_it_off(redis_url):
    """The site spider adds its pipeline to the settings `scrapy crawl` hands it (before they
    freeze): under the project's own entry for it, if any, which wins (None keeps it off)."""
    spider, path = spider_for(redis_url), "crawlplug.sites.spider.SitePipeline"

    def adjusted(pipelines: dict) -> dict:
        settings = Settings({"ITEM_PIPELINES": pipelines}, priority="project")
        spider._adjust_settings(settings)
        return dict(settings.getdict("ITEM_PIPELINES"))

    assert adjusted({}) == {SitePipeline: 100}
    assert adjusted({path: None}) == {path: None}, "the project's None was overwritten"
    assert adjusted({path: 300}) == {path: 300}, "the project's own order was overwritten"


def test_store_put_get_list_delete(r):
    store = SiteStore(r)
    doc = doc_of("cars")
    stored = store.put(doc, "cars.yaml", pipelines=STEPS)
    assert store.version("cars") == stored.version == version_of(doc)
    assert store.names() == ["cars"] and store.get("cars").doc == doc
    assert r.exists("crawlplug:sites")
    with pytest.raises(ConfigError, match="fields.year.type"):
        store.put({**doc, "fields": {**doc["fields"], "year": {"css": "x", "type": "date"}}}, pipelines=STEPS)
    assert store.version("cars") == stored.version, "an invalid definition stores nothing"
    assert store.delete("cars") and store.names() == [] and not store.delete("cars")


def test_a_node_switches_to_a_changed_definition_and_keeps_a_bad_one_out(redis_url, r):
    store = SiteStore(r)
    v1 = store.put(doc_of("cars"), "cars.yaml", pipelines=STEPS).version
    spider = spider_for(redis_url)
    spider._opened(spider)
    stats = spider.crawler.stats
    assert spider.sites["cars"].version == v1 and spider.sites["cars"].origin == "Redis"
    assert stats.get_value(siteoutcomes.version("cars", v1)) == 1
    spider.refresh()  # nothing changed
    assert spider.sites["cars"].version == v1

    doc = doc_of("cars")
    doc["fields"]["title"] = doc["fields"].pop("name")
    v2 = store.put(doc, pipelines=STEPS).version
    spider.refresh()
    assert spider.sites["cars"].version == v2
    assert stats.get_value(siteoutcomes.version("cars", v1)) == 0
    assert stats.get_value(siteoutcomes.version("cars", v2)) == 1
    item = spider.sites["cars"].extract(page(DemoCars(brands=1), "/model/1.html")).item
    assert "title" in item and "name" not in item

    # written around the validation (by hand, by an older crawlplug): refused, v2 stays
    record = json.loads(r.hget("crawlplug:sites", "cars"))
    record["doc"]["steps"] = []
    r.hset("crawlplug:sites", mapping={"cars": json.dumps(record), "cars#v": "tampered"})
    spider.refresh()
    assert spider.sites["cars"].version == v2
    assert stats.get_value(siteoutcomes.error("cars", "DefinitionError")) == 1
    spider.refresh()  # the same bad version is not tried (nor counted) again
    assert stats.get_value(siteoutcomes.error("cars", "DefinitionError")) == 1
    spider._closed(spider)


def test_files_are_read_when_redis_has_no_definition(redis_url):
    spider = spider_for(redis_url, "shop")
    spider._opened(spider)
    assert spider.sites["shop"].origin == str(SITES / "shop.yaml")
    with pytest.raises(ConfigError, match=r"no definition of site 'nosuch': not in Redis .* nor in .*spiders/sites"):
        spider.load("nosuch")
    spider._closed(spider)


def test_pipeline_steps_run_in_order_and_a_failing_step_drops_the_item(redis_url, r):
    doc = doc_of("cars")
    doc["pipelines"] = ["tests.test_sites_def.Upper", "spiders.sitesteps.AddSite"]
    SiteStore(r).put(doc, pipelines=STEPS)
    spider = spider_for(redis_url)
    spider._opened(spider)
    pipeline = SitePipeline.from_crawler(spider.crawler)
    item = asyncio.run(pipeline.process_item(SiteItem("cars", {"name": "Aurora Coupe EV"})))
    assert item == {"name": "AURORA COUPE EV", "site": "cars"}
    assert pipeline.steps["tests.test_sites_def.Upper"].opened
    assert asyncio.run(pipeline.process_item({"name": "not a site item"})) == {"name": "not a site item"}

    doc = copy.deepcopy(doc)
    doc["pipelines"] = ["tests.test_sites_def.Explode"]
    SiteStore(r).put(doc, pipelines=STEPS)
    spider.refresh()
    with pytest.raises(DropItem, match="pipeline step tests.test_sites_def.Explode raised RuntimeError: boom"):
        asyncio.run(pipeline.process_item(SiteItem("cars", {"name": "x"})))
    assert spider.crawler.stats.get_value("site/cars/errors/RuntimeError") == 1
    spider._closed(spider)


# -- pipeline steps: only what the node lists, and nothing else imported -------------------------


@pytest.fixture
def planted_module(tmp_path, monkeypatch):
    """A module on the path that leaves a marker file when imported (what a stored definition
    naming it would do to a node that imported it), and one that raises at import."""
    marker = tmp_path / "imported"
    name = f"planted_step_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).touch()\n"
        "class Step:\n    def process_item(self, item):\n        return item\n"
    )
    (tmp_path / f"{name}_broken.py").write_text("raise RuntimeError('half-deployed module')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name, marker


def test_a_pipeline_step_the_node_does_not_list_is_an_error_and_is_never_imported(planted_module, redis_url, r):
    name, marker = planted_module
    doc = {**doc_of("cars"), "pipelines": [f"{name}.Step"]}
    not_listed = (
        f"pipelines[0]: '{name}.Step' is not a pipeline step this node allows: list it in CRAWLPLUG_SITE_PIPELINES"
    )
    assert errors_of(doc)[0].startswith(not_listed)
    with pytest.raises(ConfigError, match="CRAWLPLUG_SITE_PIPELINES"):
        SiteStore(r).put(doc, pipelines=STEPS)
    # written into Redis around the validation, as anyone who can write to it can: the node refuses it
    r.hset("crawlplug:sites", mapping={"cars": json.dumps({"doc": doc, "version": "planted"}), "cars#v": "planted"})
    spider = spider_for(redis_url)
    spider.store = SiteStore(r)
    with pytest.raises(ConfigError, match="is not a pipeline step this node allows"):
        spider.load("cars")
    assert not marker.exists() and name not in sys.modules, "the unlisted module was imported"
    # listed, it is imported and runs
    assert validate(doc, pipelines=[f"{name}.Step"]).pipelines == [f"{name}.Step"]
    assert marker.exists()


def test_any_exception_a_listed_step_raises_at_import_is_an_error_of_the_definition(planted_module):
    name, _ = planted_module
    doc = {**doc_of("cars"), "pipelines": [f"{name}_broken.Step"]}
    assert errors_of(doc, pipelines=doc["pipelines"]) == [
        f"pipelines[0]: cannot import '{name}_broken.Step': RuntimeError: half-deployed module"
    ]


def test_the_site_pipeline_loads_no_step_its_settings_do_not_list(redis_url):
    pipeline = SitePipeline.from_crawler(spider_for(redis_url, CRAWLPLUG_SITE_PIPELINES=[]).crawler)
    with pytest.raises(ConfigError, match="is not listed in CRAWLPLUG_SITE_PIPELINES; not loaded"):
        pipeline._step("tests.test_sites_def.Upper")
    assert pipeline.steps == {}
