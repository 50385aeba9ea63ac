"""The control process (``crawlplug control``): what must happen when no node runs.

An operator runs it next to Redis, on one machine or several: each process takes
part in every duty, and for each crawl one of them leads (crawlplug.crawl.leadership:
a lease in Redis with a fencing token). Its duties (:attr:`Control.duties`): firing the
crawls' scheduled runs (crawlplug.schedules), and evaluating their alert rules
(crawlplug.alerts.evaluator, led apart: the ``alerts``
duty, so a dashboard may lead it). ``crawlplug control --metrics-port`` serves the
crawls' Prometheus metrics too (crawlplug.metrics.exporter).

Each tick (a second by default) it reads which crawls have schedules, holds or
tries to take each crawl's leadership, and, where it leads, claims and fires every
schedule that is due. A background thread renews its leases in between, so a firing
that waits on slow daemons does not lose them. Stopping (SIGINT, SIGTERM) releases
them: another control process takes over at its next tick instead of after the lease.

A firing claimed by a leader that died before it finished is adopted by the next
leader (its fence is higher): the jobs the dead leader had recorded are kept and the
ones it had not are started (crawlplug.schedules.firing.fire with ``adopted``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import redis

from .alerts.evaluator import Evaluator
from .alerts.outbox import Sender
from .errors import REDIS_ERRORS, ConfigError, CrawlplugError
from .frontier.keys import CrawlKeys
from .frontier.results import new_node_id
from .frontier.store import redis_ms
from .schedules import firing as schedules
from .schedules import store as stored
from .schedules.store import ScheduleLeadership

logger = logging.getLogger(__name__)

#: Seconds a leader's lease lasts unless renewed (it is renewed every third of it).
LEASE = 15.0
#: Seconds between two ticks.
TICK = 1.0


def utc(ms: int | None) -> str:
    if not isinstance(ms, int):
        return "?"
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


class Control:
    """One control process (module docstring)."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "crawlplug",
        lease: float = LEASE,
        tick: float = TICK,
        timeout: float = 30.0,
        owner: str | None = None,
        dashboard_url: str = "",
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.lease_ms = int(lease * 1000)
        self.tick_seconds = tick
        self.timeout = timeout
        self.owner = owner or f"control-{new_node_id()}"
        self.leads: dict[str, ScheduleLeadership] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._warned: set[str] = set()
        #: outcomes of firings this process carried out but could not record yet (a Redis error)
        self._unrecorded: dict[tuple[str, str, int], dict[str, Any]] = {}
        #: evaluates the alert rules of every crawl whose ``alerts`` duty this process leads
        self.alerts = Evaluator(client, self.owner, prefix=prefix, lease_ms=self.lease_ms, dashboard_url=dashboard_url)
        #: what runs at every tick (metrics are served apart: crawlplug.metrics.exporter, read at scrape time)
        self.duties: list[Callable[[], None]] = [self.fire_schedules, self.alerts.tick]

    # -- leadership -------------------------------------------------------------------
    def _hold(self, crawl: str) -> ScheduleLeadership | None:
        """This process's leadership of ``crawl``, taken or renewed now; None if another leads."""
        with self._lock:
            lead = self.leads.get(crawl)
            if lead is None:
                lead = self.leads[crawl] = ScheduleLeadership(
                    self.client, CrawlKeys(crawl, self.prefix), self.owner, self.lease_ms
                )
            was = lead.fence
            what = lead.hold()
        if what == "acquired":
            logger.info(
                "crawlplug control %s: leading the schedules of crawl %r (fence %d)", self.owner, crawl, lead.fence
            )
        elif what == "held" and was:
            logger.warning("crawlplug control %s: lost the lead of crawl %r to %s", self.owner, crawl, lead.holder)
        return lead if lead.fence else None

    def _renew(self) -> None:
        """The lease keeper (a thread): renews every lease held, a third of the lease apart."""
        while not self._stop.wait(self.lease_ms / 3000):
            for crawl in [c for c, lead in list(self.leads.items()) if lead.fence]:
                try:
                    self._hold(crawl)
                except REDIS_ERRORS as exc:
                    logger.warning("crawlplug control: could not renew the lead of crawl %r: %s", crawl, exc)

    def release(self) -> None:
        """Step down from every lead (another process takes over at its next tick)."""
        with self._lock:
            for lead in self.leads.values():
                if lead.fence:
                    try:
                        lead.release()
                    except REDIS_ERRORS as exc:
                        logger.warning("crawlplug control: could not release a lead (%s); it expires", exc)

    # -- the duty of firing schedules ---------------------------------------------------
    def fire_schedules(self) -> None:
        for crawl in stored.scheduled_crawls(self.client, self.prefix):
            lead = self._hold(crawl)
            if lead is not None:
                self._fire_due(lead)

    def _once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message, *args)

    def _fire_due(self, lead: ScheduleLeadership) -> None:
        keys = lead.keys
        for name, spec in stored.all_schedules(self.client, keys).items():
            if "unreadable" in spec or not isinstance(spec.get("next"), int):
                self._once(
                    f"{keys.crawl}/{name}",
                    "crawlplug control: schedule %r of crawl %r is unreadable; delete it and add it again",
                    name,
                    keys.crawl,
                )
                continue
            last = spec.get("last") or {}
            if last.get("state") == "firing" and isinstance(last.get("due"), int):
                late = self._unrecorded.get((keys.crawl, name, last["due"]))
                if late is not None and int(last.get("fence") or 0) == lead.fence:
                    # this process fired it; recording the outcome failed (a Redis error): again
                    if lead.done(name, last["due"], late)[0] in ("done", "moved", "gone", "deposed"):
                        self._unrecorded.pop((keys.crawl, name, last["due"]), None)
                    continue
                if int(last.get("fence") or 0) < lead.fence:
                    what, _ = lead.adopt(name, last["due"])
                    if what == "adopted":
                        logger.info(
                            "crawlplug control: schedule %r of crawl %r: taking over its firing due %s, "
                            "left unfinished by %s",
                            name,
                            keys.crawl,
                            utc(last["due"]),
                            last.get("owner"),
                        )
                        self._carry_out(lead, spec, last["due"], adopted=True)
                continue
            now = redis_ms(self.client)
            due = spec["next"]
            if due > now:
                continue
            try:
                times = schedules.times_between(spec["cron"], spec.get("tz", "UTC"), due, now)
                next_due = schedules.next_after(spec["cron"], spec.get("tz", "UTC"), now)
            except (ConfigError, KeyError, TypeError, AttributeError) as exc:  # a schedule written by hand
                self._once(
                    f"{keys.crawl}/{name}",
                    "crawlplug control: schedule %r of crawl %r is unreadable (%s); delete it and add it again",
                    name,
                    keys.crawl,
                    exc,
                )
                continue
            what, detail = lead.claim(name, due, next_due, times)
            if what != "claimed":
                logger.info(
                    "crawlplug control: schedule %r of crawl %r not fired here: %s %s", name, keys.crawl, what, detail
                )
                continue
            self._carry_out(lead, spec, due, times=times, next_due=next_due)

    def _carry_out(
        self,
        lead: ScheduleLeadership,
        spec: dict[str, Any],
        due: int,
        *,
        adopted: bool = False,
        times: int = 1,
        next_due: int | None = None,
    ) -> None:
        keys, name = lead.keys, spec["name"]
        try:
            outcome = schedules.fire(
                self.client, keys, spec, due, fence=lead.fence, adopted=adopted, timeout=self.timeout
            )
        except (CrawlplugError, *REDIS_ERRORS) as exc:
            outcome = {"state": "failed", "why": str(exc)[:500]}
        outcome["times"] = times
        try:
            what, _ = lead.done(name, due, outcome)
        except REDIS_ERRORS:
            self._unrecorded[(keys.crawl, name, due)] = outcome  # recorded at a later tick
            raise
        missed = f" (stands for {times} due times missed while no control process ran)" if times > 1 else ""
        said = outcome.get("message") or outcome.get("why") or ""
        nxt = f"; next {utc(next_due)}" if next_due else ""
        if what != "done":
            logger.warning(
                "crawlplug control: schedule %r of crawl %r: the outcome of its firing due %s was not "
                "recorded (%s): this process no longer leads",
                name,
                keys.crawl,
                utc(due),
                what,
            )
        logger.info(
            "crawlplug control: schedule %r of crawl %r due %s: %s: %s%s%s",
            name,
            keys.crawl,
            utc(due),
            outcome["state"],
            said,
            missed,
            nxt,
        )

    # -- the loop ---------------------------------------------------------------------
    def tick(self) -> None:
        """Run every duty once, schedules first. A duty that fails (a Redis error, or anything a
        value written by hand into Redis makes it raise) is said once and tried again at the next
        tick; it never keeps the other duties from running."""
        for duty in self.duties:
            try:
                duty()
            except REDIS_ERRORS as exc:
                self._once(f"redis:{exc}", "crawlplug control: Redis error (%s); trying again every tick", exc)
            except Exception as exc:
                if f"duty:{type(exc).__name__}:{exc}" not in self._warned:
                    self._warned.add(f"duty:{type(exc).__name__}:{exc}")
                    logger.exception(
                        "crawlplug control: %s failed; trying again every tick", getattr(duty, "__name__", duty)
                    )

    def run(self, *, ticks: int | None = None) -> None:
        """Tick until :meth:`stop` (or ``ticks`` ticks); releases the leads at the end."""
        keeper = threading.Thread(target=self._renew, name="crawlplug-control-leases", daemon=True)
        keeper.start()
        # the alert notifications go out (and are retried) beside the ticks, never in their way
        sender = Sender(self.client, self.alerts.leading).start()
        n = 0
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                self.tick()
                n += 1
                if ticks is not None and n >= ticks:
                    break
                self._stop.wait(max(0.0, self.tick_seconds - (time.monotonic() - started)))
        finally:
            self._stop.set()
            keeper.join(5)
            sender.stop()
            self.release()
            self.alerts.release()

    def stop(self) -> None:
        self._stop.set()
