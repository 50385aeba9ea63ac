"""The live dashboard of a crawl: ``crawlplug dashboard``.

A Starlette application serving one page (``static/``, plain HTML and
JavaScript, no build step; the charts are drawn by uPlot, vendored in
``static/vendor/`` with its licence) and a JSON API under ``/api`` that the page
uses and scripts may use too. Every number comes from Redis at request time: the
charts read the crawl's history (per 10 s for the last hour, per minute for a day,
per hour for a month: crawlplug.history.series), so a dashboard opened late still
shows what happened; the Report and Sites pages read crawlplug.reports.report.

Read-only unless a token is configured (``CRAWLPLUG_DASHBOARD_TOKEN``):
actions (pause, resume, stop or drain the run and continue it, a domain's limits,
requeueing dead letters) then need
``Authorization: Bearer <token>``. It binds to loopback unless told otherwise,
and answers only requests whose ``Host`` header names an allowed host
(Starlette's TrustedHostMiddleware; loopback names by default, see
:func:`crawlplug.web.hosts.allowed_hosts`): a web page the browser loaded from elsewhere that
points its own name at 127.0.0.1 (DNS rebinding) gets 400, not the crawl's state.

Its size: the dashboard's routes, one short handler each, over one :class:`Dashboard`.
"""

from __future__ import annotations

import hmac
import logging
import math
from collections.abc import Iterable
from importlib.resources import files
from typing import Any

import redis
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..access import audit
from ..access.users import TOKEN_USER, User
from ..alerts import rules as crawl_alerts
from ..crawl import Crawl, control
from ..crawl import runs as frontier_runs
from ..errors import CrawlplugError
from ..frontier.core import open_domains
from ..frontier.keys import CrawlKeys
from ..frontier.store import redis_ms
from ..history import series as crawl_history
from ..metrics import exporter as metrics
from ..ops import dead, status
from ..probes import errorsamples
from ..reports import report as run_report
from ..reports import store as runstats
from ..scrapyd.jobs import annotate_nodes
from ..sites import outcomes as site_fields
from . import alerting
from . import sites as site_pages
from .hosts import LOOPBACK_HOSTS, allowed_hosts, host_pattern

__all__ = ["API", "LOOPBACK_HOSTS", "Dashboard", "allowed_hosts", "create_app", "host_pattern"]

logger = logging.getLogger(__name__)

STATIC = files(__package__).joinpath("static")

#: The API, as served at GET /api (and documented in docs/dashboard.md).
API = {
    "GET /api/status": "counts, rates (and what they are taken over), ETA (and why none), work held by silent "
    "nodes, paused state, crawl-wide counters and nodes (the crawl now)",
    "GET /api/history?minutes=60": "per-10 s points: done, pages_per_min, admitted, queued, in_flight, dead",
    "GET /api/history?since=6h&until=&run=&step=auto&finest=10s": "the history over a range (since, until: ms "
    "or a duration back from now; run: that run's "
    "time and records only): per 10 s, minute or "
    "hour (step; auto: the finest kept, no finer "
    "than finest), done, admitted, items, errors "
    "per point, queued, in_flight, dead, nodes at "
    "its end",
    "GET /api/runs": "every run of the crawl, oldest first (id, state, started, ended, pages...), and the runs "
    "whose report is kept",
    "GET /api/report?run=": "node x domain (pages, items, errors by kind, success rate, mean response time), "
    "node x site definition and per field (filled, missing, invalid, defaulted)",
    "GET /api/sites": "the site definitions stored in Redis (name, version, steps, fields)",
    "GET /api/nodes": "every registered node and every node found dead in the last hour: state (live, silent, "
    "dead) and what became of its leases, host, pid, uptime, heartbeat age, leases, pages/min, "
    "and the Scrapyd job it is (crawlplug start), if any",
    "GET /api/errors": "errors by kind (http/<status>, download/<Exception>, spider/<Exception>) with sample URLs",
    "GET /api/domains?n=50": "per-domain queue: queued, in flight, requests leased so far (its rate), delay and "
    "concurrency in force, next start",
    "GET /api/fields": "extraction outcomes per site, step and field (Scrapy stats named site/<site>/...), "
    "also as rows with a label ('price is null')",
    "GET /api/dead?n=50": "the newest dead letters: index, url, reason, time, deliveries",
    "GET /api/alerts?n=20": "the crawl's alert rules with their state (ok, pending, firing, or unknown with why: "
    "its metric cannot be evaluated), the active ones, and the recent events (fired, cleared)",
    "POST /api/pause": "pause the crawl (token)",
    "POST /api/resume": "resume the crawl (token)",
    "POST /api/stop": '{"drain": false}: stop the current run now, or ({"drain": true}) admit no new request '
    "and stop once the queue has run out; sticky: nodes started later exit (token)",
    "POST /api/continue": "continue a run that was stopped or is draining (token)",
    "POST /api/domains/{domain}": 'set a domain\'s limits: {"delay": s, "concurrency": n} ("*" = default) (token)',
    "DELETE /api/domains/{domain}": "drop the runtime limits of a domain (token)",
    "POST /api/dead/requeue": '{"indexes": [...]} or {"all": true}: dead letters back to the queue (token)',
    "POST /api/sites/try": '{"site": stored name} or {"definition": YAML text}, "url", "step", "base_url": fetch '
    "the page through Scrapy with the project's settings and show what the definition "
    "extracts and follows; touches no crawl (token: it fetches a URL from this machine)",
}


class Dashboard:
    """The routes of one crawl's dashboard."""

    def __init__(
        self,
        client: redis.Redis,
        keys: CrawlKeys,
        token: str | None = None,
        redis_label: str = "",
        top_domains: int = metrics.TOP_DOMAINS,
    ) -> None:
        self.client = client
        self.keys = keys
        self.token = token or None
        self.redis_label = redis_label
        self.metrics = metrics.registry(client, lambda: [keys], top_domains)

    # -- helpers -----------------------------------------------------------------
    def _authorized(self, request: Request) -> JSONResponse | None:
        if self.token is None:
            return JSONResponse(
                {"error": "read-only dashboard: start it with CRAWLPLUG_DASHBOARD_TOKEN set to allow actions"},
                status_code=403,
            )
        given = request.headers.get("authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.encode(), self.token.encode()):
            return JSONResponse({"error": "a valid token is needed (Authorization: Bearer <token>)"}, status_code=401)
        return None

    def _audit(self, request: Request, action: str, detail: dict[str, Any], outcome: str = "ok") -> None:
        """Write a change made through the dashboard to the audit log (its token's user: the admin "token")."""
        who = User(TOKEN_USER, "admin", request.client.host if request.client else "?")
        audit.record(self.client, who, action, self.keys.crawl, detail, outcome)

    @staticmethod
    def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
        try:
            return max(low, min(high, int(request.query_params.get(name, default))))
        except ValueError:
            return default

    # -- pages and reads ------------------------------------------------------------
    async def index(self, request: Request) -> Response:
        return FileResponse(str(STATIC.joinpath("index.html")))

    def api(self, request: Request) -> JSONResponse:
        return JSONResponse({"crawl": self.keys.crawl, "endpoints": API})

    def status(self, request: Request) -> JSONResponse:
        snap = status.snapshot(self.client, self.keys)
        snap.pop("history", None)
        annotate_nodes(self.client, self.keys, snap["nodes"])
        snap["redis"] = self.redis_label
        snap["actions"] = self.token is not None
        return JSONResponse(snap)

    def history(self, request: Request) -> JSONResponse:
        q = request.query_params
        if not any(name in q for name in ("since", "until", "run", "step")):
            minutes = self._int(request, "minutes", 60, 1, 60)
            return JSONResponse(status.history(self.client, self.keys, minutes))
        try:
            now = redis_ms(self.client)
            since = crawl_history.parse_time(q.get("since"), now)
            until = crawl_history.parse_time(q.get("until"), now)
            run = int(q["run"]) if q.get("run") else None
            got = crawl_history.history(
                self.client,
                self.keys,
                since_ms=since,
                until_ms=until,
                run=run,
                step=q.get("step") or "auto",
                finest=q.get("finest") or "10s",
            )
        except (ValueError, CrawlplugError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse(got)

    def runs(self, request: Request) -> JSONResponse:
        return JSONResponse(
            {"runs": frontier_runs.history(self.client, self.keys), "kept": runstats.kept(self.client, self.keys)}
        )

    def report(self, request: Request) -> JSONResponse:
        raw = request.query_params.get("run")
        try:
            got = run_report.report(self.client, self.keys, int(raw) if raw else None)
        except (ValueError, CrawlplugError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse(got)

    def sites(self, request: Request) -> JSONResponse:
        try:
            return JSONResponse({"sites": site_pages.stored_sites(self.client)})
        except CrawlplugError as exc:
            return JSONResponse({"error": str(exc)}, status_code=500)

    async def try_site(self, request: Request) -> JSONResponse:
        denied = self._authorized(request)
        if denied:
            return denied
        try:
            trial = site_pages.trial_request(self.client, await request.json())
        except (ValueError, CrawlplugError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        code, body = await site_pages.run_trial(trial)
        return JSONResponse(body, status_code=code)

    def nodes(self, request: Request) -> JSONResponse:
        st = Crawl(self.client, self.keys).status()
        rows = status.nodes(self.client, self.keys, st["nodes"], redis_ms(self.client))
        return JSONResponse({"nodes": annotate_nodes(self.client, self.keys, rows)})

    def errors(self, request: Request) -> JSONResponse:
        return JSONResponse({"errors": errorsamples.read(self.client, self.keys)})

    def domains(self, request: Request) -> JSONResponse:
        n = self._int(request, "n", 50, 1, 1000)
        view = open_domains(self.client, self.keys)
        return JSONResponse(
            {
                "domains": view.scheduled_count(),
                "rows": view.table(n),
                "limits": view.limits(),
            }
        )

    def fields(self, request: Request) -> JSONResponse:
        sites = site_outcomes(status.crawl_stats(self.client, self.keys))
        rows = [
            {"site": site, "outcome": what, "label": site_fields.describe(what), "value": value}
            for site, found in sites.items()
            for what, value in found.items()
        ]
        return JSONResponse({"sites": sites, "rows": rows})

    def dead(self, request: Request) -> JSONResponse:
        n = self._int(request, "n", 50, 1, 1000)
        total = dead.dead_count(self.client, self.keys)
        return JSONResponse({"total": total, "rows": dead.dead_rows(self.client, self.keys, -n, -1)})

    def alerts(self, request: Request) -> JSONResponse:
        return JSONResponse(crawl_alerts.view(self.client, self.keys, self._int(request, "n", 20, 1, 200)))

    def prometheus(self, request: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest  # noqa: PLC0415

        return Response(generate_latest(self.metrics), media_type=CONTENT_TYPE_LATEST)

    # -- actions ----------------------------------------------------------------------
    def pause(self, request: Request) -> JSONResponse:
        denied = self._authorized(request)
        if denied:
            return denied
        changed = Crawl(self.client, self.keys).pause(by="dashboard")
        self._audit(request, "pause", {}, "ok" if changed else "already paused")
        return JSONResponse({"paused": True, "changed": changed})

    def resume(self, request: Request) -> JSONResponse:
        denied = self._authorized(request)
        if denied:
            return denied
        changed = Crawl(self.client, self.keys).resume()
        self._audit(request, "resume", {}, "ok" if changed else "not paused")
        return JSONResponse({"paused": False, "changed": changed})

    async def stop(self, request: Request) -> JSONResponse:
        denied = self._authorized(request)
        if denied:
            return denied
        try:
            body = await request.json() if await request.body() else {}
        except ValueError as exc:
            return JSONResponse({"error": f"bad body: {exc}"}, status_code=400)
        drain = body.get("drain", False) if isinstance(body, dict) else None
        if not isinstance(drain, bool):
            return JSONResponse({"error": 'bad body: give {"drain": true} or {"drain": false}'}, status_code=400)
        by = f"dashboard ({request.client.host if request.client else '?'})"
        out = control.stop(self.client, self.keys, by=by, drain=drain)
        self._audit(request, "stop", {"drain": drain}, "ok" if out.ok else _why(out.outcome, out.state))
        return JSONResponse(
            {
                "stopped": True,
                "drain": drain,
                "changed": out.ok,
                "run": out.run or None,
                "state": out.state,
                "why": None if out.ok else _why(out.outcome, out.state),
            }
        )

    def continue_(self, request: Request) -> JSONResponse:
        denied = self._authorized(request)
        if denied:
            return denied
        by = f"dashboard ({request.client.host if request.client else '?'})"
        out = control.continue_run(self.client, self.keys, by=by)
        self._audit(request, "continue", {}, "ok" if out.ok else _why(out.outcome, out.state, out.reached))
        why = None if out.ok else _why(out.outcome, out.state, out.reached)
        return JSONResponse(
            {"continued": True, "changed": out.ok, "run": out.run or None, "state": out.state, "why": why}
        )

    async def set_domain(self, request: Request) -> JSONResponse:
        denied = self._authorized(request)
        if denied:
            return denied
        domain = request.path_params["domain"]
        view = open_domains(self.client, self.keys)
        if request.method == "DELETE":
            if not domain or any(c in domain for c in "\t| "):
                return JSONResponse({"error": f"invalid domain {domain!r}"}, status_code=400)
            had = view.reset(domain)
            self._audit(request, "domains.reset", {"domain": domain}, "ok" if had else "had no override")
            return JSONResponse({"domain": domain, "override": None})
        try:
            body = await request.json()
            delay = _limit(body.get("delay"), "delay")
            conc = _limit(body.get("concurrency"), "concurrency")
            view.override(domain, delay=delay, concurrency=conc)  # a whole number: checked there
        except (ValueError, TypeError, AttributeError, OverflowError, CrawlplugError) as exc:
            return JSONResponse({"error": f"bad limits: {exc}"}, status_code=400)
        conc_out = None if conc is None else int(conc)
        self._audit(request, "domains.set", {"domain": domain, "delay": delay, "concurrency": conc_out})
        return JSONResponse({"domain": domain, "override": {"delay": delay, "concurrency": conc_out}})

    async def requeue(self, request: Request) -> JSONResponse:
        denied = self._authorized(request)
        if denied:
            return denied
        try:
            body = await request.json()
            indexes = [int(i) for i in body.get("indexes", [])]
            requeued, kept = dead.requeue_dead(self.client, self.keys, indexes, bool(body.get("all")))
        except (ValueError, TypeError, AttributeError, OverflowError, CrawlplugError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        self._audit(request, "dead.requeue", {"indexes": indexes, "all": bool(body.get("all")), "requeued": requeued})
        return JSONResponse({"requeued": requeued, "kept": [{"index": i, "why": why} for i, why in kept]})

    def routes(self) -> list[Any]:
        return [
            Route("/", self.index),
            Route("/api", self.api),
            Route("/api/status", self.status),
            Route("/api/history", self.history),
            Route("/api/runs", self.runs),
            Route("/api/report", self.report),
            Route("/api/sites", self.sites),
            Route("/api/sites/try", self.try_site, methods=["POST"]),
            Route("/api/nodes", self.nodes),
            Route("/api/errors", self.errors),
            Route("/api/domains", self.domains),
            Route("/api/fields", self.fields),
            Route("/api/dead", self.dead),
            Route("/api/alerts", self.alerts),
            Route("/metrics", self.prometheus),
            Route("/api/pause", self.pause, methods=["POST"]),
            Route("/api/resume", self.resume, methods=["POST"]),
            Route("/api/stop", self.stop, methods=["POST"]),
            Route("/api/continue", self.continue_, methods=["POST"]),
            Route("/api/domains/{domain}", self.set_domain, methods=["POST", "DELETE"]),
            Route("/api/dead/requeue", self.requeue, methods=["POST"]),
            Mount("/static", app=StaticFiles(directory=str(STATIC)), name="static"),
        ]


def _why(outcome: str, state: str, reached: str = "") -> str:
    """Why a stop or a continue did nothing, in words."""
    if outcome == "none":
        return "no run is recorded yet"
    if outcome == "reached":
        return f"its limit {reached} is still reached: raise it first (`crawlplug continue CRAWL --pages N`)"
    return f"the run is {state}"


def _limit(value: Any, name: str) -> float | None:
    """A domain limit from a JSON body: None, or a finite number >= 0 (a number or numeric text)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"{name} must be a number, not {value!r:.40}")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{name} must be a finite number >= 0, not {value!r:.40}")
    return number


def site_outcomes(stats: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Scrapy stats named ``site/<site>/<what...>`` grouped per site: the convention
    site spiders use to report pages per step, items ok, missing fields, exceptions
    (:mod:`crawlplug.sites.outcomes`)."""
    return site_fields.outcomes(stats)


def create_app(
    client: redis.Redis,
    keys: CrawlKeys,
    token: str | None = None,
    redis_label: str = "",
    *,
    hosts: Iterable[str] | None = None,
    top_domains: int = metrics.TOP_DOMAINS,
    alerts_link: str | None = None,
) -> Starlette:
    """The dashboard of crawl ``keys`` on ``client``; it answers requests whose Host header
    is one of ``hosts`` (patterns as :func:`allowed_hosts` gives them; default: loopback
    names only), others get 400. ``alerts_link`` (the dashboard's own address): while the
    app runs it evaluates the crawl's alert rules too, when it leads them (crawlplug.web.alerting)."""
    dash = Dashboard(client, keys, token, redis_label, top_domains)

    async def redis_down(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": f"Redis error: {exc}"}, status_code=503)

    trusted = list(hosts) if hosts is not None else list(LOOPBACK_HOSTS)
    return Starlette(
        routes=dash.routes(),
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=trusted, www_redirect=False)],
        exception_handlers={redis.RedisError: redis_down},
        lifespan=alerting.lifespan(client, keys, alerts_link),
    )
