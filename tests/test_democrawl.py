"""`python -m crawlplug.demo.crawl`: the newcomer's demo runs a real two-node crawl."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time

import httpx
import pytest

from crawlplug.demo import crawl as democrawl
from crawlplug.server import embedded

from .support.nodes import ROOT
from .support.patience import patient


def _row(summary: str, label: str) -> str:
    match = re.search(rf"^\s+{re.escape(label)}\s{{2,}}(.+)$", summary, re.MULTILINE)
    assert match, f"no {label!r} row in:\n{summary}"
    return match.group(1).strip()


@pytest.mark.e2e  # starts processes of its own
def test_two_node_demo_crawl(redis_url, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "crawlplug.demo.crawl",
            "--nodes",
            "2",
            "--items",
            "300",
            "--redis-url",
            redis_url,
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    report = f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 0, report
    assert "Demo crawl OK" in proc.stdout, report
    assert _row(proc.stdout, "nodes") == "2"
    assert _row(proc.stdout, "node exit codes") == "0, 0"
    assert _row(proc.stdout, "pages fetched twice") == "0"
    assert _row(proc.stdout, "pages never fetched") == "0"
    assert _row(proc.stdout, "pages crawled (distinct)") == _row(proc.stdout, "pages on the site")
    assert _row(proc.stdout, "items").startswith("300 lines, 300 distinct urls"), report
    assert "crawlplug" in proc.stdout and "status --crawl shop" in proc.stdout
    assert _row(proc.stdout, "logs and items") == str(out)
    assert {p.name for p in out.iterdir()} >= {"node1.log", "node2.log", "node1.jsonl", "node2.jsonl"}
    per_node = dict(x.split() for x in _row(proc.stdout, "items per node").split(", "))
    assert sum(int(n) for n in per_node.values()) == 300


@pytest.mark.e2e  # starts processes of its own
def test_unreachable_redis_fails_cleanly():
    proc = subprocess.run(
        [sys.executable, "-m", "crawlplug.demo.crawl", "--redis-url", "redis://:s3cret@127.0.0.1:1/0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "cannot reach Redis at redis://:***@127.0.0.1:1/0" in proc.stderr
    assert "s3cret" not in proc.stderr + proc.stdout and "Traceback" not in proc.stderr


# -- issue 18: no dead dashboard link, no embedded Redis left running unsaid, what to try next ------


def _read_until(fd: int, marker: str, timeout: float) -> str:
    """Read a pseudo-terminal until ``marker`` shows (or the process closed it)."""
    out = b""
    deadline = time.monotonic() + patient(timeout)
    while marker.encode() not in out:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {marker!r} within {timeout}s in:\n{out.decode(errors='replace')}")
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the other side closed
                break
            if not chunk:
                break
            out += chunk
    return out.decode(errors="replace")


@pytest.mark.e2e  # starts processes of its own
def test_in_a_terminal_the_dashboard_stays_up_until_enter(redis_url, tmp_path):
    """`make crawl` in a terminal: the dashboard link printed at the start still answers
    while the summary is read, and goes when the user presses Enter."""
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "crawlplug.demo.crawl",
            "--nodes",
            "1",
            "--items",
            "60",
            "--redis-url",
            redis_url,
            "--out",
            str(tmp_path / "run"),
            "--dashboard-port",
            "0",
        ],
        cwd=ROOT,
        stdin=slave,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    try:
        shown = _read_until(master, "press Enter to stop it and exit", 180)
        assert "Demo crawl OK" in shown, shown
        assert "after the crawl it stays up until you press Enter" in shown
        url = re.search(r"The dashboard still shows the finished crawl at (http://127\.0\.0\.1:\d+/)", shown).group(1)
        status = httpx.get(url + "api/status", timeout=10).json()  # the link works after the crawl
        assert status["done"] == status["rate"]["run_pages"] > 0 and status["eta_seconds"] == 0
        os.write(master, b"\n")
        rest = _read_until(master, "What to try next:", 30)
        assert proc.wait(30) == 0, rest
        with pytest.raises(httpx.TransportError):
            httpx.get(url + "api", timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


@pytest.mark.e2e  # starts processes of its own
def test_the_demo_says_what_became_of_the_embedded_redis(tmp_path):
    """With no Redis given the demo uses the project's embedded one: if it started it, it
    stops it and says so; if it was running, it leaves it running and says how to stop it.
    Then it ends with what to try next."""
    directory = democrawl.embedded_dir(ROOT)
    was_running = embedded.running(directory)
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "crawlplug.demo.crawl",
            "--nodes",
            "1",
            "--items",
            "40",
            "--out",
            str(tmp_path / "run"),
            "--dashboard-port",
            "-1",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    report = f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 0, report
    if was_running:
        assert "was running before and is left running: `" in proc.stdout and "embedded stop` stops it" in proc.stdout
        assert embedded.running(directory), "a Redis it did not start is left alone"
    else:
        assert f"The embedded Redis this demo started is stopped; its data stays in {directory}" in proc.stdout
        assert not embedded.running(directory)
    tail = proc.stdout.split("What to try next:\n", 1)[1].splitlines()
    assert 3 <= len(tail) <= 6 and any("status --crawl shop" in line for line in tail), report
    assert " pages/min over its " in _row(proc.stdout, "rate (crawlplug status)"), report
