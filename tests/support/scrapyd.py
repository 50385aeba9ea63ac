"""Real Scrapyd daemons for the tests, on loopback ports: each stands for one machine.

A daemon is started in a project directory (the checkout's demo project by default:
scrapy.cfg, settings/, spiders/), so it runs that project as its "default" project
with no egg, the way docs/scrapyd.md describes. Each gets a configuration and
directories of its own (logs, queue database, eggs): Scrapyd reads
``~/.scrapyd.conf``, and each daemon gets a HOME of its own. The daemon, and the
``scrapy crawl`` nodes it starts, run in a process group of their own, killed whole
at :meth:`ScrapydDaemon.stop`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .nodes import ROOT
from .patience import patient
from .servers import free_port

#: the venv's scrapyd command
SCRAPYD = str(Path(sys.executable).with_name("scrapyd"))


@dataclass
class ScrapydDaemon:
    """One scrapyd process (and the nodes it starts)."""

    directory: Path
    project_dir: Path = ROOT
    max_proc: int = 4
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def logs(self) -> Path:
        return self.directory / "logs"

    def start(self) -> ScrapydDaemon:
        self.port = self.port or free_port()
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / ".scrapyd.conf").write_text(
            "[scrapyd]\n"
            f"bind_address = 127.0.0.1\nhttp_port = {self.port}\n"
            f"logs_dir = {self.logs}\ndbs_dir = {self.directory / 'dbs'}\neggs_dir = {self.directory / 'eggs'}\n"
            f"items_dir =\njobs_dir =\nmax_proc = {self.max_proc}\npoll_interval = 0.2\nfinished_to_keep = 100\n"
        )
        env = dict(os.environ)
        env.pop("REDIS_URL", None)
        env["HOME"] = str(self.directory)
        self.proc = subprocess.Popen(
            [
                SCRAPYD,
                "--logfile",
                str(self.directory / "scrapyd.log"),
                "--pidfile",
                str(self.directory / "twistd.pid"),
            ],
            cwd=self.project_dir,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                self.get("daemonstatus.json")
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"scrapyd did not start:\n{self.log_text()[-3000:]}") from None
                time.sleep(0.1)

    def get(self, endpoint: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/{endpoint}", timeout=10) as response:
            return json.loads(response.read())

    def jobs(self, project: str = "default") -> dict[str, list[dict[str, Any]]]:
        """``listjobs.json``: {"pending": [...], "running": [...], "finished": [...]}."""
        return self.get(f"listjobs.json?project={project}")

    def job_log(self, job: str, project: str = "default", spider: str = "shop") -> str:
        path = self.logs / project / spider / f"{job}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def log_text(self) -> str:
        path = self.directory / "scrapyd.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Kill the daemon and every node it started (its process group)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)


def wait_for(check: Any, timeout: float, what: str, every: float = 0.2) -> Any:
    """Poll ``check()`` until it returns something true; AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + patient(timeout)
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"waited {timeout}s for {what}"
        time.sleep(every)
