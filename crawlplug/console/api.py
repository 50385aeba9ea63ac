"""The console's HTTP API, ``/api/v1``: one call per action on every crawl of one Redis.

Each route names the permission it needs (crawlplug.access.users: the viewer reads, the
operator runs crawls, the site editor also stores site definitions, the admin may
everything) and calls the library function the CLI calls for the same action, so a rule
is written once: refusals come back as 4xx with the reason the CLI prints. Every change,
done or refused, goes to the audit log (crawlplug.access.audit) with who, from where and
how it ended. The OpenAPI document (``/api/v1/openapi.json``) is FastAPI's, made from these
routes and their pydantic models.

Its size: the API's routes, one short handler each over the library.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated, Any

import redis
from fastapi import APIRouter, Body, Depends, HTTPException, Query, Request, Response
from pydantic import BaseModel, Field

from .. import starts
from ..access import audit, users
from ..access.users import User
from ..alerts import outbox
from ..alerts import rules as alert_rules
from ..alerts import store as alert_store
from ..config import start_key
from ..crawl import Crawl, control, registry, runs, views
from ..errors import ConfigError, CrawlplugError, DecodeError, ScrapydError
from ..frontier.core import open_domains
from ..frontier.keys import CrawlKeys
from ..frontier.store import redis_ms
from ..history import series as crawl_history
from ..nodelog import store as nodelog
from ..ops import dead, forget, status
from ..reports import report as run_report
from ..reports import store as runstats
from ..schedules import firing as schedule_firing
from ..schedules import store as schedule_store
from ..scrapyd import fleet
from ..scrapyd import logs as job_logs
from ..scrapyd import store as jobs
from ..scrapyd.jobs import annotate_nodes
from ..scrapyd.launch import Plan, check_reach, launch
from ..starts.seeds import Seeds, make_seed
from .auth import CSRF_COOKIE, SESSION_COOKIE, need

__all__ = ["router"]

router = APIRouter(prefix="/api/v1")

Viewer = Annotated[User, Depends(need("read"))]
Runner = Annotated[User, Depends(need("run"))]
Starter = Annotated[User, Depends(need("start"))]
Pusher = Annotated[User, Depends(need("push"))]
DeadHand = Annotated[User, Depends(need("dead"))]
Scheduler = Annotated[User, Depends(need("schedules"))]
Alerter = Annotated[User, Depends(need("alerts"))]
SiteTrier = Annotated[User, Depends(need("sites.try"))]
SiteEditor = Annotated[User, Depends(need("sites.put"))]
Forgetter = Annotated[User, Depends(need("forget"))]
Purger = Annotated[User, Depends(need("purge"))]
Admin = Annotated[User, Depends(need("users"))]


# -- bodies ------------------------------------------------------------------------------


class StopBody(BaseModel):
    drain: bool = Field(False, description="admit no new request and stop once the queue has run out")


class Limits(BaseModel):
    pages: int | None = Field(None, ge=0, description="pages done in the run (0: no limit)")
    items: int | None = Field(None, ge=0)
    errors: int | None = Field(None, ge=0)
    timeout: float | None = Field(None, ge=0, description="seconds since the run began")
    domain_pages: int | None = Field(
        None, ge=0, description="most pages of one domain in a run (0: the nodes' setting)"
    )

    def changes(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.model_dump().items() if v is not None and k != "domain_pages"}


class DomainLimits(BaseModel):
    delay: float | None = Field(None, ge=0, description="seconds between two request starts of the domain")
    concurrency: int | None = Field(None, ge=0, description="most requests in flight (0: no limit)")


class PushBody(BaseModel):
    entries: list[str] = Field(description="URLs, or JSON entries ({'url': ..., 'meta': ...}), one each")
    lane: str = Field("start_urls", description="start_urls, or a lane start_urls:<lane>")
    strict: bool = Field(False, description="refuse every JSON key that is not a request attribute")


class SeedBody(BaseModel):
    entries: list[str]
    every: str | None = Field(None, description="90s, 15m, 6h, 1d...")
    cron: str | None = None
    tz: str = "UTC"
    run_now: bool = True


class DeadBody(BaseModel):
    indexes: list[int] = []
    all: bool = False


class PlanBody(BaseModel):
    daemons: list[str] = Field(description="Scrapyd daemons' URLs")
    spider: str | None = Field(None, description="default: the crawl's name")
    project: str = "default"
    nodes_per_host: int = Field(1, ge=1)
    settings: dict[str, str] = {}
    args: dict[str, str] = {}
    node_redis_url: str | None = Field(None, description="the Redis URL as the nodes reach it (default: the console's)")
    incremental: bool | None = Field(
        None,
        description="the run begun keeps the fingerprints (true) or clears them (false); "
        "null: as the nodes' settings say",
    )


class StartBody(PlanBody):
    new_run: bool = False


class ScheduleBody(PlanBody):
    name: str = "default"
    cron: str
    tz: str = "UTC"


class AlertBody(BaseModel):
    when: str = Field(description="METRIC[(ARG)] [OP NUMBER] [for DURATION]")
    notify: list[str] = Field([], description="Apprise URLs")
    name: str | None = None
    cooldown: float = Field(alert_rules.COOLDOWN, ge=0)
    then: str | None = Field(None, description="pause, drain, stop or pause-schedules: what it does when it fires")
    create: bool = Field(False, description="the crawl does not exist yet: create it")


class DefinitionBody(BaseModel):
    definition: str = Field(description="a site definition, YAML or JSON text")


class RollbackBody(BaseModel):
    to: int = Field(ge=1, description="the version whose document is stored again, as a new version")


class TryBody(BaseModel):
    url: str
    site: str | None = Field(None, description="a stored definition's name")
    definition: str | None = Field(None, description="or a definition's text")
    step: str | None = None
    base_url: str | None = None


class ForgetBody(BaseModel):
    urls: list[str] = []
    patterns: list[str] = []
    from_dead: bool = False
    roll: bool = Field(False, description="forget every fingerprint (alone)")
    dry_run: bool = False


class UserBody(BaseModel):
    name: str
    role: str = Field(description=", ".join(users.ROLES))


class SessionBody(BaseModel):
    token: str


# -- helpers -----------------------------------------------------------------------------


def _client(request: Request) -> redis.Redis:
    return request.app.state.access.client


def _keys(request: Request, crawl: str, *, create: bool = False) -> CrawlKeys:
    """The crawl's keys; 404 (naming the known crawls) for a crawl this Redis does not know,
    unless the action may create it."""
    keys = CrawlKeys(crawl)
    if not create and not registry.exists(_client(request), keys):
        raise HTTPException(404, registry.unknown_crawl_message(_client(request), keys))
    return keys


def _done(request: Request, who: User, action: str, crawl: str, detail: dict[str, Any], outcome: str = "ok") -> None:
    audit.record(_client(request), who, action, crawl, detail, outcome)


def _refused(
    request: Request, who: User, action: str, crawl: str, detail: dict[str, Any], status_code: int, why: str
) -> HTTPException:
    """Record a refused change, and the error to raise for it."""
    _done(request, who, action, crawl, detail, f"refused: {why}")
    return HTTPException(status_code, why)


def _why(outcome: control.Outcome) -> str:
    if outcome.outcome == "none":
        return "no run is recorded yet"
    if outcome.outcome == "reached":
        return f"its limit {outcome.reached} is still reached: raise it first"
    return f"the run is {outcome.state}"


# -- reads -------------------------------------------------------------------------------


@router.get("/crawls", summary="every crawl on this Redis")
def crawls(
    request: Request,
    who: Viewer,
    detail: bool = Query(False, description="also rates, nodes by state and firing alerts (the console's home)"),
) -> dict[str, Any]:
    client = _client(request)
    rows = runs.crawl_rows(client)
    for row in rows:
        if row["run"] is not None:
            row["jobs"] = len(jobs.all_jobs(client, CrawlKeys(row["crawl"]), run=row["run"]))
        if detail:
            row.update(_home_row(client, CrawlKeys(str(row["crawl"]))))
    return {"crawls": rows}


def _home_row(client: redis.Redis, keys: CrawlKeys) -> dict[str, Any]:
    """What the console's home shows of a crawl beside its row: pages and items a minute,
    its nodes by state, the alert rules firing."""
    now = redis_ms(client)
    snap = status.snapshot(client, keys)
    by_state = {"live": 0, "silent": 0, "dead": 0}
    for node in snap["nodes"]:
        state = str(node.get("state") or "")
        by_state[state if state in by_state else "dead"] += 1
    # items a minute: the history's last whole minute (the snapshot's rates count pages only)
    # (the last whole minute's; the current minute's while it is the run's first)
    items = None
    with contextlib.suppress(CrawlplugError, ValueError):
        counts = crawl_history.history(client, keys, since_ms=now - 120_000, until_ms=now, step="minute")["items"]
        items = counts[-2] if len(counts) >= 2 and counts[-2] is not None else (counts[-1] if counts else None)
    alerting = alert_rules.view(client, keys, 1)
    return {
        "paused": snap["paused"],
        "pages_per_min": snap["pages_per_min"],
        "items_per_min": items,
        "nodes": by_state,
        "firing": [str(rule.get("id") or rule.get("name")) for rule in alerting["active"]],
        "failed": snap["failed"],
        "dead": snap["dead"],
    }


@router.get("/session", summary="who is logged in: name, role and what it may do")
def whoami(request: Request, who: Viewer) -> dict[str, Any]:
    return {"name": who.name, "role": who.role, "may": sorted(users.ROLES.get(who.role, ()))}


@router.get("/cron", summary="check a cron expression: its next five firing times")
def cron_times(request: Request, who: Viewer, cron: str, tz: str = "UTC") -> dict[str, Any]:
    try:
        return {"cron": cron, "tz": tz, "next_five_ms": _next_times(cron, tz, redis_ms(_client(request)))}
    except (ConfigError, TypeError, ValueError) as exc:
        raise HTTPException(400, str(exc)) from None


class WhenBody(BaseModel):
    when: str


@router.post("/alerts/check", summary="check an alert condition's grammar, storing nothing")
def check_alert(request: Request, body: WhenBody, who: Viewer) -> dict[str, Any]:
    try:
        rule = alert_rules.make_rule("check", body.when, [], alert_rules.COOLDOWN)
    except ConfigError as exc:
        return {"ok": False, "error": str(exc)}
    return {"ok": True, "rule": rule}


@router.get("/crawls/{crawl}", summary="a crawl's status: counts, rates, ETA, nodes")
def crawl_status(request: Request, crawl: str, who: Viewer) -> dict[str, Any]:
    keys = _keys(request, crawl)
    snap = status.snapshot(_client(request), keys)
    snap.pop("history", None)
    annotate_nodes(_client(request), keys, snap["nodes"])
    return snap


@router.get("/crawls/{crawl}/runs", summary="the crawl's runs, and those whose report is kept")
def crawl_runs(request: Request, crawl: str, who: Viewer) -> dict[str, Any]:
    keys = _keys(request, crawl)
    return {"runs": runs.history(_client(request), keys), "kept": runstats.kept(_client(request), keys)}


@router.get("/crawls/{crawl}/history", summary="the crawl's history over a range")
def crawl_history_(
    request: Request,
    crawl: str,
    who: Viewer,
    since: str | None = Query(None, description="ms, or a duration back from now (6h)"),
    until: str | None = None,
    run: int | None = None,
    step: str = "auto",
    finest: str = "10s",
) -> dict[str, Any]:
    keys = _keys(request, crawl)
    client = _client(request)
    now = redis_ms(client)
    try:
        return crawl_history.history(
            client,
            keys,
            since_ms=crawl_history.parse_time(since, now),
            until_ms=crawl_history.parse_time(until, now),
            run=run,
            step=step,
            finest=finest,
        )
    except (ValueError, CrawlplugError) as exc:
        raise HTTPException(400, str(exc)) from None


@router.get("/crawls/{crawl}/report", summary="per node, domain, site and field")
def crawl_report(request: Request, crawl: str, who: Viewer, run: int | None = None) -> dict[str, Any]:
    keys = _keys(request, crawl)
    try:
        return run_report.report(_client(request), keys, run)
    except CrawlplugError as exc:
        raise HTTPException(400, str(exc)) from None


@router.get("/crawls/{crawl}/nodes", summary="every node: live, silent or dead, and its Scrapyd job")
def crawl_nodes(request: Request, crawl: str, who: Viewer) -> dict[str, Any]:
    keys = _keys(request, crawl)
    client = _client(request)
    st = Crawl(client, keys).status()
    rows = status.nodes(client, keys, st["nodes"], redis_ms(client))
    return {"nodes": annotate_nodes(client, keys, rows)}


@router.get(
    "/crawls/{crawl}/nodes/{node}/log",
    summary="a node's last WARNING-and-above log records (CRAWLPLUG_NODE_LOG), with counts by level and logger",
)
def node_log(
    request: Request,
    crawl: str,
    node: str,
    who: Viewer,
    level: str | None = Query(None, description="this level and above: WARNING, ERROR or CRITICAL"),
    q: str | None = Query(None, description="only records whose text or logger holds this (any case)"),
    limit: int = Query(200, ge=1, le=10_000),
) -> dict[str, Any]:
    keys = _keys(request, crawl)
    client = _client(request)
    if level is not None and level.upper() not in ("WARNING", "ERROR", "CRITICAL"):
        raise HTTPException(400, f"level must be WARNING, ERROR or CRITICAL, not {level!r}")
    known = sorted({*views.node_ids(client, keys), *nodelog.kept(client, keys)})
    if node not in known:
        raise HTTPException(404, f"no node {node!r} in crawl {crawl!r} (its nodes: {', '.join(known) or 'none'})")
    records = nodelog.read(client, keys, [node], level=level, search=q, limit=limit)
    return {"node": node, "records": records, "summary": nodelog.summary(records)}


@router.get(
    "/crawls/{crawl}/jobs/{job}/log",
    summary="a Scrapyd job's log from its daemon: the last lines, and counts by level and logger",
)
def job_log(
    request: Request,
    crawl: str,
    job: str,
    who: Viewer,
    tail: int = Query(200, ge=1, le=100_000),
    q: str | None = Query(None, description="only the records holding this (any case)"),
) -> dict[str, Any]:
    keys = _keys(request, crawl)
    try:
        return job_logs.job_log(_client(request), keys, job, tail=tail, search=q)
    except ScrapydError as exc:
        status_code = 404 if "has no Scrapyd job" in str(exc) else 502
        raise HTTPException(status_code, str(exc)) from None


@router.get("/daemons", summary="the Scrapyd daemons the crawls know: reachable, projects, versions, spiders, jobs")
def daemons(request: Request, who: Viewer) -> dict[str, Any]:
    client = _client(request)
    return {"daemons": fleet.describe_known(fleet.job_daemons(client), schedule_store.plan_daemons(client))}


# -- the run ---------------------------------------------------------------------------------


@router.post("/crawls/{crawl}/start", summary="start nodes on Scrapyd daemons")
def start(request: Request, crawl: str, body: StartBody, who: Starter) -> dict[str, Any]:
    keys = _keys(request, crawl, create=True)
    client = _client(request)
    conn = request.app.state.conn
    detail = {"daemons": body.daemons, "nodes_per_host": body.nodes_per_host, "new_run": body.new_run}
    try:
        plan = _plan(body, crawl, conn, new_run=body.new_run)
        new = not registry.exists(client, keys)
        out = launch(client, keys, plan, by=f"console ({who.name})")
    except (ConfigError, ScrapydError) as exc:
        raise _refused(request, who, "start", crawl, detail, 409, str(exc)) from None
    if new:
        registry.register(client, keys)
    _done(request, who, "start", crawl, {**detail, "jobs": len(out.jobs)}, "ok" if not out.refused else "some refused")
    return out.as_dict()


def _plan(body: PlanBody, crawl: str, conn: Any, *, new_run: bool = False) -> Plan:
    return Plan(
        crawl=crawl,
        daemons=body.daemons,
        spider=body.spider,
        project=body.project,
        nodes_per_host=body.nodes_per_host,
        settings=dict(body.settings),
        args=dict(body.args),
        redis_url=body.node_redis_url or conn.url,
        embedded=conn.embedded and not body.node_redis_url,
        new_run=new_run,
        incremental=body.incremental,
    )


@router.post("/crawls/{crawl}/pause", summary="hold every node of the run")
def pause(request: Request, crawl: str, who: Runner) -> dict[str, Any]:
    keys = _keys(request, crawl)
    changed = Crawl(_client(request), keys).pause(by=f"console ({who.name})")
    _done(request, who, "pause", crawl, {}, "ok" if changed else "already paused")
    return {"paused": True, "changed": changed}


@router.post("/crawls/{crawl}/resume", summary="let a paused crawl go on")
def resume(request: Request, crawl: str, who: Runner) -> dict[str, Any]:
    keys = _keys(request, crawl)
    changed = Crawl(_client(request), keys).resume()
    _done(request, who, "resume", crawl, {}, "ok" if changed else "not paused")
    return {"paused": False, "changed": changed}


@router.post("/crawls/{crawl}/stop", summary="stop the current run (sticky), or drain it")
def stop(request: Request, crawl: str, who: Runner, body: StopBody | None = None) -> dict[str, Any]:
    keys = _keys(request, crawl)
    drain = bool(body and body.drain)
    out = control.stop(_client(request), keys, by=f"console ({who.name})", drain=drain)
    if not out.ok and not (out.state == "stopped" or (out.state == "draining" and drain)):
        raise _refused(request, who, "stop", crawl, {"drain": drain}, 409, f"not stopped: {_why(out)}")
    _done(request, who, "stop", crawl, {"drain": drain}, "ok" if out.ok else f"already {out.state}")
    return {"run": out.run or None, "state": out.state, "changed": out.ok}


@router.post("/crawls/{crawl}/continue", summary="a stopped or limited run goes on")
def continue_(request: Request, crawl: str, who: Runner, body: Limits | None = None) -> dict[str, Any]:
    keys = _keys(request, crawl)
    changes = body.changes() if body else {}
    out = control.continue_run(_client(request), keys, by=f"console ({who.name})", changes=changes)
    if not out.ok:
        raise _refused(request, who, "continue", crawl, {"limits": changes}, 409, f"not continued: {_why(out)}")
    _done(request, who, "continue", crawl, {"limits": changes})
    return {"run": out.run, "state": out.state, "limits": out.limits.text()}


@router.get("/crawls/{crawl}/limits", summary="the run's crawl-wide limits")
def get_limits(request: Request, crawl: str, who: Viewer) -> dict[str, Any]:
    keys = _keys(request, crawl)
    client = _client(request)
    view = runs.view(client, keys)
    if view.id is None:
        raise HTTPException(409, "no run is recorded yet")
    limits = control.Limits.from_fields(view.raw)
    return {
        "run": view.id,
        "state": view.state,
        "limits": {"pages": limits.pages, "items": limits.items, "errors": limits.errors, "timeout": limits.timeout},
        "domain_pages": control.domain_pages(client, keys),
    }


@router.put("/crawls/{crawl}/limits", summary="change the run's crawl-wide limits")
def set_limits(request: Request, crawl: str, body: Limits, who: Runner) -> dict[str, Any]:
    keys = _keys(request, crawl)
    client = _client(request)
    changes = body.changes()
    detail = body.model_dump(exclude_none=True)
    if not detail:
        raise _refused(request, who, "limits", crawl, detail, 400, "give at least one limit")
    if changes:
        out = control.set_limits(client, keys, changes, by=f"console ({who.name})")
        if not out.ok:
            raise _refused(request, who, "limits", crawl, detail, 409, _why(out))
    if body.domain_pages is not None:
        control.set_domain_pages(client, keys, body.domain_pages)
    _done(request, who, "limits", crawl, detail)
    return get_limits(request, crawl, who)


@router.post("/crawls/{crawl}/new-run", summary="after a stopped or limited run: the next node begins a new one")
def new_run(request: Request, crawl: str, who: Runner) -> dict[str, Any]:
    keys = _keys(request, crawl)
    out = control.new_run(_client(request), keys, by=f"console ({who.name})")
    if not out.ok and out.state != "finished":
        raise _refused(request, who, "new-run", crawl, {}, 409, f"{_why(out)}: stop it first")
    _done(request, who, "new-run", crawl, {}, "ok" if out.ok else "finished: a new run begins anyway")
    return {"run": out.run, "state": out.state, "next_run": out.run + 1}


# -- per-domain limits ---------------------------------------------------------------------


@router.get("/crawls/{crawl}/domains", summary="the per-domain queue")
def domains(request: Request, crawl: str, who: Viewer, n: int = Query(50, ge=1, le=1000)) -> dict[str, Any]:
    view = open_domains(_client(request), _keys(request, crawl))
    return {"domains": view.scheduled_count(), "rows": view.table(n), "limits": view.limits()}


@router.put("/crawls/{crawl}/domains/{domain}", summary="a domain's limits, crawl-wide ('*': the default)")
def set_domain(request: Request, crawl: str, domain: str, body: DomainLimits, who: Runner) -> dict[str, Any]:
    keys = _keys(request, crawl)
    detail = {"domain": domain, **body.model_dump()}
    try:
        open_domains(_client(request), keys).override(domain, delay=body.delay, concurrency=body.concurrency)
    except ConfigError as exc:
        raise _refused(request, who, "domains.set", crawl, detail, 400, str(exc)) from None
    _done(request, who, "domains.set", crawl, detail)
    return {"domain": domain, "override": body.model_dump()}


@router.delete("/crawls/{crawl}/domains/{domain}", summary="drop a domain's runtime limits")
def reset_domain(request: Request, crawl: str, domain: str, who: Runner) -> dict[str, Any]:
    keys = _keys(request, crawl)
    had = open_domains(_client(request), keys).reset(domain)
    _done(request, who, "domains.reset", crawl, {"domain": domain}, "ok" if had else "had no override")
    return {"domain": domain, "had_override": had}


# -- start entries and seeds ---------------------------------------------------------------------


@router.post("/crawls/{crawl}/start-urls", summary="push start URLs (or JSON entries) into a lane")
def push(request: Request, crawl: str, body: PushBody, who: Pusher) -> dict[str, Any]:
    keys = _keys(request, crawl, create=True)
    client = _client(request)
    detail = {"lane": body.lane, "entries": len(body.entries)}
    try:
        start_key(body.lane)
    except ConfigError as exc:
        raise _refused(request, who, "push", crawl, detail, 400, f"lane: {exc}") from None
    valid, bad = starts.checked_lines(((f"entry {i}", e) for i, e in enumerate(body.entries)), strict=body.strict)
    if not valid:
        why = "; ".join(f"{w}: {y}" for w, y in bad) or "no entries given"
        raise _refused(request, who, "push", crawl, detail, 400, f"nothing pushed: {why}")
    registry.register(client, keys)
    waiting = Crawl(client, keys).push_starts(valid, body.lane)
    _done(request, who, "push", crawl, {**detail, "pushed": len(valid), "skipped": len(bad)})
    return {"pushed": len(valid), "waiting": waiting, "skipped": [{"entry": w, "why": y} for w, y in bad]}


@router.get("/crawls/{crawl}/seeds", summary="recurring seeds, their schedule, last and next run")
def seeds(request: Request, crawl: str, who: Viewer) -> dict[str, Any]:
    book = Seeds(_client(request), _keys(request, crawl))
    due = book.due_times()
    return {
        "seeds": [
            {"id": sid, "entry": s.entry, "schedule": s.schedule(), "last_run_ms": s.last, "next_run_ms": due.get(sid)}
            for sid, s in sorted(book.all().items())
        ]
    }


@router.post("/crawls/{crawl}/seeds", summary="add recurring seeds")
def add_seeds(request: Request, crawl: str, body: SeedBody, who: Pusher) -> dict[str, Any]:
    keys = _keys(request, crawl, create=True)
    client = _client(request)
    detail = {"entries": len(body.entries), "every": body.every, "cron": body.cron, "tz": body.tz}
    if (body.every is None) == (body.cron is None) or not body.entries:
        raise _refused(request, who, "seeds.add", crawl, detail, 400, "give entries and exactly one of every or cron")
    try:
        made = [make_seed(e, every=body.every, cron=body.cron, tz=body.tz) for e in body.entries]
    except (ConfigError, DecodeError) as exc:
        raise _refused(request, who, "seeds.add", crawl, detail, 400, str(exc)) from None
    registry.register(client, keys)
    book = Seeds(client, keys)
    added = []
    for seed in made:
        first = None if body.run_now else seed.next_after(redis_ms(client))
        book.add(seed, first_run_ms=first)
        added.append({"id": seed.id, "schedule": seed.schedule(), "first_run_ms": first})
    _done(request, who, "seeds.add", crawl, {**detail, "seeds": [a["id"] for a in added]})
    return {"added": added}


@router.delete("/crawls/{crawl}/seeds/{ident}", summary="remove a seed by id or URL")
def remove_seed(request: Request, crawl: str, ident: str, who: Pusher) -> dict[str, Any]:
    keys = _keys(request, crawl)
    if not Seeds(_client(request), keys).remove(ident):
        raise _refused(request, who, "seeds.remove", crawl, {"seed": ident}, 404, f"no seed {ident!r}")
    _done(request, who, "seeds.remove", crawl, {"seed": ident})
    return {"removed": ident}


# -- dead letters ---------------------------------------------------------------------------


@router.get("/crawls/{crawl}/dead", summary="the newest dead letters, with why")
def dead_letters(request: Request, crawl: str, who: Viewer, n: int = Query(50, ge=1, le=1000)) -> dict[str, Any]:
    keys = _keys(request, crawl)
    client = _client(request)
    return {"total": dead.dead_count(client, keys), "rows": dead.dead_rows(client, keys, -n, -1)}


@router.post("/crawls/{crawl}/dead/requeue", summary="dead letters back to the queue")
def requeue(request: Request, crawl: str, body: DeadBody, who: DeadHand) -> dict[str, Any]:
    keys = _keys(request, crawl)
    detail = body.model_dump()
    if not body.indexes and not body.all:
        raise _refused(request, who, "dead.requeue", crawl, detail, 400, "give indexes, or all")
    try:
        requeued, kept = dead.requeue_dead(_client(request), keys, body.indexes, body.all)
    except CrawlplugError as exc:
        raise _refused(request, who, "dead.requeue", crawl, detail, 400, str(exc)) from None
    _done(request, who, "dead.requeue", crawl, {**detail, "requeued": requeued})
    return {"requeued": requeued, "kept": [{"index": i, "why": why} for i, why in kept]}


@router.post("/crawls/{crawl}/dead/drop", summary="delete dead letters for good")
def drop(request: Request, crawl: str, body: DeadBody, who: DeadHand) -> dict[str, Any]:
    keys = _keys(request, crawl)
    client = _client(request)
    detail = body.model_dump()
    if not body.indexes and not body.all:
        raise _refused(request, who, "dead.drop", crawl, detail, 400, "give indexes, or all")
    picked = dead.pick_dead(client, keys, body.indexes, body.all)
    removed = dead.remove_dead(client, keys, [i for i, _ in picked])
    _done(request, who, "dead.drop", crawl, {**detail, "dropped": removed})
    return {"dropped": removed}


# -- schedules --------------------------------------------------------------------------------


@router.get("/crawls/{crawl}/schedules", summary="the crawl's schedules, each with its next five firing times")
def schedules(request: Request, crawl: str, who: Viewer) -> dict[str, Any]:
    keys = _keys(request, crawl)
    client = _client(request)
    now = redis_ms(client)
    out = []
    for name, spec in schedule_store.all_schedules(client, keys).items():
        row: dict[str, Any] = {"name": name, **spec}
        with contextlib.suppress(ConfigError, TypeError, ValueError):
            row["next_five_ms"] = _next_times(str(spec["cron"]), str(spec.get("tz") or "UTC"), now)
        out.append(row)
    return {
        "schedules": out,
        "fires": schedule_store.fires(client, keys, 20),
        "paused": control.schedules_paused(client, keys),
    }


@router.post("/crawls/{crawl}/schedules/pause", summary="hold every schedule of the crawl until resumed")
def pause_schedules(request: Request, crawl: str, who: Scheduler) -> dict[str, Any]:
    keys = _keys(request, crawl)
    done = control.pause_schedules(_client(request), keys, by=who.name, why="paused from the console")
    _done(request, who, "schedules.pause", crawl, {}, "ok" if done else "already paused")
    return {"paused": control.schedules_paused(_client(request), keys), "changed": done}


@router.post("/crawls/{crawl}/schedules/resume", summary="let the crawl's schedules fire again")
def resume_schedules(request: Request, crawl: str, who: Scheduler) -> dict[str, Any]:
    keys = _keys(request, crawl)
    done = control.resume_schedules(_client(request), keys)
    _done(request, who, "schedules.resume", crawl, {}, "ok" if done else "not paused")
    return {"paused": None, "changed": done}


def _next_times(cron: str, tz: str, after_ms: int, n: int = 5) -> list[int]:
    times: list[int] = []
    for _ in range(n):
        after_ms = schedule_firing.next_after(cron, tz, after_ms)
        times.append(after_ms)
    return times


@router.post("/crawls/{crawl}/schedules", summary="add (or replace) a schedule: runs started at cron times")
def add_schedule(request: Request, crawl: str, body: ScheduleBody, who: Scheduler) -> dict[str, Any]:
    keys = _keys(request, crawl, create=True)
    client = _client(request)
    detail = {"name": body.name, "cron": body.cron, "tz": body.tz, "daemons": body.daemons}
    try:
        plan = _plan(body, crawl, request.app.state.conn)
        warnings = check_reach(plan.redis_url, plan.daemons, embedded=plan.embedded)
        spec = schedule_firing.make(client, keys, name=body.name, cron=body.cron, tz=body.tz, plan=plan, by=who.name)
    except (ConfigError, ScrapydError) as exc:
        raise _refused(request, who, "schedules.add", crawl, detail, 400, str(exc)) from None
    registry.register(client, keys)
    new = schedule_firing.add(client, keys, spec)
    _done(request, who, "schedules.add", crawl, detail, "ok" if new else "replaced")
    return {
        "schedule": spec,
        "new": new,
        "warnings": warnings,
        "next_five_ms": _next_times(body.cron, body.tz, redis_ms(client)),
    }


@router.delete("/crawls/{crawl}/schedules/{name}", summary="delete a schedule")
def delete_schedule(request: Request, crawl: str, name: str, who: Scheduler) -> dict[str, Any]:
    keys = _keys(request, crawl)
    if not schedule_store.delete(_client(request), keys, name):
        raise _refused(request, who, "schedules.delete", crawl, {"name": name}, 404, f"no schedule {name!r}")
    _done(request, who, "schedules.delete", crawl, {"name": name})
    return {"deleted": name}


# -- alert rules --------------------------------------------------------------------------------


@router.get("/crawls/{crawl}/alerts", summary="alert rules with their state, the firing ones, recent events")
def alerts(request: Request, crawl: str, who: Viewer, n: int = Query(20, ge=1, le=200)) -> dict[str, Any]:
    keys = _keys(request, crawl)
    client = _client(request)
    view = alert_rules.view(client, keys, n)
    return {**view, "pending": outbox.pending(client, keys), "failed": outbox.failed(client, keys)}


@router.post("/crawls/{crawl}/alerts", summary="add (or replace) an alert rule")
def add_alert(request: Request, crawl: str, body: AlertBody, who: Alerter) -> dict[str, Any]:
    keys = _keys(request, crawl, create=body.create)
    client = _client(request)
    have = alert_store.rules(client, keys)
    name = body.name or next(f"rule{i}" for i in range(1, len(have) + 2) if f"rule{i}" not in have)
    detail = {"rule": name, "when": body.when, "notify": len(body.notify)}
    try:
        rule = alert_rules.make_rule(name, body.when, list(body.notify), body.cooldown, body.then)
    except ConfigError as exc:
        raise _refused(request, who, "alerts.add", crawl, detail, 400, str(exc)) from None
    registry.register(client, keys)
    new = alert_store.put(client, keys, rule)
    _done(request, who, "alerts.add", crawl, detail, "ok" if new else "replaced")
    return {"rule": {**rule, "notify": [alert_rules.masked(u) for u in body.notify]}, "new": new}


@router.delete("/crawls/{crawl}/alerts/{rule}", summary="delete an alert rule")
def delete_alert(request: Request, crawl: str, rule: str, who: Alerter) -> dict[str, Any]:
    keys = _keys(request, crawl)
    if not alert_store.delete(_client(request), keys, rule):
        raise _refused(request, who, "alerts.delete", crawl, {"rule": rule}, 404, f"no alert rule {rule!r}")
    _done(request, who, "alerts.delete", crawl, {"rule": rule})
    return {"deleted": rule}


@router.post("/crawls/{crawl}/alerts/{rule}/test", summary="send a test notification to a rule's URLs")
def test_alert(request: Request, crawl: str, rule: str, who: Alerter) -> dict[str, Any]:
    keys = _keys(request, crawl)
    try:
        sent = outbox.send_test(_client(request), keys, rule, f"{who.name} from the console")
    except ConfigError as exc:
        status_code = 409 if "notifies no URL" in str(exc) else 404
        raise _refused(request, who, "alerts.test", crawl, {"rule": rule}, status_code, str(exc)) from None
    _done(request, who, "alerts.test", crawl, {"rule": rule}, "ok" if sent else "not sent")
    if not sent:
        raise HTTPException(502, "the notification was not sent (its URLs refused it or could not be reached)")
    return {"sent": True}


# -- site definitions ------------------------------------------------------------------------------


def _sites() -> Any:
    try:
        from ..sites import store as site_store  # noqa: PLC0415 - the [sites] extra
        from ..sites.definition import parse_text, validate  # noqa: PLC0415
    except ImportError as exc:  # pragma: no cover - without the extra
        raise HTTPException(501, f"site definitions need crawlplug's [sites] extra ({exc})") from None
    return site_store, parse_text, validate


@router.get("/sites", summary="the stored site definitions")
def sites(request: Request, who: Viewer) -> dict[str, Any]:
    from ..web import sites as site_pages  # noqa: PLC0415

    return {"sites": site_pages.stored_sites(_client(request))}


@router.get("/sites/{name}", summary="a stored site definition, as stored")
def site(request: Request, name: str, who: Viewer) -> dict[str, Any]:
    site_store, _, _ = _sites()
    stored = site_store.SiteStore(_client(request)).get(name)
    if stored is None:
        raise HTTPException(404, f"no site definition {name!r}")
    return {
        "name": stored.name,
        "version": stored.version,
        "n": stored.n,
        "by": stored.by,
        "source": stored.source,
        "doc": stored.doc,
    }


@router.post("/sites/check", summary="check a site definition's text, storing nothing: each problem at its line")
def check_site(request: Request, body: DefinitionBody, who: Viewer) -> dict[str, Any]:
    site_store, _, _ = _sites()
    from ..sites.checking import check_text  # noqa: PLC0415 - the [sites] extra

    return check_text(body.definition, pipelines=site_store.project_pipelines()).as_dict()


@router.put("/sites", summary="store a site definition (its name is its own); running nodes pick it up")
def put_site(request: Request, body: DefinitionBody, who: SiteEditor) -> dict[str, Any]:
    site_store, parse_text, _ = _sites()
    store = site_store.SiteStore(_client(request))
    try:
        doc = parse_text(body.definition, "the definition given")
        if not isinstance(doc, dict):
            raise ConfigError("the definition given: a site definition is a mapping (name, start_urls, steps, fields)")
        stored = store.put(doc, f"console ({who.name})", by=who.name, pipelines=site_store.project_pipelines())
    except ConfigError as exc:
        raise _refused(request, who, "sites.put", "", {}, 400, str(exc)) from None
    detail = {"site": stored.name, "version": stored.version, "n": stored.n}
    _done(request, who, "sites.put", "", detail, "unchanged" if stored.unchanged else "ok")
    return {"name": stored.name, "version": stored.version, "n": stored.n, "unchanged": stored.unchanged}


@router.post("/sites/try", summary="fetch a page and show what a definition extracts and follows")
async def try_site(request: Request, body: TryBody, who: SiteTrier) -> Response:
    from fastapi.responses import JSONResponse  # noqa: PLC0415

    from ..web import sites as site_pages  # noqa: PLC0415

    try:
        trial = site_pages.trial_request(_client(request), body.model_dump(exclude_none=True))
    except (ValueError, CrawlplugError) as exc:
        raise HTTPException(400, str(exc)) from None
    code, out = await site_pages.run_trial(trial)
    return JSONResponse(out, status_code=code)


# -- site definitions: versions ---------------------------------------------------------------


@contextlib.contextmanager
def _versions_read() -> Iterator[None]:
    """A version asked for that is not there: 404; one whose record is not readable: 409."""
    from ..sites.versions import UnknownVersion  # noqa: PLC0415 - the [sites] extra

    try:
        yield
    except ConfigError as exc:
        raise HTTPException(404 if isinstance(exc, UnknownVersion) else 409, str(exc)) from None


@router.get("/sites/{name}/versions", summary="a site definition's versions, newest first, and the one in force")
def site_versions(request: Request, name: str, who: Viewer) -> dict[str, Any]:
    store = _sites()[0].SiteStore(_client(request))
    history = store.history(name)
    if not history:
        raise HTTPException(404, f"site {name!r} has no versions stored")
    newest_first = [v.as_dict(with_doc=False) for v in reversed(history)]
    return {"name": name, "in_force": store.in_force(name), "versions": newest_first}


@router.get("/sites/{name}/versions/{n}", summary="one version of a site definition, with its document")
def site_version(request: Request, name: str, n: int, who: Viewer) -> dict[str, Any]:
    store = _sites()[0].SiteStore(_client(request))
    with _versions_read():
        version = store.get_version(name, n)
    return {**version.as_dict(), "in_force": store.in_force(name) == n}


@router.get(
    "/sites/{name}/diff", summary="what changed from version a to b (default: the one before b, the one in force)"
)
def site_diff(
    request: Request,
    name: str,
    who: Viewer,
    a: Annotated[int | None, Query(ge=1)] = None,
    b: Annotated[int | None, Query(ge=1)] = None,
) -> dict[str, Any]:
    store = _sites()[0].SiteStore(_client(request))
    with _versions_read():
        compared = store.compare(name, a, b)
    return {"a": compared.a, "b": compared.b, "diff": compared.text}


@router.post("/sites/{name}/rollback", summary="store an earlier version's document again, as a new version")
def rollback_site(request: Request, name: str, body: RollbackBody, who: SiteEditor) -> dict[str, Any]:
    site_store, _, _ = _sites()
    from ..sites.versions import InForce, UnknownVersion  # noqa: PLC0415 - the [sites] extra

    detail = {"site": name, "to": body.to}
    try:
        stored = site_store.SiteStore(_client(request)).rollback(
            name, body.to, by=who.name, pipelines=site_store.project_pipelines()
        )
    except ConfigError as exc:
        code = 404 if isinstance(exc, UnknownVersion) else 409 if isinstance(exc, InForce) else 400
        raise _refused(request, who, "sites.rollback", "", detail, code, str(exc)) from None
    _done(request, who, "sites.rollback", "", {**detail, "n": stored.n, "version": stored.version})
    return {"name": name, "n": stored.n, "version": stored.version, "rollback_of": stored.rollback_of}


# -- forgetting and purging ---------------------------------------------------------------------------


@router.post("/crawls/{crawl}/forget", summary="forget URLs' fingerprints (or every one: roll)")
def forget_(request: Request, crawl: str, body: ForgetBody, who: Forgetter) -> dict[str, Any]:
    keys = _keys(request, crawl)
    client = _client(request)
    detail = body.model_dump()
    if body.roll:
        if body.urls or body.patterns or body.from_dead:
            raise _refused(request, who, "forget", crawl, detail, 400, "roll forgets everything: give it alone")
        if body.dry_run:
            return {"roll": True, "dry_run": True}
        deleted = forget.roll(client, keys)
        _done(request, who, "forget.roll", crawl, {"dedup_keys_deleted": deleted})
        return {"roll": True, "dedup_keys_deleted": deleted}
    try:
        given = forget.given_requests((f"url {i}", u) for i, u in enumerate(body.urls))
        done = forget.forget_requests(
            client, keys, given, from_dead=body.from_dead, patterns=body.patterns, dry_run=body.dry_run
        )
    except ConfigError as exc:
        raise _refused(request, who, "forget", crawl, detail, 400, str(exc)) from None
    urls = [r.url for r in done.chosen]
    if not done.dry_run:
        _done(request, who, "forget", crawl, {"urls": len(urls), "forgot": done.removed})
    return {"urls": urls, "flags": done.flags, "forgot": done.removed, "dry_run": done.dry_run, "notes": done.notes}


@router.delete("/crawls/{crawl}", summary="purge: delete every key of the crawl")
def purge(request: Request, crawl: str, who: Purger) -> dict[str, Any]:
    keys = _keys(request, crawl)
    deleted = runs.purge(_client(request), keys)
    _done(request, who, "purge", crawl, {"keys_deleted": deleted})
    return {"purged": crawl, "keys_deleted": deleted}


# -- the audit log, users, sessions -----------------------------------------------------------------------


@router.get("/audit", summary="the audit log: every change, who, when, from where, how it ended")
def audit_log(
    request: Request, who: Viewer, n: int = Query(100, ge=1, le=10_000), crawl: str | None = None
) -> dict[str, Any]:
    return {"entries": audit.entries(_client(request), n, crawl=crawl)}


@router.get("/users", summary="the console's users (never their tokens)")
def list_users(request: Request, who: Admin) -> dict[str, Any]:
    return {"users": users.users(_client(request)), "roles": {r: sorted(p) for r, p in users.ROLES.items()}}


@router.post("/users", summary="add (or replace) a user: its token is shown once")
def add_user(request: Request, body: UserBody, who: Admin) -> dict[str, Any]:
    detail = {"user": body.name, "role": body.role}
    try:
        token = users.add(_client(request), body.name, body.role, by=who.name)
    except ConfigError as exc:
        raise _refused(request, who, "users.add", "", detail, 400, str(exc)) from None
    _done(request, who, "users.add", "", detail)
    return {"name": body.name, "role": body.role, "token": token}


@router.delete("/users/{name}", summary="revoke a user and its token")
def revoke_user(request: Request, name: str, who: Admin) -> dict[str, Any]:
    if not users.revoke(_client(request), name):
        raise _refused(request, who, "users.revoke", "", {"user": name}, 404, f"no user {name!r}")
    _done(request, who, "users.revoke", "", {"user": name})
    return {"revoked": name}


@router.post("/session", summary="log in with a token: a session cookie, and its CSRF token")
def login(request: Request, response: Response, body: Annotated[SessionBody, Body()]) -> dict[str, Any]:
    access = request.app.state.access
    user = users.authenticate(access.client, body.token, admin_token=access.admin_token)
    if user is None:
        raise HTTPException(401, "the token is nobody's (revoked, or mistyped)")
    session, csrf = users.open_session(access.client, user)
    secure = request.url.scheme == "https"
    response.set_cookie(SESSION_COOKIE, session, httponly=True, samesite="strict", secure=secure, path="/")
    response.set_cookie(CSRF_COOKIE, csrf, httponly=False, samesite="strict", secure=secure, path="/")
    return {"name": user.name, "role": user.role, "csrf": csrf}


@router.delete("/session", summary="log out")
def logout(request: Request, response: Response) -> dict[str, Any]:
    session = request.cookies.get(SESSION_COOKIE)
    closed = bool(session) and users.close_session(request.app.state.access.client, session)
    response.delete_cookie(SESSION_COOKIE, path="/")
    response.delete_cookie(CSRF_COOKIE, path="/")
    return {"closed": closed}
