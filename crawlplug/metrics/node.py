"""A node's own ``/metrics`` (``CRAWLPLUG_METRICS_PORT``; off by default).

A Scrapy extension (the add-on lists it; it stays off without the setting) that
serves the metrics of the crawl the node joined, as the dashboard and
``crawlplug control --metrics-port`` serve them (crawlplug.metrics.exporter: read from
Redis at scrape time), from prometheus_client's own HTTP server in a thread.
Useful where each machine is scraped on its own; one scrape of any of them gives
the whole crawl, so a Prometheus should scrape one, not sum them.
"""

from __future__ import annotations

import logging
from typing import Any

from scrapy import Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured

from ..config import setting
from ..errors import ConfigError
from ..frontier.keys import crawl_keys
from ..server import clients

logger = logging.getLogger(__name__)


class NodeMetrics:
    """Serves this node's crawl's metrics (module docstring)."""

    def __init__(self, crawler: Crawler, port: int, host: str, top_n: int) -> None:
        self.crawler = crawler
        self.port = port
        self.host = host
        self.top_n = top_n
        self.server: Any = None
        self.conn: clients.Connection | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> NodeMetrics:
        port = crawler.settings.get("CRAWLPLUG_METRICS_PORT")
        if port is None or port == "":
            raise NotConfigured  # no message: Scrapy would log a WARNING for a feature not asked for
        try:
            number = int(port)
        except ValueError:
            raise ConfigError(f"CRAWLPLUG_METRICS_PORT must be a port number, not {port!r}") from None
        if not 0 <= number <= 65535:
            raise ConfigError(f"CRAWLPLUG_METRICS_PORT must be a port number (0-65535), not {number}")
        ext = cls(
            crawler,
            number,
            str(setting(crawler.settings, "CRAWLPLUG_METRICS_HOST")),
            int(setting(crawler.settings, "CRAWLPLUG_METRICS_TOP_DOMAINS")),
        )
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def spider_opened(self, spider: Spider) -> None:
        # imported here, as prometheus_client: ~25 ms of start-up a node without metrics does without
        from prometheus_client import start_http_server  # noqa: PLC0415

        from . import exporter as metrics  # noqa: PLC0415

        self.conn = clients.from_settings(self.crawler.settings)
        keys = crawl_keys(self.crawler.settings, spider.name)
        reg = metrics.registry(self.conn.client, lambda: [keys], self.top_n)
        try:
            self.server, _ = start_http_server(self.port, self.host, registry=reg)
        except OSError as exc:
            logger.error(
                "crawlplug: cannot serve metrics on %s:%s (CRAWLPLUG_METRICS_PORT): %s", self.host, self.port, exc
            )
            return
        logger.info(
            "crawlplug: metrics of crawl %r at http://%s:%d/metrics", keys.crawl, self.host, self.server.server_port
        )

    def spider_closed(self, spider: Spider, reason: str) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        if self.conn is not None:
            self.conn.client.close()
