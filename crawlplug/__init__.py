"""crawlplug: distributed, crash-proof Scrapy crawls with a Redis frontier.

Turn it on in a Scrapy (>= 2.13) project with::

    ADDONS = {"crawlplug.Addon": 0}
"""

from __future__ import annotations

# The one place the version is written: setup.cfg reads it (attr:), `crawlplug --version`
# prints it, a node's first log line names it. Set before the imports below, so that any
# module they load can import it.
__version__ = "0.1.0"

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
