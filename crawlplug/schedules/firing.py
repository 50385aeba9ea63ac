"""Scheduled runs: a crawl started anew at the times of a cron expression (``crawlplug schedule``).

A schedule names a crawl, a cron expression (five fields, or six with seconds last:
``*/5 * * * * *`` is every five seconds; croniter's syntax) read in a time zone (UTC
unless told), and what to start: the daemons, nodes per daemon, settings, spider
arguments (crawlplug.scrapyd.launch.Plan). At each due time the control process that
leads the crawl's schedules (``crawlplug control``, crawlplug.controlprocess) fires it
with :func:`fire`:

* the last run finished (or there is none): the nodes are started and begin the
  next run themselves, their settings deciding whether it keeps fingerprints;
* the last run was stopped, ended by a limit, interrupted (work left, no node), or
  runs with no live node: a new run is begun first, then the nodes are started;
* the run still runs with live nodes (the last firing has not finished its crawl),
  or nodes started before still wait on their daemons: the firing is **skipped**
  and says so; the run is not cut short.

Times missed while no control process ran are fired once when one runs again
(``times`` says how many it stands for), not once each.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any

import redis

from ..crawl import control, runs
from ..crawl.nodes import live_nodes
from ..errors import ConfigError, ScrapydError
from ..frontier.keys import CrawlKeys
from ..frontier.store import redis_ms
from ..scrapyd import store as jobs
from ..scrapyd.jobs import refresh
from ..scrapyd.launch import Plan, launch
from ..starts.seeds import zone
from . import store as schedules

#: The longest cron expression read (croniter's own parsing is given nothing longer).
MAX_CRON = 200
#: A schedule's name: it names its jobs on the daemons (their log files) too.
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")


def _croniter() -> Any:
    from croniter import croniter  # noqa: PLC0415 - only the schedule commands and the control process need it

    return croniter


def check_cron(expr: str, tz: str = "UTC") -> None:
    """ConfigError unless ``expr`` is a cron expression of five fields, or six (seconds last),
    whose times do come (``0 0 31 2 *``, February 31st, never does), read in time zone ``tz``."""
    fields = expr.split() if isinstance(expr, str) else []
    if len(fields) not in (5, 6) or len(expr) > MAX_CRON or not _valid(expr):
        raise ConfigError(
            f"--cron {expr!r:.120} is not a cron expression: five fields (minute hour day month weekday, "
            "e.g. '0 2 * * *'), or six with seconds last (e.g. '* * * * * */5', every 5 seconds)"
        )
    zone(tz)
    next_after(expr, tz, int(time.time() * 1000))


def _valid(expr: str) -> bool:
    try:
        return bool(_croniter().is_valid(expr))
    except Exception:  # noqa: BLE001 - croniter's own checks raise what they raise on odd text
        return False


def next_after(expr: str, tz: str, after_ms: int) -> int:
    """The first time of ``expr`` strictly after ``after_ms`` (ms since the epoch); ConfigError if
    there is none (a date that never comes) or the expression is not one (a schedule written by
    hand into Redis)."""
    start = datetime.fromtimestamp(after_ms / 1000, zone(tz))
    try:
        return int(_croniter()(expr, start).get_next(datetime).timestamp() * 1000)
    except Exception as exc:  # noqa: BLE001 - croniter raises CroniterError, ValueError, KeyError... on odd text
        raise ConfigError(
            f"cron expression {expr!r:.120} gives no next time ({type(exc).__name__}: {str(exc)[:120]})"
        ) from None


def times_between(expr: str, tz: str, first_ms: int, now_ms: int, cap: int = 1000) -> int:
    """How many times of ``expr`` fall in [first_ms, now_ms] (``first_ms`` being one); at most ``cap``."""
    n, t = 1, first_ms
    while n < cap:
        t = next_after(expr, tz, t)
        if t > now_ms:
            break
        n += 1
    return n


def make(
    client: redis.Redis, keys: CrawlKeys, *, name: str, cron: str, tz: str, plan: Plan, by: str = "operator"
) -> dict[str, Any]:
    """A schedule's spec (checked), due at its first time after now."""
    if not NAME_RE.match(name):
        raise ConfigError(f"schedule name {name!r}: letters, digits, '_', '.', '-', at most 40")
    check_cron(cron, tz)
    now = redis_ms(client)
    return {
        "name": name,
        "crawl": keys.crawl,
        "cron": cron,
        "tz": tz,
        "plan": plan.as_dict(),
        "created": now,
        "by": by,
        "next": next_after(cron, tz, now),
        "last": None,
    }


def add(client: redis.Redis, keys: CrawlKeys, spec: dict[str, Any]) -> bool:
    """Store the schedule (True: new; False: it replaced one of the same name)."""
    return schedules.put(client, keys, spec)


def _waiting_jobs(client: redis.Redis, keys: CrawlKeys, timeout: float) -> list[str]:
    """Jobs of the crawl that their daemon, asked now, still has waiting or starting (a
    firing would begin a run under them); jobs of a daemon that does not answer do not
    hold a firing back."""
    asked = redis_ms(client)
    refresh(client, keys, timeout=min(timeout, 10.0))
    return [
        j["id"]
        for j in jobs.all_jobs(client, keys)
        if j["state"] in ("pending", "starting") and int(j.get("checked") or 0) >= asked
    ]


def fire(
    client: redis.Redis,
    keys: CrawlKeys,
    spec: dict[str, Any],
    due: int,
    *,
    fence: int,
    adopted: bool = False,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Carry out one firing of ``spec`` due at ``due`` (module docstring); returns its outcome
    (state "fired", "skipped" or "failed", with what happened). ``adopted``: a firing an earlier
    leader claimed and left unfinished; the jobs it recorded are not started again, and if it
    recorded any, their run is continued rather than a new one begun."""
    name = spec["name"]
    firing = f"{name}@{due}"
    done = {j["id"] for j in jobs.with_firing(client, keys, firing)} if adopted else set()
    view = runs.view(client, keys)
    paused = control.schedules_paused(client, keys) if not done else None
    if paused is not None:
        said = f": {paused.get('why')}" if paused.get("why") else ""
        return {
            "state": "skipped",
            "run": view.id,
            "why": f"the crawl's schedules are paused by {paused.get('by')}{said} (crawlplug schedule resume)",
        }
    live = live_nodes(client, keys)
    if not done and view.state in ("running", "starting") and live > 0:
        return {
            "state": "skipped",
            "run": view.id,
            "why": f"run {view.id} still runs with {live} live node{'s' if live != 1 else ''}",
        }
    if not done:
        waiting = _waiting_jobs(client, keys, timeout)
        if waiting:
            return {
                "state": "skipped",
                "run": view.id,
                "why": f"{len(waiting)} job{'s' if len(waiting) != 1 else ''} started before ({', '.join(waiting)}) "
                "have not opened their spider yet",
            }
    new_run = not done and view.state not in ("none", "finished")
    try:
        try:
            plan = Plan.from_dict(spec["plan"], new_run=new_run)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a plan written by hand into Redis
            raise ConfigError(
                f"the schedule's plan is not readable ({type(exc).__name__}: {exc}); add the schedule again"
            ) from None
        launched = launch(
            client, keys, plan, by=f"schedule {name}", firing=firing, fence=fence, timeout=timeout, skip=frozenset(done)
        )
    except (ConfigError, ScrapydError) as exc:
        return {"state": "failed", "why": str(exc)[:500]}
    outcome = {
        "state": "fired",
        "run": launched.run,
        "action": launched.action,
        "message": launched.message,
        "jobs": len(launched.jobs) - len(launched.refused),
        "refused": len(launched.refused),
    }
    if done:
        outcome["resumed"] = len(done)
    if launched.refused:
        outcome["why"] = "; ".join(launched.refused)[:500]
    return outcome
