"""End to end: the dashboard page in headless Chromium during a real two-node crawl.

Needs Debian's chromium and chromium-driver (``apt-get install chromium
chromium-driver``; .ci/run installs them) and selenium (test extra). Selenium
is given the driver's path, so it never tries to download one. The screenshot
is kept as tests/artifacts/dashboard.png; with CRAWLPLUG_UPDATE_SCREENSHOT=1 it
also replaces docs/dashboard.png, the docs' picture (a test run never
changes the repository otherwise).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from .support.dashboardproc import CRAWL_SETTINGS, SHOP_DELAY, SHOP_ITEMS, start_dashboard
from .support.nodes import ROOT

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
TOKEN = "e2e-dashboard-token-0123456789"
ARTIFACTS = ROOT / "tests" / "artifacts"

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
if not CHROMIUM.exists() or not CHROMEDRIVER.exists():
    pytest.skip(f"headless Chromium is not installed ({CHROMIUM} and {CHROMEDRIVER} are needed: "
                "apt-get install chromium chromium-driver)", allow_module_level=True)  # fmt: skip

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait


@pytest.fixture
def browser(tmp_path: Path):
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000",
                f"--user-data-dir={tmp_path / 'chromium-profile'}"):  # fmt: skip
        options.add_argument(arg)
    options.binary_location = str(CHROMIUM)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def number(driver, selector: str) -> int | None:
    """The integer shown in ``selector`` ("1,234" -> 1234; "-" -> None)."""
    digits = re.sub(r"\D", "", driver.find_element(By.CSS_SELECTOR, selector).text)
    return int(digits) if digits else None


def refreshed(driver) -> int:
    return int(driver.execute_script("return document.body.dataset.refreshed || '0'"))


def until(driver, check, timeout: float, what: str):
    return WebDriverWait(driver, timeout, poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,)
                         ).until(lambda d: check(d), message=f"waiting {timeout}s for {what}")  # fmt: skip


def node_rows(driver) -> list[list[str]]:
    rows = driver.find_elements(By.CSS_SELECTOR, "#nodes-table tbody tr")
    return [[td.text for td in row.find_elements(By.TAG_NAME, "td")] for row in rows]


def test_dashboard_in_chromium_during_a_crawl(browser, crawl, make_shop, redis_url, tmp_path):
    shop = make_shop(items=SHOP_ITEMS, delay=SHOP_DELAY)
    dash = start_dashboard(redis_url, "shop", tmp_path, token=TOKEN)
    try:
        browser.get(dash.url + "/")
        until(browser, lambda d: refreshed(d) > 0, 10, "the first refresh")
        assert browser.find_element(By.ID, "crawl").text == "shop"
        assert browser.find_element(By.ID, "pause").is_enabled(), "a token is configured: actions on"

        settings = {"REDIS_URL": redis_url, **CRAWL_SETTINGS}
        nodes = [crawl(args={"base_url": shop.url}, settings=settings) for _ in range(2)]

        # the numbers move
        first = until(browser, lambda d: number(d, "#n-done"), 30, "a first page done")
        moved = until(browser, lambda d: (number(d, "#n-done") or 0) > first and number(d, "#n-done"), 10,
                      "done to increase")  # fmt: skip
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
        resumed = until(browser, lambda d: (number(d, "#n-done") or 0) > frozen and number(d, "#n-done"), 10,
                        "done to increase after resume")  # fmt: skip

        # a screenshot of the running crawl, with its charts drawn
        time.sleep(2)
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "dashboard.png"
        assert browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        if os.environ.get("CRAWLPLUG_UPDATE_SCREENSHOT") == "1":
            shutil.copyfile(shot, ROOT / "docs" / "dashboard.png")

        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors

        for node in nodes:
            assert node.wait(60) == 0, node.text()[-3000:]
        hits = shop.hits
        assert set(hits) == shop.shop.paths() and max(hits.values()) == 1, "every page fetched exactly once"
        until(browser, lambda d: number(d, "#n-done") == len(shop.shop.paths()), 10, "the final count on the page")
        print(f"\n[dashboard e2e] done {first} -> {moved}; paused: nodes idle after {took:.1f}s, "
              f"done frozen at {frozen}; resumed: {resumed}; finished at {len(hits)}; screenshot {shot}")
    finally:
        dash.stop()
