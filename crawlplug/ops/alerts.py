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
``for``) -> ``firing`` (announced once) -> ``ok`` (announced once: cleared), and
``unknown`` while its metric cannot be evaluated (:class:`Unknown`: why is recorded and
shown; the state it had resumes once the metric is known again, nothing is announced). A new
episode that starts within the rule's cooldown of the last announcement fires
quietly (recorded and shown, not sent), and so does its clearing. The state is
recorded (lua/alert.lua) before the notification is sent: a leader that dies in
between loses that one notification rather than sending it twice.

Its size: one feature, a rule from its text to its notification, with the leader's loop
(:class:`Evaluator`) most of the module.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import redis

from ..errors import REDIS_ERRORS, ConfigError, CrawlplugError
from ..frontier import alerts as stored
from ..frontier.keys import CrawlKeys
from ..frontier.schedules import Leadership
from . import status
from .alertgrammar import MAX_LENGTH, Condition, read
from .alertmetrics import METRICS, NO_SCRAPY_STATS, RUN_END_STATES, WINDOWED, Unknown

__all__ = [
    "COOLDOWN",
    "MAX_LENGTH",
    "METRICS",
    "NO_SCRAPY_STATS",
    "RUN_END_STATES",
    "WINDOWED",
    "Condition",
    "Evaluator",
    "Unknown",
    "check_url",
    "make_rule",
    "masked",
    "message",
    "notify",
    "parse",
    "step",
    "view",
]

logger = logging.getLogger(__name__)

#: Seconds after an announcement during which a new episode of the same rule is not sent.
COOLDOWN = 300.0


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
        raise ConfigError(
            f"the condition {when!r} reads, but {condition.not_evaluated} is not evaluated yet "
            "(planned: docs/alerts.md); nothing stored"
        )
    if cooldown < 0:
        raise ConfigError(f"the cooldown must be >= 0 seconds, not {cooldown:g}")
    for url in notify:
        check_url(url)
    return {"id": rule_id, "when": str(condition), "notify": list(notify), "cooldown": float(cooldown)}


def _apprise() -> Any:
    try:
        import apprise  # noqa: PLC0415 - the [alerts] extra
    except ImportError as exc:
        raise ConfigError(
            f"alert notifications need crawlplug's [alerts] extra ({exc}): pip install 'crawlplug[alerts]'"
        ) from None
    return apprise


def check_url(url: str) -> None:
    """ConfigError unless Apprise knows how to notify ``url`` (json://host/path, mailto://, slack://...)."""
    if not _apprise().Apprise().add(url):
        raise ConfigError(
            f"Apprise cannot notify {url!r}: see https://github.com/caronc/apprise/wiki "
            "(a webhook: json://host:port/path or jsons:// for HTTPS)"
        )


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


def step(
    state: dict[str, Any], holds: bool, now_ms: int, for_ms: int, cooldown_ms: int
) -> tuple[dict[str, Any], str | None]:
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

    def __init__(
        self,
        client: redis.Redis,
        owner: str,
        *,
        prefix: str = "crawlplug",
        lease_ms: int = 15_000,
        dashboard_url: str = "",
        crawls: list[str] | None = None,
    ) -> None:
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
                lead = self.leads[crawl] = Leadership(
                    self.client, CrawlKeys(crawl, self.prefix), self.owner, self.lease_ms, duty="alerts"
                )
            if lead.hold() == "acquired":
                logger.info(
                    "crawlplug alerts %s: evaluating the alert rules of crawl %r (fence %d)",
                    self.owner,
                    crawl,
                    lead.fence,
                )
            if lead.fence:
                try:
                    self.evaluate(lead)
                except CrawlplugError as exc:  # a corrupt key (written by hand): this crawl only, said once
                    self._once(
                        f"{crawl}/error", "crawlplug alerts: the rules of crawl %r not evaluated: %s", crawl, exc
                    )

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
                self._once(
                    f"{keys.crawl}/{rule_id}/error",
                    "crawlplug alerts: rule %r of crawl %r not evaluated: %s: %s",
                    rule_id,
                    keys.crawl,
                    type(exc).__name__,
                    exc,
                )

    def _condition(self, keys: CrawlKeys, rule_id: str, rule: dict[str, Any]) -> Condition | None:
        """The rule's condition, or None (said once) if this evaluator cannot use it."""
        when = rule.get("when", "")
        if isinstance(when, str) and len(when) > MAX_LENGTH:
            self._once(
                f"{keys.crawl}/{rule_id}",
                "crawlplug alerts: rule %r of crawl %r is skipped: its condition "
                "has %d characters (at most %d); delete it and add it again",
                rule_id,
                keys.crawl,
                len(when),
                MAX_LENGTH,
            )
            return None
        try:
            condition = parse(when)
        except ConfigError as exc:
            self._once(
                f"{keys.crawl}/{rule_id}",
                "crawlplug alerts: rule %r of crawl %r is unreadable (%s); delete it and add it again",
                rule_id,
                keys.crawl,
                exc,
            )
            return None
        if condition.not_evaluated:
            self._once(
                f"{keys.crawl}/{rule_id}",
                "crawlplug alerts: rule %r of crawl %r is skipped: %s is not evaluated yet",
                rule_id,
                keys.crawl,
                condition.not_evaluated,
            )
            return None
        return condition

    def _evaluate_rule(
        self,
        lead: Leadership,
        rule_id: str,
        rule: dict[str, Any],
        condition: Condition,
        snap: dict[str, Any],
        states: dict[str, Any],
    ) -> bool:
        """Evaluate one rule, record its state and send its notification; False once deposed."""
        keys = lead.keys
        value = METRICS[condition.metric][2](self.client, keys, snap, condition.arg)
        last = states.get(rule_id, {})
        if isinstance(value, Unknown) or value is None:  # recorded as unknown, with why: shown so, not "ok"
            why = value if isinstance(value, Unknown) else Unknown(f"{condition.metric} is unknown")
            self._once(
                f"{keys.crawl}/{rule_id}/unknown/{why}",
                "crawlplug alerts: rule %r of crawl %r cannot be evaluated: %s",
                rule_id,
                keys.crawl,
                why,
            )
            return last.get("unknown") == why or self._record_unknown(lead, rule_id, last, why, snap)
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
            record = {
                "at": snap["now_ms"],
                "event": event,
                "crawl": keys.crawl,
                "run": snap["run"].get("id"),
                "rule": rule_id,
                "when": rule.get("when"),
                "value": value,
                "sent": send,
                "dashboard": self.dashboard_url or None,
            }
        what = stored.record(lead, rule_id, new, record)
        if what == "deposed":
            lead.fence = 0
            logger.warning("crawlplug alerts %s: no longer leads the alerts of crawl %r", self.owner, keys.crawl)
            return False
        if what != "done" or record is None:
            return True
        logger.warning(
            "crawlplug alerts: crawl %r: rule %r (%s) %s, value %g%s",
            keys.crawl,
            rule_id,
            rule.get("when"),
            event,
            value,
            "" if send else " (within its cooldown: not sent)",
        )
        if send and rule.get("notify"):
            title, body = message(record)
            try:
                ok = notify(list(rule["notify"]), title, body)
            except ConfigError as exc:
                self._once("apprise", "crawlplug alerts: %s", exc)
                ok = False
            if not ok:
                logger.warning(
                    "crawlplug alerts: crawl %r: the notification of rule %r did not go through "
                    "(see Apprise's log above)",
                    keys.crawl,
                    rule_id,
                )
        return True

    def _record_unknown(
        self, lead: Leadership, rule_id: str, last: dict[str, Any], why: str, snap: dict[str, Any]
    ) -> bool:
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
        rows.append(
            {
                **shown,
                "state": "unknown" if unknown else held,
                "why": unknown or None,
                "held": held,
                "since_ms": state.get("since"),
                "fired_ms": state.get("fired_ms"),
                "value": state.get("value"),
                "checked_ms": state.get("checked_ms"),
            }
        )
    return {
        "rules": rows,
        "active": [r for r in rows if r["held"] == "firing"],
        "events": stored.events(client, keys, n),
    }
