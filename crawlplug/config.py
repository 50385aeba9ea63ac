"""The scheduler's settings, read once from Scrapy settings into a plain object.

Every name and default is documented in :mod:`crawlplug.defaults`; this
module only reads and validates them, so a test (or another embedding) can
build a :class:`SchedulerConfig` directly.

A project coming from scrapy-redis keeps its settings: where crawlplug's own
setting is unset, :func:`setting` reads scrapy-redis's name for it
(:data:`SCRAPY_REDIS_NAMES`), converted to crawlplug's meaning, and
:func:`scrapy_redis_notes` says once where crawlplug deliberately differs
(docs/migrating.md has the whole table).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .defaults import default
from .errors import ConfigError

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


def setting(settings: BaseSettings, name: str, kind: str = "get") -> Any:
    """A crawlplug setting; unset, scrapy-redis's name for it, else its documented default."""
    if settings.get(name) is None:
        value = scrapy_redis_value(settings, name)
        return default(name) if value is None else value
    return getattr(settings, kind)(name)


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
    try:
        seconds = float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from None
    if seconds < 0:
        raise ConfigError(f"{name} must not be negative, got {raw!r}")
    return seconds


def _queue_path(raw: Any) -> Any:
    from .queues import load_queue_class  # noqa: PLC0415 - queues imports this module

    try:
        load_queue_class(raw)
    except ConfigError as exc:
        raise ConfigError(
            f"SCHEDULER_QUEUE_CLASS={raw!r} (scrapy-redis's setting, read because CRAWLPLUG_QUEUE_CLASS "
            f"is unset) is not a queue crawlplug can use: scrapy_redis.queue.PriorityQueue, FifoQueue and "
            f"LifoQueue map to crawlplug's; else set CRAWLPLUG_QUEUE_CLASS ({exc})"
        ) from None
    return raw


def scrapy_redis_notes(settings: BaseSettings) -> list[tuple[int, str]]:
    """(log level, message) for each scrapy-redis setting crawlplug reads differently."""
    notes: list[tuple[int, str]] = []
    persist = settings.get("SCHEDULER_PERSIST")
    if persist is not None and not settings.getbool("SCHEDULER_PERSIST"):
        notes.append((logging.INFO, (
            "SCHEDULER_PERSIST=False (scrapy-redis) is followed as crawlplug's runs do it: a new run, "
            "started after a finished one, starts without the old fingerprints; but a closing node never "
            "deletes the queue or fingerprints that other nodes, and an interrupted run, still need"
        )))  # fmt: skip
    if settings.get("CRAWLPLUG_CRAWL_ID") is None:
        for name in ("SCHEDULER_QUEUE_KEY", "SCHEDULER_DUPEFILTER_KEY"):
            value = settings.get(name)
            if value and value != SCRAPY_REDIS_KEYS[name]:
                notes.append((logging.WARNING, (
                    f"{name}={value!r} (scrapy-redis) does not name crawlplug's keys: they are "
                    "crawlplug:{<crawl>}:..., the crawl being CRAWLPLUG_CRAWL_ID, else the spider's name. "
                    "If this template kept crawls apart on one Redis, give each its own "
                    "CRAWLPLUG_CRAWL_ID (`crawlplug migrate from-scrapy-redis` reads the old keys from it)"
                )))  # fmt: skip
    if settings.get("SCHEDULER_SERIALIZER"):
        notes.append((logging.INFO, (
            f"SCHEDULER_SERIALIZER={settings.get('SCHEDULER_SERIALIZER')!r} (scrapy-redis) is not used: "
            "crawlplug stores requests as JSON (CRAWLPLUG_SERIALIZER)"
        )))  # fmt: skip
    return notes


_noted: set[str] = set()


def log_scrapy_redis_notes(settings: BaseSettings) -> None:
    """Log each of :func:`scrapy_redis_notes` once per process."""
    for level, message in scrapy_redis_notes(settings):
        if message not in _noted:
            _noted.add(message)
            logger.log(level, "crawlplug: %s", message)


@dataclass(frozen=True)
class SchedulerConfig:
    crawl_id: str | None = None
    key_prefix: str = default("CRAWLPLUG_KEY_PREFIX")
    flush_on_start: bool = default("CRAWLPLUG_FLUSH_ON_START")
    batch_size: int = default("CRAWLPLUG_BATCH_SIZE")
    flush_interval: float = default("CRAWLPLUG_FLUSH_INTERVAL")
    prefetch: int = default("CRAWLPLUG_PREFETCH")
    heartbeat: float = default("CRAWLPLUG_HEARTBEAT")
    lease_timeout: float = default("CRAWLPLUG_LEASE_TIMEOUT")
    max_deliveries: int = default("CRAWLPLUG_MAX_DELIVERIES")
    idle_close: float = default("CRAWLPLUG_IDLE_CLOSE")
    poll_interval: float = default("CRAWLPLUG_POLL_INTERVAL")
    fp_cache: int = default("CRAWLPLUG_FP_CACHE")
    start_batch: int = default("CRAWLPLUG_START_BATCH")
    seeds: bool = default("CRAWLPLUG_SEEDS")
    incremental: bool | None = default("CRAWLPLUG_INCREMENTAL")

    def __post_init__(self) -> None:
        if self.heartbeat <= 0:
            raise ConfigError(f"CRAWLPLUG_HEARTBEAT must be positive, got {self.heartbeat}")
        if self.lease_timeout <= self.heartbeat * 2:
            raise ConfigError(
                f"CRAWLPLUG_LEASE_TIMEOUT ({self.lease_timeout}s) must be more than twice "
                f"CRAWLPLUG_HEARTBEAT ({self.heartbeat}s), or live nodes would lose their leases"
            )
        if self.max_deliveries < 1:
            raise ConfigError(f"CRAWLPLUG_MAX_DELIVERIES must be at least 1, got {self.max_deliveries}")
        for name, value in (("CRAWLPLUG_BATCH_SIZE", self.batch_size), ("CRAWLPLUG_PREFETCH", self.prefetch),
                            ("CRAWLPLUG_START_BATCH", self.start_batch)):  # fmt: skip
            if value < 1:
                raise ConfigError(f"{name} must be at least 1, got {value}")
        if self.flush_interval <= 0 or self.poll_interval <= 0:
            raise ConfigError("CRAWLPLUG_FLUSH_INTERVAL and CRAWLPLUG_POLL_INTERVAL must be positive")

    @classmethod
    def from_settings(cls, s: BaseSettings) -> SchedulerConfig:
        log_scrapy_redis_notes(s)
        return cls(
            crawl_id=s.get("CRAWLPLUG_CRAWL_ID"),
            key_prefix=setting(s, "CRAWLPLUG_KEY_PREFIX"),
            flush_on_start=setting(s, "CRAWLPLUG_FLUSH_ON_START", "getbool"),
            batch_size=setting(s, "CRAWLPLUG_BATCH_SIZE", "getint"),
            flush_interval=setting(s, "CRAWLPLUG_FLUSH_INTERVAL", "getfloat"),
            prefetch=setting(s, "CRAWLPLUG_PREFETCH", "getint"),
            heartbeat=setting(s, "CRAWLPLUG_HEARTBEAT", "getfloat"),
            lease_timeout=setting(s, "CRAWLPLUG_LEASE_TIMEOUT", "getfloat"),
            max_deliveries=setting(s, "CRAWLPLUG_MAX_DELIVERIES", "getint"),
            idle_close=setting(s, "CRAWLPLUG_IDLE_CLOSE", "getfloat"),
            poll_interval=setting(s, "CRAWLPLUG_POLL_INTERVAL", "getfloat"),
            fp_cache=setting(s, "CRAWLPLUG_FP_CACHE", "getint"),
            start_batch=setting(s, "CRAWLPLUG_START_BATCH", "getint"),
            seeds=setting(s, "CRAWLPLUG_SEEDS", "getbool"),
            incremental=None if setting(s, "CRAWLPLUG_INCREMENTAL") is None
            else setting(s, "CRAWLPLUG_INCREMENTAL", "getbool"),
        )
