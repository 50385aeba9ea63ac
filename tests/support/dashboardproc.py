"""Helpers of the dashboard tests: the real `crawlplug dashboard` process, the
crawl settings they share, and waiting for a condition."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from .nodes import ROOT
from .patience import patient
from .servers import free_port

CRAWLPLUG = str(Path(sys.executable).with_name("crawlplug"))
TOKEN_ENVVAR = "CRAWLPLUG_DASHBOARD_TOKEN"
HOSTS_ENVVAR = "CRAWLPLUG_DASHBOARD_HOSTS"

#: A crawl of the demo shop that takes a while (two nodes x 4 at 50 ms a page: ~10 s for
#: 1500 items), with crawl-wide Scrapy stats and a heartbeat every second.
SHOP_ITEMS = 1500
SHOP_DELAY = 0.05
CRAWL_SETTINGS: dict[str, object] = {
    "CRAWLPLUG_IDLE_CLOSE": 2,
    "CRAWLPLUG_HEARTBEAT": 1,
    "CRAWLPLUG_LEASE_TIMEOUT": 10,
    "CONCURRENT_REQUESTS": 4,
    "STATS_CLASS": "crawlplug.stats.RedisStatsCollector",
}


def wait_for(check: Callable[[], Any], timeout: float, what: str, step: float = 0.1) -> Any:
    """Call ``check`` until it returns something truthy (returned), at most ``timeout`` s."""
    deadline = time.monotonic() + patient(timeout)
    last: Any = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        time.sleep(step)


@dataclass
class DashboardProcess:
    """A running `crawlplug dashboard` and an HTTP client for it."""

    proc: subprocess.Popen[bytes]
    port: int
    err: Path
    http: httpx.Client

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def text(self) -> str:
        return self.err.read_text(errors="replace")

    def stop(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_dashboard(
    redis_url: str,
    crawl: str,
    directory: Path,
    token: str | None = None,
    extra_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> DashboardProcess:
    """`crawlplug dashboard --redis-url URL --crawl NAME --port P`, ready to answer
    (``env``: more environment variables for it)."""
    port = free_port()
    extra_env = env or {}
    env = dict(os.environ)
    for name in ("REDIS_URL", "CRAWLPLUG_CRAWL", TOKEN_ENVVAR, HOSTS_ENVVAR):
        env.pop(name, None)
    env.update(extra_env)
    if token is not None:
        env[TOKEN_ENVVAR] = token
    err = directory / f"dashboard-{port}.err"
    with open(err, "wb") as log:
        proc = subprocess.Popen(
            [CRAWLPLUG, "dashboard", "--redis-url", redis_url, "--crawl", crawl, "--port", str(port), *extra_args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    dash = DashboardProcess(proc, port, err, httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10))

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"crawlplug dashboard exited with {proc.returncode}: {dash.text()}")
        try:
            return dash.http.get("/api").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(ready, 20, "the dashboard to answer")
    except BaseException:
        dash.stop()
        raise
    return dash


def listening_addresses(port: int) -> set[str] | None:
    """The IPv4/IPv6 addresses a socket listens on at ``port`` (Linux /proc/net/tcp*;
    None where there is no such table)."""
    out: set[str] = set()
    readable = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            address, hexport = fields[1].split(":")
            if int(hexport, 16) == port and fields[3] == "0A":  # LISTEN
                if len(address) == 8:
                    out.add(".".join(str(int(address[i : i + 2], 16)) for i in (6, 4, 2, 0)))
                else:
                    out.add(address)
    return out if readable else None
