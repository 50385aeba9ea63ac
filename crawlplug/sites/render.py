"""A site definition's ``render:``: its pages rendered by a browser (scrapy-playwright)
before they are parsed, for prices and comments a page's script writes.

``render: {engine: playwright, wait_for: ".price", timeout: 10, wait: 0.5}`` (per site,
or per step: a step's own wins) becomes the request meta scrapy-playwright reads:
``playwright: True`` and ``playwright_page_methods``, a ``wait_for_selector`` of
``wait_for`` (the page's own CSS selector, at most ``timeout`` seconds) and a
``wait_for_timeout`` of ``wait`` seconds. Both are page methods of the PageMethod
codec's allow-list (crawlplug.serializers.pagemethods), so the requests are stored in
Redis as JSON and read back like any other; a definition names no code, only a
selector and numbers. A page whose ``wait_for`` does not appear in time fails (its
error counted for the site) rather than being parsed half-rendered.

:func:`handlers` makes the node download through scrapy-playwright (http and https;
requests without ``playwright`` meta go through its plain HTTP fallback), unless the
project chose its own handlers. :func:`problems` says what a node lacks to render:
the ``[playwright]`` extra, or a browser (Playwright's own, or the one
``PLAYWRIGHT_LAUNCH_OPTIONS["executable_path"]`` names).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from .definition import Render, SiteDefinition

__all__ = ["HANDLER", "handlers", "meta", "problems", "uses_render"]

HANDLER = "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler"


def uses_render(site: SiteDefinition) -> bool:
    """Whether any page of ``site`` is rendered."""
    return site.render is not None or any(step.render is not None for step in site.steps)


def meta(render: Render) -> dict[str, Any]:
    """The request meta that makes scrapy-playwright render a page as ``render`` says."""
    from scrapy_playwright.page import PageMethod  # noqa: PLC0415 - the [playwright] extra

    methods = []
    if render.wait_for is not None:
        methods.append(PageMethod("wait_for_selector", render.wait_for, timeout=int(render.timeout * 1000)))
    if render.wait > 0:
        methods.append(PageMethod("wait_for_timeout", int(render.wait * 1000)))
    return {"playwright": True, "playwright_page_methods": methods}


def handlers(settings: BaseSettings, priority: str = "spider") -> bool:
    """Download http(s) through scrapy-playwright unless the project set its own handler
    for them; True if the handlers are scrapy-playwright's."""
    current = dict(settings.getdict("DOWNLOAD_HANDLERS"))
    mine = {scheme: HANDLER for scheme in ("http", "https") if not current.get(scheme)}
    if mine:
        settings.set("DOWNLOAD_HANDLERS", {**current, **mine}, priority=priority)
    return all(dict(settings.getdict("DOWNLOAD_HANDLERS")).get(s) == HANDLER for s in ("http", "https"))


def problems(settings: BaseSettings | None = None) -> list[str]:
    """What this machine lacks to render pages (empty: nothing)."""
    if importlib.util.find_spec("scrapy_playwright") is None:
        return ["rendering needs crawlplug's [playwright] extra: pip install 'crawlplug[playwright]'"]
    launch = dict(settings.getdict("PLAYWRIGHT_LAUNCH_OPTIONS")) if settings is not None else {}
    executable = launch.get("executable_path")
    if executable:
        if not os.access(str(executable), os.X_OK):
            return [f"PLAYWRIGHT_LAUNCH_OPTIONS executable_path {executable!r} is not a program on this machine"]
        return []
    browsers = Path(os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or Path.home() / ".cache" / "ms-playwright")
    if not any(browsers.glob("chromium*")):
        return [
            f"no browser for Playwright ({browsers} has no chromium): run `playwright install chromium`, or "
            "name one in PLAYWRIGHT_LAUNCH_OPTIONS = {'executable_path': '/usr/lib/chromium/chromium'}"
        ]
    return []
