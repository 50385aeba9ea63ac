"""Alert rules: their small grammar, the fixed list of what they watch, their evaluation
and the notifications (Apprise).

A rule's condition is ``METRIC[(ARG)] [OP NUMBER] [for DURATION]``, e.g.
``error_rate > 0.2 for 2m``, ``null_rate(shop.price) > 0.1``, ``limit_reached``
(a bare metric means ``> 0``). It is parsed by :func:`parse` (one regular
expression, never eval) into a :class:`Condition`; the metrics are
:data:`METRICS`, each computed from the crawl's status snapshot
(:func:`crawlplug.ops.status.snapshot`), the numbers ``crawlplug status`` shows.

:class:`Evaluator` evaluates every crawl's rules where it leads the crawl's
``alerts`` duty (crawlplug.frontier.alerts: a lease with a fencing token), so one
process at a time does, whichever of the control processes and dashboards runs.
A rule's states: ``ok`` -> ``pending`` (the condition holds, not yet for its
``for``) -> ``firing`` (announced once) -> ``ok`` (announced once: cleared), and
``unknown`` while its metric cannot be evaluated (:class:`Unknown`: why is recorded and
shown; the state it had resumes once the metric is known again, nothing is announced). A new
episode that starts within the rule's cooldown of the last announcement fires
quietly (recorded and shown, not sent), and so does its clearing. The state is
recorded (lua/alert.lua) before the notification is sent: a leader that dies in
between loses that one notification rather than sending it twice.
"""

from __future__ import annotations

import logging
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from ..errors import REDIS_ERRORS, ConfigError, CrawlplugError
from ..frontier import alerts as stored
from ..frontier.keys import CrawlKeys
from ..frontier.schedules import Leadership
from . import status
from .history import parse_duration

logger = logging.getLogger(__name__)

#: Seconds after an announcement during which a new episode of the same rule is not sent.
COOLDOWN = 300.0

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
}  # fmt: skip
_GRAMMAR = re.compile(
    r"\s*(?P<metric>[a-z_]+)\s*(?:\(\s*(?P<arg>[^()\s]+)\s*\))?"
    r"\s*(?:(?P<op>>=|<=|==|!=|>|<)\s*(?P<number>[0-9]+(?:\.[0-9]+)?))?"
    r"\s*(?:for\s+(?P<duration>[0-9smhdw]+))?\s*"
)


@dataclass(frozen=True)
class Condition:
    """A parsed rule condition (module docstring)."""

    metric: str
    arg: str | None
    op: str
    threshold: float
    for_ms: int

    def holds(self, value: float) -> bool:
        return _OPS[self.op](value, self.threshold)

    def __str__(self) -> str:
        arg = f"({self.arg})" if self.arg else ""
        number = f"{self.threshold:g}"
        held = f" for {_span(self.for_ms)}" if self.for_ms else ""
        return f"{self.metric}{arg} {self.op} {number}{held}"


def _span(ms: int) -> str:
    """ms as the grammar writes it: 2m, 90s, 1h (parse_duration reads it back)."""
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{max(1, round(ms / 1000))}s"


# -- the metrics rules may watch: a fixed list -------------------------------------------------


class Unknown(str):
    """What a metric gives when it cannot be evaluated now: the reason, in words."""


Metric = Callable[[redis.Redis, CrawlKeys, dict[str, Any], "str | None"], "float | Unknown"]

#: Why a metric of the crawl-wide Scrapy stats cannot be evaluated when there are none.
NO_SCRAPY_STATS = ("no crawl-wide Scrapy stats in Redis: the nodes keep them with STATS_CLASS = "
                   "'crawlplug.stats.RedisStatsCollector', which the add-on sets unless the project "
                   "names another")  # fmt: skip


def _error_rate(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | Unknown:
    # the run's errors counter, which every node's heartbeat adds to (crawlplug.failures)
    return round(snap["failed"] / snap["done"], 4) if snap["done"] else 0.0


def _dead_growth(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | Unknown:
    now = snap["now_ms"]
    sampled = [d for d in status.series_points(client, keys, now - 60_000, now, now)["dead"] if d is not None]
    return float(snap["dead"] - sampled[0]) if sampled else 0.0


def _no_progress(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | Unknown:
    if snap["queued"] + snap["in_flight"] + snap["start_urls"] == 0:
        return 0.0
    now = snap["now_ms"]
    points = status.series_points(client, keys, now - status.SERIES_MS + status.BUCKET_MS, now, now)
    done_at = [t for t, d in zip(points["t"], points["done"]) if d]
    if done_at:
        last = min(now, done_at[-1] + status.BUCKET_MS)
    else:
        last = snap["run"].get("started") or (now - status.SERIES_MS)
    return round(max(0, now - last) / 60_000, 2)


def _silent_nodes(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | Unknown:
    return float(sum(1 for node in snap["nodes"] if node["state"] != "live"))


def _null_rate(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | Unknown:
    site, _, field = (arg or "").rpartition(".")
    stats = snap["scrapy_stats"]
    if not stats:
        return Unknown(NO_SCRAPY_STATS)
    counts = {what: int(stats.get(f"site/{site}/field/{field}/{what}", 0) or 0)
              for what in ("filled", "missing", "invalid", "default")}  # fmt: skip
    total = sum(counts.values())
    if not total:
        return Unknown(f"no item of site {site!r} counted for field {field!r} yet (is {arg!r} right?)")
    return round(counts["missing"] / total, 4)


def _limit_reached(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | Unknown:
    return 1.0 if snap["run"].get("state") == "limit" else 0.0


def _memory(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | Unknown:
    memory = snap["redis_memory"]
    if not memory:
        return Unknown("Redis refused INFO (an ACL user without it): its memory is not known")
    return round(float(memory.get("ratio") or 0.0) * 100, 1)


#: name -> (what it is, the argument it takes or None, how it is computed).
METRICS: dict[str, tuple[str, str | None, Metric]] = {
    "error_rate": ("failed requests (crawlplug status's failed: HTTP 400 and more, download errors after retries, "
                   "callbacks that raised; robots.txt is no page) per request done in the run", None, _error_rate),
    "dead_letters_growth": ("dead letters added over the last minute (as the heartbeats sampled them)", None,
                            _dead_growth),
    "no_progress_minutes": ("minutes since a request last finished, while work is queued, in flight or waiting "
                            "in start_urls (0 when there is none)", None, _no_progress),
    "silent_nodes": ("nodes whose heartbeat is late (silent) or expired (dead, listed for an hour)", None,
                     _silent_nodes),
    "null_rate": ("share of a site definition's items whose field was null: null_rate(SITE.FIELD); unknown "
                  "until an item of it is counted", "SITE.FIELD", _null_rate),
    "limit_reached": ("1 when the run ended by a limit (run state 'limit'), else 0", None, _limit_reached),
    "redis_memory_percent": ("Redis memory used, % of maxmemory (0 when no maxmemory is set)", None, _memory),
}  # fmt: skip


def parse(text: str) -> Condition:
    """``text`` as a :class:`Condition`; :class:`ConfigError` saying what is wrong."""
    found = _GRAMMAR.fullmatch(text or "")
    if found is None:
        raise ConfigError(f"cannot read the condition {text!r}: write METRIC[(ARG)] [OP NUMBER] [for DURATION], "
                          "e.g. 'error_rate > 0.2 for 2m' (OP one of > >= < <= == !=)")  # fmt: skip
    metric, arg = found["metric"], found["arg"]
    if metric not in METRICS:
        raise ConfigError(f"no metric {metric!r} for alerts: one of {', '.join(METRICS)}")
    wants = METRICS[metric][1]
    if wants and not arg:
        raise ConfigError(f"{metric} needs an argument: {metric}({wants})")
    if not wants and arg:
        raise ConfigError(f"{metric} takes no argument (given {arg!r})")
    if metric == "null_rate" and (arg or "").count(".") < 1:
        raise ConfigError(f"null_rate takes SITE.FIELD (a site definition and one of its fields), not {arg!r}")
    for_ms = parse_duration(found["duration"]) if found["duration"] else 0
    op, number = (found["op"], float(found["number"])) if found["op"] else (">", 0.0)
    return Condition(metric, arg, op, number, for_ms)


def make_rule(rule_id: str, when: str, notify: list[str], cooldown: float = COOLDOWN) -> dict[str, Any]:
    """A rule to store, its condition parsed (ConfigError) and its URLs checked by Apprise."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", rule_id):
        raise ConfigError(f"invalid rule name {rule_id!r}: letters, digits, '_', '.', '-' (at most 64)")
    condition = parse(when)
    if cooldown < 0:
        raise ConfigError(f"the cooldown must be >= 0 seconds, not {cooldown:g}")
    for url in notify:
        check_url(url)
    return {"id": rule_id, "when": str(condition), "notify": list(notify), "cooldown": float(cooldown)}


def _apprise() -> Any:
    try:
        import apprise  # noqa: PLC0415 - the [alerts] extra
    except ImportError as exc:
        raise ConfigError(f"alert notifications need crawlplug's [alerts] extra ({exc}): "
                          "pip install 'crawlplug[alerts]'") from None  # fmt: skip
    return apprise


def check_url(url: str) -> None:
    """ConfigError unless Apprise knows how to notify ``url`` (json://host/path, mailto://, slack://...)."""
    if not _apprise().Apprise().add(url):
        raise ConfigError(f"Apprise cannot notify {url!r}: see https://github.com/caronc/apprise/wiki "
                          "(a webhook: json://host:port/path or jsons:// for HTTPS)")  # fmt: skip


def notify(urls: list[str], title: str, body: str) -> bool:
    """Send one notification to every URL (Apprise); whether every one went through."""
    apprise = _apprise()
    sender = apprise.Apprise()
    for url in urls:
        sender.add(url)
    return bool(sender.notify(title=title, body=body))


def message(event: dict[str, Any]) -> tuple[str, str]:
    """(title, body) of an event's notification: the crawl, the rule, the value, the dashboard."""
    what = "FIRING" if event["event"] == "fired" else "cleared"
    title = f"crawlplug: crawl {event['crawl']}: {event['rule']} {what}"
    lines = [
        f"crawl: {event['crawl']} (run {event.get('run') or '-'})",
        f"rule: {event['rule']}: {event['when']}",
        f"value: {event['value']:g}" if isinstance(event.get("value"), (int, float)) else "value: unknown",
        f"state: {what}",
    ]
    if event.get("dashboard"):
        lines.append(f"dashboard: {event['dashboard']}")
    return title, "\n".join(lines)


# -- evaluation -----------------------------------------------------------------------------------


def step(state: dict[str, Any], holds: bool, now_ms: int, for_ms: int,
         cooldown_ms: int) -> tuple[dict[str, Any], str | None]:  # fmt: skip
    """A rule's next state from its last one and whether its condition holds now, and the
    event of the change ("fired", "cleared" or None)."""
    current = state.get("state", "ok")
    new = dict(state)
    if holds:
        if current == "ok":
            new.update(state="pending", since=now_ms)
            current = "pending"
        since = new.get("since")
        if current == "pending" and now_ms - (since if isinstance(since, int) else now_ms) >= for_ms:
            last = new.get("announced_ms")
            quiet = isinstance(last, int) and now_ms - last < cooldown_ms
            new.update(state="firing", fired_ms=now_ms, quiet=quiet)
            return new, "fired"
        return new, None
    if current == "firing":
        new.update(state="ok", cleared_ms=now_ms, since=None)
        return new, "cleared"
    if current == "pending":
        new.update(state="ok", since=None)
    return new, None


class Evaluator:
    """Evaluates the rules of every crawl that has some, where it leads their ``alerts``
    duty (module docstring). ``dashboard_url``: the link notifications carry."""

    def __init__(self, client: redis.Redis, owner: str, *, prefix: str = "crawlplug", lease_ms: int = 15_000,
                 dashboard_url: str = "", crawls: list[str] | None = None) -> None:  # fmt: skip
        self.client = client
        self.owner = owner
        self.prefix = prefix
        self.lease_ms = lease_ms
        self.dashboard_url = dashboard_url
        #: only these crawls (a dashboard: its own), else every crawl with rules
        self.only = crawls
        self.leads: dict[str, Leadership] = {}
        self._warned: set[str] = set()

    def _once(self, key: str, msg: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(msg, *args)

    def tick(self) -> None:
        """Evaluate once: hold or take each crawl's lead, evaluate where this process leads."""
        crawls = stored.alerting_crawls(self.client, self.prefix)
        if self.only is not None:
            crawls = [c for c in crawls if c in self.only]
        for crawl in crawls:
            lead = self.leads.get(crawl)
            if lead is None:
                lead = self.leads[crawl] = Leadership(self.client, CrawlKeys(crawl, self.prefix), self.owner,
                                                      self.lease_ms, duty="alerts")  # fmt: skip
            if lead.hold() == "acquired":
                logger.info("crawlplug alerts %s: evaluating the alert rules of crawl %r (fence %d)", self.owner,
                            crawl, lead.fence)  # fmt: skip
            if lead.fence:
                try:
                    self.evaluate(lead)
                except CrawlplugError as exc:  # a corrupt key (written by hand): this crawl only, said once
                    self._once(f"{crawl}/error", "crawlplug alerts: the rules of crawl %r not evaluated: %s", crawl,
                               exc)  # fmt: skip

    def release(self) -> None:
        for lead in self.leads.values():
            if lead.fence:
                try:
                    lead.release()
                except REDIS_ERRORS as exc:
                    logger.warning("crawlplug alerts: could not release a lead (%s); it expires", exc)

    def evaluate(self, lead: Leadership) -> None:
        keys = lead.keys
        rules = stored.rules(self.client, keys)
        if not rules:
            return
        snap = status.snapshot(self.client, keys, history_minutes=1)
        states = stored.states(self.client, keys)
        for rule_id, rule in rules.items():
            try:
                condition = parse(rule.get("when", ""))
            except ConfigError as exc:
                self._once(f"{keys.crawl}/{rule_id}", "crawlplug alerts: rule %r of crawl %r is unreadable (%s); "
                           "delete it and add it again", rule_id, keys.crawl, exc)  # fmt: skip
                continue
            value = METRICS[condition.metric][2](self.client, keys, snap, condition.arg)
            last = states.get(rule_id, {})
            if isinstance(value, Unknown):
                self._once(f"{keys.crawl}/{rule_id}/unknown/{value}", "crawlplug alerts: rule %r of crawl %r cannot "
                           "be evaluated: %s", rule_id, keys.crawl, value)  # fmt: skip
                if last.get("unknown") != value and not self._record_unknown(lead, rule_id, last, value, snap):
                    return
                continue
            cooldown_ms = int(float(rule.get("cooldown", COOLDOWN)) * 1000)
            new, event = step(last, condition.holds(value), snap["now_ms"], condition.for_ms, cooldown_ms)
            new.pop("unknown", None)
            new["value"] = value
            new["checked_ms"] = snap["now_ms"]
            record = None
            send = False
            if event:
                send = not new.get("quiet")
                if send:
                    new["announced_ms"] = snap["now_ms"]
                record = {"at": snap["now_ms"], "event": event, "crawl": keys.crawl, "run": snap["run"].get("id"),
                          "rule": rule_id, "when": rule.get("when"), "value": value, "sent": send,
                          "dashboard": self.dashboard_url or None}  # fmt: skip
            what = stored.record(lead, rule_id, new, record)
            if what == "deposed":
                lead.fence = 0
                logger.warning("crawlplug alerts %s: no longer leads the alerts of crawl %r", self.owner, keys.crawl)
                return
            if what != "done" or record is None:
                continue
            logger.warning("crawlplug alerts: crawl %r: rule %r (%s) %s, value %g%s", keys.crawl, rule_id,
                           rule.get("when"), event, value, "" if send else " (within its cooldown: not sent)")  # fmt: skip
            if send and rule.get("notify"):
                title, body = message(record)
                try:
                    ok = notify(list(rule["notify"]), title, body)
                except ConfigError as exc:
                    self._once("apprise", "crawlplug alerts: %s", exc)
                    ok = False
                if not ok:
                    logger.warning("crawlplug alerts: crawl %r: the notification of rule %r did not go through "
                                   "(see Apprise's log above)", keys.crawl, rule_id)  # fmt: skip


    def _record_unknown(self, lead: Leadership, rule_id: str, last: dict[str, Any], why: str,
                        snap: dict[str, Any]) -> bool:  # fmt: skip
        """Record that ``rule_id`` cannot be evaluated (``why``), its state otherwise kept; False
        if this process no longer leads the crawl's alerts."""
        state = {**last, "unknown": str(why), "value": None, "checked_ms": snap["now_ms"]}
        if stored.record(lead, rule_id, state, None) == "deposed":
            lead.fence = 0
            logger.warning("crawlplug alerts %s: no longer leads the alerts of crawl %r", self.owner, lead.keys.crawl)
            return False
        return True


def masked(url: str) -> str:
    """An Apprise URL as views show it: its scheme only (the rest holds tokens, passwords)."""
    scheme, sep, _ = url.partition("://")
    return f"{scheme}://..." if sep else "..."


def view(client: redis.Redis, keys: CrawlKeys, n: int = 20) -> dict[str, Any]:
    """The crawl's rules with their states and the firing ones (``active``), and its recent
    events; notification URLs masked (:func:`masked`): the dashboard shows this to anyone."""
    states = stored.states(client, keys)
    rows = []
    for rule_id, rule in stored.rules(client, keys).items():
        state = states.get(rule_id, {})
        shown = {**rule, "notify": [masked(u) for u in rule.get("notify") or []]}
        # a rule whose metric cannot be evaluated shows as such, with why; "held" is the state it keeps meanwhile
        held = state.get("state", "ok")
        unknown = state.get("unknown")
        rows.append({**shown, "state": "unknown" if unknown else held, "why": unknown or None, "held": held,
                     "since_ms": state.get("since"), "fired_ms": state.get("fired_ms"), "value": state.get("value"),
                     "checked_ms": state.get("checked_ms")})  # fmt: skip
    return {"rules": rows, "active": [r for r in rows if r["held"] == "firing"],
            "events": stored.events(client, keys, n)}  # fmt: skip
