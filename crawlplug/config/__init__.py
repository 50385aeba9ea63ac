"""crawlplug's settings: read once from Scrapy settings into plain objects
(:mod:`.read`), and rendered as docs/settings.md (:mod:`.doc`, ``make docs``). Every
name, default and description is in :mod:`crawlplug.defaults`.
"""

from __future__ import annotations

from .read import (
    NOT_SETTINGS,
    START_KEY,
    SchedulerConfig,
    is_set,
    misspelt_settings,
    scope,
    setting,
    start_key,
    start_keys,
    warn_misspelt_settings,
)

__all__ = [
    "NOT_SETTINGS",
    "START_KEY",
    "SchedulerConfig",
    "is_set",
    "misspelt_settings",
    "scope",
    "setting",
    "start_key",
    "start_keys",
    "warn_misspelt_settings",
]
