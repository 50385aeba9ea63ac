"""crawlplug: distributed, crash-proof Scrapy crawls with a Redis frontier.

Turn it on in a Scrapy (>= 2.13) project with::

    ADDONS = {"crawlplug.Addon": 0}
"""

from __future__ import annotations

from .addon import Addon
from .errors import (
    ConfigError,
    CrawlplugError,
    DecodeError,
    RedisUnavailable,
    SerializationError,
)

__all__ = [
    "Addon",
    "ConfigError",
    "CrawlplugError",
    "DecodeError",
    "RedisUnavailable",
    "SerializationError",
]
__version__ = "0.1.0"
