"""Redis clients from Scrapy settings.

``REDIS_URL`` plus ``REDIS_PARAMS`` (and scrapy-redis's ``REDIS_HOST``,
``REDIS_PORT``, ``REDIS_DB``, ``REDIS_ENCODING``: :func:`server_settings`); with
no server named, the embedded Redis of the project (see :mod:`crawlplug.server.embedded`).
URL forms:

* ``redis://[user:password@]host:port/db``, ``rediss://`` (TLS), ``unix:///path``;
* ``redis+cluster://[user:password@]host:port[,host:port...]`` (``rediss+cluster``
  for TLS): Redis Cluster through redis-py's cluster client (any reachable
  node is enough to discover the others); ``CRAWLPLUG_REDIS_CLUSTER = True``
  reads a plain ``redis://`` URL the same way;
* ``redis+sentinel://[user:password@]host:port[,host:port...]/service_name[/db]``
  (``rediss+sentinel``): the primary Sentinel names for the service, found
  again after a failover.

Every key of a crawl shares one hash tag, so every script runs on one
cluster slot. Creating a client does no network I/O; :func:`check` does.

The clients are redis-py's, made to convert its errors once into crawlplug's
(crawlplug.server.converting).
"""

from __future__ import annotations

import codecs
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from ..defaults import default
from ..errors import ConfigError, RedisUnavailable
from . import embedded
from .converting import Redis, cluster_class

logger = logging.getLogger(__name__)

SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel")

_CLIENT_DEFAULTS: dict[str, Any] = {
    "socket_timeout": 30,  # a node's: CRAWLPLUG_REDIS_TIMEOUT (from_settings)
    "socket_connect_timeout": 2,
    "health_check_interval": 30,
    # redis-py's default retries a failed command 10 times with backoff: about 4 s
    # with Redis down, and the Twisted reactor (every download) waits meanwhile.
    # One quick retry rides over a dropped connection; the scheduler waits out
    # longer outages itself, asking again every few seconds (CRAWLPLUG_REDIS_OUTAGE_TIMEOUT).
    # Not after a timeout: a server that stopped answering (a network that drops
    # packets without closing anything) would make the caller wait the timeout again,
    # and the command may be running there still.
    "retry": Retry(ExponentialBackoff(cap=0.2, base=0.05), retries=1, supported_errors=(redis.ConnectionError,)),
}


@dataclass
class Connection:
    """A client and how it was chosen (for the first log lines)."""

    client: redis.Redis
    url: str
    embedded: bool
    #: for a Scrapy node (:func:`from_settings`): :func:`check` also makes sure the Redis
    #: user may run what every node runs (:data:`NODE_COMMANDS`)
    node: bool = False

    @property
    def safe_url(self) -> str:
        return mask_url(self.url)


def mask_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for logs and status output)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<invalid url>"
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    secret_query = any(_is_secret(k) for k, _ in pairs)
    if parts.password is None and not secret_query:
        return url  # nothing to hide (and urlunsplit would turn unix:///x into unix:/x)
    netloc = parts.netloc
    userinfo, at, hostport = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.split(':', 1)[0]}:***@{hostport}"
    query = parts.query
    if secret_query:
        query = urlencode([(k, "***" if _is_secret(k) else v) for k, v in pairs], safe="*")
    if not netloc:  # unix:///path: urlunsplit would drop the "//"
        return f"{parts.scheme}://{parts.path}" + (f"?{query}" if query else "")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _is_secret(name: str) -> bool:
    """A URL query argument that holds a secret: ``password``, redis-py's ``ssl_password``
    (the client key's passphrase), anything named like a token or a secret."""
    name = name.lower()
    return any(word in name for word in ("password", "secret", "token"))


def validate_url(url: str) -> str:
    """Refuse a REDIS_URL that redis-py would misread or reject late."""
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"REDIS_URL must be a non-empty string, got {url!r}")
    try:
        parts = urlsplit(url)
        if "+" in parts.scheme:
            _hosts(parts)  # several host:port pairs: checked one by one
        else:
            parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        raise ConfigError(f"malformed REDIS_URL {mask_url(url)!r}: {exc}") from None
    if parts.scheme not in SCHEMES:
        raise ConfigError(
            f"malformed REDIS_URL {mask_url(url)!r}: scheme must be one of {', '.join(s + '://' for s in SCHEMES)}"
        )
    if parts.scheme == "unix" and not parts.path:
        raise ConfigError(f"malformed REDIS_URL {mask_url(url)!r}: unix:// needs a socket path")
    if parts.scheme != "unix" and not parts.hostname:
        raise ConfigError(f"malformed REDIS_URL {mask_url(url)!r}: no host")
    if parts.scheme.endswith("+sentinel") and not parts.path.strip("/"):
        raise ConfigError(f"malformed REDIS_URL {mask_url(url)!r}: redis+sentinel:// needs /service_name")
    return url


def _hosts(parts: Any) -> list[tuple[str, int]]:
    """host:port pairs of a cluster or sentinel URL (port 26379 for sentinels, 6379 else)."""
    hostlist = parts.netloc.rpartition("@")[2]
    default_port = 26379 if parts.scheme.endswith("+sentinel") else 6379
    out = []
    for item in hostlist.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep:
            host, port = item.strip(), str(default_port)
        host = host.strip("[]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad host:port {item!r}")
        out.append((host, int(port)))
    return out


def client_from_url(url: str, params: Mapping[str, Any] | None = None, *, cluster: bool = False) -> Any:
    """A redis-py client for ``url`` (validated): Redis, RedisCluster, or a Sentinel-managed
    primary; no I/O."""
    validate_url(url)
    kwargs = dict(_CLIENT_DEFAULTS)
    kwargs.update(params or {})
    parts = urlsplit(url)
    try:
        if parts.scheme.endswith("+cluster") or (cluster and parts.scheme in ("redis", "rediss")):
            return _cluster(parts, kwargs)
        if parts.scheme.endswith("+sentinel"):
            return _sentinel(parts, kwargs)
        return Redis.from_url(url, **kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"malformed REDIS_URL {mask_url(url)!r}: {exc}") from None


def _auth(parts: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    from urllib.parse import unquote  # noqa: PLC0415

    if parts.username:
        kwargs.setdefault("username", unquote(parts.username))
    if parts.password:
        kwargs.setdefault("password", unquote(parts.password))
    if parts.scheme.startswith("rediss"):
        kwargs.setdefault("ssl", True)
    return kwargs


def _cluster(parts: Any, kwargs: dict[str, Any]) -> Any:
    from redis.cluster import ClusterNode  # noqa: PLC0415

    kwargs = _auth(parts, kwargs)
    kwargs.pop("health_check_interval", None)
    nodes = [ClusterNode(host, port) for host, port in _hosts(parts)]
    return cluster_class()(startup_nodes=nodes, **kwargs)


def _sentinel(parts: Any, kwargs: dict[str, Any]) -> Any:
    from redis.sentinel import Sentinel  # noqa: PLC0415

    kwargs = _auth(parts, kwargs)
    path = [p for p in parts.path.split("/") if p]
    service = path[0]
    if len(path) > 1:
        if not path[1].isdigit():
            raise ValueError(f"database must be a number, got {path[1]!r}")
        kwargs["db"] = int(path[1])
    sentinel_kwargs = {k: kwargs[k] for k in ("socket_timeout", "socket_connect_timeout") if k in kwargs}
    sentinel = Sentinel(_hosts(parts), sentinel_kwargs=sentinel_kwargs, **kwargs)
    return sentinel.master_for(service, redis_class=Redis)


def _project_dir() -> Path:
    """The Scrapy project directory (where scrapy.cfg is), else the working directory."""
    try:
        from scrapy.utils.conf import closest_scrapy_cfg  # noqa: PLC0415

        cfg = closest_scrapy_cfg()
    except Exception:  # noqa: BLE001 - a project whose scrapy.cfg cannot be read: the working directory
        cfg = ""
    return Path(cfg).parent if cfg else Path.cwd()


def embedded_dir(settings: Mapping[str, Any]) -> Path:
    raw = settings.get("CRAWLPLUG_EMBEDDED_DIR") or default("CRAWLPLUG_EMBEDDED_DIR")
    path = Path(os.path.expanduser(str(raw)))
    return path if path.is_absolute() else _project_dir() / path


def from_settings(settings: Any) -> Connection:
    """The client the settings ask for: REDIS_URL (or scrapy-redis's REDIS_HOST,
    REDIS_PORT, ...; see :func:`server_settings`), else the embedded Redis.

    Starting the embedded server is the one piece of I/O done here; call this
    from ``open()``, never from a ``from_crawler`` factory.
    """
    url, params = server_settings(settings)
    # a node's reactor waits for every reply: a connection that stopped answering
    # must be given up on in seconds, not the 30 s a command-line tool may wait
    timeout = settings.get("CRAWLPLUG_REDIS_TIMEOUT")
    if timeout is None:
        timeout = default("CRAWLPLUG_REDIS_TIMEOUT")
    params.setdefault("socket_timeout", _seconds(timeout, "CRAWLPLUG_REDIS_TIMEOUT"))
    url = url or os.environ.get("REDIS_URL") or None
    if url:
        cluster = bool(settings.getbool("CRAWLPLUG_REDIS_CLUSTER")) if hasattr(settings, "getbool") else False
        return Connection(client_from_url(url, params, cluster=cluster), url, embedded=False, node=True)
    directory = embedded_dir(settings)
    url = embedded.ensure(directory, settings.get("CRAWLPLUG_REDIS_SERVER"))
    return Connection(client_from_url(url, params), url, embedded=True, node=True)


def _seconds(value: Any, name: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number of seconds, got {value!r}") from None
    if not seconds > 0:  # NaN too
        raise ConfigError(f"{name} must be more than 0 seconds, got {value!r}")
    return seconds


#: REDIS_PARAMS keys of scrapy-redis that name the server, not a client option.
_SERVER_PARAMS = ("url", "host", "port", "db", "unix_socket_path")
_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        logger.warning("crawlplug: %s", message)


def server_settings(settings: Any) -> tuple[str | None, dict[str, Any]]:
    """(URL of the server the settings name, or None; client keyword arguments).

    As scrapy-redis reads them: REDIS_URL, else REDIS_HOST / REDIS_PORT /
    REDIS_DB (``redis://host:port/db``, localhost and 6379 filling in), where
    each setting wins over the same key of REDIS_PARAMS (``url``, ``host``,
    ``port``, ``db``, ``unix_socket_path``). REDIS_ENCODING is the client's
    ``encoding``. scrapy-redis's ``redis_cls`` and ``decode_responses`` are
    dropped with a warning: crawlplug picks its client class and reads raw
    bytes (fingerprints are 20 raw bytes).
    """
    if hasattr(settings, "getdict"):
        params = dict(settings.getdict("REDIS_PARAMS"))  # a JSON text from -s works too
    else:
        params = dict(settings.get("REDIS_PARAMS") or {})
    named = {key: params.pop(key, None) for key in _SERVER_PARAMS}
    if params.pop("redis_cls", None) is not None:
        _warn_once("REDIS_PARAMS['redis_cls'] (scrapy-redis) is ignored: crawlplug chooses its Redis client class")
    if params.pop("decode_responses", None) or settings.get("REDIS_DECODE_RESPONSES"):
        _warn_once("decode_responses (scrapy-redis) is ignored: crawlplug reads raw bytes from Redis")
    encoding = settings.get("REDIS_ENCODING")
    if encoding:
        try:
            codecs.lookup(str(encoding))
        except LookupError:
            raise ConfigError(f"REDIS_ENCODING={encoding!r} is not an encoding Python knows") from None
        params["encoding"] = str(encoding)
    url = settings.get("REDIS_URL") or named["url"]
    host = settings.get("REDIS_HOST") or named["host"]
    port = settings.get("REDIS_PORT") or named["port"]
    db = settings.get("REDIS_DB") or named["db"]
    if db is not None:
        try:
            db = int(db)
        except (TypeError, ValueError):
            raise ConfigError(f"REDIS_DB must be a database number, got {db!r}") from None
    if url:
        if db and urlsplit(str(url)).scheme in ("redis", "rediss", "unix"):
            params.setdefault("db", db)  # a database in the URL itself still wins, as in redis-py
        return str(url), params
    if host or port:
        try:
            number = int(port) if port else 6379
        except (TypeError, ValueError):
            raise ConfigError(f"REDIS_PORT must be a port number, got {port!r}") from None
        if not 0 < number < 65536:
            raise ConfigError(f"REDIS_PORT must be a port number, got {port!r}")
        host = str(host or "localhost")
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"  # IPv6
        return f"redis://{host}:{number}/{db or 0}", params
    if named["unix_socket_path"]:
        return f"unix://{named['unix_socket_path']}" + (f"?db={db}" if db else ""), params
    return None, params


#: Commands every node runs that no key names, so that a Redis ACL may deny them
#: without it showing at the first write: the scripts (EVALSHA; SCRIPT LOAD when the
#: server lost them, as after a restart) and TIME (leases, heartbeats and domain delays
#: follow Redis's clock, never the node's). On Redis 7 a node runs the scripts as the
#: Functions library (FCALL), and the scripts only when FCALL is refused; the check
#: then asks FCALL first (:func:`_denied`). The ACL crawlplug needs: docs/security.md.
NODE_COMMANDS = ("time", "evalsha", "script|load")
ACL_DOC = "docs/security.md"


def check(conn: Connection) -> None:
    """PING the server, and for a node check the user's command permissions
    (:data:`NODE_COMMANDS`); raise :class:`RedisUnavailable` with the (masked) URL and cause."""
    try:
        conn.client.ping()
        # a cluster's nodes are asked when used: a permission refused there is logged then
        denied = _denied(conn.client) if conn.node and isinstance(conn.client, redis.Redis) else []
    except redis.AuthenticationError as exc:
        raise RedisUnavailable(f"Redis at {conn.safe_url} refused the credentials: {exc}") from None
    except redis.exceptions.NoPermissionError as exc:
        raise RedisUnavailable(f"Redis at {conn.safe_url}: {exc} (the ACL crawlplug needs: {ACL_DOC})") from None
    except redis.RedisError as exc:
        raise RedisUnavailable(f"cannot reach Redis at {conn.safe_url}: {exc}") from None
    if denied:
        user = conn.client.connection_pool.connection_kwargs.get("username") or "default"
        raise RedisUnavailable(
            f"Redis at {conn.safe_url}: user {user!r} may not run {', '.join(c.upper() for c in denied)}, "
            f"which every crawlplug node needs (the ACL crawlplug needs: {ACL_DOC})"
        )


def _denied(client: redis.Redis) -> list[str]:
    """Which of :data:`NODE_COMMANDS` the server refuses with NOPERM (one round trip).

    On Redis 7 FCALL is asked first, for a function that does not exist ("Function not
    found" when allowed): a node allowed it runs the scripts as the library and never sends
    EVALSHA or SCRIPT LOAD, so they are not asked (each command name a server has run costs
    it a latency histogram, about 25 KB: docs/scaling.md). Else EVALSHA is asked for a
    script that does not exist (NOSCRIPT when allowed), and SCRIPT LOAD loads crawlplug's
    smallest script, as the node itself does next.
    """
    from ..frontier.luatext import source  # noqa: PLC0415 - the scripts' text, read once
    from ..frontier.serverinfo import server_major  # noqa: PLC0415

    refused = redis.exceptions.NoPermissionError
    if server_major(client) >= 7:  # asked once per client: the node's scripts ask it too
        pipe = client.pipeline(transaction=False)
        pipe.time()
        pipe.fcall("crawlplug_probe_0", 0)
        when, fcall = pipe.execute(raise_on_error=False)
        if not isinstance(fcall, refused):
            return ["time"] if isinstance(when, refused) else []
    pipe = client.pipeline(transaction=False)
    pipe.time()
    pipe.evalsha("0" * 40, 0)
    pipe.script_load(source("idle"))
    replies = pipe.execute(raise_on_error=False)
    return [name for name, reply in zip(NODE_COMMANDS, replies) if isinstance(reply, refused)]
