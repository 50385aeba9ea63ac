"""A spider driven by a site definition, and the pipeline that runs its steps.

``scrapy crawl site -a site=NAME`` (``spiders/site.py`` subclasses
:class:`SiteSpider`) crawls the site a definition describes (see
:mod:`crawlplug.sites.definition` and ``docs/sites.md``):

* the definition comes from Redis (``crawlplug sites put FILE``), else from
  ``CRAWLPLUG_SITES_DIR/NAME.yaml`` (``.yml``, ``.json``); ``-a base_url=URL``
  points a definition's relative start URLs at another host;
* start URLs are fetched as the first step (or the step they name); each
  page's links, as the step's rules select them, become requests of the
  rules' steps at those steps' priorities; detail pages give items;
* every ``CRAWLPLUG_SITES_REFRESH`` seconds each node asks Redis for the
  version of every definition it uses (one HGET each) and switches to a new
  one at once, so a definition changed while the crawl runs takes effect on
  all nodes without a restart;
* outcomes are counted as Scrapy stats named ``site/<site>/...``
  (:mod:`crawlplug.sites.outcomes`), crawl-wide through
  :class:`crawlplug.stats.RedisStatsCollector`, which this spider turns on
  unless the project chose another STATS_CLASS (it also counts them per minute:
  :mod:`crawlplug.sites.minutes`); an item page's outcomes are counted under the
  definition version that parsed it too (``site/<site>/v/<version>/...``);
* the pages parsed last are kept per site for trials (:mod:`crawlplug.sites.recent`),
  sent with each refresh.

Requests carry their site and step in ``cb_kwargs`` (JSON, as crawlplug
stores requests), so a node can take any request of its crawl, whichever
site it names. The crawl is ``site-<NAME>`` unless CRAWLPLUG_CRAWL_ID is set.

Its size: one spider class, the steps of a site run by Scrapy's callbacks and the per-
field counting they share.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import scrapy
from scrapy import signals
from scrapy.exceptions import CloseSpider, DropItem
from scrapy.http import Response
from scrapy.settings import SETTINGS_PRIORITIES, BaseSettings
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.misc import build_from_crawler, load_object
from twisted.internet.defer import Deferred
from twisted.internet.task import LoopingCall
from twisted.python.failure import Failure

from ..config import setting
from ..errors import REDIS_ERRORS, ConfigError, CrawlplugError
from ..probes.errorsamples import ErrorSamplesMiddleware
from ..scheduler import enginehooks
from ..server import clients
from . import outcomes as out
from . import render
from .definition import NAME_RE, version_of
from .extract import CompiledSite
from .recent import Recent
from .store import SiteStore, allowed_pipelines, load_named_file, sites_dir

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["SiteItem", "SitePipeline", "SiteSpider"]

logger = logging.getLogger(__name__)

PIPELINE = "crawlplug.sites.spider.SitePipeline"
PIPELINE_ORDER = 100
STATS_CLASS = "crawlplug.stats.RedisStatsCollector"


class SiteItem(dict):  # type: ignore[type-arg]
    """An item (a plain dict to exporters and pipelines) that knows its site, as an attribute."""

    __slots__ = ("site",)

    def __init__(self, site: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.site = site


class SiteSpider(scrapy.Spider):
    """Crawls the site named by ``-a site=NAME`` as its definition says."""

    name = "site"  # spiders/site.py makes it a spider of the project

    def __init__(self, site: str | None = None, base_url: str | None = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # reported when the spider opens: one log line and exit code 1, not a traceback
        self._problem: str | None = None
        if not site:
            self._problem = f"which site? scrapy crawl {self.name} -a site=NAME"
        elif not NAME_RE.match(site):
            self._problem = f"invalid site name {site!r}: letters, digits, '_' and '-', starting with a letter or digit"
        self.site_name = site or "unnamed"
        self.base_url = base_url or None
        self.sites: dict[str, CompiledSite] = {}
        self.store: SiteStore | None = None
        self._rejected: dict[str, str] = {}  # site -> a stored version this node could not use
        self._logged: set[tuple[str, ...]] = set()
        self._loop: LoopingCall | None = None
        self._own_conn: clients.Connection | None = None
        self.recent: Recent | None = None

    # -- Scrapy plumbing ---------------------------------------------------------------
    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> SiteSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        if not crawler.settings.frozen:
            # Here, not in update_settings: `scrapy crawl` re-applies the project's and the
            # command line's settings after update_settings, which would drop a component
            # added to a dict setting; the settings are frozen only after this factory.
            spider._adjust_settings(crawler.settings)
        crawler.signals.connect(spider._opened, signal=signals.spider_opened)
        crawler.signals.connect(spider._closed, signal=signals.spider_closed)
        return spider

    def _adjust_settings(self, settings: BaseSettings) -> None:
        if not settings.get("CRAWLPLUG_CRAWL_ID") and self._problem is None:
            settings.set("CRAWLPLUG_CRAWL_ID", f"site-{self.site_name}", priority="spider")
        # crawl-wide outcomes need the stats in Redis; a project's own choice still wins
        if settings.getpriority("STATS_CLASS") <= SETTINGS_PRIORITIES["default"]:
            settings.set("STATS_CLASS", STATS_CLASS, priority="spider")
        # the class, not its path: Scrapy compares it with each entry by the class that entry
        # loads, so a project's None under the path keeps the pipeline off (given the path,
        # it compared a class with a string and wrote its order over the None; as the add-on)
        settings.setdefault_in_component_priority_dict("ITEM_PIPELINES", load_object(PIPELINE), PIPELINE_ORDER)
        # rendering needs scrapy-playwright's download handlers, chosen before the definition
        # is read from Redis: its file says so, or the setting does (a definition only in Redis)
        wanted = self._problem is None and (settings.getbool("CRAWLPLUG_SITES_RENDER") or self._file_renders(settings))
        if wanted and not render.problems(settings):  # else each rendered request would fail: said at open
            render.handlers(settings)

    def _file_renders(self, settings: BaseSettings) -> bool:
        """Whether the site's definition file (CRAWLPLUG_SITES_DIR) renders any page."""
        try:
            directory = sites_dir(setting(settings, "CRAWLPLUG_SITES_DIR"))
            found = load_named_file(directory, self.site_name, allowed_pipelines(settings))
        except CrawlplugError:
            return False  # reported when the spider opens
        return found is not None and render.uses_render(found[0])

    def _opened(self, spider: scrapy.Spider) -> None:
        client = self._redis_client()
        if client is not None:
            prefix = setting(self.crawler.settings, "CRAWLPLUG_KEY_PREFIX")
            self.store = SiteStore(client, prefix)
            self.recent = Recent(str(self.crawler.settings.get("CRAWLPLUG_CRAWL_ID") or self.name), prefix)
        try:
            if self._problem is not None:
                raise ConfigError(self._problem)
            site = self.load(self.site_name)
        except CrawlplugError as exc:
            logger.error("site spider: %s" if self._problem else f"site {self.site_name!r}: %s", exc)

            def drop_spider(spider: scrapy.Spider) -> None:
                self.crawler.spider = None  # type: ignore[assignment] # `scrapy crawl` exits 1 (see enginehooks)

            self.crawler.signals.connect(drop_spider, signal=signals.spider_closed, weak=False)
            raise CloseSpider("site_definition_error") from None
        logger.info(
            "site %r: definition %s from %s: %d start URLs, steps %s, detail step %r, %d fields",
            site.name,
            site.version,
            site.origin,
            len(site.start()),
            " -> ".join(s.name for s in site.site.steps),
            site.detail_step,
            len(site.fields),
        )
        interval = float(setting(self.crawler.settings, "CRAWLPLUG_SITES_REFRESH", "getfloat"))
        if self.store is not None and interval > 0:
            self._loop = LoopingCall(self.refresh)
            self._loop.start(interval, now=False)

    def _closed(self, spider: scrapy.Spider) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        if self.recent is not None and self.store is not None:
            try:
                self.recent.push(self.store.client)  # the last pages parsed since the last refresh
            except REDIS_ERRORS as exc:
                logger.debug("site spider: recent URLs not sent at close (%s)", exc)
        if self._own_conn is not None:
            self._own_conn.client.close()

    def _redis_client(self) -> Any:
        """The scheduler's Redis client, else one of our own, else None (files only)."""
        try:
            scheduler = enginehooks.scheduler(self.crawler)
        except RuntimeError:  # no engine: a spider driven by hand (tests)
            scheduler = None
        frontier = getattr(scheduler, "frontier", None)
        client = getattr(frontier, "client", None)
        if client is not None:
            return client
        if scheduler is not None and hasattr(scheduler, "frontier"):
            return None  # crawlplug's scheduler could not reach Redis: it said so, and the node closes
        try:
            self._own_conn = clients.from_settings(self.crawler.settings)
            clients.check(self._own_conn)
        except (CrawlplugError, OSError, *REDIS_ERRORS) as exc:
            logger.warning(
                "site spider: no Redis for site definitions (%s); only %s is read",
                exc,
                sites_dir(setting(self.crawler.settings, "CRAWLPLUG_SITES_DIR")),
            )
            self._own_conn = None
            return None
        return self._own_conn.client

    # -- definitions -----------------------------------------------------------------------
    def load(self, name: str) -> CompiledSite:
        """Site ``name`` from Redis, else from its file; raises ConfigError if neither has it."""
        directory = sites_dir(setting(self.crawler.settings, "CRAWLPLUG_SITES_DIR"))
        stored = None
        if self.store is not None:
            try:
                stored = self.store.get(name)
            except REDIS_ERRORS as exc:
                logger.warning("site %r: cannot read its definition from Redis (%s); trying %s", name, exc, directory)
        pipelines = allowed_pipelines(self.crawler.settings)
        if stored is not None:
            compiled = self._compile(stored.definition(pipelines=pipelines), stored.version, "Redis", name)
        else:
            found = load_named_file(directory, name, pipelines)
            if found is None:
                where = "in Redis (crawlplug sites put FILE) nor " if self.store is not None else ""
                raise ConfigError(
                    f"no definition of site {name!r}: not {where}in {directory} "
                    f"({name}.yaml, {name}.yml or {name}.json)"
                )
            site, doc, path = found
            compiled = self._compile(site, version_of(doc), str(path), name)
        self.sites[name] = compiled
        self.crawler.stats.inc_value(out.version(name, compiled.version))
        self.crawler.stats.set_value(out.steps(name), ",".join(s.name for s in compiled.site.steps))
        return compiled

    def _compile(self, site: Any, version: str, origin: str, name: str) -> CompiledSite:
        if name == self.site_name and self.base_url:
            site = site.with_base_url(self.base_url)
        return CompiledSite(site, version, origin)

    def site(self, name: str) -> CompiledSite | None:
        """The definition in force for ``name`` (loaded on first use), None if there is none."""
        found = self.sites.get(name)
        if found is not None or not NAME_RE.match(name):
            return found
        try:
            return self.load(name)
        except CrawlplugError as exc:
            self._once(("load", name), logging.ERROR, "site %r: %s", name, exc)
            return None

    def refresh(self) -> None:
        """Switch every site whose stored version changed to the new definition (the timer calls this)."""
        if self.store is None:
            return
        if self.recent is not None:
            try:
                self.recent.push(self.store.client)
            except REDIS_ERRORS as exc:  # a sample lost, nothing else: the next push sends newer pages
                logger.debug("site spider: recent URLs not sent (%s)", exc)
        for name, current in list(self.sites.items()):
            try:
                ver = self.store.version(name)
                if ver is None or ver == current.version or self._rejected.get(name) == ver:
                    continue
                stored = self.store.get(name)
                if stored is None:
                    continue
                new = self._compile(
                    stored.definition(pipelines=allowed_pipelines(self.crawler.settings)), stored.version, "Redis", name
                )
            except REDIS_ERRORS as exc:
                self._once(
                    ("refresh-redis",),
                    logging.WARNING,
                    "site definitions: cannot check Redis for changes (%s); will retry",
                    exc,
                )
                return
            except CrawlplugError as exc:
                self._rejected[name] = ver or ""
                self.crawler.stats.inc_value(out.error(name, "DefinitionError"))
                logger.error(
                    "site %r: the definition stored in Redis (version %s) is not usable here, keeping version %s: %s",
                    name,
                    ver,
                    current.version,
                    exc,
                )
                continue
            self.sites[name] = new
            stats = self.crawler.stats
            stats.inc_value(out.version(name, current.version), -1)
            stats.inc_value(out.version(name, new.version))
            stats.set_value(out.steps(name), ",".join(s.name for s in new.site.steps))
            logger.info("site %r: definition changed in Redis, version %s -> %s", name, current.version, new.version)

    # -- crawling --------------------------------------------------------------------------
    async def start(self) -> AsyncIterator[Any]:
        site = self.sites.get(self.site_name)
        if site is None:  # not opened through _opened (e.g. a test driving the spider by hand)
            site = self.load(self.site_name)
        for url, step, priority in site.start():
            yield self._request(url, site.name, step, priority)

    def _request(self, url: str, site: str, step: str, priority: int) -> scrapy.Request:
        compiled = self.sites.get(site)
        how = compiled.site.render_for(step) if compiled is not None else None
        meta: dict[str, Any] = {}
        if how is not None:
            if self._renders():
                meta = render.meta(how)
            else:
                self.crawler.stats.inc_value(out.render_unavailable(site))
                self._once(
                    ("render", site),
                    logging.ERROR,
                    "site %r renders its pages (render:), but this node downloads without a browser: %s; its "
                    "pages are parsed as fetched",
                    site,
                    "; ".join(render.problems(self.crawler.settings))
                    or "set CRAWLPLUG_SITES_RENDER = True (a definition only in Redis) and start the node again",
                )
        return scrapy.Request(
            url,
            callback=self.parse_page,
            errback=self.page_failed,
            priority=priority,
            cb_kwargs={"site": site, "step": step},
            meta=meta,
        )

    def site_item_key(self, site: str) -> list[str] | None:
        """The fields a site's definition names as its items' key (SQLItemPipeline), or None."""
        compiled = self.sites.get(site)
        return list(compiled.site.item_key) or None if compiled is not None else None

    def _renders(self) -> bool:
        """Whether this node downloads through scrapy-playwright (decided when it started)."""
        handlers = self.crawler.settings.getdict("DOWNLOAD_HANDLERS")
        return all(handlers.get(scheme) == render.HANDLER for scheme in ("http", "https"))

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        """A pushed start entry without a callback: a page of this node's site's first step."""
        site = self.site(self.site_name)
        if site is not None:
            yield from self.parse_page(response, self.site_name, site.site.steps[0].name)

    def parse_page(self, response: Response, site: str, step: str) -> Iterator[Any]:
        """One page of ``step``: its item if it is a detail page, then its links."""
        compiled = self.site(site)
        if compiled is None:
            self.crawler.stats.inc_value(out.error(site, "NoDefinition"))
            return
        stats = self.crawler.stats
        if step not in compiled.steps:  # queued under a definition that had this step
            stats.inc_value(out.error(site, "UnknownStep"))
            self._once(
                ("step", site, step),
                logging.WARNING,
                "site %r has no step %r any more (definition %s); its pages are skipped: %s",
                site,
                step,
                compiled.version,
                response.url,
            )
            return
        stats.inc_value(out.step_pages(site, step))
        if self.recent is not None:
            self.recent.saw(site, response.url, step)
        if step == compiled.detail_step:
            item = self._item(compiled, response)
            if item is not None:
                yield item
        if compiled.has_links(step):
            try:
                links = compiled.links(response, step)
            except Exception as exc:  # noqa: BLE001 - a page that cannot be read for links is counted, not fatal
                self._error(site, exc, response.url, "links")
                return
            if links:
                stats.inc_value(out.step_links(site, step), len(links))
            else:
                stats.inc_value(out.step_no_links(site, step))
            for link in links:
                yield self._request(link.url, site, link.step, link.priority)

    def _item(self, site: CompiledSite, response: Response) -> SiteItem | None:
        stats = self.crawler.stats
        try:
            result = site.extract(response)
        except Exception as exc:  # noqa: BLE001
            self._error(site.name, exc, response.url, "fields")
            return None
        for name, exc in result.errors:
            self._error(site.name, exc, response.url, name)
        ver = site.version
        stats.inc_value(out.by_version(site.name, ver, "pages"))
        for name, why in result.invalid:
            stats.inc_value(out.field(site.name, name, "invalid"))
            stats.inc_value(out.by_version(site.name, ver, f"field/{name}/invalid"))
            self._sample(f"site/{site.name}/{name} is not valid", response.url)
            self._once(
                ("invalid", site.name, name),
                logging.WARNING,
                "site %r: field %r is not valid (%s) on %s; counted from now on as %s",
                site.name,
                name,
                why,
                response.url,
                out.field(site.name, name, "invalid"),
            )
        for name in result.defaulted:
            stats.inc_value(out.field(site.name, name, "default"))
            stats.inc_value(out.by_version(site.name, ver, f"field/{name}/default"))
        for name in result.filled:
            stats.inc_value(out.field(site.name, name, "filled"))
            stats.inc_value(out.by_version(site.name, ver, f"field/{name}/filled"))
        if result.complete:
            stats.inc_value(out.items(site.name, "ok"))
            stats.inc_value(out.by_version(site.name, ver, "items/ok"))
            return SiteItem(site.name, result.item)
        stats.inc_value(out.items(site.name, "incomplete"))
        stats.inc_value(out.by_version(site.name, ver, "items/incomplete"))
        for name in result.missing:
            stats.inc_value(out.field(site.name, name, "missing"))
            stats.inc_value(out.by_version(site.name, ver, f"field/{name}/missing"))
            self._sample(f"site/{site.name}/{name} is null", response.url)
            self._once(
                ("missing", site.name, name),
                logging.WARNING,
                "site %r: %s is null on %s (definition %s); counted from now on as %s",
                site.name,
                name,
                response.url,
                site.version,
                out.field(site.name, name, "missing"),
            )
        if site.site.incomplete_items == "keep":
            return SiteItem(site.name, result.item, _errors=[f"{name} is null" for name in result.missing])
        return None

    def page_failed(self, failure: Failure) -> None:
        """Errback: count the failed request under its step (Scrapy logs the failure itself)."""
        request = getattr(failure, "request", None)
        kwargs = getattr(request, "cb_kwargs", None) or {}
        site, step = kwargs.get("site"), kwargs.get("step")
        if isinstance(site, str) and isinstance(step, str):
            self.crawler.stats.inc_value(out.step_failed(site, step))

    # -- reporting -------------------------------------------------------------------------
    def _error(self, site: str, exc: BaseException, url: str, where: str) -> None:
        self.crawler.stats.inc_value(out.error(site, exc))
        self._sample(f"site/{site}/{type(exc).__name__}", url)
        self._once(
            ("error", site, type(exc).__name__),
            logging.ERROR,
            "site %r: %s while extracting %s from %s: %s (counted from now on as %s)",
            site,
            type(exc).__name__,
            where,
            url,
            exc,
            out.error(site, exc),
        )

    def _once(self, key: tuple[str, ...], level: int, msg: str, *args: Any) -> None:
        """Log a noisy event the first time only; the stats count every time."""
        if key not in self._logged:
            self._logged.add(key)
            logger.log(level, msg, *args)

    def _sample(self, kind: str, url: str) -> None:
        """Record an error kind with a sample URL for the dashboard's errors page, if it is enabled."""
        sampler = getattr(self, "_sampler", False)
        if sampler is False:
            sampler = self._sampler = _error_sampler(self.crawler)
        if sampler is not None:
            sampler.record(kind, url)


def _error_sampler(crawler: Crawler) -> Any:
    """The crawl's ErrorSamplesMiddleware (the add-on enables it), or None."""
    try:
        engine = crawler.engine
    except RuntimeError:  # no engine yet (a spider driven by hand)
        return None
    manager = getattr(getattr(engine, "downloader", None), "middleware", None)
    for mw in getattr(manager, "middlewares", ()):
        if isinstance(mw, ErrorSamplesMiddleware):
            return mw
    return None


class SitePipeline:
    """Runs the pipeline steps a site's definition names (class paths), in order, on its items.

    The SiteSpider adds it to ITEM_PIPELINES (order 100). Steps are built once
    with ``build_from_crawler`` and follow the definition in force: a step added
    to a definition in Redis runs from the next item on. Only steps listed in
    CRAWLPLUG_SITE_PIPELINES are ever loaded (the definition was validated against
    that list; this checks again). A step that raises (other than DropItem) is
    counted as ``site/<site>/errors/<Exception>`` and the item is dropped with the
    reason.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.steps: dict[str, Any] = {}
        self._logged: set[tuple[str, str]] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SitePipeline:
        return cls(crawler)

    def _step(self, path: str) -> Any:
        step = self.steps.get(path)
        if step is None:
            if path not in allowed_pipelines(self.crawler.settings):
                raise ConfigError(f"pipeline step {path!r} is not listed in CRAWLPLUG_SITE_PIPELINES; not loaded")
            step = build_from_crawler(load_object(path), self.crawler)
            opener = getattr(step, "open_spider", None)
            if opener is not None:
                _call(opener, self.crawler.spider)
            self.steps[path] = step
        return step

    async def process_item(self, item: Any) -> Any:
        site_name = getattr(item, "site", None)
        spider = self.crawler.spider
        if site_name is None or not isinstance(spider, SiteSpider):
            return item
        site = spider.sites.get(site_name)
        for path in site.site.pipelines if site is not None else ():
            try:
                result = _call(self._step(path).process_item, spider, item)
                if isinstance(result, Deferred):
                    result = await maybe_deferred_to_future(result)
                elif inspect.isawaitable(result):
                    result = await result
            except DropItem:
                raise
            except Exception as exc:
                self.crawler.stats.inc_value(out.error(site_name, exc))
                if (path, type(exc).__name__) not in self._logged:
                    self._logged.add((path, type(exc).__name__))
                    logger.error(
                        "site %r: pipeline step %s raised %s: %s (counted from now on as %s)",
                        site_name,
                        path,
                        type(exc).__name__,
                        exc,
                        out.error(site_name, exc),
                    )
                raise DropItem(f"site {site_name!r}: pipeline step {path} raised {type(exc).__name__}: {exc}") from exc
            if result is None:
                raise DropItem(f"site {site_name!r}: pipeline step {path} returned None")
            item = result
        return item

    def close_spider(self) -> None:
        for path, step in self.steps.items():
            closer = getattr(step, "close_spider", None)
            if closer is not None:
                try:
                    _call(closer, self.crawler.spider)
                except Exception:
                    logger.exception("site pipeline step %s failed to close", path)


def _call(method: Any, spider: Any, *args: Any) -> Any:
    """Call a pipeline method with or without the (deprecated in Scrapy) spider argument."""
    try:
        params = [
            p
            for p in inspect.signature(method).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    if len(params) > len(args):
        return method(*args, spider)
    return method(*args)
