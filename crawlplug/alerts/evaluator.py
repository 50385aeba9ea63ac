"""The evaluation of a crawl's alert rules by the leader of its ``alerts`` duty.

:class:`Evaluator` evaluates every crawl's rules where it leads the crawl's ``alerts``
duty (crawlplug.crawl.leadership: a lease with a fencing token), so one process at a time
does, whichever of the control processes and dashboards runs. A rule's states: ``ok`` ->
``pending`` (the condition holds, not yet for its ``for``) -> ``firing`` (announced once)
-> ``ok`` (announced once: cleared), and ``unknown`` while its metric cannot be evaluated
(:class:`~crawlplug.alerts.measures.Unknown`: why is recorded and shown; the state it had
resumes once the metric is known again, nothing is announced). A new episode that starts
within the rule's cooldown of the last announcement fires quietly (recorded and shown, not
sent), and so does its clearing. The state is recorded (``alerts/lua/alert.lua``) before
the notification is queued in the crawl's outbox (crawlplug.alerts.outbox: sent and
retried by a thread of its own, so a webhook that does not answer holds up no schedule).

A rule ``at end`` is checked once per run, when the run has ended: it fires (or not) for
that run, and says nothing while the next one runs. A threshold ``N * last_run.METRIC``
is scaled by the run before the current one's value. A rule with ``then`` acts when it
fires, by this leader only (its record fenced first): ``pause``, ``drain`` or ``stop`` the
running run, or ``pause-schedules``; the action is written to the run's record (``by``:
the rule), the audit log and the rule's state.
"""

from __future__ import annotations

import logging
from typing import Any

import redis

from ..access import audit
from ..access.users import User
from ..crawl import Crawl, control
from ..crawl.leadership import Leadership
from ..errors import REDIS_ERRORS, ConfigError, CrawlplugError
from ..frontier.keys import CrawlKeys
from ..ops import status
from . import outbox
from . import store as stored
from .grammar import MAX_LENGTH, Condition
from .measures import METRICS, RUN_END_STATES, WINDOWED, Unknown, run_summaries, run_value
from .rules import COOLDOWN, message, parse, step

__all__ = ["Evaluator"]

logger = logging.getLogger(__name__)


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

    def leading(self) -> list[CrawlKeys]:
        """The crawls whose alerts this process leads now (their outboxes are its to send)."""
        return [lead.keys for lead in list(self.leads.values()) if lead.fence]

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
        last = states.get(rule_id, {})
        run_id = snap["run"].get("id")
        if condition.at_end and (
            snap["run"].get("state") not in RUN_END_STATES or run_id is None or last.get("end_run") == run_id
        ):
            return True  # checked once a run, when it has ended
        if condition.window_ms:
            value = WINDOWED[condition.metric](self.client, keys, snap, condition.arg, condition.window_ms)
        else:
            value = METRICS[condition.metric][2](self.client, keys, snap, condition.arg)
        baseline: float | Unknown | None = None
        if condition.baseline is not None and not isinstance(value, Unknown):
            _, before = run_summaries(self.client, keys, snap)
            baseline = run_value(condition.baseline, before, snap["now_ms"])
            if isinstance(baseline, Unknown):
                value = Unknown(f"last_run.{condition.baseline}: {baseline} before run {run_id}")
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
        holds = condition.holds(value, baseline if isinstance(baseline, float) else None)
        if condition.at_end:  # once for this run: fires if it holds, quiet otherwise
            new = {"state": "firing" if holds else "ok", "since": snap["now_ms"], "end_run": run_id}
            event = "fired" if holds else None
        else:
            new, event = step(last, holds, snap["now_ms"], condition.for_ms, cooldown_ms)
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
        if event == "fired" and rule.get("then"):
            self._act(lead, rule_id, str(rule["then"]), value, new)
        if send and rule.get("notify"):
            title, body = message(record)
            outbox.enqueue(self.client, keys, rule_id, [str(u) for u in rule["notify"]], title, body)
        return True

    def _act(self, lead: Leadership, rule_id: str, then: str, value: float, state: dict[str, Any]) -> None:
        """Take the rule's action (its firing is recorded: this process leads), and say so in
        the run's record, the audit log and the rule's state."""
        keys = lead.keys
        by = f"alert rule {rule_id}"
        if then == "pause":
            done = Crawl(self.client, keys).pause(by=by)
            outcome = "ok" if done else "already paused"
        elif then in ("drain", "stop"):
            out = control.stop(self.client, keys, by=by, drain=then == "drain")
            outcome = "ok" if out.ok else f"not done: the run is {out.state}"
        else:
            done = control.pause_schedules(self.client, keys, by=by, why=f"it fired with {value:g}")
            outcome = "ok" if done else "already paused"
        who = User(by, "alerts", self.owner)
        audit.record(self.client, who, f"alerts.then.{then}", keys.crawl, {"rule": rule_id, "value": value}, outcome)
        state["action"] = {"then": then, "at": state.get("checked_ms"), "outcome": outcome}
        stored.record(lead, rule_id, state, None)
        logger.warning("crawlplug alerts: crawl %r: rule %r fired: %s (%s)", keys.crawl, rule_id, then, outcome)

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
