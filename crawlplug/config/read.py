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

import difflib
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy.settings import default_settings

from ..compat.names import (
    SCRAPY_REDIS_OTHER_NAMES,
    log_scrapy_redis_notes,
    scrapy_redis_value,
)
from ..defaults import SETTINGS, default
from ..errors import ConfigError

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)


def setting(settings: BaseSettings, name: str, kind: str = "get") -> Any:
    """A crawlplug setting; unset, scrapy-redis's name for it, else its documented default."""
    if settings.get(name) is None:
        value = scrapy_redis_value(settings, name)
        return default(name) if value is None else value
    try:
        return getattr(settings, kind)(name)
    except (TypeError, ValueError) as exc:  # Scrapy's own message does not name the setting
        raise ConfigError(f"{name}: {settings.get(name)!r} is not a valid value ({exc})") from exc


def is_set(settings: BaseSettings, name: str) -> bool:
    """Whether the project set crawlplug setting ``name`` (or scrapy-redis's name for it),
    rather than leaving it to its default."""
    return settings.get(name) is not None or scrapy_redis_value(settings, name) is not None


def scope(settings: BaseSettings, name: str) -> str:
    """A setting that is "crawl" or "node" (CRAWLPLUG_LIMITS, CRAWLPLUG_POLITENESS), checked."""
    value = str(setting(settings, name)).strip().lower()
    if value not in ("crawl", "node"):
        raise ConfigError(f"{name} must be 'crawl' or 'node', not {settings.get(name)!r}")
    return value


#: Names that look like settings but are read elsewhere: what they are instead.
NOT_SETTINGS = {
    "CRAWLPLUG_DASHBOARD_TOKEN": "an environment variable of `crawlplug dashboard`, not a Scrapy setting",
    "CRAWLPLUG_CRAWL": (
        "an environment variable of the crawlplug command; the setting naming the crawl is CRAWLPLUG_CRAWL_ID"
    ),
}
#: How close (difflib ratio) a name must be to a known one to be called its misspelling:
#: the part after CRAWLPLUG_, and whole scrapy-redis names (high, so a project's own
#: settings such as REDIS_PASSWORD are not taken for REDIS_PORT).
_OURS_CUTOFF = 0.6
_THEIRS_CUTOFF = 0.85
_PREFIX = "CRAWLPLUG_"


def misspelt_settings(settings: BaseSettings) -> list[tuple[str, str | None, str]]:
    """(name set, the setting probably meant or None, message) for each setting that
    crawlplug would silently ignore: an unknown ``CRAWLPLUG_*`` name, or a name that is a
    near miss of a scrapy-redis setting crawlplug reads (``SCHEDULER_IDLE_BEFOR_CLOSE``).

    Scrapy's own settings and names far from every crawlplug one (a project's own
    settings) are never reported.
    """
    ours = [n for n in SETTINGS if n.startswith(_PREFIX)]
    theirs = [n for n in SETTINGS if not n.startswith(_PREFIX)]
    scrapy_names = {n for n in dir(default_settings) if n.isupper()}
    out: list[tuple[str, str | None, str]] = []
    for name in sorted(str(n) for n in settings):
        if name in SETTINGS or name in scrapy_names or name in SCRAPY_REDIS_OTHER_NAMES:
            continue
        if name.startswith(_PREFIX):
            if name in NOT_SETTINGS:
                meant = "CRAWLPLUG_CRAWL_ID" if name == "CRAWLPLUG_CRAWL" else None
                out.append((name, meant, f"{name} is ignored as a setting: it is {NOT_SETTINGS[name]}"))
                continue
            close = difflib.get_close_matches(name[len(_PREFIX) :], [n[len(_PREFIX) :] for n in ours], 1, _OURS_CUTOFF)
            meant = _PREFIX + close[0] if close else None
            hint = f"did you mean {meant}?" if meant else "no crawlplug setting is close to it (docs/settings.md)"
            out.append((name, meant, f"{name} is not a crawlplug setting and is ignored: {hint}"))
            continue
        close = difflib.get_close_matches(name, theirs, 1, _THEIRS_CUTOFF)
        if close:
            message = f"{name} is not a setting crawlplug reads and is ignored: did you mean {close[0]}?"
            out.append((name, close[0], message))
    return out


_warned: set[str] = set()


def warn_misspelt_settings(settings: BaseSettings) -> None:
    """Log each of :func:`misspelt_settings` once per process (a WARNING naming the closest real setting)."""
    for name, _, message in misspelt_settings(settings):
        if name not in _warned:
            _warned.add(name)
            logger.warning("crawlplug: %s", message)


#: A crawl's own start-entry list: ``start_urls``, or one of its lanes ``start_urls:<lane>``.
START_KEY = re.compile(r"start_urls(?::[A-Za-z0-9_.-]{1,64})?")


def start_key(name: Any) -> str:
    """``name`` if it names one of a crawl's start-entry lists, else a ConfigError saying what does."""
    if not isinstance(name, str) or not START_KEY.fullmatch(name):
        raise ConfigError(
            f"{name!r} is not a start-entry key of a crawl: use 'start_urls' or "
            "'start_urls:<lane>' (letters, digits, '_', '.', '-')"
        )
    return name


def start_keys(names: Iterable[Any] | None) -> tuple[str, ...]:
    """CRAWLPLUG_START_KEYS checked: the crawl's start-entry lists in the order a node reads
    them, ``start_urls`` first unless listed (entries a node took and could not finish
    return to its head)."""
    out = [start_key(n) for n in (names or ())]
    if len(set(out)) != len(out):
        raise ConfigError(f"CRAWLPLUG_START_KEYS names a key twice: {out}")
    return tuple(out if "start_urls" in out else ["start_urls", *out])


def _run_id(value: Any) -> int | None:
    """CRAWLPLUG_FOR_RUN as a run id (None: unset); ConfigError naming it if it is none."""
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"CRAWLPLUG_FOR_RUN must be a run id (1 or more), got {value!r}") from None


def _async_calls(value: Any) -> str:
    """CRAWLPLUG_ASYNC_CALLS as "on", "off" or "auto"; ConfigError naming it if it is none."""
    if isinstance(value, bool):
        return "on" if value else "off"
    text = str(value).strip().lower()
    for mode, spellings in (
        ("auto", ("auto",)),
        ("on", ("1", "true", "on", "yes")),
        ("off", ("0", "false", "off", "no")),
    ):
        if text in spellings:
            return mode
    raise ConfigError(f"CRAWLPLUG_ASYNC_CALLS must be auto, on or off, got {value!r}")


@dataclass(frozen=True)
class SchedulerConfig:
    crawl_id: str | None = None
    key_prefix: str = default("CRAWLPLUG_KEY_PREFIX")
    flush_on_start: bool = default("CRAWLPLUG_FLUSH_ON_START")
    batch_size: int = default("CRAWLPLUG_BATCH_SIZE")
    flush_interval: float = default("CRAWLPLUG_FLUSH_INTERVAL")
    prefetch: int = default("CRAWLPLUG_PREFETCH")
    #: "on", "off" or "auto" (crawlplug.scheduler.calls)
    async_calls: str = default("CRAWLPLUG_ASYNC_CALLS")
    #: freeze the objects alive at start out of the collector's sweeps (crawlplug.scheduler.gcfreeze)
    gc_freeze: bool = default("CRAWLPLUG_GC_FREEZE")
    heartbeat: float = default("CRAWLPLUG_HEARTBEAT")
    lease_timeout: float = default("CRAWLPLUG_LEASE_TIMEOUT")
    max_deliveries: int = default("CRAWLPLUG_MAX_DELIVERIES")
    idle_close: float = default("CRAWLPLUG_IDLE_CLOSE")
    poll_interval: float = default("CRAWLPLUG_POLL_INTERVAL")
    fp_cache: int = default("CRAWLPLUG_FP_CACHE")
    start_batch: int = default("CRAWLPLUG_START_BATCH")
    seeds: bool = default("CRAWLPLUG_SEEDS")
    incremental: bool | None = default("CRAWLPLUG_INCREMENTAL")
    #: the run this node was started for (CRAWLPLUG_FOR_RUN; None: any)
    for_run: int | None = default("CRAWLPLUG_FOR_RUN")
    #: the crawl's start-entry lists in the order they are read (:func:`start_keys`)
    start_keys: tuple[str, ...] = ("start_urls",)

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
        for name, value in (
            ("CRAWLPLUG_BATCH_SIZE", self.batch_size),
            ("CRAWLPLUG_PREFETCH", self.prefetch),
            ("CRAWLPLUG_START_BATCH", self.start_batch),
        ):
            if value < 1:
                raise ConfigError(f"{name} must be at least 1, got {value}")
        if self.for_run is not None and self.for_run < 1:
            raise ConfigError(f"CRAWLPLUG_FOR_RUN must be a run id (1 or more), got {self.for_run}")
        if self.flush_interval <= 0 or self.poll_interval <= 0:
            raise ConfigError("CRAWLPLUG_FLUSH_INTERVAL and CRAWLPLUG_POLL_INTERVAL must be positive")

    @classmethod
    def from_settings(cls, s: BaseSettings) -> SchedulerConfig:
        warn_misspelt_settings(s)
        log_scrapy_redis_notes(s)
        return cls(
            crawl_id=s.get("CRAWLPLUG_CRAWL_ID"),
            key_prefix=setting(s, "CRAWLPLUG_KEY_PREFIX"),
            flush_on_start=setting(s, "CRAWLPLUG_FLUSH_ON_START", "getbool"),
            batch_size=setting(s, "CRAWLPLUG_BATCH_SIZE", "getint"),
            flush_interval=setting(s, "CRAWLPLUG_FLUSH_INTERVAL", "getfloat"),
            prefetch=setting(s, "CRAWLPLUG_PREFETCH", "getint"),
            async_calls=_async_calls(s.get("CRAWLPLUG_ASYNC_CALLS", "auto")),
            gc_freeze=setting(s, "CRAWLPLUG_GC_FREEZE", "getbool"),
            heartbeat=setting(s, "CRAWLPLUG_HEARTBEAT", "getfloat"),
            lease_timeout=setting(s, "CRAWLPLUG_LEASE_TIMEOUT", "getfloat"),
            max_deliveries=setting(s, "CRAWLPLUG_MAX_DELIVERIES", "getint"),
            idle_close=setting(s, "CRAWLPLUG_IDLE_CLOSE", "getfloat"),
            poll_interval=setting(s, "CRAWLPLUG_POLL_INTERVAL", "getfloat"),
            fp_cache=setting(s, "CRAWLPLUG_FP_CACHE", "getint"),
            start_batch=setting(s, "CRAWLPLUG_START_BATCH", "getint"),
            seeds=setting(s, "CRAWLPLUG_SEEDS", "getbool"),
            incremental=None
            if setting(s, "CRAWLPLUG_INCREMENTAL") is None
            else setting(s, "CRAWLPLUG_INCREMENTAL", "getbool"),
            start_keys=start_keys(setting(s, "CRAWLPLUG_START_KEYS", "getlist")),
            for_run=_run_id(s.get("CRAWLPLUG_FOR_RUN")),
        )
