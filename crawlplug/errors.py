"""crawlplug's exceptions: one root, a branch per subsystem."""

from __future__ import annotations

import redis


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


class StaleEpoch(CrawlplugError, redis.exceptions.ResponseError):
    """A script refused a node's call: the crawl was reset, or began a new run, since the
    node joined it (lua/epoch.lua). Nothing was written; the node must join again."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        parts = message.split()
        self.stored = parts[1] if len(parts) > 1 else None

    @classmethod
    def check(cls, exc: BaseException) -> BaseException:
        """``exc`` as a StaleEpoch when it is a script's epoch refusal, else ``exc``."""
        if isinstance(exc, redis.exceptions.ResponseError) and not isinstance(exc, cls):
            text = str(exc)
            if text.startswith("STALE_EPOCH"):
                return cls(text)
        return exc


class RunEnded(CrawlplugError):
    """The crawl's run ended by a limit or an operator and stays so (crawlplug.runs);
    ``state`` is how it ended ("limit", "stopped"), a node's close reason."""

    def __init__(self, message: str, state: str = "stopped") -> None:
        super().__init__(message)
        self.state = state


def _redis_errors() -> tuple[type[BaseException], ...]:
    import redis  # noqa: PLC0415

    return (redis.RedisError, redis.exceptions.RedisClusterException)


#: What a Redis call may raise when the server (or the cluster) is unreachable,
#: busy, failing over or refusing: redis-py's errors and its cluster client's.
REDIS_ERRORS = _redis_errors()
