"""Queue orders for the shared frontier.

All queues keep request ids in one Redis sorted set (``queue``) and payloads
in a hash (``requests``), so two identical requests are two entries and never
collapse into one. A queue class only decides the score of a request and
which end of the set is popped first; among equal scores Redis orders
members (zero-padded, increasing ids) lexicographically, i.e. by age.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, ClassVar

from scrapy import Request
from scrapy.settings import BaseSettings
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import load_object

from .compat.names import SCRAPY_REDIS_QUEUES
from .config import setting
from .errors import ConfigError, checked_number


class BaseQueue:
    """How requests are ordered: ``score(request)`` and the end popped first."""

    #: "min": lowest score (and, among equals, oldest) first; "max": highest (newest) first.
    order: ClassVar[str] = "min"

    @staticmethod
    def score(request: Request) -> float:
        raise NotImplementedError

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> BaseQueue:
        return cls()

    def domain(self, request: Request) -> str:
        """The per-domain sub-queue of ``request``; "" = the one shared queue."""
        return ""


class PriorityQueue(BaseQueue):
    """Higher ``Request.priority`` first; first in, first out among equal priority."""

    order = "min"

    @staticmethod
    def score(request: Request) -> float:
        return -request.priority


class FifoQueue(BaseQueue):
    """First in, first out; ``Request.priority`` is ignored."""

    order = "min"

    @staticmethod
    def score(request: Request) -> float:
        return 0


class LifoQueue(BaseQueue):
    """Last in, first out (depth-first); ``Request.priority`` is ignored."""

    order = "max"

    @staticmethod
    def score(request: Request) -> float:
        return 0


class DomainQueue(BaseQueue):
    """One sub-queue per domain, politeness enforced for the whole crawl.

    Priority order (then oldest first) inside each domain; a pop takes from the
    domains whose next allowed fetch time has come, the longest waiting first,
    each an equal share of the batch, so a huge domain never starves small
    ones. A domain's delay (CRAWLPLUG_DOMAIN_DELAY) spaces the starts of its
    requests across all nodes; its concurrency (CRAWLPLUG_DOMAIN_CONCURRENCY)
    caps its requests leased at once, crawl-wide. The schedule lives in Redis
    (lua/domains.lua) and limits can be changed while the crawl runs
    (``crawlplug domains set``).
    """

    order = "domain"

    def __init__(self, key: str = "host") -> None:
        if key not in ("host", "domain"):
            raise ConfigError(f"CRAWLPLUG_DOMAIN_KEY must be 'host' or 'domain', not {key!r}")
        self.key = key

    @staticmethod
    def score(request: Request) -> float:
        return -request.priority

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> DomainQueue:
        return cls(setting(settings, "CRAWLPLUG_DOMAIN_KEY"))

    def domain(self, request: Request) -> str:
        host = (urlparse_cached(request).hostname or "-").rstrip(".")
        if "\t" in host or "|" in host:  # separators in Redis members; not in a valid host
            host = host.replace("\t", "%09").replace("|", "%7C")
        return registered_domain(host) if self.key == "domain" else host


def route(request: Request, domain: str = "") -> str:
    """What a sharded crawl routes ``request`` by (crawlplug.frontier.layout.shard_of): its
    per-domain queue's key (``domain``, from :meth:`BaseQueue.domain`), else its host, else
    its URL. One site, one shard: the Scheduler's admissions and a dupefilter used on its
    own route alike, so both find a fingerprint in the same shard."""
    return domain or urlparse_cached(request).hostname or request.url


@lru_cache(maxsize=65536)
def registered_domain(host: str) -> str:
    """``shop.example.co.uk`` -> ``example.co.uk``; IPs and bare names stay as they are.

    tldextract (a Scrapy dependency) with its bundled Public Suffix List
    snapshot: never fetches the list over the network.
    """
    result = _extractor()(host)
    top = getattr(result, "top_domain_under_public_suffix", None)
    if top is None:  # tldextract < 5.3
        top = result.registered_domain
    return top or host


@lru_cache(maxsize=1)
def _extractor() -> Any:
    import tldextract  # noqa: PLC0415 - its public-suffix list, only for DomainQueue by registered domain

    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


def domain_limits(settings: BaseSettings) -> dict[str, str]:
    """The dconf fields ("s:<domain>" -> "<delay ms> <concurrency>") the settings ask for."""
    delay = setting(settings, "CRAWLPLUG_DOMAIN_DELAY")
    if delay is None:
        delay = settings.getfloat("DOWNLOAD_DELAY")
    concurrency = setting(settings, "CRAWLPLUG_DOMAIN_CONCURRENCY")
    if concurrency is None:
        concurrency = settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN")
    fields = {"s:*": _limit_value(delay, concurrency, "the default")}
    overrides = setting(settings, "CRAWLPLUG_DOMAINS", "getdict")
    for domain, limits in overrides.items():
        if not isinstance(limits, dict) or set(limits) - {"delay", "concurrency"}:
            raise ConfigError(
                f"CRAWLPLUG_DOMAINS[{domain!r}] must be a dict with 'delay' and/or 'concurrency', got {limits!r}"
            )
        fields[f"s:{domain}"] = _limit_value(limits.get("delay"), limits.get("concurrency"), repr(domain))
    return fields


def _limit_value(delay: Any, concurrency: Any, what: str) -> str:
    """ "<delay ms> <concurrency>" with "-" for unset; refuses negative or non-numeric limits."""
    parts = []
    for value, name, conv in ((delay, "delay", float), (concurrency, "concurrency", int)):
        if value is None:
            parts.append("-")
            continue
        number = checked_number(value, f"{name} for {what}", conv)
        parts.append(str(round(number * 1000)) if name == "delay" else str(number))
    return " ".join(parts)


def load_queue_class(path: str | type) -> type[BaseQueue]:
    """The queue class named by CRAWLPLUG_QUEUE_CLASS (a scrapy-redis path maps to ours)."""
    if isinstance(path, str):
        path = SCRAPY_REDIS_QUEUES.get(path, path)
    try:
        cls = load_object(path) if isinstance(path, str) else path
    except (ImportError, NameError, AttributeError, ValueError) as exc:
        raise ConfigError(f"CRAWLPLUG_QUEUE_CLASS={path!r} cannot be loaded: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, BaseQueue)):
        raise ConfigError(f"CRAWLPLUG_QUEUE_CLASS={path!r} is not a crawlplug.queues.BaseQueue")
    return cls
