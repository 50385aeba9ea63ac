"""One page fetched through Scrapy for a trial of a site definition (crawlplug.sites.trial).

:func:`fetch` runs a Scrapy crawler of one request with the project's settings (its
headers, user agent, proxies, middlewares, robots.txt rule, timeouts), minus what would
touch a crawl: Scrapy's own scheduler, dupefilter and stats collector instead of
crawlplug's, no item pipelines, and none of crawlplug's components (the add-on is left
out). Every status is handed to the trial (a 404 page is shown as one). Scrapy's
reactor starts once per process, so the CLI fetches in its own process and the
dashboard runs ``python -m crawlplug.sites.fetch`` (JSON in on stdin, out on stdout).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import scrapy
from scrapy.http import Response, TextResponse
from scrapy.settings import Settings

from ..errors import ConfigError, CrawlplugError
from . import render
from .definition import SiteDefinition, validate, version_of
from .store import allowed_pipelines
from .trial import explain

__all__ = ["Fetched", "fetch", "fetch_many", "main", "trial_settings", "try_definition", "try_pages"]

#: Seconds a trial waits for its page, unless told otherwise.
TIMEOUT = 30.0


@dataclass
class Fetched:
    """The page a trial fetched, or why there is none."""

    response: Response | None
    error: str | None
    ms: float


def trial_settings(project: Settings, timeout: float = TIMEOUT, log_level: str = "ERROR") -> Settings:
    """The project's settings with crawlplug and every crawl-state writer taken out; every
    HTTP status reaches the trial (redirects are still followed, as in a crawl)."""
    settings = project.copy()
    addons = {
        k: v
        for k, v in settings.getdict("ADDONS").items()
        if not (k == "crawlplug.Addon" or getattr(k, "__module__", "").startswith("crawlplug"))
    }
    settings.set("ADDONS", addons, priority="cmdline")
    for name in ("DOWNLOADER_MIDDLEWARES", "SPIDER_MIDDLEWARES", "EXTENSIONS"):
        parts = dict(settings.getdict(name))
        for path in list(parts):
            if str(path).startswith("crawlplug."):
                parts[path] = None  # off: crawlplug's components need its scheduler and Redis
        settings.set(name, parts, priority="cmdline")
    fixed = {
        "SCHEDULER": "scrapy.core.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy.dupefilters.BaseDupeFilter",
        "STATS_CLASS": "scrapy.statscollectors.MemoryStatsCollector",
        "ITEM_PIPELINES": {},
        "JOBDIR": None,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": log_level,
        "DOWNLOAD_TIMEOUT": timeout,
        "HTTPERROR_ALLOW_ALL": True,
    }
    for name, value in fixed.items():
        settings.set(name, value, priority="cmdline")
    return settings


def fetch(
    url: str, settings: Settings, timeout: float = TIMEOUT, log_level: str = "ERROR", meta: dict[str, Any] | None = None
) -> Fetched:
    """GET ``url`` through Scrapy with ``settings`` (trial_settings applied), the request
    carrying ``meta`` (a definition's render: scrapy-playwright's handlers then download
    it). Runs the reactor: once per process."""
    return fetch_many([(url, meta)], settings, timeout, log_level)[0]


def fetch_many(
    targets: list[tuple[str, dict[str, Any] | None]],
    settings: Settings,
    timeout: float = TIMEOUT,
    log_level: str = "ERROR",
) -> list[Fetched]:
    """GET each (url, meta) of ``targets`` through one Scrapy crawler (the reactor runs once
    per process), as :func:`fetch` does one; the results in the same order."""
    from scrapy.crawler import CrawlerProcess  # noqa: PLC0415 - installs the reactor

    boxes: list[dict[str, Any]] = [{} for _ in targets]

    class TrySpider(scrapy.Spider):
        name = "crawlplug-try"

        async def start(self) -> AsyncIterator[Any]:
            for i, (url, meta) in enumerate(targets):
                yield scrapy.Request(
                    url,
                    callback=self.got,
                    errback=self.failed,
                    dont_filter=True,
                    meta={**(meta or {}), "crawlplug_try": i},
                )

        def got(self, response: Response) -> None:
            boxes[response.meta["crawlplug_try"]]["response"] = response

        def failed(self, failure: Any) -> None:
            i = failure.request.meta.get("crawlplug_try", 0)
            boxes[i]["error"] = f"{type(failure.value).__name__}: {failure.value}"

    started = time.monotonic()
    tried = trial_settings(settings, timeout, log_level)
    if any(meta and meta.get("playwright") for _, meta in targets):
        render.handlers(tried, priority="cmdline")
    process = CrawlerProcess(tried)
    process.crawl(TrySpider)
    process.start()
    elapsed = (time.monotonic() - started) * 1000
    out = []
    for box in boxes:
        response = box.get("response")
        ms = elapsed
        latency = response.meta.get("download_latency") if response is not None else None
        if isinstance(latency, (int, float)):
            ms = latency * 1000  # the download itself, not Scrapy's start
        if response is None and "error" not in box:
            box["error"] = "the request was dropped before it was sent (a middleware or the project's settings)"
        out.append(Fetched(response, box.get("error"), ms))
    return out


def absolute(url: str, site: SiteDefinition) -> str:
    """``url`` as given, or resolved against the definition's base_url; ConfigError if neither is an http(s) URL."""
    parts = urlsplit(url)
    if parts.scheme in ("http", "https") and parts.netloc:
        return url
    if site.base_url and not parts.scheme:
        return urljoin(site.base_url, url)
    hint = "" if site.base_url else " (a relative one needs the definition's base_url, or --base-url)"
    raise ConfigError(f"{url!r} is not an absolute http(s) URL{hint}")


def try_definition(
    site: SiteDefinition,
    url: str,
    *,
    settings: Settings,
    version: str,
    origin: str,
    step: str | None = None,
    timeout: float = TIMEOUT,
    log_level: str = "ERROR",
) -> dict[str, Any]:
    """Fetch ``url`` and explain it (crawlplug.sites.trial.explain), with what was fetched
    under "page"; CrawlplugError if no page came (it says why)."""
    names = [s.name for s in site.steps]
    if step is not None and step not in names:
        raise ConfigError(f"site {site.name!r} has no step {step!r} (steps: {', '.join(names)})")
    absolute(url, site)  # a ConfigError before anything is fetched
    result = try_pages(
        site, [(url, step)], settings=settings, version=version, origin=origin, timeout=timeout, log_level=log_level
    )[0]
    if "error" in result:
        raise CrawlplugError(result["error"])
    return result


def try_pages(
    site: SiteDefinition,
    pages: list[tuple[str, str | None]],
    *,
    settings: Settings,
    version: str,
    origin: str,
    timeout: float = TIMEOUT,
    log_level: str = "ERROR",
) -> list[dict[str, Any]]:
    """Fetch each (url, step) of ``pages`` in one crawler and explain it as :func:`try_definition`
    does; a page that could not be tried is {"url", "step", "error"} (why), in its place."""
    how_render = render.problems(settings)
    targets: list[tuple[str, dict[str, Any] | None]] = []
    refused: dict[int, str] = {}
    names = [s.name for s in site.steps]
    for i, (url, step) in enumerate(pages):
        how = site.render_for(step or site.detail_step) if step in (None, *names) else None
        try:
            if step is not None and step not in names:
                raise ConfigError(f"site {site.name!r} has no step {step!r} (steps: {', '.join(names)})")
            target = absolute(url, site)
            if how is not None and how_render:
                raise ConfigError(
                    f"site {site.name!r} renders its pages (render:), but this machine cannot: {how_render[0]}"
                )
        except ConfigError as exc:
            refused[i] = str(exc)
            target = url
        targets.append((target, render.meta(how) if how is not None else None))
    wanted = [i for i in range(len(pages)) if i not in refused]
    fetched = (
        dict(zip(wanted, fetch_many([targets[i] for i in wanted], settings, timeout, log_level))) if wanted else {}
    )
    out: list[dict[str, Any]] = []
    for i, (url, step) in enumerate(pages):
        target, meta = targets[i]
        got = fetched.get(i)
        if got is None or got.response is None:
            why = refused.get(i) or f"could not fetch {target}: {got.error if got else 'not tried'}"
            out.append({"url": target, "step": step, "error": why})
            continue
        response = got.response
        if not isinstance(response, TextResponse):
            kind = response.headers.get("Content-Type", b"").decode(errors="replace") or "unknown"
            out.append(
                {
                    "url": target,
                    "step": step,
                    "error": (
                        f"{response.url} is not a text page (Content-Type {kind}, HTTP {response.status}): "
                        "a definition's selectors cannot read it"
                    ),
                }
            )
            continue
        result = explain(site, response, step=step, version=version, origin=origin)
        result["url"] = target
        result["page"] = {
            "url": response.url,
            "status": response.status,
            "bytes": len(response.body),
            "ms": round(got.ms),
            "content_type": response.headers.get("Content-Type", b"").decode(errors="replace"),
            "rendered": meta is not None,
        }
        out.append(result)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m crawlplug.sites.fetch``: read {"definition": <the document>, "url", "step",
    "base_url", "timeout", "origin"} as JSON on stdin, print the trial (or {"error": ...},
    exit code 1) as JSON. The dashboard's Sites page runs it, in the project's directory."""
    from scrapy.utils.project import get_project_settings  # noqa: PLC0415

    try:
        request = json.load(sys.stdin)
        pages = request.get("pages") if isinstance(request, dict) else None
        if isinstance(pages, list):
            return _main_pages(request, pages)
        if not isinstance(request, dict) or not isinstance(request.get("url"), str):
            raise ConfigError("give a JSON object with the definition and the url (or pages)")
        doc = request.get("definition")
        if request.get("base_url") and isinstance(doc, dict):
            doc = {**doc, "base_url": request["base_url"]}  # as -a base_url: relative start URLs go there
        project = get_project_settings()
        site = validate(doc, str(request.get("origin") or "the definition"), pipelines=allowed_pipelines(project))
        result = try_definition(
            site,
            request["url"],
            settings=project,
            version=version_of(doc),
            origin=str(request.get("origin") or "the definition"),
            step=request.get("step") or None,
            timeout=float(request.get("timeout") or TIMEOUT),
        )
    except (CrawlplugError, ValueError) as exc:
        json.dump({"error": str(exc)}, sys.stdout)
        return 1
    json.dump(result, sys.stdout, default=repr)
    return 0


def _main_pages(request: dict[str, Any], pages: list[Any]) -> int:
    """main() for {"definition", "pages": [{"url", "step"}], ...}: {"trials": [...]} out."""
    from scrapy.utils.project import get_project_settings  # noqa: PLC0415

    try:
        wanted = [(str(p["url"]), p.get("step") or None) for p in pages if isinstance(p, dict) and p.get("url")]
        if not wanted:
            raise ConfigError('no page to try: give pages as [{"url": ..., "step": ...}]')
        doc = request.get("definition")
        if request.get("base_url") and isinstance(doc, dict):
            doc = {**doc, "base_url": request["base_url"]}
        project = get_project_settings()
        origin = str(request.get("origin") or "the definition")
        site = validate(doc, origin, pipelines=allowed_pipelines(project))
        trials = try_pages(
            site,
            wanted,
            settings=project,
            version=version_of(doc),
            origin=origin,
            timeout=float(request.get("timeout") or TIMEOUT),
        )
    except (CrawlplugError, ValueError) as exc:
        json.dump({"error": str(exc)}, sys.stdout)
        return 1
    json.dump({"trials": trials, "version": version_of(doc), "origin": origin}, sys.stdout, default=repr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
