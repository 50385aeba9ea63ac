"""End to end: a dashboard with no control process evaluates its crawl's alert rules
(it leads them), the alert reaches a real webhook receiver once, /api/alerts reports it,
and the Alerts page in headless Chromium shows the firing rule and the recent event
(a screenshot for the docs: tests/artifacts/dashboard-alerts.png; CRAWLPLUG_UPDATE_SCREENSHOT=1
also replaces docs/dashboard-alerts.png)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from crawlplug.alerts import rules as alerts
from crawlplug.alerts import store as stored
from crawlplug.crawl.registry import register
from crawlplug.frontier.keys import CrawlKeys

from .support.browser import browser, fresh, screenshot, severe_logs, skip_without_chromium, table, until
from .support.dashboardproc import start_dashboard, wait_for
from .support.webhook import WebhookReceiver

skip_without_chromium()

from selenium.webdriver.common.by import By

pytestmark = pytest.mark.e2e
__all__ = ["browser"]  # the fixture, imported for the test here
KEYS = CrawlKeys("shop")


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    hook = WebhookReceiver()
    yield hook
    hook.stop()


def test_the_dashboard_evaluates_alerts_and_shows_them(fresh_redis, receiver, browser, tmp_path):
    client = redis.Redis.from_url(fresh_redis.url)
    register(client, KEYS)
    stored.put(client, KEYS, alerts.make_rule("memory", "redis_memory_percent > 0 for 1s", [receiver.apprise_url()]))
    client.config_set("maxmemory", 1 << 30)  # a limit: used memory is above 0 % of it
    dash = start_dashboard(fresh_redis.url, "shop", tmp_path)
    try:
        wait_for(receiver.bodies, 20, "the dashboard's alert")
        time.sleep(2)  # more evaluations: still one notification
        [body] = receiver.bodies()
        assert "FIRING" in body["title"] and "crawl: shop" in body["message"]
        assert f"dashboard: http://127.0.0.1:{dash.port}/" in body["message"]
        got = dash.http.get("/api/alerts").json()
        assert [r["id"] for r in got["active"]] == ["memory"]
        assert [(e["rule"], e["event"], e["sent"]) for e in got["events"]] == [("memory", "fired", True)]
        browser.get(f"{dash.url}/#alerts")
        until(browser, lambda d: d.find_element(By.ID, "alerts").is_displayed(), 10, "the Alerts page")
        fresh(browser)
        assert browser.find_element(By.ID, "alerts-active").text == "firing: memory"
        cells = [cell for row in table(browser, "alert-events") for cell in row]
        assert cells[1:5] == ["memory", "fired", str(got["events"][0]["value"]), "sent"]
        assert "redis_memory_percent > 0 for 1s" in browser.find_element(By.ID, "alerts-table").text
        assert severe_logs(browser) == []
        screenshot(browser, "dashboard-alerts")
    finally:
        dash.stop()
        client.close()
