"""The scheduler's settings, read once from Scrapy settings into a plain object.

Every name and default is documented in :mod:`crawlplug.defaults`; this
module only reads and validates them, so a test (or another embedding) can
build a :class:`SchedulerConfig` directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .defaults import default
from .errors import ConfigError

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


def setting(settings: BaseSettings, name: str, kind: str = "get") -> Any:
    """A crawlplug setting, falling back to its documented default."""
    if settings.get(name) is None:
        return default(name)
    return getattr(settings, kind)(name)


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
        )
