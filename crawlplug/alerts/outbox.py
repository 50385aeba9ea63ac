"""Alert notifications that must reach someone: queued in Redis, sent and retried off the
thread that fires the schedules and evaluates the rules.

A rule that fires (crawlplug.alerts.evaluator) puts its notification in the crawl's
outbox (``alertsend``: id -> when the next attempt is due; ``alertmsg``: id -> the
notification) and goes on. :class:`Sender`, a thread of ``crawlplug control`` (and of a
dashboard that evaluates rules), sends what is due for the crawls whose alerts its
process leads, through Apprise, a rule's in the order they were queued: sent, it leaves
the outbox; refused or unreachable, it
is tried again after 2, 4, 8... seconds (at most :data:`CAP_S`), and after
:data:`MAX_ATTEMPTS` attempts it is moved to ``alertfailed`` (the last 100 kept, shown
by ``crawlplug alerts list`` and the console) and logged as an error. A notification
is removed once sent: a process killed between the two sends it once more.

:func:`send_test` is what ``crawlplug alerts test RULE`` and the console's Test button
call: one notification of the rule, sent now, its outcome said.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
from collections.abc import Callable
from typing import Any

import redis

from ..errors import REDIS_ERRORS, ConfigError
from ..frontier.keys import CrawlKeys
from ..frontier.store import redis_ms, text
from . import store as stored

__all__ = ["CAP_S", "MAX_ATTEMPTS", "Sender", "enqueue", "failed", "pending", "send_due", "send_test"]

logger = logging.getLogger(__name__)

#: Attempts before a notification is given up on (kept in ``alertfailed``).
MAX_ATTEMPTS = 6
#: Seconds before the second attempt; each next one waits twice as long, at most CAP_S.
BASE_S = 2.0
CAP_S = 300.0
#: Notifications that still failed kept per crawl.
KEEP_FAILED = 100

Send = Callable[[list[str], str, str], bool]


def _default_send(urls: list[str], title: str, body: str) -> bool:
    from .rules import notify  # noqa: PLC0415 - Apprise, the [alerts] extra

    return notify(urls, title, body)


def enqueue(client: redis.Redis, keys: CrawlKeys, rule_id: str, urls: list[str], title: str, body: str) -> str:
    """Queue one notification of ``rule_id``, due now; its id."""
    now = redis_ms(client)
    nid = f"{now}-{secrets.token_hex(3)}"
    record = {"id": nid, "rule": rule_id, "urls": urls, "title": title, "body": body, "queued": now, "attempts": 0}
    pipe = client.pipeline(transaction=True)
    pipe.hset(keys.alertmsg, nid, json.dumps(record, separators=(",", ":")))
    pipe.zadd(keys.alertsend, {nid: now})
    pipe.execute()
    return nid


def _read(raw: Any) -> dict[str, Any] | None:
    try:
        found = json.loads(text(raw))
    except (TypeError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def backoff(attempts: int) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones."""
    return min(CAP_S, BASE_S * 2 ** max(0, attempts - 1))


def send_due(client: redis.Redis, keys: CrawlKeys, send: Send = _default_send, n: int = 20) -> dict[str, int]:
    """Send the crawl's notifications that are due; counts of sent, retried and failed."""
    now = redis_ms(client)
    counts = {"sent": 0, "retry": 0, "failed": 0}
    due = [text(x) for x in client.zrangebyscore(keys.alertsend, "-inf", now, start=0, num=n)]
    if not due:
        return counts
    # a rule's notifications go out in the order they were queued: one waits for the earlier
    # ones of its rule (a clearing is not heard before the firing it clears)
    waiting: dict[str, int] = {}
    for raw in client.hvals(keys.alertmsg):
        other = _read(raw)
        if other is not None:
            rule = str(other.get("rule"))
            waiting[rule] = min(waiting.get(rule, other.get("queued") or 0), other.get("queued") or 0)
    for nid in due:
        record = _read(client.hget(keys.alertmsg, nid))
        if record is None:  # its record is gone or unreadable: nothing to send
            client.zrem(keys.alertsend, nid)
            continue
        earliest = waiting.get(str(record.get("rule")))
        if earliest is not None and earliest < (record.get("queued") or 0):
            continue  # an earlier one of its rule is still to go
        try:
            ok = send([str(u) for u in record.get("urls") or []], str(record["title"]), str(record["body"]))
            why = "" if ok else "Apprise could not deliver it (see its log)"
        except ConfigError as exc:
            ok, why = False, str(exc)
        record["attempts"] = int(record.get("attempts") or 0) + 1
        at = redis_ms(client)
        if ok:
            pipe = client.pipeline(transaction=True)
            pipe.zrem(keys.alertsend, nid)
            pipe.hdel(keys.alertmsg, nid)
            pipe.execute()
            waiting.pop(str(record.get("rule")), None)
            counts["sent"] += 1
            logger.info(
                "crawlplug alerts: crawl %r: the notification of rule %r sent (attempt %d)",
                keys.crawl,
                record["rule"],
                record["attempts"],
            )
            continue
        record["last_error"], record["last_attempt"] = why, at
        if record["attempts"] >= MAX_ATTEMPTS:
            pipe = client.pipeline(transaction=True)
            pipe.zrem(keys.alertsend, nid)
            pipe.hdel(keys.alertmsg, nid)
            pipe.lpush(keys.alertfailed, json.dumps(record, separators=(",", ":")))
            pipe.ltrim(keys.alertfailed, 0, KEEP_FAILED - 1)
            pipe.execute()
            counts["failed"] += 1
            logger.error(
                "crawlplug alerts: crawl %r: the notification of rule %r was not delivered after %d attempts (%s); "
                "kept in its failed notifications (crawlplug alerts list)",
                keys.crawl,
                record["rule"],
                record["attempts"],
                why,
            )
            continue
        delay = backoff(record["attempts"])
        pipe = client.pipeline(transaction=True)
        pipe.hset(keys.alertmsg, nid, json.dumps(record, separators=(",", ":")))
        pipe.zadd(keys.alertsend, {nid: at + int(delay * 1000)})
        pipe.execute()
        counts["retry"] += 1
        logger.warning(
            "crawlplug alerts: crawl %r: the notification of rule %r failed (attempt %d of %d: %s); again in %gs",
            keys.crawl,
            record["rule"],
            record["attempts"],
            MAX_ATTEMPTS,
            why,
            delay,
        )
    return counts


def pending(client: redis.Redis, keys: CrawlKeys) -> list[dict[str, Any]]:
    """Notifications waiting to be sent, each with when its next attempt is due (``due``)."""
    out = []
    for raw_id, due in client.zrange(keys.alertsend, 0, -1, withscores=True):
        record = _read(client.hget(keys.alertmsg, text(raw_id)))
        if record is not None:
            out.append({**_shown(record), "due": int(due)})
    return out


def failed(client: redis.Redis, keys: CrawlKeys, n: int = 20) -> list[dict[str, Any]]:
    """The newest notifications that were never delivered."""
    return [_shown(r) for r in (_read(x) for x in client.lrange(keys.alertfailed, 0, n - 1)) if r is not None]


def _shown(record: dict[str, Any]) -> dict[str, Any]:
    from .rules import masked  # noqa: PLC0415

    return {**record, "urls": [masked(str(u)) for u in record.get("urls") or []]}


def send_test(client: redis.Redis, keys: CrawlKeys, rule_id: str, by: str, send: Send = _default_send) -> bool:
    """Send one test notification of rule ``rule_id`` now (ConfigError: no such rule, or one
    that notifies nobody); True if it went through."""
    rule = stored.rules(client, keys).get(rule_id)
    if rule is None or "unreadable" in rule:
        raise ConfigError(f"crawl {keys.crawl!r} has no readable alert rule {rule_id!r}")
    urls = [str(u) for u in rule.get("notify") or []]  # type: ignore[union-attr]
    if not urls:
        raise ConfigError(f"alert rule {rule_id!r} notifies no URL")
    return send(
        urls,
        f"crawlplug: test of alert rule {rule_id!r} of crawl {keys.crawl!r}",
        f"A test notification, sent by {by}. The rule: {rule.get('when')}",
    )


class Sender:
    """Sends the outboxes of the crawls ``leads()`` names, every ``every`` seconds, in a thread."""

    def __init__(self, client: redis.Redis, leads: Callable[[], list[CrawlKeys]], every: float = 0.5) -> None:
        self.client = client
        self.leads = leads
        self.every = every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> None:
        for keys in self.leads():
            try:
                send_due(self.client, keys)
            except REDIS_ERRORS as exc:
                logger.warning("crawlplug alerts: cannot read crawl %r's outbox (%s); trying again", keys.crawl, exc)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.tick()

    def start(self) -> Sender:
        self._thread = threading.Thread(target=self._run, name="crawlplug-alert-sender", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


def crawls_with_outbox(client: redis.Redis, prefix: str = "crawlplug") -> list[str]:
    """Crawls that have alert rules (whose outboxes a sender looks at)."""
    return stored.alerting_crawls(client, prefix)
