"""What crawlplug needs from Scrapy's engine beyond the Scheduler interface.

Scrapy has no public signal for "the engine is completely done with this
request", no public way to wake the engine up early, and its feed exporter
buffers output that must reach the OS before a request is acknowledged. Every
use of an engine internal lives here, behind a guard, so a Scrapy upgrade
breaks in one place (and the test suite says so).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from scrapy import Request, Spider, signals
from scrapy.exceptions import CloseSpider
from scrapy.extensions.closespider import CloseSpider as CloseSpiderExtension
from scrapy.extensions.feedexport import FeedExporter
from scrapy.utils.defer import deferred_from_coro

from ..errors import ConfigError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = [
    "close",
    "download_slots",
    "fail_at_start",
    "flush_feeds",
    "free_download_slots",
    "no_local_delay",
    "on_request_done",
    "scheduler",
    "start_running",
    "take_over_closespider",
    "wake",
]

logger = logging.getLogger(__name__)


def on_request_done(crawler: Crawler, callback: Callable[[Request], None]) -> None:
    """Call ``callback(request)`` when the engine is done with a scheduled request.

    The engine removes a request from its slot only after the download, the
    callback or errback, every request the callback produced being scheduled
    and every item going through the pipelines (also when a downloader
    middleware replaced the request, e.g. a redirect). ``callback`` runs before
    the slot may fire its closing sequence.
    """
    slot = getattr(crawler.engine, "_slot", None)
    remove = getattr(slot, "remove_request", None)
    if remove is None:
        raise ConfigError("crawlplug cannot find the engine slot of this Scrapy version; it needs Scrapy >= 2.13")

    def remove_request(request: Request) -> None:
        callback(request)
        remove(request)

    slot.remove_request = remove_request  # type: ignore[union-attr]


def wake(crawler: Crawler) -> None:
    """Make the engine ask the scheduler for requests now, not at its next 5 s heartbeat."""
    slot = getattr(crawler.engine, "_slot", None)
    nextcall = getattr(slot, "nextcall", None)
    if nextcall is not None:
        nextcall.schedule()


def start_running(crawler: Crawler) -> bool:
    """Whether the spider's ``start()`` may still yield requests (True if unknown)."""
    return getattr(crawler.engine, "_start", True) is not None


def free_download_slots(crawler: Crawler, most: int) -> int:
    """How many requests the downloader would take now (at least 1, at most ``most``)."""
    free, _ = download_slots(crawler, most)
    return max(1, min(most, free))


def download_slots(crawler: Crawler, most: int) -> tuple[int, int]:
    """(free, busy) slots of the downloader now (``most`` free when it cannot be told)."""
    downloader = getattr(crawler.engine, "downloader", None)
    total = getattr(downloader, "total_concurrency", most)
    active = len(getattr(downloader, "active", ()))
    return total - active, active


def flush_feeds(crawler: Crawler) -> list[str]:
    """Push buffered feed output to the OS; returns the errors met (if any).

    Scrapy's feed exporter writes items into a block-buffered file: a node
    killed with SIGKILL would lose that buffer while the requests that
    produced the items are already acknowledged. (A power loss can still lose
    what the OS has not written; an fsync per ack would cost too much.)
    """
    errors = []
    for ext in getattr(getattr(crawler, "extensions", None), "middlewares", ()):
        if not isinstance(ext, FeedExporter):
            continue
        for slot in getattr(ext, "slots", ()):
            file = getattr(slot, "file", None)
            if file is not None and not getattr(file, "closed", True):
                try:
                    file.flush()
                except (OSError, ValueError) as exc:
                    errors.append(str(exc))
    return errors


def fail_at_start(crawler: Crawler, reason: str, *, failed: bool = True) -> None:
    """Close cleanly with ``reason`` as soon as the spider is open, and exit non-zero
    (zero if not ``failed``: a node with nothing to do, crawlplug.errors.RunOver).

    The close is requested from ``spider_opened`` with CloseSpider, Scrapy's way
    for a component that cannot start, once every other component is open (so
    none of them logs a traceback while closing). Scrapy's crawl command exits
    1 when a crawler ends without a spider (its "bootstrap failed" rule), so
    the spider reference is dropped once it is closed: a node that could not
    join its crawl tells its supervisor. The feed exporter does not open its feeds:
    a node that did not run touches no output file (``-O items.jsonl`` stays as the
    last run left it; Scrapy would store an empty feed at close).
    """

    def spider_opened(spider: Spider) -> None:
        raise CloseSpider(reason)

    def spider_closed(spider: Spider) -> None:
        crawler.spider = None

    for ext in getattr(getattr(crawler, "extensions", None), "middlewares", ()):
        if isinstance(ext, FeedExporter):
            crawler.signals.disconnect(ext.open_spider, signal=signals.spider_opened)
    crawler.signals.connect(spider_opened, signal=signals.spider_opened, weak=False)
    if failed:
        crawler.signals.connect(spider_closed, signal=signals.spider_closed, weak=False)


def close(crawler: Crawler, reason: str, *, failed: bool = False) -> None:
    """Close the running spider with ``reason`` (the engine's public close, as CloseSpider's
    extension does it). ``failed``: ``scrapy crawl`` then exits 1, as for a node that could
    not start (see :func:`fail_at_start`), so a supervisor can tell it from a finished crawl."""
    engine = crawler.engine
    spider = getattr(engine, "spider", None)
    if engine is None or spider is None:
        return
    if failed:

        def spider_closed(spider: Spider) -> None:
            crawler.spider = None

        crawler.signals.connect(spider_closed, signal=signals.spider_closed, weak=False)
    if hasattr(engine, "close_spider_async"):  # Scrapy >= 2.14
        deferred_from_coro(engine.close_spider_async(reason=reason))
    else:  # pragma: no cover - Scrapy 2.13
        engine.close_spider(spider, reason)


def scheduler(crawler: Crawler) -> object | None:
    """The engine's scheduler instance (None before the spider opened)."""
    engine = crawler.engine
    if engine is None:
        return None
    found = getattr(engine, "scheduler", None)  # public since Scrapy 2.13
    if found is None:
        found = getattr(getattr(engine, "_slot", None), "scheduler", None)
    return found


def take_over_closespider(crawler: Crawler, names: list[str]) -> list[str]:
    """Stop Scrapy's CloseSpider extension from closing this node on its own count of ``names``
    ("pagecount", "itemcount", "errorcount", "timeout"): the run counts them for every node
    together (crawlplug.scheduler.runcontrol). Returns the names it took over. Called before
    ``spider_opened``, when the extension would start its timeout."""
    taken: list[str] = []
    for ext in getattr(getattr(crawler, "extensions", None), "middlewares", ()):
        if not isinstance(ext, CloseSpiderExtension):
            continue
        close_on = getattr(ext, "close_on", None)
        if not isinstance(close_on, dict):
            raise ConfigError(
                "crawlplug cannot take over Scrapy's CloseSpider limits in this Scrapy version; "
                "set CRAWLPLUG_LIMITS = 'node'"
            )
        for name in names:
            if not close_on.get(name):
                continue
            if name == "timeout":
                crawler.signals.disconnect(ext.spider_opened, signal=signals.spider_opened)
            close_on[name] = 0  # its handlers close when their counter equals the limit: never now
            taken.append(name)
    return taken


def no_local_delay(crawler: Crawler) -> bool:
    """The downloader of this node adds no DOWNLOAD_DELAY of its own (the per-domain queue spaces
    the requests of the whole crawl; a node-local delay after the "sent" report would let two
    nodes' requests start closer than the crawl's delay). False if this Scrapy has no such knob."""
    downloader = getattr(getattr(crawler, "engine", None), "downloader", None)
    if downloader is None or not hasattr(downloader, "_delay"):
        return False
    downloader._delay = 0.0
    for slot in getattr(downloader, "slots", {}).values():
        slot.delay = 0.0
    return True
