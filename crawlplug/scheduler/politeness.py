"""A node's politeness: whether a site's limits hold per node or for the whole crawl, and
the per-domain queue's limits as a node sets them (``crawlplug.queues.DomainQueue``).

:func:`choose` decides, from the settings, which queue the node uses: a project that
sets a per-domain ``DOWNLOAD_DELAY`` or ``CONCURRENT_REQUESTS_PER_DOMAIN`` (or
crawlplug's own per-domain limits) gets the per-domain queue, so that those limits
hold for the crawl, every node together, unless ``CRAWLPLUG_POLITENESS = "node"`` or
``CRAWLPLUG_QUEUE_CLASS`` names a plain queue; the node says in one line which applies.

At start a node writes the limits its settings give (CRAWLPLUG_DOMAIN_DELAY,
..._CONCURRENCY, CRAWLPLUG_DOMAINS, CRAWLPLUG_DOMAIN_PAGES) and how hosts map to
domains; when a robots.txt asks for a Crawl-delay, that delay becomes the domain's
minimum, crawl-wide. The limits themselves are applied in Redis (lua/domains.lua).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.settings import SETTINGS_PRIORITIES

from ..config import is_set, scope, setting
from ..crawl.control import CAP_SETTINGS
from ..errors import REDIS_ERRORS, ConfigError, CorruptKey
from ..frontier import Domains
from ..queues import BaseQueue, PriorityQueue, domain_limits, load_queue_class

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.robotstxt import RobotParser
    from scrapy.settings import BaseSettings

    from ..crawl import Crawl
    from ..frontier.interface import CrawlFrontier
    from ..queues import DomainQueue
    from .outage import Outage
    from .reporter import Reporter

__all__ = ["DOMAIN_QUEUE", "Choice", "Politeness", "asked", "choose"]

logger = logging.getLogger(__name__)

DOMAIN_QUEUE = "crawlplug.queues.DomainQueue"
#: crawlplug's own per-domain limits: set, they too call for the per-domain queue
_OWN_LIMITS = ("CRAWLPLUG_DOMAIN_DELAY", "CRAWLPLUG_DOMAIN_CONCURRENCY", "CRAWLPLUG_DOMAINS", "CRAWLPLUG_DOMAIN_PAGES")


@dataclass(frozen=True)
class Choice:
    """The queue a node uses, whether a site's limits hold for the crawl, and the line it says."""

    queue: BaseQueue
    crawl_wide: bool
    line: str
    #: the plain queue to take instead when the crawl was queued by one (the per-domain
    #: queue chosen for politeness, not named by CRAWLPLUG_QUEUE_CLASS)
    fallback: BaseQueue | None = None


def asked(settings: BaseSettings) -> list[str]:
    """The per-domain limits the project sets, as it wrote them ("DOWNLOAD_DELAY=1s", ...). A
    CONCURRENT_REQUESTS_PER_DOMAIN left at Scrapy's default, or not below CONCURRENT_REQUESTS
    (it then limits nothing a node would not), is not one."""
    out = []
    delay = settings.getfloat("DOWNLOAD_DELAY")
    if delay > 0:
        out.append(f"DOWNLOAD_DELAY={delay:g}s")
    per_domain, total = settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN"), settings.getint("CONCURRENT_REQUESTS")
    set_by_project = (settings.getpriority("CONCURRENT_REQUESTS_PER_DOMAIN") or 0) > SETTINGS_PRIORITIES["default"]
    if set_by_project and per_domain > 0 and (total <= 0 or per_domain < total):
        out.append(f"CONCURRENT_REQUESTS_PER_DOMAIN={per_domain}")
    out += [name for name in _OWN_LIMITS if is_set(settings, name) and settings.get(name)]
    return out


def choose(settings: BaseSettings) -> Choice:
    """The node's queue and politeness (module docstring); ConfigError for settings that cannot
    go together (a per-domain page cap with a plain queue)."""
    mode = scope(settings, "CRAWLPLUG_POLITENESS")
    named = is_set(settings, "CRAWLPLUG_QUEUE_CLASS")
    queue = load_queue_class(setting(settings, "CRAWLPLUG_QUEUE_CLASS")).from_settings(settings)
    wanted = asked(settings)
    limits = " and ".join(wanted) + (" hold" if len(wanted) > 1 else " holds")
    node_only = (
        "each node on its own: N nodes reach a site up to N times as often as one "
        "(the per-domain queue, DomainQueue, holds them for the crawl)"
    )
    if queue.order == "domain":
        return Choice(
            queue,
            True,
            f"politeness: crawl-wide (DomainQueue): per domain {_in_force(settings)}, for every node together",
        )
    if setting(settings, "CRAWLPLUG_DOMAIN_PAGES", "getint") and (named or mode == "node"):
        raise ConfigError(
            "CRAWLPLUG_DOMAIN_PAGES needs the per-domain queue (crawlplug.queues.DomainQueue), and this node uses "
            f"{type(queue).__name__} (CRAWLPLUG_QUEUE_CLASS / CRAWLPLUG_POLITENESS='node')"
        )
    if named:
        why = f"CRAWLPLUG_QUEUE_CLASS={setting(settings, 'CRAWLPLUG_QUEUE_CLASS')!r} is a plain queue"
        if wanted:
            return Choice(queue, False, f"politeness: per node ({why}): {limits} in {node_only}")
        return Choice(queue, False, f"politeness: per node ({why}; no per-domain delay or concurrency is set)")
    if not wanted:
        return Choice(
            queue,
            False,
            "politeness: per node: the project sets no per-domain delay or concurrency "
            "limit (Scrapy's own CONCURRENT_REQUESTS_PER_DOMAIN holds in each node)",
        )
    if mode == "node":
        return Choice(queue, False, f"politeness: per node (CRAWLPLUG_POLITENESS='node'): {limits} in {node_only}")
    if settings.getbool("AUTOTHROTTLE_ENABLED"):
        return Choice(
            queue,
            False,
            f"politeness: per node: AutoThrottle adjusts each node's delay on its own, so "
            f"{limits} in each node (set CRAWLPLUG_QUEUE_CLASS = '{DOMAIN_QUEUE}' "
            "and turn AutoThrottle off for limits that hold for the crawl)",
        )
    domain_queue = load_queue_class(DOMAIN_QUEUE).from_settings(settings)
    return Choice(
        domain_queue,
        True,
        f"politeness: crawl-wide: {limits} per domain for every node together, "
        "not per node (the per-domain queue, DomainQueue; CRAWLPLUG_POLITENESS='node' "
        "for Scrapy's per-node meaning)",
        fallback=PriorityQueue(),
    )


def _in_force(settings: BaseSettings) -> str:
    """The default per-domain limits a DomainQueue node writes, in words."""
    delay = setting(settings, "CRAWLPLUG_DOMAIN_DELAY")
    delay = settings.getfloat("DOWNLOAD_DELAY") if delay is None else float(delay)
    conc = setting(settings, "CRAWLPLUG_DOMAIN_CONCURRENCY")
    conc = settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN") if conc is None else int(conc)
    out = [
        f"a delay of {delay:g}s between request starts" if delay else "no delay",
        f"at most {conc} in flight" if conc else "no concurrency limit",
    ]
    pages = setting(settings, "CRAWLPLUG_DOMAIN_PAGES", "getint")
    if pages:
        out.append(f"at most {pages} pages a run")
    return ", ".join(out)


class Politeness:
    """A node's writes to the crawl-wide per-domain limits."""

    def __init__(
        self,
        crawler: Crawler,
        frontier: CrawlFrontier,
        queue: DomainQueue,
        *,
        crawl: Crawl,
        outage: Outage,
        reporter: Reporter,
    ) -> None:
        self.crawler = crawler
        self.queue = queue
        self.outage = outage
        self.report = reporter
        parts = frontier.parts()
        self.domains = Domains(crawl.client, frontier.keys, parts[1:] or parts)

    def configure(self) -> None:
        """The limits of this node's settings, and the host->domain key (for tools that requeue)."""
        pages = setting(self.crawler.settings, "CRAWLPLUG_DOMAIN_PAGES", "getint")
        cap = {CAP_SETTINGS: str(pages) if pages > 0 else ""}
        try:
            self.domains.configure({**domain_limits(self.crawler.settings), **cap, "key": self.queue.key})
        except CorruptKey as exc:  # the scripts refuse until it is repaired; said once
            self.outage.error(exc)

    def robots_parsed(self, robotparser: RobotParser, request: Request) -> None:
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
