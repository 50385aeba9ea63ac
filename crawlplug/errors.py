"""crawlplug's exceptions: one root, a branch per subsystem."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from typing import Any

import redis


class CrawlplugError(Exception):
    """Root of every error crawlplug raises on purpose."""


class ConfigError(CrawlplugError, ValueError):
    """A setting has a value crawlplug cannot work with."""


class RedisUnavailable(CrawlplugError, ConnectionError):
    """The Redis server cannot be reached (or refused us) when a node or a command starts:
    the message names it (its URL, password masked) and why (crawlplug.server.clients.check)."""


class RedisFailure(CrawlplugError):
    """A call to Redis failed. redis-py's errors are converted once, where crawlplug calls
    Redis (crawlplug's clients, crawlplug.server.clients; the scripts' runner,
    crawlplug.frontier.scripts), by :func:`converted`: each converted error is of one of
    the kinds below *and* still of its redis-py class (``except redis.ConnectionError``
    still matches), with the same message. The decisions stay where they are made: a
    heartbeat's outage, a reply lost and sent again, a command's one error line."""


class ReplyLost(RedisFailure):
    """No reply came: Redis could not be reached, the connection broke, or the call timed
    out. The call may have run: what is sent again must be safe to run twice."""


class RedisRefused(RedisFailure):
    """Redis answered with an error: the call was refused and did nothing (a script's
    refusal, :class:`ScriptRefusal` and :class:`CorruptKey`, wrote nothing either)."""


class RedisFull(RedisRefused):
    """Redis is over its ``maxmemory`` and refused a write (or a script that would write)."""


class RedisForbidden(RedisRefused):
    """Redis refused this user the command or the key (``NOPERM``), or the credentials."""


class RedisReadOnly(RedisRefused):
    """The server is a read-only replica (a failover not yet seen by the client)."""


class SerializationError(CrawlplugError):
    """A request cannot be stored (e.g. meta that JSON cannot hold)."""


class DecodeError(CrawlplugError):
    """A payload read from Redis is not a request we are willing to build."""


class ItemError(CrawlplugError, TypeError):
    """An item cannot be stored (not an item, or a value JSON cannot hold)."""


class ScriptRefusal(RedisRefused, redis.exceptions.ResponseError):
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


class CorruptKey(RedisRefused, redis.ResponseError):
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
    :class:`RolledBack`, :class:`CorruptKey`), else ``exc`` :func:`converted`: converted once,
    where replies come in (crawlplug.frontier.scripts.Scripts)."""
    if not isinstance(exc, redis.exceptions.ResponseError):
        return converted(exc)
    for kind in (StaleEpoch, RolledBack):
        refusal = kind.check(exc)
        if refusal is not exc:
            return refusal
    refusal = corrupt_key(exc)  # type: ignore[arg-type]  # a ResponseError is an Exception
    return refusal if refusal is not exc else converted(exc)


#: redis-py errors that are no failure of a call, left as they are: a transaction's WATCH
#: seen to change (its caller tries again), a value redis-py will not send, a lock's misuse
_NOT_FAILURES: tuple[type[BaseException], ...] = (
    redis.exceptions.WatchError,
    redis.exceptions.DataError,
    redis.exceptions.LockError,
)
_kinds: dict[tuple[type[RedisFailure], type[BaseException]], type[BaseException]] = {}


def failure_kind(exc: BaseException) -> type[RedisFailure] | None:
    """Which :class:`RedisFailure` ``exc`` (a redis-py error) is; None if it is none."""
    if isinstance(exc, RedisFailure):
        return type(exc) if type(exc) in _KINDS else next(k for k in _KINDS if isinstance(exc, k))
    if isinstance(exc, _NOT_FAILURES) or not isinstance(
        exc, (redis.RedisError, redis.exceptions.RedisClusterException)
    ):
        return None
    text = str(exc)
    if isinstance(exc, (redis.exceptions.NoPermissionError, redis.exceptions.AuthenticationError)):
        return RedisForbidden
    if isinstance(exc, redis.exceptions.OutOfMemoryError) or "maxmemory" in text:
        return RedisFull
    if isinstance(exc, redis.exceptions.ReadOnlyError):
        return RedisReadOnly
    if isinstance(exc, (redis.exceptions.ResponseError, redis.exceptions.BusyLoadingError)):
        return RedisRefused  # an answer (LOADING too: nothing ran)
    return ReplyLost  # no answer: connection refused or broken, a timeout, a cluster in flux


_KINDS = (RedisForbidden, RedisFull, RedisReadOnly, RedisRefused, ReplyLost)


def _reduce(self: BaseException) -> tuple[Any, ...]:
    """A converted error pickles as its redis-py error, converted again when read."""
    original = next(c for c in type(self).__mro__[1:] if c.__module__.startswith("redis"))
    return (_rebuilt, (original, self.args))


def _rebuilt(original: type[BaseException], args: tuple[Any, ...]) -> BaseException:
    exc = original.__new__(original, *args)
    exc.args = args
    return converted(exc)


def converted(exc: BaseException) -> BaseException:
    """``exc`` (a redis-py error) as crawlplug's: the same error, of the same redis-py class
    and message, and also of its :class:`RedisFailure` kind (:func:`failure_kind`); ``exc``
    itself when it is crawlplug's already or no failure (:data:`_NOT_FAILURES`)."""
    if isinstance(exc, RedisFailure):
        return exc
    kind = failure_kind(exc)
    if kind is None:
        return exc
    original = type(exc)
    cls = _kinds.get((kind, original))
    if cls is None:
        # the redis-py class's name and module kept, so a log line reads as before
        cls = _kinds[(kind, original)] = type(
            original.__name__,
            (kind, original),
            {"__module__": original.__module__, "__doc__": kind.__doc__, "__reduce__": _reduce},
        )
    new = cls.__new__(cls, *exc.args)
    new.args = exc.args
    new.__dict__.update(exc.__dict__)
    new.__traceback__ = exc.__traceback__
    new.__cause__, new.__context__ = exc.__cause__, exc.__context__
    new.__suppress_context__ = exc.__suppress_context__
    return new


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


def _redis_errors() -> tuple[type[RedisFailure], type[redis.RedisError], type[redis.exceptions.RedisClusterException]]:
    return (RedisFailure, redis.RedisError, redis.exceptions.RedisClusterException)


#: What a Redis call may raise when the server (or the cluster) is unreachable, busy,
#: failing over or refusing: crawlplug's :class:`RedisFailure`, as its clients and script
#: runner convert them, and redis-py's own (a client crawlplug did not make: a test's, a
#: project's), which are the same errors unconverted.
REDIS_ERRORS = _redis_errors()


class ScrapydError(CrawlplugError):
    """A Scrapyd daemon could not be reached, or refused a request (``schedule.json``,
    ``cancel.json``, ...): the message names the daemon (its URL, password masked) and why."""


def optional_module(name: str, extra: str, what: str) -> Any:
    """Module ``name`` of crawlplug's ``[extra]``, imported; ConfigError saying what needs it
    and how to install it when it is missing."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ConfigError(
            f"{what} needs crawlplug's [{extra}] extra ({exc}): pip install 'crawlplug[{extra}]'"
        ) from None
