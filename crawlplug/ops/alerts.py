"""Alert rules: their small grammar, the fixed list of what they watch, their evaluation
and the notifications (Apprise).

A rule's condition is ``METRIC[(ARG)] [OP NUMBER] [for DURATION]``, e.g.
``error_rate > 0.2 for 2m``, ``null_rate(shop.price) > 0.1``, ``limit_reached``
(a bare metric means ``> 0``). It is parsed by :func:`parse` (an LALR grammar,
:mod:`crawlplug.ops.alertgrammar`, never eval, in time linear in its length, at most
500 characters) into a :class:`Condition`; the metrics are :data:`METRICS`, each
computed from the crawl's status snapshot (:func:`crawlplug.ops.status.snapshot`), the
numbers ``crawlplug status`` shows. Forms the grammar reads but no evaluator computes
yet (a threshold relative to the last run, ``at end``, a window) are refused when a
rule is added and skipped, said once, when a stored one is read.

:class:`Evaluator` evaluates every crawl's rules where it leads the crawl's
``alerts`` duty (crawlplug.frontier.alerts: a lease with a fencing token), so one
process at a time does, whichever of the control processes and dashboards runs.
A rule's states: ``ok`` -> ``pending`` (the condition holds, not yet for its
``for``) -> ``firing`` (announced once) -> ``ok`` (announced once: cleared). A new
episode that starts within the rule's cooldown of the last announcement fires
quietly (recorded and shown, not sent), and so does its clearing. The state is
recorded (lua/alert.lua) before the notification is sent: a leader that dies in
between loses that one notification rather than sending it twice.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import redis

from ..errors import REDIS_ERRORS, ConfigError, CrawlplugError
from ..frontier import alerts as stored
from ..frontier.keys import CrawlKeys
from ..frontier.schedules import Leadership
from . import status
from .alertgrammar import MAX_LENGTH, Condition, read

__all__ = ["COOLDOWN", "MAX_LENGTH", "METRICS", "Condition", "Evaluator", "check_url", "make_rule", "masked",
           "message", "notify", "parse", "step", "view"]  # fmt: skip

logger = logging.getLogger(__name__)

#: Seconds after an announcement during which a new episode of the same rule is not sent.
COOLDOWN = 300.0

# -- the metrics rules may watch: a fixed list -------------------------------------------------

Metric = Callable[[redis.Redis, CrawlKeys, dict[str, Any], "str | None"], "float | None"]


def _error_rate(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | None:
    if snap["failed"] is None:
        return None  # no crawl-wide Scrapy stats (STATS_CLASS = crawlplug.stats.RedisStatsCollector)
    return round(snap["failed"] / snap["done"], 4) if snap["done"] else 0.0


def _dead_growth(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | None:
    now = snap["now_ms"]
    sampled = [d for d in status.series_points(client, keys, now - 60_000, now, now)["dead"] if d is not None]
    return float(snap["dead"] - sampled[0]) if sampled else 0.0


def _no_progress(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | None:
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


def _silent_nodes(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | None:
    return float(sum(1 for node in snap["nodes"] if node["state"] != "live"))


def _null_rate(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | None:
    site, _, field = (arg or "").rpartition(".")
    stats = snap["scrapy_stats"] or {}
    counts = {what: int(stats.get(f"site/{site}/field/{field}/{what}", 0) or 0)
              for what in ("filled", "missing", "invalid", "default")}  # fmt: skip
    total = sum(counts.values())
    return round(counts["missing"] / total, 4) if total else 0.0


def _limit_reached(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | None:
    return 1.0 if snap["run"].get("state") == "limit" else 0.0


#: The states a run ends in (crawlplug.frontier.runs), what run_end(STATE) takes.
RUN_END_STATES = ("finished", "limit", "stopped", "interrupted")


def _run_end(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | None:
    return 1.0 if snap["run"].get("state") == arg else 0.0


def _memory(client: redis.Redis, keys: CrawlKeys, snap: dict[str, Any], arg: str | None) -> float | None:
    memory = snap["redis_memory"]
    if not memory:
        return None  # INFO refused (an ACL user without it)
    return round(float(memory.get("ratio") or 0.0) * 100, 1)


#: name -> (what it is, the argument it takes or None, how it is computed).
METRICS: dict[str, tuple[str, str | None, Metric]] = {
    "error_rate": ("failures (the Scrapy stats crawlplug status counts as failed) per request done in the run; "
                   "needs STATS_CLASS = crawlplug.stats.RedisStatsCollector", None, _error_rate),
    "dead_letters_growth": ("dead letters added over the last minute (as the heartbeats sampled them)", None,
                            _dead_growth),
    "no_progress_minutes": ("minutes since a request last finished, while work is queued, in flight or waiting "
                            "in start_urls (0 when there is none)", None, _no_progress),
    "silent_nodes": ("nodes whose heartbeat is late (silent) or expired (dead, listed for an hour)", None,
                     _silent_nodes),
    "null_rate": ("share of a site definition's items whose field was null: null_rate(SITE.FIELD); "
                  "null_rate(SITE.FIELD, 10m), over a window, parses but is not evaluated yet", "SITE.FIELD",
                  _null_rate),
    "limit_reached": ("1 when the run ended by a limit (run state 'limit'), else 0", None, _limit_reached),
    "run_end": ("1 when the crawl's last run ended in STATE (finished, limit, stopped, interrupted), else 0: "
                "run_end(STATE)", "STATE", _run_end),
    "redis_memory_percent": ("Redis memory used, % of maxmemory (0 when no maxmemory is set)", None, _memory),
}  # fmt: skip
#: Metrics that take a window as a second argument (parsed; not evaluated yet).
WINDOWED = frozenset({"null_rate"})


def parse(text: str, *, max_length: int | None = MAX_LENGTH) -> Condition:
    """``text`` as a :class:`Condition`: its syntax (:func:`.alertgrammar.read`, text over
    ``max_length`` characters refused unread), then its metric and arguments;
    :class:`ConfigError` saying what is wrong. Forms not evaluated yet parse
    (:attr:`Condition.not_evaluated` says which)."""
    condition = read(text, max_length=max_length)
    metric, arg = condition.metric, condition.arg
    for name in (metric, condition.baseline):
        if name is not None and name not in METRICS:
            raise ConfigError(f"no metric {name!r} for alerts: one of {', '.join(METRICS)}")
    wants = METRICS[metric][1]
    if wants and not arg:
        raise ConfigError(f"{metric} needs an argument: {metric}({wants})")
    if not wants and arg:
        raise ConfigError(f"{metric} takes no argument (given {arg!r})")
    if condition.window_ms and metric not in WINDOWED:
        raise ConfigError(f"{metric} takes one argument, not a window too: {metric}({wants})")
    if metric == "null_rate" and (arg or "").count(".") < 1:
        raise ConfigError(f"null_rate takes SITE.FIELD (a site definition and one of its fields), not {arg!r}")
    if metric == "run_end" and arg not in RUN_END_STATES:
        raise ConfigError(f"run_end takes the state a run ends in: one of {', '.join(RUN_END_STATES)}, not {arg!r}")
    return condition


def make_rule(rule_id: str, when: str, notify: list[str], cooldown: float = COOLDOWN) -> dict[str, Any]:
    """A rule to store, its condition parsed (ConfigError) and its URLs checked by Apprise."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", rule_id):
        raise ConfigError(f"invalid rule name {rule_id!r}: letters, digits, '_', '.', '-' (at most 64)")
    condition = parse(when)
    if condition.not_evaluated:
        raise ConfigError(f"the condition {when!r} reads, but {condition.not_evaluated} is not evaluated yet "
                          "(planned: docs/alerts.md); nothing stored")  # fmt: skip
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
        """Evaluate the crawl's rules once. A rule that cannot be read or evaluated (too long,
        unreadable, a form not evaluated yet, a value that breaks its metric) is skipped and
        said once: it never stops the other rules, nor the duties ticking after this one."""
        keys = lead.keys
        rules = stored.rules(self.client, keys)
        if not rules:
            return
        snap = status.snapshot(self.client, keys, history_minutes=1)
        states = stored.states(self.client, keys)
        for rule_id, rule in rules.items():
            condition = self._condition(keys, rule_id, rule)
            if condition is None:
                continue
            try:
                if not self._evaluate_rule(lead, rule_id, rule, condition, snap, states):
                    return
            except REDIS_ERRORS:
                raise
            except Exception as exc:  # noqa: BLE001 - one rule, written by hand into Redis, never stops the others
                self._once(f"{keys.crawl}/{rule_id}/error", "crawlplug alerts: rule %r of crawl %r not evaluated: "
                           "%s: %s", rule_id, keys.crawl, type(exc).__name__, exc)  # fmt: skip

    def _condition(self, keys: CrawlKeys, rule_id: str, rule: dict[str, Any]) -> Condition | None:
        """The rule's condition, or None (said once) if this evaluator cannot use it."""
        when = rule.get("when", "")
        if isinstance(when, str) and len(when) > MAX_LENGTH:
            self._once(f"{keys.crawl}/{rule_id}", "crawlplug alerts: rule %r of crawl %r is skipped: its condition "
                       "has %d characters (at most %d); delete it and add it again", rule_id, keys.crawl, len(when),
                       MAX_LENGTH)  # fmt: skip
            return None
        try:
            condition = parse(when)
        except ConfigError as exc:
            self._once(f"{keys.crawl}/{rule_id}", "crawlplug alerts: rule %r of crawl %r is unreadable (%s); "
                       "delete it and add it again", rule_id, keys.crawl, exc)  # fmt: skip
            return None
        if condition.not_evaluated:
            self._once(f"{keys.crawl}/{rule_id}", "crawlplug alerts: rule %r of crawl %r is skipped: %s is not "
                       "evaluated yet", rule_id, keys.crawl, condition.not_evaluated)  # fmt: skip
            return None
        return condition

    def _evaluate_rule(self, lead: Leadership, rule_id: str, rule: dict[str, Any], condition: Condition,
                       snap: dict[str, Any], states: dict[str, Any]) -> bool:  # fmt: skip
        """Evaluate one rule, record its state and send its notification; False once deposed."""
        keys = lead.keys
        value = METRICS[condition.metric][2](self.client, keys, snap, condition.arg)
        if value is None:
            self._once(f"{keys.crawl}/{rule_id}/none", "crawlplug alerts: rule %r of crawl %r: %s is unknown "
                       "(%s)", rule_id, keys.crawl, condition.metric, METRICS[condition.metric][0])  # fmt: skip
            return True
        last = states.get(rule_id, {})
        cooldown_ms = int(float(rule.get("cooldown", COOLDOWN)) * 1000)
        new, event = step(last, condition.holds(value), snap["now_ms"], condition.for_ms, cooldown_ms)
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
            return False
        if what != "done" or record is None:
            return True
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
        rows.append({**shown, "state": state.get("state", "ok"), "since_ms": state.get("since"),
                     "fired_ms": state.get("fired_ms"), "value": state.get("value"),
                     "checked_ms": state.get("checked_ms")})  # fmt: skip
    return {"rules": rows, "active": [r for r in rows if r["state"] == "firing"],
            "events": stored.events(client, keys, n)}  # fmt: skip
