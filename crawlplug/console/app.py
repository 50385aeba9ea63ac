"""The console: one server over every crawl of one Redis (``crawlplug console``).

A FastAPI application: the API under ``/api/v1`` (crawlplug.console.api), its OpenAPI
document at ``/api/v1/openapi.json`` made from the routes. With a crawl named (``crawlplug
dashboard --crawl X``, or ``crawlplug console --crawl X``) the dashboard of that crawl is
served beside it as before (its page at ``/``, its ``/api/*`` and ``/metrics``; while it
runs it evaluates the crawl's alert rules when it leads them). The console's pages are at
``/console/`` (``/`` leads there when no crawl is named): ``static/console.html`` and
``static/console.js``, Alpine.js over the API, every action one API call. Requests whose Host header
names another host get 400 (DNS rebinding), as the dashboard's always have.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import redis
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.middleware.trustedhost import TrustedHostMiddleware

from ..frontier.keys import CrawlKeys
from ..server.clients import Connection
from ..web import alerting
from ..web import create_app as dashboard_app
from ..web.hosts import LOOPBACK_HOSTS
from .api import router
from .auth import Access
from .studio import router as studio_router

__all__ = ["create_console"]

STATIC = Path(__file__).with_name("static")


def create_console(
    conn: Connection,
    *,
    admin_token: str | None = None,
    hosts: Iterable[str] | None = None,
    read_open: bool = False,
    crawl: CrawlKeys | None = None,
    alerts_link: str | None = None,
    redis_label: str = "",
) -> FastAPI:
    """The console over ``conn``'s Redis (module docstring). ``admin_token``:
    CRAWLPLUG_DASHBOARD_TOKEN, an admin; ``read_open``: reads need no login; ``crawl``: also
    that crawl's dashboard (``alerts_link``: its address, for the alerts it evaluates)."""
    client: redis.Redis = conn.client
    lifespan = alerting.lifespan(client, crawl, alerts_link) if crawl is not None else None
    app = FastAPI(
        title="crawlplug console",
        version="1",
        openapi_url="/api/v1/openapi.json",
        docs_url=None,  # Swagger's pages load their scripts from a CDN: none on a closed network
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.access = Access(client, admin_token=admin_token, read_open=read_open)
    app.state.conn = conn
    app.include_router(router)
    app.include_router(studio_router)

    @app.exception_handler(redis.RedisError)
    async def redis_down(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": f"Redis error: {exc}"}, status_code=503)

    # the console's pages (console.html: Alpine.js over this API), at /console/
    @app.get("/console", include_in_schema=False)
    def console_slash() -> Any:
        return RedirectResponse("/console/")

    @app.get("/console/", include_in_schema=False)
    def console_page() -> Any:
        return FileResponse(STATIC / "console.html", headers={"Cache-Control": "no-cache"})

    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")

    trusted = list(hosts) if hosts is not None else list(LOOPBACK_HOSTS)
    if crawl is not None:
        app.mount("/", dashboard_app(client, crawl, admin_token, redis_label or conn.safe_url, hosts=trusted))
    else:

        @app.get("/", include_in_schema=False)
        def home() -> Any:
            return RedirectResponse("/console/")

    app.add_middleware(TrustedHostMiddleware, allowed_hosts=trusted, www_redirect=False)
    return app
