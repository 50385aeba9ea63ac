"""The dashboard's part in alerting: while it runs it evaluates its crawl's alert rules,
when it leads them (crawlplug.alerts.evaluator.Evaluator: one leader at a time, a control
process or a dashboard), in a thread beside the web server."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import redis

from ..alerts.evaluator import Evaluator
from ..alerts.outbox import Sender
from ..errors import REDIS_ERRORS, CrawlplugError
from ..frontier.keys import CrawlKeys
from ..frontier.results import new_node_id

logger = logging.getLogger(__name__)


def lifespan(client: redis.Redis, keys: CrawlKeys, link: str | None) -> Callable[[Any], Any]:
    """A Starlette lifespan running :func:`alert_loop` (linking to ``link``) while the app
    runs; None for ``link``: no evaluation."""

    @contextlib.asynccontextmanager
    async def span(app: Any) -> AsyncIterator[None]:
        stop = threading.Event()
        thread = None
        if link is not None:
            thread = threading.Thread(
                target=alert_loop, args=(client, keys, link, stop), daemon=True, name="crawlplug-dashboard-alerts"
            )
            thread.start()
        try:
            yield
        finally:
            stop.set()
            if thread is not None:
                thread.join(10)

    return span


def alert_loop(client: redis.Redis, keys: CrawlKeys, link: str, stop: threading.Event, tick: float = 1.0) -> None:
    """Evaluate the crawl's alert rules every ``tick`` s while this dashboard leads them
    (crawlplug.alerts.evaluator.Evaluator: one leader at a time, a control process or a dashboard)."""
    evaluator = Evaluator(
        client, f"dashboard-{new_node_id()}", prefix=keys.prefix, dashboard_url=link, crawls=[keys.crawl]
    )
    warned = False
    sender = Sender(client, evaluator.leading).start()  # its notifications, sent and retried apart
    while not stop.wait(tick):
        try:
            evaluator.tick()
            warned = False
        except (*REDIS_ERRORS, CrawlplugError) as exc:
            if not warned:
                logger.warning("crawlplug dashboard: alert rules not evaluated: %s", exc)
                warned = True
    sender.stop()
    try:
        evaluator.release()
    except REDIS_ERRORS:
        pass
