"""Starting a crawl's nodes through Scrapyd (``crawlplug start``, scheduled runs).

:func:`launch` schedules the spider on every daemon (``schedule.json``), N jobs
each, with the settings that make them one crawl: ``REDIS_URL`` (the Redis every
machine reaches), ``CRAWLPLUG_CRAWL_ID`` (the crawl), ``CRAWLPLUG_SCRAPYD_JOB`` (the
job, which the node records from inside: crawlplug.scrapyd.node),
``CRAWLPLUG_FOR_RUN`` (the run they are started for: a node its daemon starts after that
run ended exits with nothing done, instead of beginning the next run and crawling it all
again), and the operator's own ``-s`` settings and ``-a`` spider arguments. Before it schedules anything it
checks, and refuses with the reason:

* that the Redis it hands the nodes can be reached from every daemon's machine
  (:func:`check_reach`): the embedded Redis, a unix socket or an address of this
  machine only (loopback or unspecified, in any spelling) with a daemon on another
  host would let each machine crawl alone;
* that each daemon answers and can run the spider (its project lists it);
* what the crawl's runs say (:func:`run_decision`): a running or interrupted run is
  continued (the nodes join or resume it); after a finished run (or none) the nodes
  begin the next one themselves (their own settings decide whether it is
  incremental); a run ended by a limit or an operator stays ended unless the
  operator asks for a new run (``new_run``), which is begun here
  (crawlplug.crawl.newrun) before any node starts. A plan that says whether its run is
  incremental (``Plan.incremental``: ``--incremental``/``--full``, a schedule's own
  choice) begins the next run here too, so that its choice holds, not that of the last
  run or of the first node.

Each job is recorded in Redis (crawlplug.scrapyd.store) before the daemon is asked,
so a daemon that answers late or never is still known and shown.
"""

from __future__ import annotations

import logging
import re
import secrets
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from ..crawl import runs
from ..crawl.newrun import begin_new_run
from ..errors import ConfigError, ScrapydError
from ..frontier.keys import CrawlKeys
from ..frontier.store import redis_ms
from ..server.clients import mask_url, validate_url
from . import store as jobs
from .addresses import is_loopback_host, local_address, resolves_here_to_loopback
from .daemon import Daemon

logger = logging.getLogger(__name__)

INCREMENTAL_SETTING = "CRAWLPLUG_INCREMENTAL"
_BOOLS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}

#: Settings crawlplug sets on every node it starts; the operator gives them otherwise
#: (--redis-url/--node-redis-url, the crawl's name), not with -s.
OWN_SETTINGS = ("REDIS_URL", "CRAWLPLUG_CRAWL_ID", "CRAWLPLUG_SCRAPYD_JOB", "CRAWLPLUG_FOR_RUN")


@dataclass
class Plan:
    """What to start: a spider of a Scrapyd project, on daemons, for a crawl."""

    crawl: str
    daemons: list[str]
    spider: str | None = None  #: default: the crawl's name
    project: str = "default"  #: the Scrapyd project (a daemon started in the project: "default")
    nodes_per_host: int = 1
    settings: dict[str, str] = field(default_factory=dict)
    args: dict[str, str] = field(default_factory=dict)
    #: the Redis URL as the nodes reach it
    redis_url: str = ""
    #: the Redis is this project's embedded one (reachable from this machine only)
    embedded: bool = False
    new_run: bool = False
    #: the run this plan begins keeps the fingerprints (True) or clears them (False); None:
    #: as the nodes' settings say (a new run begun here: as the last run did). Given, it
    #: decides whoever begins the run, and the nodes get it as CRAWLPLUG_INCREMENTAL.
    incremental: bool | None = None

    def __post_init__(self) -> None:
        if not self.daemons:
            raise ConfigError("give at least one Scrapyd daemon (--scrapyd URL)")
        if self.nodes_per_host < 1:
            raise ConfigError(f"--nodes-per-host must be at least 1, not {self.nodes_per_host}")
        own = [k for k in self.settings if k in OWN_SETTINGS]
        if own:
            raise ConfigError(
                f"-s {own[0]}=... is set by crawlplug on every node it starts (the Redis: --redis-url or "
                "--node-redis-url; the crawl: its name)"
            )
        self._settle_incremental()
        self.daemons = [Daemon.of(u).url for u in self.daemons]
        if len(set(self.daemons)) != len(self.daemons):
            raise ConfigError("a Scrapyd daemon is named twice (--nodes-per-host starts several nodes on one)")

    def _settle_incremental(self) -> None:
        """One choice from --incremental/--full and -s CRAWLPLUG_INCREMENTAL: the same one, or
        a ConfigError; the nodes get it as the setting."""
        raw = self.settings.get(INCREMENTAL_SETTING)
        said: bool | None = None
        if raw is not None:
            word = str(raw).strip().lower()
            if word not in _BOOLS:
                raise ConfigError(f"-s {INCREMENTAL_SETTING}={raw!r}: give 1 or 0 (true or false)")
            said = _BOOLS[word]
        if self.incremental is not None and said is not None and said != self.incremental:
            raise ConfigError(
                f"-s {INCREMENTAL_SETTING}={raw} says the opposite of "
                f"{'--incremental' if self.incremental else '--full'}: give one of them"
            )
        if self.incremental is None:
            self.incremental = said
        if self.incremental is not None:
            self.settings = {**self.settings, INCREMENTAL_SETTING: "1" if self.incremental else "0"}

    @property
    def kind(self) -> str:
        """The run it begins: "incremental", "full", or "" (as the nodes' settings say)."""
        return "" if self.incremental is None else ("incremental" if self.incremental else "full")

    @property
    def spider_name(self) -> str:
        return self.spider or self.crawl

    def as_dict(self) -> dict[str, Any]:
        return {
            "crawl": self.crawl,
            "daemons": self.daemons,
            "spider": self.spider,
            "project": self.project,
            "nodes_per_host": self.nodes_per_host,
            "settings": self.settings,
            "args": self.args,
            "redis_url": self.redis_url,
            "embedded": self.embedded,
            "incremental": self.incremental,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], **override: Any) -> Plan:
        names = ("crawl", "daemons", "spider", "project", "nodes_per_host", "settings", "args", "redis_url", "embedded")
        names += ("incremental",)
        # cjson (lua/firing.lua) writes an empty object where Python wrote an empty list, and back
        values = {k: data[k] for k in names if k in data}
        for k in ("settings", "args"):
            values[k] = dict(values.get(k) or {})
        if not isinstance(values.get("incremental"), bool):  # absent (older plans), null
            values["incremental"] = None
        return cls(**{**values, **override})


@dataclass
class Launched:
    """What :func:`launch` did."""

    action: str  #: "continue", "resume", "next" (the nodes begin the next run), "new" (begun here)
    run: int | None  #: the run the nodes are for (for "next": the id it will get)
    message: str  #: the run, in a sentence
    jobs: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  #: daemons that refused a job, and why
    warnings: list[str] = field(default_factory=list)  #: what the checks found doubtful but not wrong

    def as_dict(self) -> dict[str, Any]:
        """What ``crawlplug start --json`` prints and the console answers."""
        return {
            "action": self.action,
            "run": self.run,
            "message": self.message,
            "jobs": self.jobs,
            "refused": self.refused,
            "warnings": self.warnings,
        }


def redis_hosts(url: str) -> list[str] | None:
    """The hosts a Redis URL names (several for a cluster or sentinels); None for a unix socket."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "unix":
        return None
    hostport = parts.netloc.rpartition("@")[2]
    hosts = []
    for item in hostport.split(","):
        item = item.strip()
        if item.startswith("["):
            hosts.append(item[1:].split("]", 1)[0])
        else:
            hosts.append(item.rsplit(":", 1)[0] if item.count(":") == 1 else item)
    return [h for h in hosts if h]


def check_reach(redis_url: str, daemons: list[str], *, embedded: bool) -> list[str]:
    """Refuse (ConfigError, with the reason) to hand the nodes a Redis that a daemon on
    another machine cannot reach: the embedded Redis, a unix socket, an address of this
    machine only in any spelling (``127.1``, ``2130706433``, ``0.0.0.0``, ``[::ffff:127.0.0.1]``,
    ``[::]``: crawlplug.scrapyd.addresses). A host *name* that resolves to loopback here is not
    refused (the other machines resolve it themselves): the warnings returned (and logged)
    say so."""
    validate_url(redis_url)
    remote = sorted({Daemon.of(d).host for d in daemons if not is_loopback_host(Daemon.of(d).host)})
    if not remote:
        return []
    hosts = redis_hosts(redis_url)
    if embedded:
        what = "the embedded Redis of this project (a unix socket on this machine)"
    elif hosts is None:
        what = "a unix socket on this machine"
    elif all(is_loopback_host(h) for h in hosts):
        what = f"an address of this machine only ({', '.join(sorted({str(local_address(h)) for h in hosts}))})"
    else:
        warnings = []
        for host in hosts:
            here = resolves_here_to_loopback(host)
            if here:
                warnings.append(
                    f"the Redis host {host!r} resolves to {', '.join(here)} (this machine only) here; "
                    f"the nodes on {', '.join(remote)} resolve it themselves: make sure it names this "
                    "machine's network address there"
                )
        return warnings
    raise ConfigError(
        f"refusing to start: the nodes would be handed Redis {mask_url(redis_url)}, {what}, and "
        f"Scrapyd on {', '.join(remote)} runs on another machine: each machine would crawl alone, with a "
        "queue and a dedup of its own. Give a Redis every machine reaches: --redis-url "
        "redis://<host>:6379/0 (or --node-redis-url, the address as the nodes reach it)"
    )


def run_decision(client: redis.Redis, keys: CrawlKeys, *, new_run: bool) -> tuple[str, int | None, str]:
    """(action, run id, sentence): what the nodes about to start will do with the crawl's
    runs; ConfigError when the run ended by a limit or an operator and no new run is asked for."""
    view = runs.view(client, keys)
    if new_run:
        return "new", None, "a new run"
    if view.state in ("running", "starting"):
        return "continue", view.id, f"continuing run {view.id} of crawl {keys.crawl!r} ({view.state})"
    if view.state == "interrupted":
        return "resume", view.id, f"resuming interrupted run {view.id} of crawl {keys.crawl!r}"
    if view.state in ("limit", "stopped"):
        said = "ended by a limit" if view.state == "limit" else "stopped by an operator"
        raise ConfigError(
            f"run {view.id} of crawl {keys.crawl!r} was {said} and stays so: give --new-run to begin run "
            f"{(view.id or 0) + 1}, or continue the run first (docs/runs.md)"
        )
    if view.id is None:
        return "next", 1, f"run 1 of crawl {keys.crawl!r} (its first), begun by the first node"
    return (
        "next",
        view.id + 1,
        (f"run {view.id + 1} of crawl {keys.crawl!r} (run {view.id} {view.state}), begun by the first node"),
    )


def preflight(plan: Plan, timeout: float) -> None:
    """Every daemon answers and lists the spider in the project; ScrapydError naming each that does not."""
    problems = []
    for url in plan.daemons:
        daemon = Daemon(url, timeout)
        try:
            spiders = daemon.spiders(plan.project)
        except ScrapydError as exc:
            problems.append(str(exc))
            continue
        if plan.spider_name not in spiders:
            problems.append(
                f"Scrapyd {daemon.label} has no spider {plan.spider_name!r} in project "
                f"{plan.project!r} (it has: {', '.join(spiders) or 'none'})"
            )
    if problems:
        raise ScrapydError("nothing was started: " + "; ".join(problems))


def _safe(text: str) -> str:
    """A piece of a Scrapyd job id: it names the job's log file on the daemon."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:40] or "crawl"


def _log_warning(warning: str) -> None:
    logger.warning("crawlplug start: %s", warning)


def launch(
    client: redis.Redis,
    keys: CrawlKeys,
    plan: Plan,
    *,
    by: str = "start",
    firing: str | None = None,
    fence: int | None = None,
    timeout: float = 30.0,
    skip: frozenset[str] = frozenset(),
    warn: Callable[[str], None] = _log_warning,
) -> Launched:
    """Start the plan's nodes (module docstring). ``firing`` names the schedule's firing that
    starts them (``<name>@<due ms>``; job ids follow from it, so jobs already recorded, named
    in ``skip``, are not started twice). Raises ConfigError or ScrapydError, having started
    nothing, when a check fails. ``warn`` is told each warning of the checks as it is found
    (default: logged), before a later check may fail."""
    warnings = check_reach(plan.redis_url, plan.daemons, embedded=plan.embedded)
    for warning in warnings:
        warn(warning)
    action, run_id, message = run_decision(client, keys, new_run=plan.new_run)
    preflight(plan, timeout)
    if action == "next" and plan.incremental is not None:
        action = "new"  # the plan's choice decides the run, not whichever node begins it first
    if action == "new":
        joined = begin_new_run(
            client, keys, by=by, reason=f"replaced by a new run ({by})", incremental=plan.incremental
        )
        if joined.action == "new":
            before = (
                f"run {joined.previous.get('id')} {joined.previous.get('state')}"
                if joined.previous and joined.previous.get("id")
                else "its first run"
            )
            kept = "fingerprints cleared" if joined.cleared else "fingerprints kept (incremental)"
            message = f"began run {joined.run} of crawl {keys.crawl!r} ({before}, {kept})"
        else:
            action, message = "continue", f"continuing run {joined.run} of crawl {keys.crawl!r}"
        run_id = joined.run
    stem = f"{_safe(keys.crawl)}-{_safe(firing.replace('@', '-')) if firing else secrets.token_hex(4)}"
    out = Launched(action, run_id, message, warnings=warnings)
    for d, url in enumerate(plan.daemons):
        daemon = Daemon(url, timeout)
        for slot in range(plan.nodes_per_host):
            job_id = f"{stem}-{d}-{slot}"
            if job_id in skip:
                continue
            jobs.record(
                client,
                keys,
                job_id,
                {
                    "daemon": url,
                    "project": plan.project,
                    "spider": plan.spider_name,
                    "run": run_id,
                    "slot": slot,
                    "by": by,
                    "firing": firing,
                    "fence": fence,
                },
                scheduled_ms=redis_ms(client),
            )
            settings = {
                **plan.settings,
                "REDIS_URL": plan.redis_url,
                "CRAWLPLUG_CRAWL_ID": keys.crawl,
                "CRAWLPLUG_SCRAPYD_JOB": job_id,
            }
            if run_id is not None:  # a daemon that starts it after the run ended: it begins no other
                settings["CRAWLPLUG_FOR_RUN"] = str(run_id)
            try:
                daemon.schedule(plan.project, plan.spider_name, job=job_id, settings=settings, args=plan.args)
            except ScrapydError as exc:
                jobs.update(client, keys, job_id, {"daemon_state": "error", "error": str(exc)[:300]})
                out.refused.append(str(exc))
            out.jobs.append(jobs.get(client, keys, job_id) or {"id": job_id})
    return out
