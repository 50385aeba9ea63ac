"""scrapy-redis's settings, as crawlplug reads them: which of its names stand for which of
ours, how their values convert, and what crawlplug says once where it differs on purpose
(docs/migrating.md has the whole table). :mod:`crawlplug.config`, the one reader of
settings, uses this; nothing here reads Scrapy settings on its own.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, checked_number

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

#: crawlplug setting -> scrapy-redis's setting read when the crawlplug one is unset.
SCRAPY_REDIS_NAMES = {
    "CRAWLPLUG_FLUSH_ON_START": "SCHEDULER_FLUSH_ON_START",
    "CRAWLPLUG_IDLE_CLOSE": "SCHEDULER_IDLE_BEFORE_CLOSE",
    "CRAWLPLUG_QUEUE_CLASS": "SCHEDULER_QUEUE_CLASS",
    "CRAWLPLUG_INCREMENTAL": "SCHEDULER_PERSIST",
}

#: scrapy-redis's default key templates (scrapy_redis.defaults).
SCRAPY_REDIS_KEYS = {
    "SCHEDULER_QUEUE_KEY": "%(spider)s:requests",
    "SCHEDULER_DUPEFILTER_KEY": "%(spider)s:dupefilter",
    "REDIS_START_URLS_KEY": "%(name)s:start_urls",
}


#: scrapy-redis queue classes and crawlplug's queue of the same order.
SCRAPY_REDIS_QUEUES = {
    "scrapy_redis.queue.PriorityQueue": "crawlplug.queues.PriorityQueue",
    "scrapy_redis.queue.FifoQueue": "crawlplug.queues.FifoQueue",
    "scrapy_redis.queue.LifoQueue": "crawlplug.queues.LifoQueue",
    "scrapy_redis.queue.SpiderPriorityQueue": "crawlplug.queues.PriorityQueue",
    "scrapy_redis.queue.SpiderQueue": "crawlplug.queues.FifoQueue",
    "scrapy_redis.queue.SpiderStack": "crawlplug.queues.LifoQueue",
}

#: scrapy-redis settings that crawlplug does not read but that are real names (no misspelling).
SCRAPY_REDIS_OTHER_NAMES = frozenset(
    {
        "DUPEFILTER_CLASS",
        "SCHEDULER_DUPEFILTER_CLASS",
        "SCHEDULER_SERIALIZER",
        "REDIS_CLS",
        "REDIS_DECODE_RESPONSES",
        "REDIS_ITEMS_SERIALIZER",
        "DUPEFILTER_KEY",
    }
)


def scrapy_redis_value(settings: BaseSettings, name: str) -> Any:
    """The value scrapy-redis's setting gives crawlplug's ``name``; None if it gives none.

    * SCHEDULER_FLUSH_ON_START -> CRAWLPLUG_FLUSH_ON_START, same meaning;
    * SCHEDULER_IDLE_BEFORE_CLOSE -> CRAWLPLUG_IDLE_CLOSE when positive (scrapy-redis's
      0, "close as soon as the queue looks empty", is not crawlplug's 0, "never close":
      it leaves crawlplug's default grace);
    * SCHEDULER_QUEUE_CLASS -> CRAWLPLUG_QUEUE_CLASS, scrapy-redis's queue paths mapped
      to crawlplug's queues of the same order;
    * SCHEDULER_PERSIST -> CRAWLPLUG_INCREMENTAL when true: a scrapy-redis crawl that kept
      its fingerprints between runs keeps them in crawlplug too (False: the default).
    """
    old = SCRAPY_REDIS_NAMES.get(name)
    raw = None if old is None else settings.get(old)
    if raw is None:
        return None
    if name in ("CRAWLPLUG_FLUSH_ON_START", "CRAWLPLUG_INCREMENTAL"):
        value = settings.getbool(old) if hasattr(settings, "getbool") else bool(raw)
        return value if name == "CRAWLPLUG_FLUSH_ON_START" or value else None
    if name == "CRAWLPLUG_IDLE_CLOSE":
        seconds = _seconds(raw, old)
        return seconds if seconds > 0 else None
    return _queue_path(raw)


def _seconds(raw: Any, name: str) -> float:
    return checked_number(raw, name, kind="a number of seconds")


def _queue_path(raw: Any) -> Any:
    """scrapy-redis's queue path as crawlplug's queue of the same order; a path of neither
    is refused here, naming both settings (a class object is left to the queue loader)."""
    if not isinstance(raw, str):
        return raw
    if raw in SCRAPY_REDIS_QUEUES:
        return SCRAPY_REDIS_QUEUES[raw]
    if raw.startswith("crawlplug.queues."):
        return raw
    raise ConfigError(
        f"SCHEDULER_QUEUE_CLASS={raw!r} (scrapy-redis's setting, read because CRAWLPLUG_QUEUE_CLASS "
        f"is unset) is not a queue crawlplug can use: scrapy_redis.queue.PriorityQueue, FifoQueue and "
        f"LifoQueue map to crawlplug's; else set CRAWLPLUG_QUEUE_CLASS"
    )


def scrapy_redis_notes(settings: BaseSettings) -> list[tuple[int, str]]:
    """(log level, message) for each scrapy-redis setting crawlplug reads differently."""
    notes: list[tuple[int, str]] = []
    persist = settings.get("SCHEDULER_PERSIST")
    if persist is not None and not settings.getbool("SCHEDULER_PERSIST"):
        notes.append(
            (
                logging.INFO,
                (
                    "SCHEDULER_PERSIST=False (scrapy-redis) is followed as crawlplug's runs do it: a new run, "
                    "started after a finished one, starts without the old fingerprints; but a closing node never "
                    "deletes the queue or fingerprints that other nodes, and an interrupted run, still need"
                ),
            )
        )
    if settings.get("CRAWLPLUG_CRAWL_ID") is None:
        for name in ("SCHEDULER_QUEUE_KEY", "SCHEDULER_DUPEFILTER_KEY"):
            value = settings.get(name)
            if value and value != SCRAPY_REDIS_KEYS[name]:
                notes.append(
                    (
                        logging.WARNING,
                        (
                            f"{name}={value!r} (scrapy-redis) does not name crawlplug's keys: they are "
                            "crawlplug:{<crawl>}:..., the crawl being CRAWLPLUG_CRAWL_ID, else the spider's name. "
                            "If this template kept crawls apart on one Redis, give each its own "
                            "CRAWLPLUG_CRAWL_ID (`crawlplug migrate from-scrapy-redis` reads the old keys from it)"
                        ),
                    )
                )
    if settings.get("SCHEDULER_SERIALIZER"):
        notes.append(
            (
                logging.INFO,
                (
                    f"SCHEDULER_SERIALIZER={settings.get('SCHEDULER_SERIALIZER')!r} (scrapy-redis) is not used: "
                    "crawlplug stores requests as JSON (CRAWLPLUG_SERIALIZER)"
                ),
            )
        )
    return notes


_noted: set[str] = set()


def log_scrapy_redis_notes(settings: BaseSettings) -> None:
    """Log each of :func:`scrapy_redis_notes` once per process."""
    for level, message in scrapy_redis_notes(settings):
        if message not in _noted:
            _noted.add(message)
            logger.log(level, "crawlplug: %s", message)
