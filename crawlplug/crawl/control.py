"""A run's control: its crawl-wide limits, and an operator's stop, drain, continue or new run.

A run (crawlplug.crawl.runs) carries its own limits in its ``run`` hash:
``lim_pages``, ``lim_items``, ``lim_errors`` and ``lim_timeout`` (ms since the run
began). Nodes write their ``CLOSESPIDER_*`` settings there when they join, only the
limits the run has none of yet (:func:`apply`), so the run keeps the limits it began
with; an operator changes them (:func:`set_limits`). They are enforced where the work
happens, in scripts that run anyway: ``lua/pop.lua`` leases nothing for a run that
ended and never more pages than the page limit leaves room for after the pages done
and the leases held (so the pages fetched overshoot the limit only by requests that
fail and are fetched again), and ``lua/heartbeat.lua`` ends the run, state ``limit``
with the limit as its reason (``closespider_pagecount``, ``closespider_itemcount``,
``closespider_errorcount``, ``closespider_timeout``), at the first heartbeat that finds
one reached. Items and spider errors are counted by the nodes and added with each
heartbeat, so those limits hold to within a heartbeat's worth of items.

An operator stops a run (:func:`stop`): state ``stopped``, at once; or drains it
(``drain=True``): state ``draining``, the nodes admit no new request, and when the
queue has run out the run ends as stopped (``lua/finish.lua``). Both are sticky: a
node that starts later is told so by ``lua/join.lua`` and exits, until the operator
continues the run (:func:`continue_run`, refused while a limit stays reached) or asks
for a new one (:func:`new_run`: the next node begins it). Every transition is one
call of ``lua/runctl.lua``, which checks the state and changes it atomically.

The per-domain page cap (``CRAWLPLUG_DOMAIN_PAGES``) is a limit of the per-domain
queue: ``lua/admit.lua`` admits at most that many requests of one domain in a run
(dconf ``cap:s`` from the nodes' settings, ``cap:o`` from an operator:
:func:`set_domain_pages`).
"""

from __future__ import annotations

import getpass
import json
import socket
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import redis

from ..errors import ConfigError
from ..frontier.core import open_domains
from ..frontier.keys import CrawlKeys
from ..frontier.scripts import Scripts
from ..frontier.store import redis_ms, text
from . import runs

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

__all__ = [
    "LIMITS",
    "Limits",
    "Outcome",
    "apply",
    "continue_run",
    "domain_pages",
    "from_settings",
    "new_run",
    "operator",
    "pause_schedules",
    "record_summary",
    "resume_schedules",
    "schedules_paused",
    "set_domain_pages",
    "set_limits",
    "stop",
]

#: limit name -> (run hash field, the Scrapy setting it takes the meaning of, close reason)
LIMITS: dict[str, tuple[str, str, str]] = {
    "pages": ("lim_pages", "CLOSESPIDER_PAGECOUNT", "closespider_pagecount"),
    "items": ("lim_items", "CLOSESPIDER_ITEMCOUNT", "closespider_itemcount"),
    "errors": ("lim_errors", "CLOSESPIDER_ERRORCOUNT", "closespider_errorcount"),
    "timeout": ("lim_timeout", "CLOSESPIDER_TIMEOUT", "closespider_timeout"),
}
#: dconf fields of the per-domain page cap: an operator's, the nodes' settings (lua/admit.lua)
CAP_OPERATOR, CAP_SETTINGS = "cap:o", "cap:s"


@dataclass(frozen=True)
class Limits:
    """A run's crawl-wide limits (0: none): pages done, items scraped, spider errors, and
    seconds since the run began."""

    pages: int = 0
    items: int = 0
    errors: int = 0
    timeout: float = 0.0

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def run_fields(self) -> dict[str, int]:
        """The ``run`` hash fields of the limits that are set (timeout in ms)."""
        out = {}
        for name, (field_, _, _) in LIMITS.items():
            value = getattr(self, name)
            if value:
                out[field_] = round(value * 1000) if name == "timeout" else int(value)
        return out

    @classmethod
    def from_fields(cls, values: Mapping[str, object]) -> Limits:
        """From ``run`` hash fields (or runctl.lua's JSON of them); junk reads as no limit."""

        def number(field_: str) -> float:
            raw: Any = values.get(field_) or 0  # a number, or text of one; junk raises below
            try:
                return max(0.0, float(raw))
            except (TypeError, ValueError):
                return 0.0

        return cls(
            int(number("lim_pages")), int(number("lim_items")), int(number("lim_errors")), number("lim_timeout") / 1000
        )

    def items_text(self) -> list[str]:
        out = []
        if self.pages:
            out.append(f"{self.pages:,} pages")
        if self.items:
            out.append(f"{self.items:,} items")
        if self.errors:
            out.append(f"{self.errors:,} spider errors")
        if self.timeout:
            out.append(f"{self.timeout:g} s since the run began")
        return out

    def text(self) -> str:
        return ", ".join(self.items_text()) or "none"

    def differs(self, other: Limits) -> list[str]:
        """The settings of ``self`` (a node's) that ``other`` (the run's) does not hold."""
        return [
            LIMITS[f.name][1]
            for f in fields(self)
            if getattr(self, f.name) and getattr(self, f.name) != getattr(other, f.name)
        ]


def from_settings(settings: BaseSettings) -> Limits:
    """The ``CLOSESPIDER_*`` limits Scrapy settings ask for (0: none); refuses negative ones."""
    values: dict[str, float] = {}
    for name, (_, setting, _) in LIMITS.items():
        try:
            value = settings.getfloat(setting) if name == "timeout" else settings.getint(setting)
        except (TypeError, ValueError):
            raise ConfigError(f"{setting}={settings.get(setting)!r} is not a number") from None
        if value < 0:
            raise ConfigError(f"{setting} must be 0 (no limit) or more, got {value}")
        values[name] = value
    return Limits(int(values["pages"]), int(values["items"]), int(values["errors"]), values["timeout"])


@dataclass
class Outcome:
    """What lua/runctl.lua did: ``outcome`` "ok", or why nothing was done ("none", "gone",
    "state", "reached"), the run's ``state`` and id after the call, its limits in force,
    and for "reached" the close reason of the limit still reached."""

    outcome: str
    state: str
    run: int
    limits: Limits
    reached: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def operator(command: str) -> str:
    """Who an operator's command is recorded as: ``crawlplug stop (alice@web1)``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = "?"
    return f"{command} ({user}@{socket.gethostname()})"


def _call(
    client: redis.Redis,
    keys: CrawlKeys,
    action: str,
    *,
    run_id: int | None = None,
    by: str = "",
    arg: Mapping[str, object] | None = None,
    mode: str = "set",
    scripts: Scripts | None = None,
) -> Outcome:
    scripts = scripts or Scripts(client)
    raw = scripts.runctl(
        keys=[keys.run, keys.runs, keys.stats],
        args=[action, "" if run_id is None else str(run_id), by, json.dumps(arg or {}, separators=(",", ":")), mode],
    )
    limits = Limits.from_fields(json.loads(text(raw[3]) or "{}"))
    return Outcome(text(raw[0]), text(raw[1]), int(raw[2]), limits, text(raw[4]))


def apply(
    client: redis.Redis, keys: CrawlKeys, run_id: int, limits: Limits, *, by: str, scripts: Scripts | None = None
) -> Outcome:
    """A node's limits, written to run ``run_id`` where it has none yet (the run keeps those it
    began with); returns the limits in force."""
    return _call(client, keys, "limits", run_id=run_id, by=by, arg=limits.run_fields(), mode="nx", scripts=scripts)


def set_limits(client: redis.Redis, keys: CrawlKeys, changes: dict[str, float], *, by: str) -> Outcome:
    """An operator sets limits of the current run (``{"pages": 500, "timeout": 0}``: 0 drops one)."""
    return _call(client, keys, "limits", by=by, arg=_fields(changes))


def _fields(changes: dict[str, float]) -> dict[str, int]:
    out = {}
    for name, value in changes.items():
        if name not in LIMITS:
            raise ConfigError(f"unknown limit {name!r} (known: {', '.join(LIMITS)})")
        if value < 0:
            raise ConfigError(f"the {name} limit must be 0 (none) or more, got {value}")
        out[LIMITS[name][0]] = round(value * 1000) if name == "timeout" else int(value)
    return out


def stop(client: redis.Redis, keys: CrawlKeys, *, by: str, drain: bool = False) -> Outcome:
    """Stop the current run now (state ``stopped``), or drain it (``draining``: it ends as
    stopped when its queue has run out)."""
    if drain:
        return _call(client, keys, "drain", by=by)
    totals = runs.totals(client, runs.part_keys(client, keys))
    return _call(client, keys, "stop", by=by, arg=totals)


def continue_run(client: redis.Redis, keys: CrawlKeys, *, by: str, changes: dict[str, float] | None = None) -> Outcome:
    """Let a run that was stopped, ended by a limit or is draining run again, with ``changes``
    to its limits first; refused (outcome "reached") while one of its limits stays reached."""
    return _call(client, keys, "continue", by=by, arg=_fields(changes or {}))


def new_run(client: redis.Redis, keys: CrawlKeys, *, by: str) -> Outcome:
    """After a run that was stopped or ended by a limit: the next node that starts begins a
    new run (as after a finished one)."""
    return _call(client, keys, "new", by=by)


def record_summary(client: redis.Redis, keys: CrawlKeys, run_id: int, scripts: Scripts | None = None) -> bool:
    """Write the summary of run ``run_id`` (stopped or ended by a limit) with its totals now; a
    node closing does it, so the last to close leaves the final numbers."""
    totals = runs.totals(client, runs.part_keys(client, keys))
    return _call(client, keys, "summary", run_id=run_id, arg=totals, scripts=scripts).ok


def set_domain_pages(client: redis.Redis, keys: CrawlKeys, pages: int) -> None:
    """An operator's per-domain page cap for the crawl (0: drop it, the nodes' setting holds)."""
    if pages < 0:
        raise ConfigError(f"the per-domain page cap must be 0 (none) or more, got {pages}")
    open_domains(client, keys).configure({CAP_OPERATOR: str(pages) if pages else ""})


def domain_pages(client: redis.Redis, keys: CrawlKeys) -> int:
    """The per-domain page cap in force (lua/admit.lua's rule: the operator's, else the nodes'); 0: none."""
    conf = open_domains(client, keys).limits()
    for field_ in (CAP_OPERATOR, CAP_SETTINGS):
        try:
            return max(0, int(conf[field_]))
        except (KeyError, ValueError):
            continue
    return 0


# -- the crawl's schedules, paused (an alert rule's --then pause-schedules, an operator) ----


def pause_schedules(client: redis.Redis, keys: CrawlKeys, *, by: str, why: str = "") -> bool:
    """Hold every schedule of the crawl until :func:`resume_schedules`: a firing due meanwhile
    is recorded as skipped, saying who paused them. False if they were paused already."""
    record = json.dumps({"by": by, "at": redis_ms(client), "why": why}, separators=(",", ":"))
    if client.set(keys.schedpause, record, nx=True):
        return True
    return text(client.get(keys.schedpause) or b"") == record  # this call's own, sent again after a lost reply


def resume_schedules(client: redis.Redis, keys: CrawlKeys) -> bool:
    """Let the crawl's schedules fire again; False if they were not paused."""
    return bool(client.delete(keys.schedpause))


def schedules_paused(client: redis.Redis, keys: CrawlKeys) -> dict[str, object] | None:
    """Who paused the crawl's schedules, when and why; None when they are not paused."""
    raw = client.get(keys.schedpause)
    if raw is None:
        return None
    try:
        found = json.loads(raw)
    except ValueError:
        return {"by": "?", "at": None, "why": f"unreadable: {raw[:80]!r}"}
    return found if isinstance(found, dict) else {"by": "?", "at": None, "why": "unreadable"}
