"""The site studio's reads and trials, ``/api/v1/sites/...`` beside the definitions' own routes
(crawlplug.console.api): a site's history per minute in a crawl and its outcomes per
definition version, the URLs its crawls fetched last, and a definition tried on several of
them at once. Reads need a viewer, a trial the permission ``sites.try`` (the operator's),
as a single-page trial does.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from ..errors import CrawlplugError
from ..frontier.store import redis_ms
from ..stats import crawl_stats
from .api import SiteTrier, Viewer, _client, _keys

__all__ = ["router"]

router = APIRouter(prefix="/api/v1")

#: At most this many pages in one trial of recent URLs.
MOST_TRIED = 20


def _site_modules() -> Any:
    try:
        from ..sites import minutes, outcomes, recent  # noqa: PLC0415 - the [sites] extra
        from ..sites import store as site_store  # noqa: PLC0415
    except ImportError as exc:  # pragma: no cover - without the extra
        raise HTTPException(501, f"site definitions need crawlplug's [sites] extra ({exc})") from None
    return minutes, outcomes, recent, site_store


class RecentTryBody(BaseModel):
    site: str = Field(description="the site whose recent URLs are tried")
    definition: str | None = Field(None, description="a definition's text to try (default: the stored one)")
    n: int = Field(5, ge=1, le=MOST_TRIED, description="how many of its last URLs (distinct, newest first)")
    step: str | None = Field(None, description="only URLs of this step")
    base_url: str | None = None


@router.get("/crawls/{crawl}/sites/{site}/minutes", summary="a site's pages, items and field outcomes per minute")
def site_minutes(
    request: Request, crawl: str, site: str, who: Viewer, minutes: int = Query(60, ge=1, le=1440)
) -> dict[str, Any]:
    keys = _keys(request, crawl)
    mins, outcomes, _, site_store = _site_modules()
    client = _client(request)
    now = redis_ms(client)
    got = mins.series(client, keys, site, now - (max(minutes, 11) - 1) * mins.MINUTE_MS, now)
    out = got.as_dict()
    # each field's null rate over the last 10 minutes, as null_rate(SITE.FIELD, 10m) reads it
    out["null_rate_10m"] = got.window_rates(now, 10 * mins.MINUTE_MS)
    stats = crawl_stats(client, keys)
    out["by_version"] = outcomes.per_version(stats, site)
    out["now_ms"] = now
    # each version stored, when and by whom: the charts mark the moments
    out["applied"] = [
        {"n": v.n, "version": v.version, "at_ms": int(v.at * 1000), "by": v.by, "rollback_of": v.rollback_of}
        for v in site_store.SiteStore(client).history(site)
    ]
    return out


@router.get("/sites/{site}/recent", summary="the URLs of a site its crawls parsed last, newest first")
def site_recent(request: Request, site: str, who: Viewer, n: int = Query(20, ge=1, le=50)) -> dict[str, Any]:
    _, _, recent, _ = _site_modules()
    return {"site": site, "urls": recent.recent_urls(_client(request), site, n)}


@router.post("/sites/try-recent", summary="try a definition on a site's recent URLs, fetched again")
async def try_recent(request: Request, body: RecentTryBody, who: SiteTrier) -> JSONResponse:
    from ..web import sites as site_pages  # noqa: PLC0415

    _, _, recent, _ = _site_modules()
    client = _client(request)
    urls = [u for u in recent.recent_urls(client, body.site, 50) if body.step is None or u["step"] == body.step]
    if not urls:
        raise HTTPException(
            404, f"no recent URL of site {body.site!r}{f' at step {body.step!r}' if body.step else ''} kept yet"
        )
    try:
        trial = site_pages.trial_request(
            client,
            {"site": body.site, "definition": body.definition, "url": urls[0]["url"], "base_url": body.base_url},
        )
    except (ValueError, CrawlplugError) as exc:
        raise HTTPException(400, str(exc)) from None
    trial.pop("url")
    trial["pages"] = [{"url": u["url"], "step": u["step"] or None} for u in urls[: body.n]]
    started = time.monotonic()
    code, out = await site_pages.run_trial(trial, timeout=site_pages.TRIAL_TIMEOUT + 5 * len(trial["pages"]))
    if code == 200:
        out["summary"] = _summary(out.get("trials", []))
        out["seconds"] = round(time.monotonic() - started, 1)
    return JSONResponse(out, status_code=code)


def _summary(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """Per field, on how many of the item pages tried it had each outcome (filled, missing, ...)."""
    fields: dict[str, dict[str, int]] = {}
    for trial in trials:
        for f in trial.get("fields") or ():
            row = fields.setdefault(str(f.get("name")), {})
            row[str(f.get("outcome"))] = row.get(str(f.get("outcome")), 0) + 1
    item_pages = sum(1 for t in trials if t.get("fields"))
    return {
        "pages": len(trials),
        "item_pages": item_pages,
        "failed": sum(1 for t in trials if "error" in t),
        "fields": fields,
    }
