"""The per-domain queue's limits as a node sets them (``crawlplug.queues.DomainQueue``).

At start a node writes the limits its settings give (CRAWLPLUG_DOMAIN_DELAY,
..._CONCURRENCY, CRAWLPLUG_DOMAINS) and how hosts map to domains; when a
robots.txt asks for a Crawl-delay, that delay becomes the domain's minimum,
crawl-wide. The limits themselves are applied in Redis (lua/domains.lua).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import Request

from ..errors import REDIS_ERRORS, CorruptKey
from ..frontier import Domains
from ..queues import domain_limits

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from ..frontier.interface import CrawlFrontier
    from ..queues import BaseQueue
    from .outage import Outage, Reporter

logger = logging.getLogger(__name__)


class Politeness:
    """A node's writes to the crawl-wide per-domain limits."""

    def __init__(self, crawler: Crawler, frontier: CrawlFrontier, queue: BaseQueue, *, outage: Outage,
                 reporter: Reporter) -> None:  # fmt: skip
        self.crawler = crawler
        self.queue = queue
        self.outage = outage
        self.report = reporter
        parts = frontier.parts()
        self.domains = Domains(frontier.client, frontier.keys, parts[1:] or parts)

    def configure(self) -> None:
        """The limits of this node's settings, and the host->domain key (for tools that requeue)."""
        try:
            self.domains.configure({**domain_limits(self.crawler.settings), "key": self.queue.key})
        except CorruptKey as exc:  # the scripts refuse until it is repaired; said once
            self.outage.error(exc)

    def robots_parsed(self, robotparser: Any, request: Request) -> None:
        """robots.txt parsed: its Crawl-delay becomes the domain's minimum delay, crawl-wide."""
        s = self.crawler.settings
        agent = s.get("ROBOTSTXT_USER_AGENT") or request.headers.get(b"User-Agent") or s.get("USER_AGENT")
        try:
            delay = robotparser.crawl_delay(agent)
        except Exception:  # noqa: BLE001 - a parser without Crawl-delay support, or a broken robots.txt
            return
        if not delay or delay <= 0:
            return
        domain = self.queue.domain(request)
        try:
            self.domains.configure({f"r:{domain}": f"{round(float(delay) * 1000)} -"})
        except REDIS_ERRORS as exc:
            self.outage.error(exc)
            return
        logger.info("crawlplug: robots.txt of %s asks for Crawl-delay %ss; applied crawl-wide", domain, delay)
        self.report.count("crawlplug/robots_crawl_delay")
