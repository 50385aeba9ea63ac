"""Duplicate filters whose state lives in the crawl's Redis.

The check itself runs inside the admission script (see ``lua/admit.lua``):
the fingerprint is recorded in the same atomic step that stores the request,
so there is never a fingerprint whose request is nowhere. A dupefilter here
supplies the fingerprint, names the dedup mode the script applies, and logs
and counts what was filtered. Used on its own (``request_seen``) it is an
ordinary shared set.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.dupefilters import BaseDupeFilter

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.utils.request import RequestFingerprinterProtocol

    from .frontier import Frontier

logger = logging.getLogger(__name__)


class RedisSetDupeFilter(BaseDupeFilter):
    """Exact dedup: a Redis set of raw 20-byte request fingerprints.

    Fingerprints come from ``crawler.request_fingerprinter``, so
    ``REQUEST_FINGERPRINTER_CLASS`` is honoured. Closing never deletes the set:
    other nodes, and the next run, still need it.
    """

    mode = "set"

    def __init__(
        self,
        fingerprinter: RequestFingerprinterProtocol,
        *,
        debug: bool = False,
        crawler: Crawler | None = None,
    ) -> None:
        self.fingerprinter = fingerprinter
        self.debug = debug
        self.crawler = crawler
        self.frontier: Frontier | None = None
        self._logged_once = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RedisSetDupeFilter:
        assert crawler.request_fingerprinter is not None
        return cls(
            crawler.request_fingerprinter,
            debug=crawler.settings.getbool("DUPEFILTER_DEBUG"),
            crawler=crawler,
        )

    def bind(self, frontier: Frontier) -> None:
        """Attach to the crawl's frontier (done by the Scheduler in ``open``)."""
        self.frontier = frontier

    def fingerprint(self, request: Request) -> bytes:
        return self.fingerprinter.fingerprint(request)

    def request_seen(self, request: Request) -> bool:
        """Record the fingerprint; True if it was already there (one SADD)."""
        if self.frontier is None:
            raise RuntimeError("RedisSetDupeFilter is not bound to a crawl; the Scheduler binds it")
        added = self.frontier.client.sadd(self.frontier.keys.seen, self.fingerprint(request))
        return not added

    def log(self, request: Request, spider: object = None) -> None:
        if self.debug:
            logger.debug("Filtered duplicate request: %(request)s", {"request": request})
        elif not self._logged_once:
            logger.debug(
                "Filtered duplicate request: %(request)s - no more duplicates will be shown"
                " (see DUPEFILTER_DEBUG to show all duplicates)",
                {"request": request},
            )
            self._logged_once = True
        if self.crawler is not None and self.crawler.stats is not None:
            self.crawler.stats.inc_value("dupefilter/filtered")

    def close(self, reason: str) -> None:
        """Nothing to do: the fingerprints stay in Redis for the other nodes."""
