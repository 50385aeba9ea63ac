"""A node started through Scrapyd records its job: the Scrapy extension
:class:`ScrapydJob`, added by the add-on, on only when ``CRAWLPLUG_SCRAPYD_JOB`` is set
(``crawlplug start`` and scheduled runs set it to the Scrapyd job id of each node).

When the spider opens (the scheduler has joined the crawl's run by then) it records,
in the job's record (crawlplug.scrapyd.store): the node's id, host and pid, and the
run it joined; when it closes: why (``finish_reason``), the pages it fetched
(``response_received_count``) and the items it scraped (``item_scraped_count``). A
node killed with SIGKILL records no end: its daemon's ``listjobs.json`` tells it
(``crawlplug crawls show`` says "exited").
"""

from __future__ import annotations

import logging
import os
import socket
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured

from ..crawl import runs
from ..errors import REDIS_ERRORS, ConfigError, RedisUnavailable
from ..frontier.keys import CrawlKeys, crawl_keys
from ..frontier.results import process_node_id
from ..server import clients
from . import store as jobs

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class ScrapydJob:
    """Records this node's Scrapyd job in Redis (module docstring)."""

    def __init__(self, crawler: Crawler, job_id: str) -> None:
        self.crawler = crawler
        self.job_id = job_id
        self.conn: clients.Connection | None = None
        self.keys: CrawlKeys | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ScrapydJob:
        job_id = crawler.settings.get("CRAWLPLUG_SCRAPYD_JOB")
        if not job_id:
            raise NotConfigured  # not started by crawlplug through Scrapyd (no message: Scrapy would log a WARNING)
        ext = cls(crawler, str(job_id))
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def spider_opened(self, spider: Spider) -> None:
        try:
            self.conn = clients.from_settings(self.crawler.settings)
            self.keys = crawl_keys(self.crawler.settings, spider.name)
            run = runs.record(self.conn.client, self.keys).get("id")
            jobs.node_opened(
                self.conn.client,
                self.keys,
                self.job_id,
                node=process_node_id(),
                host=socket.gethostname(),
                pid=os.getpid(),
                run=int(run) if run else None,
            )
            for_run = self.crawler.settings.get("CRAWLPLUG_FOR_RUN")
            logger.info(
                "crawlplug: this node is Scrapyd job %s of crawl %r%s",
                self.job_id,
                self.keys.crawl,
                f", started for run {for_run}" if for_run else "",
            )
        except (*REDIS_ERRORS, RedisUnavailable, ConfigError) as exc:
            logger.warning("crawlplug: could not record Scrapyd job %s: %s", self.job_id, exc)

    def spider_closed(self, spider: Spider, reason: str) -> None:
        if self.conn is None or self.keys is None:
            return
        stats: Any = self.crawler.stats
        try:
            jobs.node_closed(
                self.conn.client,
                self.keys,
                self.job_id,
                reason=reason,
                pages=int(stats.get_value("response_received_count", 0) or 0),
                items=int(stats.get_value("item_scraped_count", 0) or 0),
            )
        except REDIS_ERRORS as exc:
            logger.warning("crawlplug: could not record the end of Scrapyd job %s: %s", self.job_id, exc)
        finally:
            self.conn.client.close()
