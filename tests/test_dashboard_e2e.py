"""End to end: the dashboard page in headless Chromium during a real two-node crawl.

Chromium, chromium-driver and selenium as tests/support/browser.py says. The
screenshot is kept as tests/artifacts/dashboard.png; with
CRAWLPLUG_UPDATE_SCREENSHOT=1 it also replaces docs/dashboard.png, the docs' picture.
Every other page is in tests/test_dashboard_pages.py.
"""

from __future__ import annotations

import time

from .support.browser import browser, number, refreshed, screenshot, severe_logs, skip_without_chromium, table, until
from .support.dashboardproc import CRAWL_SETTINGS, SHOP_DELAY, SHOP_ITEMS, start_dashboard
from .support.nodes import start_joined

skip_without_chromium()

from selenium.webdriver.common.by import By

TOKEN = "e2e-dashboard-token-0123456789"
__all__ = ["browser"]  # the fixture, imported for the tests here


def node_rows(driver) -> list[list[str]]:
    return table(driver, "nodes-table")


def test_dashboard_in_chromium_during_a_crawl(browser, crawl, make_shop, redis_url, tmp_path):
    shop = make_shop(items=SHOP_ITEMS, delay=SHOP_DELAY)
    dash = start_dashboard(redis_url, "shop", tmp_path, token=TOKEN)
    try:
        browser.get(dash.url + "/")
        until(browser, lambda d: refreshed(d) > 0, 10, "the first refresh")
        assert browser.find_element(By.ID, "crawl").text == "shop"
        assert browser.find_element(By.ID, "pause").is_enabled(), "a token is configured: actions on"

        settings = {"REDIS_URL": redis_url, **CRAWL_SETTINGS}
        nodes = start_joined(lambda: crawl(args={"base_url": shop.url}, settings=settings), shop, 2)

        # the numbers move
        first = until(browser, lambda d: number(d, "#n-done"), 30, "a first page done")
        moved = until(
            browser, lambda d: (number(d, "#n-done") or 0) > first and number(d, "#n-done"), 10, "done to increase"
        )
        assert browser.find_element(By.ID, "state").text == "running"
        until(browser, lambda d: number(d, "#n-nodes") == 2, 10, "2 live nodes")

        # pause with the token typed into the page
        field = browser.find_element(By.ID, "token")
        field.send_keys(TOKEN)
        browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", field)
        assert browser.execute_script("return sessionStorage.getItem('crawlplug-token')") == TOKEN
        browser.find_element(By.ID, "pause").click()
        paused_at = time.monotonic()
        until(browser, lambda d: d.find_element(By.ID, "state").text == "paused", 5, "the badge to say paused")
        assert "paused" in browser.find_element(By.ID, "state").get_attribute("class")

        # the Nodes tab: both nodes paused, holding no lease
        browser.find_element(By.CSS_SELECTOR, 'nav a[href="#nodes"]').click()
        assert browser.find_element(By.ID, "nodes").is_displayed()

        def both_paused(d) -> list | None:
            rows = node_rows(d)
            ok = len(rows) == 2 and all(row[-1] == "paused" and row[5] == "0" for row in rows)
            return rows if ok else None

        rows = until(browser, both_paused, 8, "both nodes paused with 0 leases on the Nodes tab")
        took = time.monotonic() - paused_at
        pids = {int(row[2]) for row in rows}
        assert pids == {node.proc.pid for node in nodes}

        # done stops moving (over 3 s, several refreshes)
        browser.find_element(By.CSS_SELECTOR, 'nav a[href="#overview"]').click()
        mark = refreshed(browser)
        until(browser, lambda d: refreshed(d) > mark, 5, "a refresh of the overview")
        frozen = number(browser, "#n-done")
        mark = refreshed(browser)
        time.sleep(3)
        assert refreshed(browser) > mark, "the page kept refreshing"
        assert number(browser, "#n-done") == frozen, "done stopped while paused"
        assert dash.http.get("/api/status").json()["done"] == frozen
        assert frozen < len(shop.shop.paths())

        # resume: it moves again
        browser.find_element(By.ID, "resume").click()
        until(browser, lambda d: d.find_element(By.ID, "state").text == "running", 5, "the badge to say running")
        resumed = until(
            browser,
            lambda d: (number(d, "#n-done") or 0) > frozen and number(d, "#n-done"),
            10,
            "done to increase after resume",
        )

        # a screenshot of the running crawl, with its charts drawn by uPlot, over the last 15 min
        browser.find_element(By.CSS_SELECTOR, '.range-btn[data-last="15m"]').click()
        until(
            browser,
            lambda d: int(d.find_element(By.ID, "chart-done").get_attribute("data-points") or 0) > 0,
            15,
            "the pages/min chart to have points",
        )
        assert browser.find_elements(By.CSS_SELECTOR, "#chart-done canvas"), "uPlot drew the chart"
        assert browser.find_element(By.ID, "chart-done").get_attribute("data-step") == "10s"
        time.sleep(2)
        shot = screenshot(browser, "dashboard")

        errors = severe_logs(browser)
        assert not errors, errors

        for node in nodes:
            assert node.wait(60) == 0, node.text()[-3000:]
        hits = shop.hits
        assert set(hits) == shop.shop.paths() and max(hits.values()) == 1, "every page fetched exactly once"
        until(browser, lambda d: number(d, "#n-done") == len(shop.shop.paths()), 10, "the final count on the page")
        print(
            f"\n[dashboard e2e] done {first} -> {moved}; paused: nodes idle after {took:.1f}s, "
            f"done frozen at {frozen}; resumed: {resumed}; finished at {len(hits)}; screenshot {shot}"
        )
    finally:
        dash.stop()
