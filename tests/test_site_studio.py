"""The site studio's data, from a real `scrapy crawl site` against a shop on loopback that
changes its markup mid-crawl: the site's minutes (pages, items, field outcomes), the windowed
null rate alert rules read, outcomes per definition version, the recent URLs a trial fetches
again, and a trial of a fixed definition on them (tests/test_console_pages.py's site-studio
test drives the same loop through the browser)."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml
from scrapy.utils.test import get_crawler

from crawlplug.alerts.measures import WINDOWED
from crawlplug.demo.shop import ShopServer
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.store import redis_ms
from crawlplug.sites import minutes, outcomes
from crawlplug.sites.recent import recent_urls
from crawlplug.sites.store import SiteStore
from crawlplug.stats import crawl_stats, node_stats
from crawlplug.web import sites as site_pages

from .support.dashboardproc import wait_for
from .support.markup import RedesignedShop
from .support.nodes import ROOT

pytestmark = pytest.mark.e2e

STEPS = ("spiders.sitesteps.AddSite",)
SETTINGS: dict[str, object] = {
    "CRAWLPLUG_IDLE_CLOSE": 1,
    "CRAWLPLUG_HEARTBEAT": 0.5,
    "CRAWLPLUG_LEASE_TIMEOUT": 20,
    "CRAWLPLUG_STATS_INTERVAL": 0.3,
    "CRAWLPLUG_SITES_REFRESH": 0.3,
    "CONCURRENT_REQUESTS": 2,
}
KEYS = CrawlKeys("site-shop")


def shop_doc() -> dict:
    return yaml.safe_load((ROOT / "spiders" / "sites" / "shop.yaml").read_text())


def test_a_markup_change_shows_in_the_minutes_the_window_and_per_version_and_a_fix_tried_on_recent_urls(
    crawl, redis_url, r
):
    site = RedesignedShop(items=60, categories=3, held_after=20)
    store = SiteStore(r)
    v1 = store.put(shop_doc(), pipelines=STEPS).version
    with ShopServer(site) as server:
        node = crawl(
            "site", args={"site": "shop", "base_url": server.url}, settings={"REDIS_URL": redis_url, **SETTINGS}
        )
        wait_for(lambda: crawl_stats(r, KEYS).get("site/shop/items/ok") == 20, 60, "20 items with a price")
        site.redesigned.set()  # the price is in <span class="cost"> from now on
        site.release(35)
        wait_for(lambda: crawl_stats(r, KEYS).get("site/shop/items/incomplete") == 15, 60, "15 items without")
        now = redis_ms(r)
        # the window's rate: 15 null of 35 (the run's is the same here; the window forgets)
        rate = WINDOWED["null_rate"](r, KEYS, {"now_ms": now}, "shop.price", 600_000)
        assert rate == pytest.approx(15 / 35, abs=1e-4)
        later = WINDOWED["null_rate"](r, KEYS, {"now_ms": now + 13 * 60_000}, "shop.price", 600_000)
        assert "no item of site 'shop' counted for field 'price' in the window" in later

        # the URLs the crawl parsed last are kept for trials; a fixed definition finds the price on them
        wait_for(lambda: len(recent_urls(r, "shop")) >= 30, 30, "the node to send its recent URLs")
        recent = recent_urls(r, "shop", 5)
        assert all(u["crawl"] == "site-shop" and u["url"].startswith(server.url) for u in recent)
        fixed = shop_doc()
        fixed["fields"]["price"]["css"] = "span.cost::text"
        pages = [{"url": u["url"], "step": u["step"]} for u in recent_urls(r, "shop", 50) if u["step"] == "item"][:3]
        trials = {}
        for name, doc in (("v1", shop_doc()), ("fixed", fixed)):
            code, out = asyncio.run(site_pages.run_trial({"definition": doc, "origin": name, "pages": pages}))
            assert code == 200, out
            trials[name] = out["trials"]
        truth = site.truth()
        assert [t["item"]["price"] for t in trials["fixed"]] == [
            truth[p["url"][len(server.url) :]]["price"] for p in pages
        ]
        assert all(t["missing"] == ["price"] for t in trials["v1"]), trials["v1"]

        v2 = store.put(fixed, pipelines=STEPS).version
        wait_for(lambda: [s.get(f"site/shop/version/{v2}") for s in node_stats(r, KEYS).values()] == [1], 30, "v2")
        site.release(None)
        assert node.wait(90) == 0, node.text()[-3000:]

    stats = crawl_stats(r, KEYS)
    by = outcomes.per_version(stats, "shop")
    assert by[v1]["fields"]["price"].get("missing") == 15 and by[v1]["fields"]["price"]["filled"] == 20
    assert by[v2]["pages"] == 25 and by[v2]["fields"]["price"] == {"filled": 25}, by  # 0 null under v2
    assert by[v1]["pages"] + by[v2]["pages"] == stats["site/shop/step/item/pages"] == 60
    # the minutes add up to the run's stats
    now = redis_ms(r)
    got = minutes.series(r, KEYS, "shop", now - 30 * 60_000, now)
    assert sum(got.items_ok) == stats["site/shop/items/ok"] == 45
    assert sum(got.fields["price"]["missing"]) == 15 and sum(got.fields["price"]["filled"]) == 45
    assert sum(got.steps["item"]) == 60 and sum(got.steps["list"]) == stats["site/shop/step/list/pages"]
    assert json.loads(json.dumps(got.as_dict()))["null_rate"]["price"]  # serialisable, one rate a minute
    assert len(node.item_lines()) == 45  # incomplete items are dropped (the definition's default)


def test_hand_written_minutes_and_recent_urls_count_nothing_and_break_no_flush(r):
    """A writer of the minutes or of the recent URLs makes the studio show wrong numbers or
    try a URL of their choosing (http(s) only); no reader raises, no stats flush is refused."""
    from crawlplug.stats import RedisStatsCollector

    keys = CrawlKeys("planted")
    now = redis_ms(r)
    minute = now // 60_000
    r.set(keys.site_minute(minute), "not a hash")
    r.hset(keys.site_minute(minute - 1), mapping={"shop/field/price/missing": "many", "shop/field/price/filled": 3})
    stats = RedisStatsCollector(get_crawler(settings_dict={"STATS_DUMP": False}))
    stats.bind(r, keys, "node-a")
    stats.inc_value("site/shop/field/price/filled", 2)
    assert stats.flush(), "the flush is written whatever the minute's key holds"
    assert crawl_stats(r, keys)["site/shop/field/price/filled"] == 2
    got = minutes.series(r, keys, "shop", now - 120_000, now + 60_000)
    assert sum(got.fields["price"]["filled"]) in (3, 5)  # the planted 3, and 2 if the flush named the next minute
    assert sum(got.fields["price"]["missing"]) == 0
    assert minutes.null_rate(r, keys, "shop", "price", 600_000, now) == 0.0
    r.rpush(
        "crawlplug:sites:recent:shop",
        "not json",
        json.dumps({"url": "file:///etc/passwd", "step": "item"}),
        json.dumps({"url": "http://127.0.0.1:9/item/1/", "step": "item"}),
        json.dumps(["a", "list"]),
    )
    assert [u["url"] for u in recent_urls(r, "shop")] == ["http://127.0.0.1:9/item/1/"]
    r.delete("crawlplug:sites:recent:shop")
    r.set("crawlplug:sites:recent:shop", "a string")
    assert recent_urls(r, "shop") == []
