"""Errors of the whole crawl, by kind, with sample URLs, for the operators.

A downloader middleware (the add-on enables it next to the engine, beside
crawlplug.probes.domainstats, so it sees what Scrapy made of a request once retries and
redirects are done) counts the failed requests of :mod:`crawlplug.failures`' one
definition, crawl-wide in Redis:

* ``http/<status>``: responses with status 400 or more (robots.txt is no page);
* ``download/<ExceptionClass>``: downloads that failed after their retries (DNS,
  timeouts, ...; a request a middleware filtered is none);
* ``spider/<ExceptionClass>``: callbacks that raised.

It keeps the last few URLs of each kind and sends counts and samples every
few seconds in one pipeline (``errors`` hash: ``<kind>`` -> count,
``<kind>|s`` -> JSON list of recent URLs). The dashboard's errors page and
:func:`read` show them. It needs crawlplug's scheduler (for the Redis client
and the crawl's keys) and stays silent without it.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict, deque
from typing import TYPE_CHECKING, Any

import redis
from scrapy import Request, Spider, signals
from scrapy.http import Response
from twisted.internet.task import LoopingCall

from ..errors import REDIS_ERRORS
from ..failures import exception_failure, response_failure, spider_failure
from ..frontier.keys import CrawlKeys
from ..scheduler import enginehooks

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

SAMPLES = 5
FLUSH_INTERVAL = 2.0


class ErrorSamplesMiddleware:
    """Counts errors by kind with sample URLs, crawl-wide (see the module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.counts: dict[str, int] = defaultdict(int)
        self.samples: dict[str, deque[str]] = defaultdict(lambda: deque(maxlen=SAMPLES))
        self.loop: LoopingCall | None = None
        #: the crawl's Redis and keys, once the scheduler had them: the flush at close needs
        #: them after the engine has let go of its scheduler
        self.target: tuple[redis.Redis, CrawlKeys] | None = None
        crawler.signals.connect(self.spider_error, signal=signals.spider_error)
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ErrorSamplesMiddleware:
        return cls(crawler)

    # -- what is recorded -------------------------------------------------------------
    def record(self, kind: str, url: str) -> None:
        self.counts[kind] += 1
        self.samples[kind].append(url[:500])

    def process_response(self, request: Request, response: Response, spider: Spider | None = None) -> Response:
        failed = response_failure(request, response)
        if failed is not None:
            self.record(failed, response.url)
        return response

    def process_exception(self, request: Request, exception: BaseException, spider: Spider | None = None) -> None:
        failed = exception_failure(request, exception)
        if failed is not None:
            self.record(failed, request.url)

    def spider_error(self, failure: Any, response: Response, spider: Spider) -> None:
        self.record(spider_failure(failure), getattr(response, "url", "?"))

    # -- sending -------------------------------------------------------------------------
    def spider_opened(self, spider: Spider) -> None:
        self._target()  # the scheduler has joined its crawl by now
        self.loop = LoopingCall(self.flush)
        self.loop.start(FLUSH_INTERVAL, now=False)

    def spider_closed(self, spider: Spider) -> None:
        if self.loop is not None and self.loop.running:
            self.loop.stop()
        self.flush()

    def _target(self) -> tuple[redis.Redis, CrawlKeys] | None:
        scheduler = enginehooks.scheduler(self.crawler)
        frontier = getattr(scheduler, "frontier", None)
        if frontier is not None:
            self.target = frontier.client, frontier.keys
        return self.target

    def flush(self) -> None:
        if not self.counts:
            return
        target = self._target()
        if target is None:
            return
        client, keys = target
        counts, samples = dict(self.counts), {k: list(v) for k, v in self.samples.items()}
        try:
            old = client.hmget(keys.errors, [f"{k}|s" for k in samples])
            pipe = client.pipeline(transaction=False)
            for (kind, n), previous in zip(counts.items(), old):
                pipe.hincrby(keys.errors, kind, n)
                merged = _load(previous) + samples.get(kind, [])
                pipe.hset(keys.errors, f"{kind}|s", json.dumps(merged[-SAMPLES:]))
            pipe.execute()
        except REDIS_ERRORS as exc:
            logger.debug("crawlplug: error samples not sent (%s); kept for the next try", exc)
            return
        for kind, n in counts.items():
            self.counts[kind] -= n
            if self.counts[kind] <= 0:
                del self.counts[kind]
        self.samples.clear()


def _load(raw: Any) -> list[str]:
    try:
        value = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [str(x) for x in value] if isinstance(value, list) else []


def read(client: redis.Redis, keys: CrawlKeys) -> list[dict[str, Any]]:
    """[{"kind", "group" (http/download/spider), "name", "count", "samples"}], most frequent first."""
    raw = {k.decode(): v for k, v in client.hgetall(keys.errors).items()}
    out = []
    for field, value in raw.items():
        if field.endswith("|s"):
            continue
        group, _, name = field.partition("/")
        out.append(
            {"kind": field, "group": group, "name": name, "count": int(value), "samples": _load(raw.get(f"{field}|s"))}
        )
    out.sort(key=lambda e: (-e["count"], e["kind"]))
    return out
