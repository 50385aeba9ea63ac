"""The console's pages in headless Chromium through one operator's day, without the CLI.

Real things only: a Redis, the demo shop on loopback (its access log is the judge of
pages fetched twice), two Scrapyd daemons on loopback that start the nodes, `crawlplug
console` and `crawlplug control` (it fires the schedules and evaluates the alert rules) as
processes, a webhook receiver. The operator logs in with a token, pushes start URLs,
starts the crawl on both daemons, watches pages rise, reads a node's log and its Scrapyd
job's log, sets a page limit and sees the run end `limit`, continues it, stops it, adds a
schedule that fires within the test and sees the run it began, adds an alert rule whose
notification reaches the webhook; then a viewer sees every action refused.

Screenshots of every page go to tests/artifacts/console-*.png (and docs/ with
CRAWLPLUG_UPDATE_SCREENSHOT=1: `make screenshots`).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest

from crawlplug.access import users
from crawlplug.crawl import runs
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.scrapyd import store as jobs

from .support.browser import browser, screenshot, severe_logs, skip_without_chromium, table
from .support.browser import until as wait_until
from .support.control import ControlProcess
from .support.nodes import ROOT
from .support.scrapyd import wait_for
from .support.servers import free_port
from .support.webhook import WebhookReceiver

skip_without_chromium()

from selenium.webdriver.common.by import By

pytestmark = pytest.mark.e2e
__all__ = ["browser"]  # the fixture, imported for the tests here

CRAWLPLUG = str(Path(sys.executable).with_name("crawlplug"))
KEYS = CrawlKeys("shop")
NODE_SETTINGS = "CRAWLPLUG_IDLE_CLOSE=1\nCRAWLPLUG_HEARTBEAT=0.5\nLOG_LEVEL=INFO"


def start_console(redis_url: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "CRAWLPLUG_CRAWL", "CRAWLPLUG_DASHBOARD_TOKEN")
    }
    proc = subprocess.Popen(
        [CRAWLPLUG, "--redis-url", redis_url, "console", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(log, "wb"),
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert proc.poll() is None, log.read_text()
        try:
            return httpx.get(url + "/console/", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    wait_for(ready, 20, "the console to answer")
    return proc, url


def until(driver, check, timeout: float, what: str):
    """browser.until, and on a timeout what the page said (its error and its last message)."""
    from selenium.common.exceptions import TimeoutException

    try:
        return wait_until(driver, check, timeout, what)
    except TimeoutException:
        said = driver.execute_script(
            "return [document.getElementById('error').innerText, document.getElementById('flash').innerText]"
        )
        raise AssertionError(f"waited {timeout}s for {what}; the page said: {said}") from None


def fill(driver, element_id: str, text: str) -> None:
    field = driver.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(text)


def click(driver, element_id: str) -> None:
    driver.find_element(By.ID, element_id).click()


def shown(driver, element_id: str) -> str:
    return driver.find_element(By.ID, element_id).text


def count(driver, element_id: str) -> int:
    digits = "".join(ch for ch in shown(driver, element_id) if ch.isdigit())
    return int(digits) if digits else 0


def log_in(driver, url: str, token: str) -> None:
    driver.get(url + "/console/#/")
    until(driver, lambda d: d.find_element(By.ID, "login-token").is_displayed(), 10, "the login form")
    fill(driver, "login-token", token)
    click(driver, "login")
    until(driver, lambda d: d.find_element(By.ID, "me").text, 10, "logged in")


def run_state(driver) -> str:
    return shown(driver, "run-state")


def test_an_operators_day_in_the_console(browser, make_scrapyd, make_shop, redis_url, r, tmp_path):
    shop = make_shop(items=400, delay=0.2)
    a, b = make_scrapyd(), make_scrapyd()
    hook = WebhookReceiver()
    operator = users.add(r, "olga", "operator", by="test")
    viewer = users.add(r, "victor", "viewer", by="test")
    console, url = start_console(redis_url, tmp_path / "console.log")
    control = ControlProcess(redis_url, tmp_path / "control.log")
    try:
        # -- log in as the operator; the crawl does not exist yet
        log_in(browser, url, operator)
        assert shown(browser, "me") == "olga (operator)"
        browser.get(url + "/console/#/crawl/shop")
        until(browser, lambda d: d.find_element(By.ID, "crawl-page").is_displayed(), 10, "the crawl's page")
        assert "no run yet" in run_state(browser)

        # -- push start URLs, one a line; a malformed one is skipped, said why
        entry = json.dumps({"url": f"{shop.url}/", "callback": "parse_list"})  # the demo spider's list pages
        fill(browser, "push-entries", f"{entry}\nnot a url")
        click(browser, "push-submit")
        until(browser, lambda d: "pushed 1" in shown(d, "push-result"), 10, "the push")
        assert "skipped entry 1" in shown(browser, "push-result")

        # -- start on two Scrapyd daemons; a refusal is a form error first
        fill(browser, "start-daemons", "http://127.0.0.1:1")
        click(browser, "start-submit")
        until(browser, lambda d: shown(d, "start-error"), 15, "the refusal of an unreachable daemon")
        fill(browser, "start-daemons", f"{a.url}\n{b.url}")
        fill(browser, "start-args", f"base_url={shop.url}")
        fill(browser, "start-settings", NODE_SETTINGS + "\nCONCURRENT_REQUESTS=1")
        click(browser, "start-submit")
        until(browser, lambda d: "started 2 nodes" in shown(d, "start-result"), 30, "2 nodes started")

        # -- watch pages rise
        until(browser, lambda d: "running" in run_state(d), 30, "run 1 running")
        first = until(browser, lambda d: count(d, "n-done"), 60, "a first page done")
        until(browser, lambda d: count(d, "n-done") > first, 30, "pages to rise")
        until(browser, lambda d: count(d, "n-nodes") == 2, 30, "2 live nodes")
        screenshot(browser, "console-crawl")

        # -- the nodes page: a node's log, and its Scrapyd job's log from the daemon
        browser.get(url + "/console/#/crawl/shop/nodes")
        until(browser, lambda d: len(table(d, "nodes-table")) == 2, 20, "both nodes listed")
        rows = table(browser, "nodes-table")
        assert all(" on http://127.0.0.1:" in row[3] for row in rows), rows  # each node's Scrapyd job
        browser.find_elements(By.CSS_SELECTOR, "#nodes-table .open-log")[0].click()
        until(browser, lambda d: "this node is Scrapyd job" in shown(d, "job-lines"), 20, "the job's log")
        assert "by level: " in shown(browser, "job-summary") and "INFO" in shown(browser, "job-summary")
        fill(browser, "job-search", "started for run")
        until(
            browser,
            lambda d: shown(d, "job-lines").count("\n") == 0 and "started for run 1" in shown(d, "job-lines"),
            10,
            "the search",
        )
        screenshot(browser, "console-nodes")

        # -- a page limit ends the run `limit`
        browser.get(url + "/console/#/crawl/shop")
        until(browser, lambda d: count(d, "n-done") > 0, 10, "the crawl's page")
        limit = count(browser, "n-done") + 15
        fill(browser, "limit-pages", str(limit))
        click(browser, "set-limits")
        until(browser, lambda d: f"pages {limit}" in shown(d, "limits-now"), 10, "the limit set")
        until(browser, lambda d: "limit" in run_state(d), 60, "run 1 to end by its limit")
        wait_for(lambda: not any(d.jobs()["running"] for d in (a, b)), 60, "the nodes to close")

        # -- continue it: the limit raised (0: none), nodes started again for the same run
        fill(browser, "limit-pages", "0")
        click(browser, "continue")
        until(browser, lambda d: shown(d, "flash") == "continue: the run is running", 15, "run 1 to go on")
        fill(browser, "start-daemons", a.url)
        click(browser, "start-submit")
        until(browser, lambda d: "started 1 node" in shown(d, "start-result"), 30, "a node started again")
        until(browser, lambda d: count(d, "n-nodes") == 1, 30, "the node to join")
        assert run_state(browser) == "run 1 running"
        until(browser, lambda d: count(d, "n-done") > limit, 30, "pages past the old limit")

        # -- stop it
        click(browser, "stop")
        until(browser, lambda d: "stopped" in run_state(d), 15, "run 1 stopped")
        wait_for(lambda: not any(d.jobs()["running"] for d in (a, b)), 60, "the nodes to close")
        in_run_1 = shop.hits
        assert in_run_1 and max(in_run_1.values()) == 1, in_run_1.most_common(3)

        # -- a schedule that fires within the test (once: a given second of the day, UTC)
        fire_at = datetime.now(timezone.utc) + timedelta(seconds=25)
        cron = f"{fire_at.minute} {fire_at.hour} * * * {fire_at.second}"
        fill(browser, "schedule-name", "soon")
        fill(browser, "schedule-cron", cron)
        until(browser, lambda d: "next five: " in shown(d, "schedule-preview"), 10, "the next five firing times")
        fill(browser, "schedule-daemons", f"{a.url}\n{b.url}")
        fill(browser, "schedule-args", f"base_url={shop.url}")
        fill(browser, "schedule-settings", NODE_SETTINGS)
        click(browser, "schedule-submit")
        until(browser, lambda d: any(row[0] == "soon" for row in table(d, "schedules-table")), 10, "the schedule")
        until(browser, lambda d: any(row[2] == "fired" for row in table(d, "fires-table")), 90, "the firing")
        until(browser, lambda d: run_state(d).startswith("run 2 "), 30, "the run the schedule began")

        # -- an alert rule: the grammar checked as typed; its test and its firing reach the webhook
        fill(browser, "alert-when", "run_end(finished) >")
        until(browser, lambda d: shown(d, "alert-check") and shown(d, "alert-check") != "reads well", 10, "a refusal")
        fill(browser, "alert-name", "moving")
        fill(browser, "alert-when", "run_end(finished)")
        until(browser, lambda d: shown(d, "alert-check") == "reads well", 10, "the grammar accepted")
        fill(browser, "alert-notify", hook.apprise_url("moving"))
        click(browser, "alert-submit")
        until(browser, lambda d: any(row[0] == "moving" for row in table(d, "alerts-table")), 10, "the rule")
        browser.find_element(By.CSS_SELECTOR, "#alerts-table .test-alert").click()
        until(browser, lambda d: "test notification of moving sent" in shown(d, "flash"), 15, "the test")
        wait_for(lambda: any("test of alert rule" in str(body) for body in hook.bodies()), 15, "the test's webhook")

        # the scheduled run finishes: the rule fires, its notification reaches the webhook
        wait_for(lambda: runs.view(r, KEYS).state == "finished", 120, "run 2 to finish")
        wait_for(lambda: any("moving FIRING" in str(body) for body in hook.bodies()), 30, "the rule's notification")
        until(browser, lambda d: any(row[2] == "firing" for row in table(d, "alerts-table")), 15, "the rule firing")
        screenshot(browser, "console-crawl-day")
        # each page at most once more than in run 1
        hits = shop.hits
        assert max(hits.values()) <= 2, hits.most_common(3)
        assert [j["run"] for j in jobs.all_jobs(r, KEYS)][-2:] == [2, 2]

        # -- home and the daemons
        browser.get(url + "/console/#/")
        until(browser, lambda d: any(row[0] == "shop" for row in table(d, "crawls-table")), 10, "the home page")
        home = next(row for row in table(browser, "crawls-table") if row[0] == "shop")
        assert home[1] == "2" and home[9] == "moving", home
        screenshot(browser, "console-home")
        browser.get(url + "/console/#/daemons")
        until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".daemon")) == 2, 20, "both daemons")
        text = shown(browser, "daemons-page")
        assert text.count("reachable") == 2 and "crawls: shop" in text and "shop" in text
        screenshot(browser, "console-daemons")
        browser.get(url + "/console/#/audit")
        until(browser, lambda d: len(table(d, "audit-table")) >= 8, 10, "the audit log")
        actions = {row[4] for row in table(browser, "audit-table") if row[1] == "olga"}
        assert {"push", "start", "limits", "continue", "stop", "schedules.add", "alerts.add", "alerts.test"} <= actions
        assert not [e for e in severe_logs(browser) if "/api/v1/" not in e["message"]], "no script error"

        # -- a viewer: reads everything, every action refused
        click(browser, "logout")
        log_in(browser, url, viewer)
        browser.get(url + "/console/#/crawl/shop")
        until(browser, lambda d: run_state(d).startswith("run 2 "), 10, "the viewer's crawl page")
        for button in ("stop", "drain", "continue", "pause", "new-run", "set-limits", "start-submit", "push-submit"):
            assert not browser.find_element(By.ID, button).is_enabled(), button
        before = len(r.xrange("crawlplug:audit"))
        for action in ("stop", "continue", "pause", "new-run"):  # what a hand-made click would send
            browser.execute_script(f"document.body._x_dataStack[0].act('{action}', {{}})")
            until(
                browser, lambda d, a=action: f"{a} refused: user 'victor' (viewer) may not" in shown(d, "error"), 10, a
            )
        assert len(r.xrange("crawlplug:audit")) == before, "a refused call changes nothing"
        assert runs.view(r, KEYS).state == "finished"
    finally:
        control.stop()
        console.terminate()
        console.wait(10)
        hook.stop()


def test_the_run_buttons_dead_letters_and_a_file_of_start_urls(browser, redis_url, r, tmp_path):
    """What the day above does not: pause and resume, drain, a new run, dead letters requeued
    and dropped, start URLs from a file into a lane, and the login and audit pages."""
    operator = users.add(r, "olga", "operator", by="test")
    console, url = start_console(redis_url, tmp_path / "console.log")
    try:
        browser.get(url + "/console/#/")
        until(browser, lambda d: d.find_element(By.ID, "login-token").is_displayed(), 10, "the login form")
        fill(browser, "login-token", "not-a-token")
        click(browser, "login")
        until(browser, lambda d: "nobody's" in shown(d, "login-error"), 10, "a wrong token refused")
        screenshot(browser, "console-login")
        log_in(browser, url, operator)

        # start URLs from a file, into a lane
        urls = tmp_path / "urls.txt"
        urls.write_text("http://a.test/1\nhttp://a.test/2\n\nhttp://a.test/3\n")
        browser.get(url + "/console/#/crawl/shop")
        until(browser, lambda d: d.find_element(By.ID, "crawl-page").is_displayed(), 10, "the crawl's page")
        browser.find_element(By.ID, "push-file").send_keys(str(urls))
        until(browser, lambda d: "a.test/3" in d.find_element(By.ID, "push-entries").get_attribute("value"), 10, "read")
        fill(browser, "push-lane", "start_urls:high")
        click(browser, "push-submit")
        until(browser, lambda d: shown(d, "push-result").startswith("pushed 3, 3 waiting"), 10, "the push")
        assert r.llen("crawlplug:{shop}:start_urls:high") == 3

        # a run with a node (joined here: nothing fetches)
        runs.join(r, KEYS, node_id="a-node", ttl_ms=60_000)
        until(browser, lambda d: run_state(d) == "run 1 running", 10, "run 1")

        # dead letters: one requeued, one dropped, chosen by their boxes
        f = Frontier(r, KEYS, node_id="dead-maker")
        for i in range(2):
            fp = hashlib.sha1(f"dead-{i}".encode()).digest()
            f.admit([(fp, 0.0, b'{"v": 2, "url": "http://a.test/dead/%d"}' % i)])
        for lease in f.pop(2):
            f.dead_letter(lease.id, "test: made dead")
        until(browser, lambda d: len(table(d, "dead-table")) == 2, 10, "two dead letters")
        assert {row[3] for row in table(browser, "dead-table")} == {"test: made dead"}
        browser.find_elements(By.CSS_SELECTOR, "#dead-table input[type=checkbox]")[0].click()
        click(browser, "dead-requeue")
        until(browser, lambda d: len(table(d, "dead-table")) == 1, 10, "one requeued")
        browser.find_elements(By.CSS_SELECTOR, "#dead-table input[type=checkbox]")[0].click()
        click(browser, "dead-drop")
        until(browser, lambda d: len(table(d, "dead-table")) == 0, 10, "one dropped")
        assert shown(browser, "n-dead") == "0"

        # paused and resumed, drained, a new run refused until the run is stopped
        click(browser, "pause")
        until(browser, lambda d: run_state(d) == "run 1 paused", 10, "paused")
        click(browser, "pause")  # now labelled Resume
        until(browser, lambda d: run_state(d) == "run 1 running", 10, "resumed")
        click(browser, "drain")
        until(browser, lambda d: run_state(d) == "run 1 draining", 10, "draining")
        click(browser, "new-run")
        until(browser, lambda d: "new-run refused: " in shown(d, "error"), 10, "a new run refused")
        assert "stop it first" in shown(browser, "error")
        click(browser, "stop")
        until(browser, lambda d: run_state(d) == "run 1 stopped", 10, "stopped")
        click(browser, "new-run")
        until(browser, lambda d: shown(d, "flash").startswith("new-run"), 10, "a new run asked for")

        browser.get(url + "/console/#/audit")
        until(browser, lambda d: len(table(d, "audit-table")) >= 8, 10, "the audit log")
        actions = [row[4] for row in table(browser, "audit-table")]
        for action in ("push", "pause", "resume", "stop", "new-run", "dead.requeue", "dead.drop"):
            assert action in actions, (action, actions)
        screenshot(browser, "console-audit")
        assert not [e for e in severe_logs(browser) if "/api/v1/" not in e["message"]], "no script error"
    finally:
        console.terminate()
        console.wait(10)
