"""What crawlplug's calls learn of a Redis server, once per client: its major version (whether
scripts may declare flags, whether it has Functions), what a reply says of the scripts it
holds ("not found") and whether its ACL refuses this user the Functions commands."""

from __future__ import annotations

import logging
import weakref
from typing import Any

import redis
from redis.cluster import RedisCluster

__all__ = [
    "already_loaded",
    "functions_refused",
    "mark_refused",
    "mark_unloadable",
    "not_found",
    "server_major",
    "server_of",
    "was_refused",
]

logger = logging.getLogger(__name__)

_versions: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def server_major(client: redis.Redis | RedisCluster) -> int:
    """The major version of the Redis server behind ``client`` (the lowest of a
    cluster's nodes; 0 if it cannot be told), asked once per client."""
    try:
        return _versions[client]
    except (KeyError, TypeError):
        pass
    major = 0
    try:
        info = client.info("server")
        found = [info] if "redis_version" in info else [v for v in info.values() if isinstance(v, dict)]
        majors = [int(str(x["redis_version"]).split(".")[0]) for x in found if "redis_version" in x]
        major = min(majors) if majors else 0
    except (redis.RedisError, ValueError, AttributeError) as exc:
        logger.debug("crawlplug: could not tell the Redis version (%s); scripts without flags", exc)
        return 0
    try:
        _versions[client] = major
    except TypeError:
        pass
    return major


def not_found(reply: object) -> bool:
    """Whether ``reply`` says the server does not hold what was called (a script: NOSCRIPT;
    the library's function: "Function not found"): the call did nothing, and is sent again."""
    if isinstance(reply, redis.exceptions.NoScriptError):
        return True
    return isinstance(reply, redis.ResponseError) and str(reply).startswith("Function not found")


def already_loaded(reply: object) -> bool:
    """Whether ``reply`` is FUNCTION LOAD's answer that the server holds the library already
    (two nodes loading it at once, a pipeline's load ahead of calls it did not need)."""
    return isinstance(reply, redis.ResponseError) and "already exists" in str(reply)


def functions_refused(reply: object) -> bool:
    """Whether ``reply`` is the server's NOPERM for FCALL, FCALL_RO or FUNCTION LOAD itself (an
    ACL without them, docs/security.md): refused before the call ran, so it may go out again
    as EVALSHA. A NOPERM from inside a running function (a key the user may not touch) is
    not this: that call ran in part, and is never sent again."""
    if not isinstance(reply, redis.exceptions.NoPermissionError):
        return False
    text = str(reply).lower()
    return any(f"run the '{name}' command" in text for name in ("fcall", "fcall_ro", "function|load"))


def server_of(client: object) -> tuple[object, ...]:
    """Which server and user ``client`` talks to (host, port, socket path, database, user),
    so that what one client learnt of a server holds for the others of the process (a node's
    frontier and its stats collector each have one)."""
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None) or {}
    return tuple(kwargs.get(k) for k in ("host", "port", "path", "db", "username")) or (id(client),)


#: the servers (server_of) that refused this process's user FCALL or FUNCTION LOAD
_refused_servers: set[tuple[object, ...]] = set()
#: the reasons each client's server gave for not loading the library (said once each: a
#: full Redis is a passing state, said again by a client made after it)
_unloadable: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def was_refused(client: object) -> bool:
    return server_of(client) in _refused_servers


def mark_refused(client: object) -> bool:
    """Note that ``client``'s server refused this user FCALL or FUNCTION LOAD; whether that is news."""
    server = server_of(client)
    first = server not in _refused_servers
    _refused_servers.add(server)
    return first


def mark_unloadable(client: object, reason: str) -> bool:
    """Note that ``client``'s server could not load the library for ``reason``; whether that is news."""
    try:
        said = _unloadable.setdefault(client, set())
    except TypeError:
        return True
    first = reason not in said
    said.add(reason)
    return first
