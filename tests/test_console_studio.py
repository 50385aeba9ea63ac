"""The site studio in headless Chromium: a site changes its markup mid-crawl and an operator
mends its definition in the console, without the CLI.

Real things only: a Redis, a shop on loopback whose item pages move their price from
``span.price`` to ``span.cost`` when told (tests/support/markup.py), a real `scrapy crawl
site` node, `crawlplug console` and `crawlplug control` (it evaluates the alert rules) as
processes, a webhook receiver. The price's windowed null rate rises on the site's page and a
``null_rate(shop.price, 10m)`` rule fires to the webhook; the site editor's first edit is
refused at its line, the fixed selector tried on the URLs the crawl fetched last finds every
price, Apply stores version 2, which the node picks up; the pages parsed under version 2
count no null price; a roll back puts version 1 in force again.

Screenshots go to tests/artifacts/console-site-*.png (and docs/ with
CRAWLPLUG_UPDATE_SCREENSHOT=1: `make screenshots`).
"""

from __future__ import annotations

import json

import pytest
import yaml

from crawlplug.access import users
from crawlplug.demo.shop import ShopServer
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.sites.store import SiteStore
from crawlplug.stats import crawl_stats, node_stats

from .support.browser import browser, screenshot, severe_logs, skip_without_chromium, table
from .support.control import ControlProcess
from .support.markup import RedesignedShop
from .support.nodes import ROOT
from .support.scrapyd import wait_for
from .support.webhook import WebhookReceiver
from .test_console_pages import click, fill, log_in, shown, start_console, until

skip_without_chromium()

from selenium.webdriver.common.by import By

pytestmark = pytest.mark.e2e
__all__ = ["browser"]  # the fixture, imported for the tests here

KEYS = CrawlKeys("site-shop")
STEPS = ("spiders.sitesteps.AddSite",)
NODE_SETTINGS: dict[str, object] = {
    "CRAWLPLUG_IDLE_CLOSE": 1,
    "CRAWLPLUG_HEARTBEAT": 0.5,
    "CRAWLPLUG_LEASE_TIMEOUT": 30,
    "CRAWLPLUG_STATS_INTERVAL": 0.3,
    "CRAWLPLUG_SITES_REFRESH": 0.5,
    "CONCURRENT_REQUESTS": 2,
}


def set_text(driver, element_id: str, text: str) -> None:
    """What typing the whole text does to an Alpine x-model (one input event)."""
    driver.execute_script(
        "const el = document.getElementById(arguments[0]); el.value = arguments[1];"
        "el.dispatchEvent(new Event('input', {bubbles: true}));",
        element_id,
        text,
    )


def test_an_operator_mends_a_broken_site_in_the_console(browser, crawl, redis_url, r, tmp_path):
    shop = RedesignedShop(items=60, categories=3, held_after=20)
    store = SiteStore(r)
    doc = yaml.safe_load((ROOT / "spiders" / "sites" / "shop.yaml").read_text())
    v1 = store.put(doc, "spiders/sites/shop.yaml", by="test", pipelines=STEPS).version
    editor = users.add(r, "sara", "site-editor", by="test")
    hook = WebhookReceiver()
    console, url = start_console(redis_url, tmp_path / "console.log")
    control = ControlProcess(redis_url, tmp_path / "control.log")
    server = ShopServer(shop).start()
    try:
        node = crawl(
            "site", args={"site": "shop", "base_url": server.url}, settings={"REDIS_URL": redis_url, **NODE_SETTINGS}
        )
        wait_for(lambda: crawl_stats(r, KEYS).get("site/shop/items/ok") == 20, 60, "20 items with their price")

        # -- an alert rule on the price's windowed null rate, checked as typed
        log_in(browser, url, editor)
        browser.get(url + "/console/#/crawl/site-shop")
        until(browser, lambda d: d.find_element(By.ID, "crawl-page").is_displayed(), 10, "the crawl's page")
        fill(browser, "alert-name", "price")
        fill(browser, "alert-when", "null_rate(shop.price, 10m) > 0.3")
        until(browser, lambda d: shown(d, "alert-check") == "reads well", 10, "the windowed rule accepted")
        fill(browser, "alert-notify", hook.apprise_url("price"))
        click(browser, "alert-submit")
        until(browser, lambda d: any(row[0] == "price" for row in table(d, "alerts-table")), 10, "the rule")

        # -- the site changes its markup: 15 items without a price
        shop.redesigned.set()
        shop.release(35)
        wait_for(lambda: crawl_stats(r, KEYS).get("site/shop/items/incomplete") == 15, 60, "15 items without a price")

        browser.get(url + "/console/#/site/shop")
        until(browser, lambda d: shown(d, "site-in-force").startswith("v1 in force"), 10, "the site's page")
        until(browser, lambda d: shown(d, "site-null-rate") == "42.9 %", 20, "15 of 35 null in the window")
        assert f"v1 ({v1}) 35 20 15 20 15 0" in shown(browser, "site-versions-outcomes")
        wait_for(lambda: any("price FIRING" in str(body) for body in hook.bodies()), 30, "the rule's notification")
        assert any("null_rate(shop.price, 10m) > 0.3" in str(body) for body in hook.bodies())
        screenshot(browser, "console-site-broken")

        # -- an edit with a mistake is refused at its line; the fix reads well
        text = browser.find_element(By.ID, "site-text").get_attribute("value")
        assert '"css": "span.price::text"' in text
        wrong = text.replace('"type": "float"', '"type": "flaot"')
        set_text(browser, "site-text", wrong)
        line = next(i for i, row in enumerate(wrong.splitlines(), 1) if '"flaot"' in row)
        until(browser, lambda d: f"line {line}: " in shown(d, "site-errors"), 10, "the mistake at its line")
        assert not browser.find_element(By.ID, "site-apply").is_enabled()
        set_text(browser, "site-text", text.replace('"css": "span.price::text"', '"css": "span.cost::text"'))
        until(browser, lambda d: shown(d, "site-check") == "valid", 10, "the fix checked")

        # -- tried on the URLs the crawl fetched last: every price found again
        click(browser, "site-try-recent")
        until(browser, lambda d: "5 item pages" in shown(d, "site-trial-summary"), 60, "the trial of 5 recent URLs")
        summary = shown(browser, "site-trial-summary")
        assert "price: filled 5" in summary and "price: missing" not in summary, summary

        # -- applied: version 2, which the running node picks up
        click(browser, "site-apply")
        until(browser, lambda d: "stored as v2" in shown(d, "flash"), 10, "version 2 stored")
        v2 = store.version("shop")
        assert v2 != v1
        wait_for(lambda: [s.get(f"site/shop/version/{v2}") for s in node_stats(r, KEYS).values()] == [1], 30, "v2")
        shop.release(None)
        assert node.wait(90) == 0, node.text()[-3000:]

        # -- the outcomes per version: no null price among the pages parsed with version 2
        def row_of(d, digest):
            return next((row for row in table(d, "site-versions-outcomes") if digest in row[0]), None)

        until(browser, lambda d: (row_of(d, v2) or ["", ""])[1] == "25", 20, "25 item pages under v2")
        assert row_of(browser, v2)[4:6] == ["25", "0"], row_of(browser, v2)  # price filled 25, null 0
        assert row_of(browser, v1)[4:6] == ["20", "15"], row_of(browser, v1)
        stats = crawl_stats(r, KEYS)
        assert stats[f"site/shop/v/{v2}/field/price/filled"] == 25
        assert f"site/shop/v/{v2}/field/price/missing" not in stats
        marks = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#site-chart text")]
        assert "v2" in marks, marks  # the moment version 2 was applied, on the site's chart
        screenshot(browser, "console-site-fixed")

        # -- the history says who changed what; a roll back puts version 1 in force again
        browser.find_element(By.CSS_SELECTOR, "#site-versions tr[data-n='2'] .diff").click()
        until(browser, lambda d: "span.cost" in shown(d, "site-diff"), 10, "version 2's diff")
        assert "-" in shown(browser, "site-diff") and "span.price" in shown(browser, "site-diff")
        versions = table(browser, "site-versions")
        assert "sara" in versions[0][2] and "test" in versions[-1][2], versions
        browser.find_element(By.CSS_SELECTOR, "#site-versions tr[data-n='1'] .rollback").click()
        until(browser, lambda d: "v1 is in force again, as v3" in shown(d, "flash"), 10, "the roll back")
        assert store.version("shop") == v1
        until(browser, lambda d: shown(d, "site-in-force").startswith("v3 in force"), 10, "v3 shown in force")
        screenshot(browser, "console-site-versions")
        audit = [json.loads(e[1][b"e"]) if b"e" in e[1] else e[1] for e in r.xrange("crawlplug:audit")]
        assert any("sites.rollback" in str(e) for e in audit) and any("sites.put" in str(e) for e in audit)
        assert not [e for e in severe_logs(browser) if "/api/v1/" not in e["message"]], "no script error"
    finally:
        server.stop()
        control.stop()
        console.terminate()
        console.wait(10)
        hook.stop()
