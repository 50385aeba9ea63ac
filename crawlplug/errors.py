"""crawlplug's exceptions: one root, a branch per subsystem."""

from __future__ import annotations

import re

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


class CorruptKey(CrawlplugError, redis.ResponseError):
    """A crawl key holds what crawlplug never writes there (a wrong type, a counter
    that is no integer): the script refused the whole call, having written nothing.
    Not an outage: waiting does not repair it, an operator does (the message names
    the key and what to do). ``key`` is its name."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key

_CORRUPT = re.compile(r"CORRUPT crawl key (\S+) ")


def corrupt_key(exc: Exception) -> Exception:
    """``exc`` as a :class:`CorruptKey` if it is a script's refusal of a corrupt key
    (guard.lua), else ``exc`` itself."""
    if isinstance(exc, CorruptKey):
        return exc
    match = _CORRUPT.search(str(exc))
    if match is None:
        return exc
    message = str(exc)
    return CorruptKey(message[message.index("CORRUPT crawl key"):], match.group(1))


class AdmissionIncomplete(CrawlplugError):
    """An admission of one batch that went through in part only (a sharded crawl
    whose shards answered differently, a Bloom filter that grew half-way): the
    requests ``flags`` marks "1" (admitted) or "0" (duplicate) are done, those
    marked "-" are not, nor are the acks. ``cause`` is the error the rest met.
    Retrying only the rest counts nothing twice."""

    def __init__(self, flags: str, cause: Exception) -> None:
        super().__init__(f"{flags.count('-')} of {len(flags)} requests not admitted: {cause}")
        self.flags = flags
        self.cause = cause


def _redis_errors() -> tuple[type[BaseException], ...]:
    import redis  # noqa: PLC0415

    return (redis.RedisError, redis.exceptions.RedisClusterException)


#: What a Redis call may raise when the server (or the cluster) is unreachable,
#: busy, failing over or refusing: redis-py's errors and its cluster client's.
REDIS_ERRORS = _redis_errors()
