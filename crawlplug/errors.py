"""crawlplug's exceptions: one root, a branch per subsystem."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

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


class ScriptRefusal(CrawlplugError, redis.exceptions.ResponseError):
    """A script refused a node's call before any write, with an error reply that begins
    with :attr:`PREFIX` (each kind converted once, where replies come in: :func:`script_error`)."""

    PREFIX = ""

    @classmethod
    def check(cls, exc: BaseException) -> BaseException:
        """``exc`` as this kind of refusal when its reply says so, else ``exc``."""
        if isinstance(exc, redis.exceptions.ResponseError) and not isinstance(exc, cls):
            text = str(exc)
            if text.startswith(cls.PREFIX):
                return cls(text)
        return exc


class StaleEpoch(ScriptRefusal):
    """A script refused a node's call: the crawl was reset, or began a new run, since the
    node joined it (lua/epoch.lua). Nothing was written; the node must join again."""

    PREFIX = "STALE_EPOCH"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        parts = message.split()
        self.stored = parts[1] if len(parts) > 1 else None


class RolledBack(ScriptRefusal):
    """A script refused a node's call: Redis holds an older state than the node's last
    recorded call (lua/record.lua), so it went back in time (a restart from a snapshot, a
    failover to a replica that lagged, a restored backup) and may have lost what the node's
    pages produced. Nothing was written. The frontier that meets it gives back every lease
    the node holds (``given_back``: their ids, as the caller names them) before raising it,
    so that those pages are fetched again; the caller forgets them, forgets the fingerprints
    it knew, and sends the rest of its call again."""

    PREFIX = "ROLLBACK"

    def __init__(self, message: str, given_back: Sequence[str] = ()) -> None:
        super().__init__(message)
        parts = message.split()
        self.found = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        self.given_back = list(given_back)
        #: the frontier already gave back what the node held for this refusal (a call made
        #: inside another, e.g. admit-and-pop's own pop, met it first): not again
        self.settled = False


class RunEnded(CrawlplugError):
    """The crawl's run ended by a limit or an operator and stays so (crawlplug.crawl.runs);
    ``state`` is a node's close reason (the limit's, e.g. "closespider_pagecount", or
    "stopped"); ``run_state`` the run's ("limit", "stopped", "draining")."""

    def __init__(self, message: str, state: str = "stopped", run_state: str = "") -> None:
        super().__init__(message)
        self.state = state
        self.run_state = run_state or ("stopped" if state == "stopped" else "limit")


class RunOver(RunEnded):
    """The run a node was started for (CRAWLPLUG_FOR_RUN: ``crawlplug start`` sets it on
    its Scrapyd jobs) ended before the node joined, and no later run is running: the node
    has nothing to do and begins no run of its own (crawlplug.crawl.runs.join). Not a
    failure: ``state`` is "finished" for a run that finished."""


class CorruptKey(CrawlplugError, redis.ResponseError):
    """A crawl key holds what crawlplug never writes there (a wrong type, a counter
    that is no integer): the script refused the whole call, having written nothing.
    Not an outage: waiting does not repair it, an operator does (the message names
    the key and what to do). ``key`` is its name."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


_CORRUPT = re.compile(r"CORRUPT crawl key (\S+) ")


def checked_number(
    value: Any,
    what: str,
    conv: Callable[[Any], Any] = float,
    *,
    kind: str = "a number",
    negative: str = "must not be negative",
) -> Any:
    """``value`` as a number (``conv``: float, int) of 0 or more, or a :class:`ConfigError` that
    names ``what`` ("... must be <kind>, got ..." / "... <negative>, got ...")."""
    try:
        number = conv(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be {kind}, got {value!r}") from None
    if number < 0:
        raise ConfigError(f"{what} {negative}, got {value!r}")
    return number


def corrupt_key(exc: Exception) -> Exception:
    """``exc`` as a :class:`CorruptKey` if it is a script's refusal of a corrupt key
    (guard.lua), else ``exc`` itself."""
    if isinstance(exc, CorruptKey):
        return exc
    match = _CORRUPT.search(str(exc))
    if match is None:
        return exc
    message = str(exc)
    return CorruptKey(message[message.index("CORRUPT crawl key") :], match.group(1))


def script_error(exc: BaseException) -> BaseException:
    """A script's error reply as crawlplug's error for it (:class:`StaleEpoch`,
    :class:`RolledBack`, :class:`CorruptKey`), else ``exc`` itself: converted once, where replies come in
    (crawlplug.frontier.scripts.Scripts)."""
    if not isinstance(exc, redis.exceptions.ResponseError):
        return exc
    for kind in (StaleEpoch, RolledBack):
        converted = kind.check(exc)
        if converted is not exc:
            return converted
    return corrupt_key(exc)


class AdmissionIncomplete(CrawlplugError):
    """An admission of one batch that went through in part only (a sharded crawl
    whose shards answered differently, a Bloom filter that grew half-way): the
    requests ``flags`` marks "1" (admitted) or "0" (duplicate) are done, those
    marked "-" are not. Of the acks, those in ``acks_done`` were made (``acked`` of
    them acknowledged, ``stale`` found no longer held), the others not. ``cause`` is
    the error the rest met. Retrying only the rest counts nothing twice."""

    def __init__(
        self, flags: str, cause: Exception, acks_done: Sequence[str] = (), acked: int = 0, stale: int = 0
    ) -> None:
        super().__init__(
            f"{flags.count('-')} of {len(flags)} requests not admitted"
            f"{f', {len(acks_done)} acks made' if acks_done else ''}: {cause}"
        )
        self.flags = flags
        self.cause = cause
        self.acks_done = list(acks_done)
        self.acked = acked
        self.stale = stale


class TransferError(CrawlplugError):
    """An export file that cannot be imported, or a target that must not be written."""


class MigrationError(CrawlplugError):
    """The scrapy-redis crawl cannot be carried over as asked."""


def _redis_errors() -> tuple[type[redis.RedisError], type[redis.exceptions.RedisClusterException]]:
    return (redis.RedisError, redis.exceptions.RedisClusterException)


#: What a Redis call may raise when the server (or the cluster) is unreachable,
#: busy, failing over or refusing: redis-py's errors and its cluster client's.
REDIS_ERRORS = _redis_errors()


class ScrapydError(CrawlplugError):
    """A Scrapyd daemon could not be reached, or refused a request (``schedule.json``,
    ``cancel.json``, ...): the message names the daemon (its URL, password masked) and why."""
