"""A node's side of its run's crawl-wide limits and of an operator's stop or drain.

With ``CRAWLPLUG_LIMITS = "crawl"`` (the default) Scrapy's ``CLOSESPIDER_PAGECOUNT``,
``_ITEMCOUNT``, ``_ERRORCOUNT`` and ``_TIMEOUT`` mean the whole run, every node
together: :class:`RunControl` takes them over from Scrapy's CloseSpider extension
(which would count this node alone), writes them to the run
(:func:`crawlplug.crawl.control.apply`) and says so in the node's first lines.
Redis enforces them (lua/pop.lua, lua/heartbeat.lua); this part follows the run's
state that each heartbeat brings back:

* ``limit`` or ``stopped``: the node takes no new lease, gives back the ones it had
  not started, finishes what it downloads and closes with the limit as its reason
  (``closespider_pagecount``, ...) or ``stopped``;
* ``draining``: the node admits no new request and crawls what is queued; the run
  ends as stopped when the queue has run out (lua/finish.lua), and the node closes
  with ``stopped``;
* ``running`` again after a drain: an operator continued the run.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..config import scope
from ..crawl import control, runs
from ..crawl.control import LIMITS, Limits
from ..errors import REDIS_ERRORS
from . import enginehooks

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

    from ..crawl import Crawl
    from ..frontier.interface import CrawlFrontier
    from .batch import Batch
    from .reporter import Reporter

__all__ = ["RunControl", "from_settings"]

logger = logging.getLogger(__name__)

#: limit name -> the key of Scrapy's CloseSpider extension that counts it
_CLOSESPIDER_KEYS = {"pages": "pagecount", "items": "itemcount", "errors": "errorcount", "timeout": "timeout"}


def from_settings(settings: BaseSettings) -> tuple[Limits, bool]:
    """This node's CLOSESPIDER_* limits, and whether they mean the whole run (CRAWLPLUG_LIMITS);
    ConfigError for a value that is not a limit."""
    return control.from_settings(settings), scope(settings, "CRAWLPLUG_LIMITS") == "crawl"


class RunControl:
    """The run's limits as this node applies them, and what it does when the run ends or drains."""

    def __init__(
        self,
        crawler: Crawler,
        frontier: CrawlFrontier,
        batch: Batch,
        *,
        crawl: Crawl,
        reporter: Reporter,
        limits: Limits,
        crawl_wide: bool,
    ) -> None:
        self.crawler = crawler
        self.frontier = frontier
        self.crawl = crawl  #: the crawl's control plane (its run record and limits)
        self.batch = batch
        self.report = reporter
        self.limits = limits  #: this node's CLOSESPIDER_* settings
        self.crawl_wide = crawl_wide  #: CRAWLPLUG_LIMITS = "crawl"
        self.in_force = Limits()  #: the run's limits, as last read
        self.run_id = 0
        self.ending = ""  #: the reason this node closes with, once the run ended (a limit, a stop)
        self.draining = False

    def take_over(self) -> None:
        """Scrapy's CloseSpider stops counting the limits the run counts (before spider_opened)."""
        if self.crawl_wide and self.limits:
            names = [_CLOSESPIDER_KEYS[name] for name in LIMITS if getattr(self.limits, name)]
            enginehooks.take_over_closespider(self.crawler, names)

    def _settings_text(self, verb: str) -> str:
        """This node's limit settings as written, and ``verb`` agreeing with them ("mean" -> "means")."""
        parts = []
        for name, (_, setting, _) in LIMITS.items():
            value = getattr(self.limits, name)
            if value:
                parts.append(f"{setting}={value:g}" if name == "timeout" else f"{setting}={value}")
        return " and ".join(parts) + " " + (verb if len(parts) > 1 else verb + "s")

    def apply(self, run_id: int) -> None:
        """The node joined run ``run_id`` (or joined again): its limits go to the run where the run
        has none, and it says which limits hold, in its first lines."""
        self.run_id = run_id
        self.ending = ""
        self.draining = False
        self.batch.new_run()
        crawl = self.frontier.keys.crawl
        if not self.crawl_wide:
            if self.limits:
                logger.info(
                    "crawlplug: limits: per node (CRAWLPLUG_LIMITS='node'): %s this node alone, as in Scrapy",
                    self._settings_text("count"),
                )
            return
        outcome = control.apply(
            self.crawl.client,
            self.crawl.keys,
            run_id,
            self.limits,
            by=self.frontier.node_id,
            scripts=self.crawl.scripts,
        )
        if outcome.outcome != "ok":
            logger.debug("crawlplug: the run's limits were not written (%s, run %s)", outcome.outcome, outcome.run)
            return
        self.in_force = outcome.limits
        if self.limits:
            logger.info(
                "crawlplug: limits: %s the whole run here, every node together: run %d of crawl %r "
                "ends at %s (CRAWLPLUG_LIMITS='node' for Scrapy's per-node meaning)",
                self._settings_text("mean"),
                run_id,
                crawl,
                self.in_force.text(),
            )
            differ = self.limits.differs(self.in_force)
            if differ:
                logger.warning(
                    "crawlplug: run %d keeps the limits it has (%s): this node's %s not applied; "
                    "`crawlplug limits %s --pages N ...` changes them",
                    run_id,
                    self.in_force.text(),
                    " and ".join(differ) + (" are" if len(differ) > 1 else " is"),
                    crawl,
                )
        elif self.in_force:
            logger.info(
                "crawlplug: limits: run %d of crawl %r has crawl-wide limits: %s (`crawlplug limits %s` "
                "shows and changes them)",
                run_id,
                crawl,
                self.in_force.text(),
                crawl,
            )

    # -- the run's state, at each heartbeat -------------------------------------------
    def follow(self, state: str) -> str:
        """The run's state from a heartbeat: what changed ("end", "drain", "continue", or "")."""
        if state in ("limit", "stopped"):
            if self.ending:
                return ""
            self.end(state)
            return "end"
        if state == "draining" and not self.draining:
            self._drain()
            return "drain"
        if state == "running" and self.draining:
            self.draining = False
            self.batch.drain(False)
            logger.warning(
                "crawlplug: run %d of crawl %r was continued by an operator: it no longer drains",
                self.run_id,
                self.frontier.keys.crawl,
            )
            enginehooks.wake(self.crawler)
            return "continue"
        return ""

    def end(self, state: str) -> None:
        """The run ended by a limit or was stopped: no new lease, unstarted leases back, in-flight
        requests finished, then the node closes with the run's reason."""
        record = runs.record(self.crawl.client, self.crawl.keys)
        reason = record.get("reason") or state
        self.ending = reason
        self.batch.close_run()
        given = 0
        try:
            given = self.batch.give_back_prefetched()
        except REDIS_ERRORS as exc:  # they expire, and go back then
            logger.warning("crawlplug: could not give the requests not started back now (%s)", exc)
        crawl, busy = self.frontier.keys.crawl, len(self.batch.book)
        self.report.count(f"crawlplug/run_{state}")
        doing = []
        if busy:
            doing.append(f"finishes the {busy} requests it is downloading")
        if given:
            doing.append(f"gave {given} it had not started back to the queue")
        closes = "this node " + ", ".join([*doing, "closes"]) if doing else "this node closes"
        if state == "limit":
            limits = Limits.from_fields(record)
            what = {reason_: name for name, (_, _, reason_) in LIMITS.items()}.get(reason, "")
            value = getattr(limits, what, 0) if what else 0
            shown = Limits(**{what: value}).text() if what and value else "its limit"
            logger.warning(
                "crawlplug: run %d of crawl %r ended by a limit: %s (%s, every node together): %s",
                self.run_id,
                crawl,
                reason,
                shown,
                closes,
            )
        else:
            logger.warning(
                "crawlplug: run %d of crawl %r was stopped by %s at %s: %s; nodes started later exit "
                "until `crawlplug continue %s` or `crawlplug new-run %s`",
                self.run_id,
                crawl,
                record.get("by", "an operator"),
                runs.format_ms(_int(record.get("ended"))),
                closes,
                crawl,
                crawl,
            )
        enginehooks.close(self.crawler, reason)

    def _drain(self) -> None:
        self.draining = True
        self.batch.drain(True)
        record = runs.record(self.crawl.client, self.crawl.keys)
        logger.warning(
            "crawlplug: run %d of crawl %r is draining (by %s): this node admits "
            "no new requests, crawls what is queued, and closes with 'stopped' when the queue has run out",
            self.run_id,
            self.frontier.keys.crawl,
            record.get("drain_by", "an operator"),
        )
        self.report.count("crawlplug/run_draining")

    def ended_by_finish(self, state: str) -> None:
        """lua/finish.lua found the run stopped (a drain that ran out, recorded by this node or
        another) or ended by a limit: close with it, as at a heartbeat."""
        if not self.ending:
            self.end(state)

    def closed(self) -> None:
        """The node closes after the run ended: the run's summary gets the totals as they are now
        (the last node to close leaves the final numbers)."""
        if not self.ending:
            return
        try:
            control.record_summary(self.crawl.client, self.crawl.keys, self.run_id, scripts=self.crawl.scripts)
        except REDIS_ERRORS as exc:
            logger.debug("crawlplug: could not update the summary of run %d: %s", self.run_id, exc)


def _int(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None
