"""Queue orders for the shared frontier.

All queues keep request ids in one Redis sorted set (``queue``) and payloads
in a hash (``requests``), so two identical requests are two entries and never
collapse into one. A queue class only decides the score of a request and
which end of the set is popped first; among equal scores Redis orders
members (zero-padded, increasing ids) lexicographically, i.e. by age.
"""

from __future__ import annotations

from typing import ClassVar

from scrapy import Request
from scrapy.utils.misc import load_object

from .errors import ConfigError


class BaseQueue:
    """How requests are ordered: ``score(request)`` and the end popped first."""

    #: "min": lowest score (and, among equals, oldest) first; "max": highest (newest) first.
    order: ClassVar[str] = "min"

    @staticmethod
    def score(request: Request) -> float:
        raise NotImplementedError


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


#: scrapy-redis queue classes and the crawlplug queue with the same order.
SCRAPY_REDIS_ALIASES = {
    "scrapy_redis.queue.PriorityQueue": PriorityQueue,
    "scrapy_redis.queue.FifoQueue": FifoQueue,
    "scrapy_redis.queue.LifoQueue": LifoQueue,
    "scrapy_redis.queue.SpiderPriorityQueue": PriorityQueue,
    "scrapy_redis.queue.SpiderQueue": FifoQueue,
    "scrapy_redis.queue.SpiderStack": LifoQueue,
}


def load_queue_class(path: str | type) -> type[BaseQueue]:
    """The queue class named by CRAWLPLUG_QUEUE_CLASS (a scrapy-redis path maps to ours)."""
    if isinstance(path, str) and path in SCRAPY_REDIS_ALIASES:
        return SCRAPY_REDIS_ALIASES[path]
    try:
        cls = load_object(path) if isinstance(path, str) else path
    except (ImportError, NameError, AttributeError, ValueError) as exc:
        raise ConfigError(f"CRAWLPLUG_QUEUE_CLASS={path!r} cannot be loaded: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, BaseQueue)):
        raise ConfigError(f"CRAWLPLUG_QUEUE_CLASS={path!r} is not a crawlplug.queues.BaseQueue")
    return cls
