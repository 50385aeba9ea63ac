"""Alert rules: their small grammar, the fixed list of what they watch, their evaluation
and the notifications (Apprise).

A rule's condition is ``METRIC[(ARG)] [OP NUMBER] [for DURATION]``, e.g.
``error_rate > 0.2 for 2m``, ``null_rate(shop.price) > 0.1``, ``limit_reached``
(a bare metric means ``> 0``). It is parsed by :func:`parse` (an LALR grammar,
:mod:`crawlplug.alerts.grammar`, never eval, in time linear in its length, at most
500 characters) into a :class:`Condition`; the metrics are :data:`METRICS`, each
computed from the crawl's status snapshot (:func:`crawlplug.ops.status.snapshot`), the
numbers ``crawlplug status`` shows. Forms the grammar reads but no evaluator computes
yet (a threshold relative to the last run, ``at end``, a window) are refused when a
rule is added and skipped, said once, when a stored one is read.

:class:`Evaluator` evaluates every crawl's rules where it leads the crawl's
``alerts`` duty (crawlplug.alerts.store: a lease with a fencing token), so one
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

from ..errors import ConfigError, optional_module
from ..frontier.keys import CrawlKeys
from . import store as stored
from .grammar import MAX_LENGTH, Condition, read
from .measures import DAY_MS, METRICS, MINUTE_MS, NO_SCRAPY_STATS, RUN_END_STATES, RUN_METRICS, WINDOWED, Unknown

__all__ = [
    "ACTIONS",
    "COOLDOWN",
    "MAX_LENGTH",
    "METRICS",
    "NO_SCRAPY_STATS",
    "RUN_END_STATES",
    "WINDOWED",
    "Condition",
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
    if condition.baseline is not None and condition.baseline not in RUN_METRICS:
        raise ConfigError(
            f"last_run.{condition.baseline}: the last run's value is kept for {', '.join(sorted(RUN_METRICS))}"
        )
    wants = METRICS[metric][1]
    optional = bool(wants and wants.endswith("?"))
    if wants and not arg and not optional:
        raise ConfigError(f"{metric} needs an argument: {metric}({wants})")
    if not wants and arg:
        raise ConfigError(f"{metric} takes no argument (given {arg!r})")
    if condition.window_ms and metric not in WINDOWED:
        raise ConfigError(f"{metric} takes one argument, not a window too: {metric}({wants})")
    if condition.window_ms and not MINUTE_MS <= condition.window_ms <= DAY_MS:
        raise ConfigError(
            f"the window of {metric} is read from the site's minutes, kept a day: between 1m and 1d, "
            f"not {condition.args[-1]}"
        )
    if metric == "null_rate" and (arg or "").count(".") < 1:
        raise ConfigError(f"null_rate takes SITE.FIELD (a site definition and one of its fields), not {arg!r}")
    if metric == "run_end" and arg is not None and arg not in RUN_END_STATES:
        raise ConfigError(f"run_end takes the state a run ends in: one of {', '.join(RUN_END_STATES)}, not {arg!r}")
    return condition


#: What a rule may do when it fires (``--then``), besides notifying: on the running run, and
#: (the one a run-end rule may take) on the crawl's schedules.
ACTIONS = ("pause", "drain", "stop", "pause-schedules")


def make_rule(
    rule_id: str, when: str, notify: list[str], cooldown: float = COOLDOWN, then: str | None = None
) -> dict[str, Any]:
    """A rule to store, its condition parsed (ConfigError) and its URLs checked by Apprise;
    ``then``: what it does when it fires (:data:`ACTIONS`)."""
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
    if then is not None:
        if then not in ACTIONS:
            raise ConfigError(f"--then {then!r}: one of {', '.join(ACTIONS)}")
        if then != "pause-schedules" and (condition.at_end or condition.metric in _ENDED):
            raise ConfigError(
                f"--then {then}: a rule checked when a run has ended acts on no run (it has ended); "
                "it may pause the crawl's schedules (--then pause-schedules)"
            )
    for url in notify:
        check_url(url)
    rule = {"id": rule_id, "when": str(condition), "notify": list(notify), "cooldown": float(cooldown)}
    if then is not None:
        rule["then"] = then
    return rule


#: Metrics that are about a run that has ended.
_ENDED = frozenset({"run_end", "limit_reached", "new_items", "changed_items", "gone_items"})


def _apprise() -> Any:
    return optional_module("apprise", "alerts", "sending alert notifications")


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
                "action": state.get("action"),
            }
        )
    return {
        "rules": rows,
        "active": [r for r in rows if r["held"] == "firing"],
        "events": stored.events(client, keys, n),
    }
