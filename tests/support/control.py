"""A real `crawlplug control` process for the tests (short lease and tick: a test waits
seconds, not minutes)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

CRAWLPLUG = str(Path(sys.executable).with_name("crawlplug"))


class ControlProcess:
    """One `crawlplug control` process; ``extra``: more options (--metrics-port 0, ...)."""

    def __init__(self, redis_url: str, log: Path, extra: tuple[str, ...] = ()) -> None:
        self.log = log
        env = {
            k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "CRAWLPLUG_CRAWL", "CRAWLPLUG_DASHBOARD_URL")
        }
        self.proc = subprocess.Popen(
            [CRAWLPLUG, "--redis-url", redis_url, "control", "--tick", "0.2", "--lease", "2", *extra],
            stdout=subprocess.DEVNULL,
            stderr=open(log, "wb"),
            env=env,
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def ready(self) -> bool:
        """Whether it has begun firing schedules and evaluating alert rules."""
        return "firing the scheduled runs and evaluating the alert rules" in self.text()

    def metrics_url(self) -> str | None:
        """The /metrics address it printed (with --metrics-port), once it has."""
        found = re.search(r"Prometheus metrics at (http://\S+/metrics)", self.text())
        return found.group(1) if found else None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)
