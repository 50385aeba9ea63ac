"""End to end: every page of the dashboard in headless Chromium, around a real crawl of a site
spider (two nodes of `scrapy crawl site -a site=shop` on the demo shop), with a screenshot of
each for the docs (tests/artifacts/dashboard-<page>.png; CRAWLPLUG_UPDATE_SCREENSHOT=1 also
replaces docs/dashboard-<page>.png).

The Nodes page is read while the crawl runs, the Domains page while it is paused; then the Overview's charts
(uPlot) over several ranges and a zoom, the Report, the Sites page with a definition tried
on a live page (one whose required field is missing), the Errors and the Dead letters.
"""

from __future__ import annotations

import json

from click.testing import CliRunner

from crawlplug.cli import main

from .support.browser import browser, fresh, number, screenshot, severe_logs, skip_without_chromium, table, until
from .support.dashboardproc import start_dashboard, wait_for
from .support.nodes import ROOT

skip_without_chromium()

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

TOKEN = "e2e-pages-token-0123456789"
__all__ = ["browser"]  # the fixture, imported for the tests here
SETTINGS = {
    "CRAWLPLUG_IDLE_CLOSE": 1,
    "CRAWLPLUG_HEARTBEAT": 0.5,
    "CRAWLPLUG_LEASE_TIMEOUT": 5,
    "CRAWLPLUG_STATS_INTERVAL": 0.5,
    "CONCURRENT_REQUESTS": 4,
    "CRAWLPLUG_QUEUE_CLASS": "crawlplug.queues.DomainQueue",
}
#: a definition of the shop whose required "sku" is looked for where it is not
MISSING_SKU = """
name: shoptry
start_urls: [/category/1/]
steps:
  - name: list
    links: [{region: {css: ul.products}, match: {prefix: /item/}, to: item}]
  - name: item
fields:
  name: {css: "h1.name::text", required: true}
  sku:  {css: "span.no-such-class::text", required: true}
"""


def cli(redis_url: str, *args: str):
    res = CliRunner().invoke(main, ["--redis-url", redis_url, *args], env={"REDIS_URL": None, "CRAWLPLUG_CRAWL": None})
    assert res.exit_code == 0, res.output
    return res


def tab(driver, name: str) -> None:
    driver.find_element(By.CSS_SELECTOR, f'nav a[href="#{name}"]').click()
    until(driver, lambda d: d.find_element(By.ID, name).is_displayed(), 5, f"the {name} page")
    fresh(driver)


def chart(driver, chart_id: str) -> dict[str, str]:
    el = driver.find_element(By.ID, chart_id)
    return {name: el.get_attribute(f"data-{name}") or "" for name in ("step", "points", "since", "until")}


def test_every_page_of_the_dashboard_in_chromium(browser, crawl, make_shop, redis_url, r, tmp_path):
    shop = make_shop(items=240, delay=0.2)  # about 7 s of pages: the Nodes page sees the nodes crawl
    pages = len(shop.shop.paths() - {"/"})  # the site spider starts at the category pages: not the home page
    cli(redis_url, "sites", "put", str(ROOT / "spiders" / "sites" / "shop.yaml"))
    missing = [f"{shop.url}/category/1/missing-{i}/" for i in range(2)]  # two 404s, seen on the Errors page
    cli(redis_url, "push", "--crawl", "site-shop", *missing)
    dash = start_dashboard(redis_url, "site-shop", tmp_path, token=TOKEN)
    try:
        nodes = [
            crawl("site", args={"site": "shop", "base_url": shop.url}, settings={"REDIS_URL": redis_url, **SETTINGS})
            for _ in range(2)
        ]
        browser.get(dash.url + "/#nodes")
        field = browser.find_element(By.ID, "token")
        field.send_keys(TOKEN)
        browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", field)

        # -- while it runs: Nodes, Domains ------------------------------------------------
        rows = until(
            browser,
            lambda d: (t := table(d, "nodes-table")) and len(t) == 2 and all(x[-1] == "live" for x in t) and t,
            30,
            "two live nodes on the Nodes page",
        )
        assert {int(x[2]) for x in rows} == {n.proc.pid for n in nodes}
        screenshot(browser, "dashboard-nodes")
        # paused, the queue stays as it is while the Domains page is read
        browser.find_element(By.ID, "pause").click()
        until(browser, lambda d: d.find_element(By.ID, "state").text == "paused", 5, "the crawl paused")
        tab(browser, "domains")
        queued = until(
            browser,
            lambda d: [x for x in table(d, "domains-table") if x[0] == "127.0.0.1"],
            15,
            "the shop's host in the per-domain queue",
        )
        assert int(queued[0][1].replace(",", "")) > 0, queued
        screenshot(browser, "dashboard-domains")
        browser.find_element(By.ID, "resume").click()
        until(browser, lambda d: d.find_element(By.ID, "state").text == "running", 5, "the crawl resumed")
        for node in nodes:
            assert node.wait(120) == 0, node.text()[-3000:]
        assert sum(shop.hits.values()) == pages + len(missing)

        # -- Overview: the charts over ranges, a run, a zoom ---------------------------------
        tab(browser, "overview")
        until(browser, lambda d: number(d, "#n-done") == pages + len(missing), 10, "the final count")
        until(browser, lambda d: chart(d, "chart-done")["points"] not in ("", "0"), 15, "the charts")
        assert chart(browser, "chart-done")["step"] == "10s" and chart(browser, "chart-items")["step"] == "minute"
        for chart_id in ("chart-done", "chart-queue", "chart-items", "chart-dead"):
            assert browser.find_elements(By.CSS_SELECTOR, f"#{chart_id} canvas"), f"uPlot drew {chart_id}"
        text = browser.find_element(By.ID, "range-text").text
        assert text.startswith("last 1h, per 10 s: ") and f"{pages + len(missing):,} pages" in text, text
        browser.find_element(By.CSS_SELECTOR, '.range-btn[data-last="15m"]').click()
        until(
            browser, lambda d: d.find_element(By.ID, "range-text").text.startswith("last 15m, per 10 s"), 10, "15 min"
        )

        browser.find_element(By.CSS_SELECTOR, '.range-btn[data-last="24h"]').click()
        until(browser, lambda d: chart(d, "chart-done")["step"] == "minute", 10, "minute records over 24 h")
        until(browser, lambda d: d.find_element(By.ID, "range-text").text.startswith("last 24h, per minute"), 5, "24 h")
        assert "240 items" in browser.find_element(By.ID, "range-text").text
        until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '#run-select option[value="1"]'), 15, "run 1 listed")
        Select(browser.find_element(By.ID, "run-select")).select_by_value("1")
        until(
            browser, lambda d: d.find_element(By.ID, "range-text").text.startswith("run 1, per minute: "), 10, "run 1"
        )
        # a drag across the pages/min chart zooms in: asked again for that range, at 10 s
        browser.find_element(By.CSS_SELECTOR, '.range-btn[data-last="1h"]').click()
        until(browser, lambda d: chart(d, "chart-done")["step"] == "10s", 10, "back to the last hour")
        before = chart(browser, "chart-done")
        over = browser.find_element(By.CSS_SELECTOR, "#chart-done .u-over")
        width = over.size["width"]
        ActionChains(browser).move_to_element_with_offset(over, int(width * 0.1), 10).click_and_hold().move_by_offset(
            int(width * 0.3), 0
        ).release().perform()
        zoomed = until(browser, lambda d: (c := chart(d, "chart-done"))["since"] != before["since"] and c, 10, "a zoom")
        assert int(before["since"]) < int(zoomed["since"]) < int(zoomed["until"]) < int(before["until"])
        assert browser.find_element(By.ID, "zoom-out").is_displayed()
        browser.find_element(By.ID, "zoom-out").click()
        until(browser, lambda d: not d.find_element(By.ID, "zoom-out").is_displayed(), 5, "the zoom undone")
        # the picture: zoomed (as a drag does) onto the run's few seconds and a minute around them
        run = dash.http.get("/api/runs").json()["runs"][0]
        browser.execute_script(
            "Charts.zoomTo(arguments[0], arguments[1])", run["started"] - 40_000, run["ended"] + 40_000
        )
        until(browser, lambda d: chart(d, "chart-queue")["since"] == str(run["started"] - 40_000), 10, "the zoom")
        screenshot(browser, "dashboard-overview")

        # -- Report: node x domain -------------------------------------------------------------
        tab(browser, "report")
        rows = until(browser, lambda d: (t := table(d, "report-domains")) and len(t) == 3 and t, 10, "the report")
        assert [x[0] for x in rows][-1] == "all nodes" and all(x[1] == "127.0.0.1" for x in rows)
        total = rows[-1]
        assert int(total[2].replace(",", "")) == pages + len(missing) and total[3] == "240", total
        assert total[4] == "2" and "http/404 2" in total[7], "the two pushed 404s"
        api = dash.http.get("/api/report").json()
        assert sum(x["pages"] for x in api["domains"] if x["node"] != "all nodes") == pages + len(missing)
        screenshot(browser, "dashboard-report")

        # -- Sites: node x site, per field, and a definition tried on a live page -------------------
        tab(browser, "sites")
        sites = until(browser, lambda d: (t := table(d, "sites-table")) and len(t) == 3 and t, 10, "the sites table")
        assert sites[-1][:4] == ["all nodes", "shop", str(pages), "240"], "the pushed 404s are no page of a step"
        fields = {(x[0], x[2]): x for x in table(browser, "fields-report")}
        assert fields["all nodes", "sku"][3:] == ["240", "0", "0", "0"]
        assert fields["all nodes", "category"][3] == "240"
        form = browser.find_element(By.ID, "try-form")
        form.find_element(By.NAME, "url").send_keys("/item/7/")
        form.find_element(By.NAME, "base_url").send_keys(shop.url)
        form.find_element(By.NAME, "definition").send_keys(MISSING_SKU)
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        state = until(
            browser,
            lambda d: (
                d.find_element(By.ID, "try-result").get_attribute("data-state") in ("done", "error")
                and d.find_element(By.ID, "try-result").get_attribute("data-state")
            ),
            40,
            "the trial's result",
        )
        assert state == "done", browser.find_element(By.ID, "try-result").text
        outcomes = {
            row.get_attribute("data-field"): row
            for row in browser.find_elements(By.CSS_SELECTOR, "#try-fields tr[data-field]")
        }
        assert outcomes["name"].get_attribute("data-outcome") == "filled"
        assert outcomes["sku"].get_attribute("data-outcome") == "missing"
        assert "missing: the selector matched nothing" in outcomes["sku"].text
        assert "item: INCOMPLETE, sku is null" in browser.find_element(By.ID, "try-verdict").text
        follows = browser.find_element(By.CSS_SELECTOR, '#try-result ul.try-links[data-step="list"]').text
        assert "rule 1 (region css ul.products, prefix /item/) → step item: 0 links" in follows, follows
        screenshot(browser, "dashboard-sites")
        assert not r.keys("*shoptry*"), "the trial stored nothing"

        # -- Errors, Dead letters -------------------------------------------------------------------
        tab(browser, "errors")
        errors = until(browser, lambda d: [x for x in table(d, "errors-table") if x[0] == "http/404"], 10, "the 404s")
        assert errors[0][1] == "2" and missing[0] in errors[0][2]
        screenshot(browser, "dashboard-errors")
        tab(browser, "dead")
        assert browser.find_element(By.ID, "dead-total").text == "0 dead letters, newest last"
        screenshot(browser, "dashboard-dead")

        logged = severe_logs(browser)
        assert not logged, logged
        assert json.loads(dash.http.get("/api/runs").text)["runs"][0]["pages"] == pages + len(missing)
    finally:
        dash.stop()
    wait_for(lambda: dash.proc.poll() is not None, 10, "the dashboard to stop")
