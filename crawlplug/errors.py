"""crawlplug's exceptions: one root, a branch per subsystem."""

from __future__ import annotations


class CrawlplugError(Exception):
    """Root of every error crawlplug raises on purpose."""


class ConfigError(CrawlplugError, ValueError):
    """A setting has a value crawlplug cannot work with."""


class RedisUnavailable(CrawlplugError, ConnectionError):
    """The Redis server cannot be reached (or refused us)."""


class SerializationError(CrawlplugError):
    """A request cannot be stored (e.g. meta that JSON cannot hold)."""


class DecodeError(CrawlplugError):
    """A payload read from Redis is not a request we are willing to build."""


class ItemError(CrawlplugError, TypeError):
    """An item cannot be stored (not an item, or a value JSON cannot hold)."""


def _redis_errors() -> tuple[type[BaseException], ...]:
    import redis  # noqa: PLC0415

    return (redis.RedisError, redis.exceptions.RedisClusterException)


#: What a Redis call may raise when the server (or the cluster) is unreachable,
#: busy, failing over or refusing: redis-py's errors and its cluster client's.
REDIS_ERRORS = _redis_errors()
