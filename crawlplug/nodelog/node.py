"""The node's side of :mod:`crawlplug.nodelog`: an extension (the add-on enables it) that
keeps the process's WARNING-and-above records and sends the new ones on the heartbeat's
timer (``CRAWLPLUG_HEARTBEAT``), in a round trip of their own only when there are any."""

from __future__ import annotations

import itertools
import logging
from collections import deque
from typing import TYPE_CHECKING

from scrapy import Spider, signals
from scrapy.exceptions import NotConfigured
from twisted.internet.task import LoopingCall

from ..config import setting
from ..defaults import default
from ..errors import REDIS_ERRORS, ConfigError
from ..scheduler import enginehooks
from .store import MAX_TEXT, Record, append

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["NodeLog"]

logger = logging.getLogger(__name__)


class _Keeper(logging.Handler):
    """Keeps the last ``keep`` records of its level and above, as :class:`Record` (a deque's
    append: no I/O in the logging call, whatever thread makes it)."""

    def __init__(self, keep: int) -> None:
        super().__init__(logging.WARNING)
        self.records: deque[Record] = deque(maxlen=keep)
        self.numbers = itertools.count(1)
        self.traceback = logging.Formatter()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            body = record.getMessage()
            if record.exc_info:
                body += "\n" + self.traceback.formatException(record.exc_info)
        except Exception:  # noqa: BLE001 - a message whose arguments do not format: said so, never raised
            body = f"(unformattable log message {record.msg!r})"
        self.records.append(
            Record(
                n=next(self.numbers),
                t=int(record.created * 1000),
                level=record.levelname,
                logger=record.name,
                text=body[:MAX_TEXT],
            )
        )


class NodeLog:
    """Sends this node's WARNING-and-above records to its crawl (module docstring)."""

    def __init__(self, crawler: Crawler, keep: int, interval: float) -> None:
        self.crawler = crawler
        self.keep = keep
        self.interval = interval
        # from the start: a misspelt setting is warned about before the spider opens
        self.handler = _Keeper(keep)
        logging.getLogger().addHandler(self.handler)
        self.loop: LoopingCall | None = None
        self.sent = 0  # records sent (a stat: crawlplug/node_log_sent)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> NodeLog:
        keep = int(setting(crawler.settings, "CRAWLPLUG_NODE_LOG", "getint"))
        if keep <= 0:
            raise NotConfigured  # no message: Scrapy would log a WARNING for a feature turned off
        try:
            interval = float(setting(crawler.settings, "CRAWLPLUG_HEARTBEAT", "getfloat"))
        except ConfigError:
            interval = 0.0
        if interval <= 0:  # the Scheduler refuses it at open, in one line: no second error here
            interval = float(default("CRAWLPLUG_HEARTBEAT"))
        ext = cls(crawler, keep, interval)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def spider_opened(self, spider: Spider) -> None:
        self.loop = LoopingCall(self.flush)
        self.loop.start(self.interval, now=False)

    def spider_closed(self, spider: Spider) -> None:
        if self.loop is not None and self.loop.running:
            self.loop.stop()
        self.flush()
        logging.getLogger().removeHandler(self.handler)

    def flush(self) -> None:
        """Send the records kept since the last flush; on a Redis error they wait for the next."""
        records = self.handler.records
        if not records:
            return
        frontier = getattr(enginehooks.scheduler(self.crawler), "frontier", None)
        if frontier is None:  # not crawlplug's scheduler, or not open yet: kept
            return
        batch = list(records)
        try:
            append(frontier.client, frontier.keys, frontier.node_id, batch, self.keep)
        except REDIS_ERRORS as exc:
            logger.debug("crawlplug: node log not sent (%s); kept for the next beat", exc)
            return
        for _ in batch:  # those logged meanwhile stay
            records.popleft()
        self.sent += len(batch)
        stats = self.crawler.stats
        if stats is not None:
            stats.set_value("crawlplug/node_log_sent", self.sent)
