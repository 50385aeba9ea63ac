"""Site spiders in real `scrapy crawl site` processes against the demo sites on loopback.

a) the demo shop crawled from its definition file alone: every item equals the ground truth;
b) the car catalogue (three steps) from its definition stored in Redis, two nodes: the same;
c) a broken selector shows up as per-field error counts in the crawl-wide stats, no crash;
d) a definition changed in Redis mid-crawl changes the extraction on every node;
e) no site named, or a missing or broken definition: one clear error line and a non-zero exit;
f) a region between two strings (sub_prefix/sub_suffix): only the links and values inside it.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import yaml

from crawlplug.demo.cars import DemoCars
from crawlplug.demo.cars import serve as serve_cars
from crawlplug.demo.shop import ShopServer
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.probes import errorsamples
from crawlplug.sites.store import SiteStore
from crawlplug.stats import crawl_stats, node_stats

from .support.dashboardproc import wait_for
from .support.nodes import ROOT, start_joined

SITES = ROOT / "spiders" / "sites"
#: the demo project's CRAWLPLUG_SITE_PIPELINES (settings/__init__.py)
STEPS = ("spiders.sitesteps.AddSite",)
SETTINGS: dict[str, object] = {
    "CRAWLPLUG_IDLE_CLOSE": 1,
    "CRAWLPLUG_HEARTBEAT": 0.5,
    "CRAWLPLUG_LEASE_TIMEOUT": 5,
    "CRAWLPLUG_STATS_INTERVAL": 0.3,
    "CONCURRENT_REQUESTS": 4,
}


def items_of(nodes) -> list[dict[str, Any]]:
    return [json.loads(line) for node in nodes for line in node.item_lines()]


def finished(nodes) -> None:
    for node in nodes:
        assert node.wait(90) == 0, node.text()[-3000:]
        text = node.text()
        assert "'finish_reason': 'finished'" in text, text[-3000:]
        assert "Traceback" not in text, text[-3000:]


def same_as_truth(items: list[dict[str, Any]], base: str, truth: dict[str, dict[str, Any]], **renamed: str) -> None:
    assert sorted(item["url"] for item in items) == sorted(base + path for path in truth), "every item once"
    for item in items:
        expected = {renamed.get(k, k): v for k, v in truth[item["url"][len(base) :]].items() if k != "url_path"}
        assert {k: item[k] for k in expected} == expected, item


def cars_doc() -> dict[str, Any]:
    return yaml.safe_load((SITES / "cars.yaml").read_text())


# -- a) and b): each demo site from its definition alone ---------------------------------------


def test_shop_from_its_definition_file(crawl, shop, redis_url, r):
    node = crawl("site", args={"site": "shop", "base_url": shop.url}, settings={"REDIS_URL": redis_url, **SETTINGS})
    finished([node])
    assert f"from {SITES / 'shop.yaml'}: 10 start URLs" in node.text(), "read from the file (nothing in Redis)"
    site = shop.shop
    same_as_truth(items_of([node]), shop.url, site.truth())
    hits = shop.hits
    assert set(hits) == site.list_paths() | site.item_paths(), "list and item pages, nothing else (no home page)"
    assert all(n == 1 for n in hits.values()), {p: n for p, n in hits.items() if n > 1}
    stats = crawl_stats(r, CrawlKeys("site-shop"))
    assert stats["site/shop/items/ok"] == len(site.item_paths())
    assert stats["site/shop/step/list/pages"] == len(site.list_paths())
    assert stats["site/shop/step/item/pages"] == len(site.item_paths())
    assert "site/shop/items/incomplete" not in stats


def test_cars_from_its_definition_in_redis_on_two_nodes(crawl, redis_url, r):
    # every page 20 ms late: the 153 pages outlast a node's poll, so both nodes extract items
    cars = DemoCars(delay=0.02)
    with serve_cars(cars) as server:
        base = server.url
        SiteStore(r).put(cars_doc(), "cars.yaml", pipelines=STEPS)
        # a loaded machine starts one node seconds after the other: the first must not crawl it all alone
        nodes = start_joined(
            lambda: crawl(
                "site", args={"site": "cars", "base_url": base}, settings={"REDIS_URL": redis_url, **SETTINGS}
            ),
            server,
            2,
        )
        finished(nodes)
        hits = server.hits
    items = items_of(nodes)
    same_as_truth(items, base, cars.truth())
    assert all(item["site"] == "cars" for item in items), "the definition's pipeline step ran"
    assert all(node.item_lines() for node in nodes), "both nodes extracted items"
    assert set(hits) == cars.crawl_paths(), "brand -> series -> model, no nav, footer, popular or similar links"
    assert all(n == 1 for n in hits.values()), {p: n for p, n in hits.items() if n > 1}
    keys = CrawlKeys("site-cars")
    stats = crawl_stats(r, keys)
    assert stats["site/cars/items/ok"] == cars.models
    assert stats["site/cars/step/brand/pages"] == cars.brands
    assert stats["site/cars/step/model/pages"] == cars.models
    assert stats["site/cars/field/price/default"] == sum(1 for t in cars.truth().values() if t["price"] is None)
    version = SiteStore(r).version("cars")
    assert stats[f"site/cars/version/{version}"] == 2
    for node in nodes:
        assert f"site 'cars': definition {version} from Redis" in node.text()


# -- c) a broken selector: counted per field, crawl-wide; the crawl goes on --------------------


def test_broken_selectors_are_counted_per_field_not_a_crash(crawl, redis_url, r):
    cars = DemoCars(brands=4)
    doc = cars_doc()
    doc["fields"]["year"]["xpath"] = "//table[@class='spec']//tr[th='Yr']/td/text()"  # matches nothing
    doc["fields"]["seats"].pop("regex")  # "5 seats" is no int
    doc["fields"]["broken"] = {"xpath": "nosuchfunction()"}  # raises on every page
    doc["incomplete_items"] = "keep"
    SiteStore(r).put(doc, pipelines=STEPS)
    with serve_cars(cars) as server:
        base = server.url
        nodes = start_joined(
            lambda: crawl(
                "site", args={"site": "cars", "base_url": base}, settings={"REDIS_URL": redis_url, **SETTINGS}
            ),
            server,
            2,
        )
        finished(nodes)
    keys = CrawlKeys("site-cars")
    stats = crawl_stats(r, keys)
    per_node = node_stats(r, keys)
    models = cars.models
    assert stats["site/cars/step/model/pages"] == models
    assert stats["site/cars/field/year/missing"] == models
    assert stats["site/cars/items/incomplete"] == models
    assert stats["site/cars/field/seats/invalid"] == models
    assert stats["site/cars/errors/ValueError"] == models
    assert "site/cars/items/ok" not in stats
    assert sum(n.get("site/cars/field/year/missing", 0) for n in per_node.values()) == models
    items = items_of(nodes)
    assert len(items) == models and all(item["_errors"] == ["year is null"] for item in items)
    assert all(item["year"] is None and item["seats"] is None for item in items)
    samples = {e["kind"]: e for e in errorsamples.read(r, keys)}
    assert samples["site/cars/year is null"]["count"] == models
    assert samples["site/cars/year is null"]["samples"][0].startswith(base + "/model/")
    for node in nodes:  # logged once per node that met it, then only counted
        node_id = re.search(r"node (\S+) (?:joining|starting) run", node.text())
        assert node_id, node.text()[-2000:]
        met = per_node.get(node_id.group(1), {}).get("site/cars/field/year/missing", 0)
        # a node started late on a loaded machine may find the other has crawled everything
        assert node.text().count("year is null on") == (1 if met else 0), (met, node.text()[-3000:])
    assert any(n.get("site/cars/field/year/missing", 0) for n in per_node.values())


# -- d) a definition changed in Redis while the crawl runs -------------------------------------


class GatedCars(DemoCars):
    """Serves ``first`` model pages, then holds every request until ``gate`` is set."""

    def __init__(self, first: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.first = first
        self.served = 0
        self.gate = threading.Event()
        self.lock = threading.Lock()

    def render(self, path: str) -> tuple[int, bytes]:
        with self.lock:
            hold = self.served >= self.first
            if not hold and path.startswith("/model/"):
                self.served += 1
        if hold:
            self.gate.wait(60)
        return super().render(path)


def test_a_definition_changed_in_redis_mid_crawl_changes_every_node(crawl, redis_url, r):
    cars = GatedCars(first=20, brands=6)
    store = SiteStore(r)
    v1 = store.put(cars_doc(), pipelines=STEPS).version
    keys = CrawlKeys("site-cars")
    settings = {"REDIS_URL": redis_url, **SETTINGS, "CRAWLPLUG_SITES_REFRESH": 0.2, "CRAWLPLUG_LEASE_TIMEOUT": 20}
    try:
        with serve_cars(cars) as server:
            base = server.url
            nodes = [crawl("site", args={"site": "cars", "base_url": base}, settings=settings) for _ in range(2)]
            # the first 20 model pages are extracted with version 1; every later request is held
            wait_for(
                lambda: crawl_stats(r, keys).get("site/cars/items/ok") == cars.first,
                60,
                "the first model pages to be extracted",
            )
            # both nodes run version 1 before it changes (a node slow to start on a loaded
            # machine would otherwise load version 2 first, and have no change to report)
            wait_for(
                lambda: [s.get(f"site/cars/version/{v1}") for s in node_stats(r, keys).values()] == [1, 1],
                60,
                "both nodes to run version 1",
            )
            doc = cars_doc()
            doc["fields"]["title"] = doc["fields"].pop("name")  # version 2: "name" is now "title"
            v2 = store.put(doc, pipelines=STEPS).version
            wait_for(
                lambda: [s.get(f"site/cars/version/{v2}") for s in node_stats(r, keys).values()] == [1, 1],
                30,
                "both nodes to switch to version 2",
            )
            cars.gate.set()
            finished(nodes)
    finally:
        cars.gate.set()
    old = [item for item in items_of(nodes) if "name" in item]
    new = [item for item in items_of(nodes) if "title" in item]
    assert len(old) == cars.first and not any("title" in item for item in old)
    assert len(new) == cars.models - cars.first
    truth = cars.truth()
    same_as_truth(old, base, {p: t for p, t in truth.items() if base + p in {i["url"] for i in old}})
    same_as_truth(new, base, {p: t for p, t in truth.items() if base + p in {i["url"] for i in new}}, name="title")
    for node in nodes:
        lines = node.item_lines()
        assert any('"title"' in line for line in lines), "every node extracts with the new definition"
        assert f"site 'cars': definition changed in Redis, version {v1} -> {v2}" in node.text()
    stats = crawl_stats(r, keys)
    assert stats[f"site/cars/version/{v1}"] == 0 and stats[f"site/cars/version/{v2}"] == 2
    assert stats["site/cars/items/ok"] == cars.models


# -- e) no usable definition: one clear line, exit 1 -------------------------------------------


def test_a_missing_or_broken_definition_is_one_clear_error(crawl, redis_url, r):
    record = {
        "doc": {"name": "broken", "start_urls": ["http://127.0.0.1:9/"], "steps": [], "fields": {}},
        "version": "x",
        "source": "",
        "stored_at": 0,
    }
    r.hset("crawlplug:sites", mapping={"broken": json.dumps(record), "broken#v": "x"})  # written around `sites put`
    missing = crawl("site", args={"site": "nosuch"}, settings={"REDIS_URL": redis_url, **SETTINGS})
    broken = crawl("site", args={"site": "broken"}, settings={"REDIS_URL": redis_url, **SETTINGS})
    unnamed = crawl("site", settings={"REDIS_URL": redis_url, **SETTINGS})
    assert missing.wait(60) == 1 and broken.wait(60) == 1 and unnamed.wait(60) == 1
    assert "ERROR: site spider: which site? scrapy crawl site -a site=NAME" in unnamed.text()
    assert "Traceback" not in unnamed.text()
    text = missing.text()
    assert (
        "ERROR: site 'nosuch': no definition of site 'nosuch': not in Redis (crawlplug sites put FILE) nor in" in text
    )
    assert "'finish_reason': 'site_definition_error'" in text and "Traceback" not in text
    text = broken.text()
    assert "ERROR: site 'broken': invalid site definition 'broken' stored in Redis:" in text
    assert "  steps: List should have at least 1 item after validation, not 0" in text
    assert "  fields: Dictionary should have at least 1 item after validation, not 0" in text
    assert "Traceback" not in text


# -- f) a region between two strings ------------------------------------------------------------


def lamp(name: str, price: str, before: str = "<!-- product -->", after: str = "<!-- /product -->") -> str:
    return (
        f'<html><body><div class="promo">Today only <span class="price">1.00</span></div>'
        f'{before}<h1>{name}</h1><span class="price">{price}</span>{after}'
        f'<div class="related"><span class="price">2.00</span></div></body></html>'
    )


class LampSite:
    """A list page whose products are between two HTML comments, with links around them (a nav
    bar, a "popular" box), a second list page without the comments, and the lamps' pages."""

    delay = 0.0
    pages = {
        "/cat/list.html": """<html><head><base href="/shop/"><title>Lamps</title></head><body>
            <nav><a href="p/8">Our favourite</a></nav>
            <!-- products --><ul>
              <li><a href="p/1">Desk lamp</a></li>
              <li><a href="p/2">Floor lamp</a></li>
              <li><a href="/shop/p/3">Wall lamp</a></li>
            </ul><a class="next" href="/cat/list2.html">next</a><!-- /products -->
            <aside><a href="/shop/p/9">Popular</a></aside></body></html>""",
        "/cat/list2.html": '<html><body><ul><li><a href="/shop/p/7">Lamp shade</a></li></ul></body></html>',
        "/shop/p/1": lamp("Desk lamp", "10.50"),
        "/shop/p/2": lamp("Floor lamp", "20.00", before="", after=""),  # no region: no price
        # the first sub_suffix after the first sub_prefix: not the one before it
        "/shop/p/3": lamp(
            "Wall lamp", "30.25", before='<!-- /product --><span class="price">3.00</span><!-- product -->'
        ),
        **{f"/shop/p/{i}": lamp(f"Lamp {i}", "9.99") for i in (7, 8, 9)},
    }

    def render(self, path: str) -> tuple[int, bytes]:
        body = self.pages.get(path)
        return (200, body.encode()) if body is not None else (404, b"no such page")


def test_a_region_between_two_strings_keeps_links_and_values_inside_it(crawl, redis_url, r):
    with ShopServer(LampSite()) as server:  # type: ignore[arg-type] # any render()/delay object
        base = server.url
        doc = {
            "name": "lamps",
            "base_url": base,
            "start_urls": ["/cat/list.html"],
            "steps": [
                {
                    "name": "list",
                    "links": [
                        {
                            "region": {"sub_prefix": "<!-- products -->", "sub_suffix": "<!-- /products -->"},
                            "match": {"prefix": "/shop/p/"},
                            "to": "item",
                        },
                        {"region": {"css": "a.next"}, "to": "list"},
                    ],
                },
                {"name": "item"},
            ],
            "fields": {
                "name": {"css": "h1::text", "required": True},
                "price": {
                    "css": "span.price::text",
                    "sub_prefix": "<!-- product -->",
                    "sub_suffix": "<!-- /product -->",
                    "type": "float",
                },
            },
        }
        SiteStore(r).put(doc, "lamps.yaml")
        node = crawl("site", args={"site": "lamps"}, settings={"REDIS_URL": redis_url, **SETTINGS})
        finished([node])
        hits = server.hits
    assert set(hits) == {"/cat/list.html", "/cat/list2.html", "/shop/p/1", "/shop/p/2", "/shop/p/3"}, (
        "the products inside the comments (relative ones through the <base href>), not the nav bar, the popular "
        "box, nor the products of a list page without the comments"
    )
    assert all(n == 1 for n in hits.values()), hits
    items = sorted(items_of([node]), key=lambda item: item["url"])
    assert [(item["url"][len(base) :], item["name"], item["price"]) for item in items] == [
        ("/shop/p/1", "Desk lamp", 10.5),
        ("/shop/p/2", "Floor lamp", None),  # its page has prices, but none between the comments
        ("/shop/p/3", "Wall lamp", 30.25),
    ]
    stats = crawl_stats(r, CrawlKeys("site-lamps"))
    assert stats["site/lamps/field/price/filled"] == 2 and stats["site/lamps/field/price/default"] == 1
    assert stats["site/lamps/step/list/pages"] == 2 and stats["site/lamps/step/list/no_links"] == 1
