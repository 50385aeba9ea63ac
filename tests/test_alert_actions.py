"""Runs that end with a verdict someone hears about (issue 44): a run-end rule against the
last run, a rule that stops a running crawl, and notifications retried from Redis.

Real things only: a Redis, the demo shop on loopback, `scrapy crawl` nodes, a Scrapyd daemon,
`crawlplug control` as a process, and a webhook receiver that can refuse its first POSTs.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from crawlplug.access import audit
from crawlplug.alerts import outbox
from crawlplug.cli import main
from crawlplug.crawl import control, runs
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.schedules import store as schedules
from crawlplug.server.clients import client_from_url

from .support.control import ControlProcess
from .support.faultproxy import FaultProxy
from .support.scrapyd import wait_for
from .support.webhook import WebhookReceiver
from .test_integration import FAST

pytestmark = pytest.mark.e2e

KEYS = CrawlKeys("shop")


def cli(redis_url: str, *args: str):
    return CliRunner().invoke(main, ["--redis-url", redis_url, *args], env={"REDIS_URL": None, "CRAWLPLUG_CRAWL": None})


def _crawl_once(crawl, shop, redis_url: str, **settings: object) -> None:
    node = crawl(args={"base_url": shop.url}, settings={"REDIS_URL": redis_url, **FAST, **settings})
    assert node.wait(120) == 0, node.text()[-3000:]


def _fired(hook: WebhookReceiver, rule: str) -> list[dict]:
    return [b for b in hook.bodies() if isinstance(b, dict) and f"{rule} FIRING" in str(b.get("title"))]


def test_a_run_with_far_fewer_items_than_the_last_fires_its_rule_once(crawl, make_shop, redis_url, r, tmp_path: Path):
    shop = make_shop(items=40)
    hook = WebhookReceiver()
    control = ControlProcess(redis_url, tmp_path / "control.log")
    try:
        _crawl_once(crawl, shop, redis_url)
        assert runs.view(r, KEYS).state == "finished"
        added = cli(
            redis_url,
            "alerts",
            "add",
            "shop",
            "--name",
            "fewer",
            "--when",
            "items < 0.5 * last_run.items at end",
            "--notify",
            hook.apprise_url("fewer"),
            "--then",
            "pause-schedules",
        )
        assert added.exit_code == 0, added.output
        # run 1 has no run before it: the rule cannot say, and says nothing
        wait_for(lambda: "last_run.items" in str(r.hget(KEYS.alertstate, "fewer") or b""), 20, "run 1 unknown")
        shop.shop.change(removed=range(1, 36))  # run 2 finds 5 items where run 1 found 40
        _crawl_once(crawl, shop, redis_url)
        assert runs.view(r, KEYS).id == 2 and runs.view(r, KEYS).state == "finished"
        wait_for(lambda: _fired(hook, "fewer"), 30, "the run-end notification")
        time.sleep(3)  # a dozen more ticks of the control process: still once
        [fired] = _fired(hook, "fewer")
        assert "value: 5" in fired["message"] and "run 2" in fired["message"]
        paused = json.loads(r.get(KEYS.schedpause))
        assert paused["by"] == "alert rule fewer", paused
        listing = cli(redis_url, "alerts", "list", "shop")
        assert "then pause-schedules" in listing.output and "did pause-schedules (ok)" in listing.output
        assert cli(redis_url, "schedule", "resume", "shop").exit_code == 0 and r.get(KEYS.schedpause) is None
        # a run-end rule acts on no run: only the schedules
        refused = cli(redis_url, "alerts", "add", "shop", "--when", "items < 5 at end", "--then", "stop")
        assert refused.exit_code != 0 and "acts on no run (it has ended)" in refused.output
    finally:
        control.stop()
        hook.stop()


def test_a_rule_with_then_stop_stops_a_running_crawl(crawl, make_shop, redis_url, r, tmp_path: Path):
    shop = make_shop(items=300, delay=0.05)
    control = ControlProcess(redis_url, tmp_path / "control.log")
    try:
        added = cli(
            redis_url, "alerts", "add", "shop", "--create", "--name", "enough", "--when", "pages > 15", "--then", "stop"
        )
        assert added.exit_code == 0, added.output
        # the control process evaluating before a page is fetched: one that starts seconds late
        # on a loaded machine would find the 331 pages (4 s of this crawl) done
        wait_for(control.ready, 60, "the control process to evaluate the rules")
        settings = {"REDIS_URL": redis_url, **FAST, "CONCURRENT_REQUESTS": 2}
        nodes = [crawl(args={"base_url": shop.url}, settings=settings) for _ in range(2)]
        for node in nodes:
            code = node.wait(120)
            # every node closes, saying who stopped the run (one that started after the stop exits 1)
            assert "was stopped by alert rule enough" in node.text(), node.text()[-3000:]
            assert code == 0 or (code == 1 and "'finish_reason'" not in node.text()), node.text()[-3000:]
            assert code == 1 or "'finish_reason': 'stopped'" in node.text()
        view = runs.view(r, KEYS)
        assert view.state == "stopped" and view.by == "alert rule enough", view.raw
        assert sum(shop.hits.values()) < 300, "stopped well before the shop was crawled"
        entry = next(e for e in audit.entries(r, 50, crawl="shop") if e["action"] == "alerts.then.stop")
        assert entry["who"] == "alert rule enough" and entry["outcome"] == "ok"
        state = json.loads(r.hget(KEYS.alertstate, "enough"))
        assert state["action"]["then"] == "stop" and state["action"]["outcome"] == "ok"
    finally:
        control.stop()


def test_a_failing_webhook_gets_the_notification_once_and_a_schedule_fires_meanwhile(
    crawl, make_shop, make_scrapyd, redis_url, r, tmp_path: Path
):
    shop = make_shop(items=10)
    daemon = make_scrapyd()
    hook = WebhookReceiver(fail_first=3)
    _crawl_once(crawl, shop, redis_url)
    added = cli(
        redis_url,
        "alerts",
        "add",
        "shop",
        "--name",
        "done",
        "--when",
        "run_end(finished)",
        "--notify",
        hook.apprise_url("done"),
    )
    assert added.exit_code == 0, added.output
    # a schedule due 5 s from now: the control process (started next) sends the notification's
    # first attempt in a second or two, and its fourth 14 s after that (2 + 4 + 8 s of backoff);
    # the firing falls between, with seconds to spare on a loaded machine (with 6 s, a Scrapyd
    # start that took 4 s under CI's load once finished after the delivery)
    when = datetime.now(timezone.utc) + timedelta(seconds=5)
    res = cli(
        redis_url,
        "schedule",
        "add",
        "shop",
        "--cron",
        f"{when.minute} {when.hour} * * * {when.second}",
        "--scrapyd",
        daemon.url,
        "-s",
        "CRAWLPLUG_IDLE_CLOSE=1",
        "-a",
        f"base_url={shop.url}",
    )
    assert res.exit_code == 0, res.output
    control = ControlProcess(redis_url, tmp_path / "control.log")
    try:
        wait_for(lambda: hook.attempts, 20, "the first attempt")  # refused: 500
        wait_for(lambda: len(hook.received) == 1, 50, "the notification, at its fourth attempt")
        time.sleep(2)
        # refused three times, then delivered, once; the rule's clearing (run 2 runs) waits for it
        assert [status for _, status in hook.attempts[:4]] == [500, 500, 500, 200], hook.attempts
        assert "FIRING" in hook.received[0][1]["title"]
        delivered_at = hook.attempts[3][0]
        wait_for(lambda: schedules.fires(r, KEYS), 30, "the firing")
        fired = schedules.fires(r, KEYS)[0]
        assert fired["state"] == "fired", fired
        # the firing did not wait for the retries: it was carried out before the last attempt
        assert fired["finished"] < delivered_at, (fired, hook.attempts)
        assert len(_fired(hook, "done")) == 1, "delivered once"
        assert outbox.failed(r, KEYS) == []
        assert "failed (attempt 1 of 6" in control.text() and "sent (attempt 4)" in control.text()
    finally:
        control.stop()
        hook.stop()


def test_a_notification_that_never_goes_through_is_kept_and_shown(redis_url, r):
    hook = WebhookReceiver(fail_first=100)
    try:
        assert (
            cli(
                redis_url,
                "alerts",
                "add",
                "shop",
                "--create",
                "--name",
                "x",
                "--when",
                "run_end",
                "--notify",
                hook.apprise_url(),
            ).exit_code
            == 0
        )
        outbox.enqueue(r, KEYS, "x", [hook.apprise_url()], "t", "b")
        for attempt in range(1, outbox.MAX_ATTEMPTS + 1):
            r.zadd(KEYS.alertsend, {m: 0 for m in r.zrange(KEYS.alertsend, 0, -1)})  # due now
            counts = outbox.send_due(r, KEYS)
            assert counts == (
                {"sent": 0, "retry": 1, "failed": 0}
                if attempt < outbox.MAX_ATTEMPTS
                else {"sent": 0, "retry": 0, "failed": 1}
            ), (attempt, counts)
        assert len(hook.attempts) == outbox.MAX_ATTEMPTS and outbox.pending(r, KEYS) == []
        [kept] = outbox.failed(r, KEYS)
        assert kept["attempts"] == outbox.MAX_ATTEMPTS and kept["urls"] == ["json://..."]
        listing = cli(redis_url, "alerts", "list", "shop")
        assert f"notification of x NOT DELIVERED after {outbox.MAX_ATTEMPTS} attempts" in listing.output
        # crawlplug alerts test: one notification, now, said whether it went through
        tested = cli(redis_url, "alerts", "test", "shop", "x")
        assert tested.exit_code != 0 and "was not sent" in tested.output
        hook.fail_first = 0
        assert cli(redis_url, "alerts", "test", "shop", "x").exit_code == 0
        assert any("test of alert rule 'x'" in str(b) for b in hook.bodies())
        assert (
            cli(redis_url, "alerts", "test", "shop", "nosuch")
            .output.strip()
            .endswith("crawl 'shop' has no readable alert rule 'nosuch'")
        )
    finally:
        hook.stop()


def test_a_pause_of_the_schedules_sent_again_after_a_lost_reply_is_still_this_calls(fresh_redis):
    """Redis pauses them and the reply is lost; redis-py sends the SET again: it finds its own record."""
    proxy = FaultProxy.for_url(fresh_redis.url).start()
    try:
        client = client_from_url(proxy.url)  # crawlplug's client: one quick retry of a dropped connection
        proxy.reset_reply(b"schedpause")
        assert control.pause_schedules(client, KEYS, by="olga", why="test") is True
        assert proxy.resets == 1, "the reply really was lost"
        assert control.schedules_paused(client, KEYS)["by"] == "olga"
        assert control.pause_schedules(client, KEYS, by="victor") is False  # another's pause: said so
    finally:
        proxy.stop()
