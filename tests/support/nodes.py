"""Real ``scrapy crawl`` nodes of the demo project (scrapy.cfg, settings/, spiders/ at the
top of the checkout), started by the ``crawl`` fixture."""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .patience import patient

#: the checkout: the demo project's scrapy.cfg is here
ROOT = Path(__file__).resolve().parent.parent.parent
#: the venv's scrapy command (the nodes import crawlplug from the venv's editable install)
SCRAPY = str(Path(sys.executable).with_name("scrapy"))


@dataclass
class Node:
    """One real `scrapy crawl` process of the demo project."""

    proc: subprocess.Popen[bytes]
    log: Path
    items: Path

    def wait(self, timeout: float = 180) -> int:
        return self.proc.wait(patient(timeout))

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.proc.wait(30)

    def text(self) -> str:
        """The node's log so far ("" before the process has written it)."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def item_lines(self) -> list[str]:
        return self.items.read_text().splitlines() if self.items.exists() else []


def tty_process(cmd: list[str], *, cwd: Path, env: dict[str, str], output: Path) -> subprocess.Popen[bytes]:
    """``cmd`` with a pseudo-terminal as its standard input and error (standard output to
    /dev/null), as when a person types it: what the pty receives is copied to ``output`` by
    a thread, so the process never blocks on a full terminal."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=slave, stdout=subprocess.DEVNULL, stderr=slave)
    finally:
        os.close(slave)

    def copy() -> None:
        with open(output, "wb") as out:
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every process holding the terminal has exited
                    break
                if not chunk:
                    break
                out.write(chunk)
                out.flush()
        os.close(master)

    threading.Thread(target=copy, daemon=True, name=f"pty-{proc.pid}").start()
    return proc


def run_together(nodes: Sequence[Node], go: Path, crawl_id: str, timeout: float) -> list[Node]:
    """Start nodes of the multisite spider together: wait until each is up and waiting for
    the ``go`` file, create it, and wait for every node to finish the crawl (exit 0, finish
    reason ``finished``) within ``timeout`` seconds."""
    deadline = time.monotonic() + 30
    for node in nodes:
        while "multisite: waiting for" not in (node.text() if node.log.exists() else ""):
            rc = node.proc.poll()
            assert rc is None, f"a node exited ({rc}) before the start:\n{node.text()[-3000:]}"
            assert time.monotonic() < deadline, "the nodes did not come up within 30 s"
            time.sleep(0.05)
    go.touch()
    deadline = time.monotonic() + patient(timeout)
    for node in nodes:
        try:
            rc = node.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pytest.fail(f"crawl {crawl_id} did not finish within {timeout} s:\n{node.text()[-3000:]}")
        assert rc == 0, f"node exited {rc}:\n{node.text()[-3000:]}"
        assert "'finish_reason': 'finished'" in node.text(), node.text()[-3000:]
    return list(nodes)


def start_joined(start: Callable[[], Node], shop: Any, n: int = 2, timeout: float = 90) -> list[Node]:
    """Start ``n`` nodes (``start()`` each) against the demo ``shop`` held, and release it once
    every node has logged that it started, joined or resumed the run: started together, the node that
    comes up first on a loaded machine may crawl a small shop alone before the other joins."""
    return start_each_joined([start] * n, shop, timeout)


def start_each_joined(starts: Sequence[Callable[[], Node]], shop: Any, timeout: float = 90) -> list[Node]:
    """:func:`start_joined` for nodes started each its own way (``starts``, in order); ``shop``
    is a demo server or a sequence of them (every one held). A node that resumes the run (it
    was left with no node running) has joined it too."""
    servers = list(shop) if isinstance(shop, Sequence) else [shop]
    for server in servers:
        server.hold()
    nodes: list[Node] = []
    try:
        for start in starts:
            nodes.append(start())
        wait_until(lambda: all(joined(node) for node in nodes), "every node to join the run", timeout, nodes)
    finally:
        for server in servers:
            server.release()
    return nodes


def joined(node: Node) -> bool:
    """Whether ``node`` has logged that it started, joined or resumed its crawl's run."""
    return bool(JOINED.search(node.text()))


#: the line a node logs once it is part of a run (crawlplug.scheduler.joining)
JOINED = re.compile(r"crawlplug: node \S+ (?:starting|joining|resuming) run \d+ ")


def wait_for_fetches(shop: Any, node: Node, fetches: int, timeout: float = 60) -> None:
    """Wait until the demo shop answered ``fetches`` requests, the node still running."""
    deadline = time.monotonic() + patient(timeout)
    while sum(shop.hits.values()) < fetches:
        assert node.proc.poll() is None, node.text()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 60.0, nodes: Sequence[Node] = ()) -> None:
    """Wait until ``predicate()`` holds, failing if one of ``nodes`` exits meanwhile or
    ``timeout`` seconds pass (the nodes' last log lines then say why)."""
    deadline = time.monotonic() + patient(timeout)
    while not predicate():
        for node in nodes:
            assert node.proc.poll() is None, f"a node exited while waiting for {what}:\n{node.text()[-3000:]}"
        if time.monotonic() > deadline:
            tails = "\n---\n".join(node.text()[-2000:] for node in nodes if node.log.exists())
            pytest.fail(f"timed out waiting for {what}:\n{tails}")
        time.sleep(0.05)


def stop_holding(node: Node, ready: Callable[[], bool], holding: Callable[[], int], timeout: float = 60.0) -> int:
    """SIGSTOP ``node`` once ``ready()`` and while it holds leases (``holding()``, counted again
    once it is stopped, so the count cannot move): a node stopped between claims, or still
    starting, holds none (a CI run stopped one holding 0). Returns what it holds, stopped."""
    deadline = time.monotonic() + patient(timeout)
    while time.monotonic() < deadline:
        if ready() and holding():
            node.signal(signal.SIGSTOP)
            held = holding()
            if held:
                return held
            node.signal(signal.SIGCONT)
        time.sleep(0.02)
    pytest.fail(f"the node held no lease within {timeout} s:\n{node.text()[-2000:]}")
