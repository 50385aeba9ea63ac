"""A shell a person types into, for the docs tests: one bash process on a pseudo-terminal
that keeps its state (working directory, variables, an activated venv, background jobs
and their ``%1``) from one block of commands to the next, as a terminal does.

The blocks are not typed on the terminal (it would echo them, and an interactive bash
prints prompts and job numbers): bash reads them from a pipe of its own and runs each
with ``eval``, while the commands' standard input, output and error are the terminal,
so ``scrapy crawl`` there sees a person at a terminal (crawlplug's "started
interactively"), and what the terminal shows is what the page's output block shows.
Markers bash writes on the terminal after each block (its exit status), and for each
command of it that failed, are taken out of the output.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import termios
import threading
import time
from dataclasses import dataclass
from pathlib import Path

#: what bash runs: blocks NUL-separated on CMD_FD, each eval'd with the terminal as its
#: standard streams; \x1e...\x1e markers: F<status>\x1f<command> for a command that failed
#: (the ERR trap, not for the eval itself), D<status> once the block is done
_LOOP = r"""
trap '__docs_status=$?; case "$BASH_COMMAND" in "eval \"\$__docs_block\""*) ;; *) printf "\036F%s\037%s\036" "$__docs_status" "$BASH_COMMAND";; esac' ERR
while IFS= read -r -d '' __docs_block <&{cmd}; do
  eval "$__docs_block" {cmd}<&-
  printf '\036D%s\036' "$?"
done
"""
_MARKER = re.compile(r"\x1e([FD])([^\x1e]*)\x1e")
#: terminal escapes (colours, cursor moves) and carriage returns, as a reader's eye drops them
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]|\r")


class TerminalError(AssertionError):
    """The shell died, or a block did not end in time."""


@dataclass
class Result:
    """What one block of commands did: its output (as shown on the terminal), the exit
    status of its last command, and each command that failed in it (status, command)."""

    output: str
    status: int
    failed: list[tuple[int, str]]


def clean(raw: str) -> str:
    """Terminal output as a reader sees it: no escapes, ``\\n`` line ends."""
    return _ESCAPES.sub("", raw)


class Terminal:
    """One bash on a pseudo-terminal (``columns`` wide), in ``cwd`` with ``env``."""

    def __init__(self, name: str, cwd: Path, env: dict[str, str], *, log: Path, columns: int = 200) -> None:
        self.name = name
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
        cmd_read, self._cmd = os.pipe()
        self.proc = subprocess.Popen(
            ["bash", "--norc", "--noprofile", "-c", _LOOP.replace("{cmd}", str(cmd_read))],
            cwd=cwd,
            env=env,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            pass_fds=(cmd_read,),
            start_new_session=True,
        )
        os.close(slave)
        os.close(cmd_read)
        self._master = master
        self._raw = ""
        self._lock = threading.Condition()
        self._closed = False
        self._log = open(log, "w", encoding="utf-8", errors="replace")  # closed in close()
        self._thread = threading.Thread(target=self._read, daemon=True, name=f"terminal-{name}")
        self._thread.start()
        self._sent = 0  # blocks sent
        self._done = 0  # blocks whose end marker arrived
        self._start = 0  # offset in _raw where the running block's output begins

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # EIO: every process holding the terminal has gone
                chunk = b""
            with self._lock:
                if not chunk:
                    self._closed = True
                    self._lock.notify_all()
                    return
                text = chunk.decode("utf-8", errors="replace")
                self._raw += text
                self._log.write(text)
                self._log.flush()
                self._lock.notify_all()

    # -- running blocks ----------------------------------------------------------------------

    def send(self, commands: str) -> None:
        """Start a block of commands; :meth:`result` waits for its end."""
        if self.busy:
            raise TerminalError(f"terminal {self.name!r} still runs its last block")
        with self._lock:
            self._start = len(self._raw)
        os.write(self._cmd, commands.encode() + b"\n\0")
        self._sent += 1

    @property
    def busy(self) -> bool:
        """Whether the last block sent has not ended yet."""
        with self._lock:
            return self._done_count() < self._sent

    def _done_count(self) -> int:
        return sum(1 for m in _MARKER.finditer(self._raw) if m.group(1) == "D")

    def result(self, timeout: float) -> Result:
        """Wait for the running block to end (TerminalError after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._done_count() < self._sent:
                if self._closed:
                    raise TerminalError(f"the shell of terminal {self.name!r} exited:\n{self.output()[-3000:]}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TerminalError(
                        f"terminal {self.name!r}: the commands did not end within {timeout:.0f} s; "
                        f"so far they printed:\n{self.output()[-3000:]}"
                    )
                self._lock.wait(min(left, 1.0))
            return self._parse(self._raw[self._start :])

    def run(self, commands: str, timeout: float = 300) -> Result:
        self.send(commands)
        return self.result(timeout)

    def output(self) -> str:
        """What the running (or last) block printed so far, markers taken out."""
        with self._lock:
            return self._parse(self._raw[self._start :]).output

    def everything(self) -> str:
        """All the terminal showed since it opened, markers taken out."""
        with self._lock:
            return self._parse(self._raw).output

    @staticmethod
    def _parse(raw: str) -> Result:
        failed: list[tuple[int, str]] = []
        status = -1
        for marker in _MARKER.finditer(raw):
            kind, value = marker.group(1), marker.group(2)
            if kind == "F":
                code, _, command = value.partition("\x1f")
                failed.append((int(code), command))
            else:
                status = int(value)
        return Result(clean(_MARKER.sub("", raw)), status, failed)

    def wait_for(self, predicate: object, timeout: float) -> bool:
        """Wait until ``predicate(output of the block so far)`` holds, the block ends, or the
        time is up; whether it held."""
        deadline = time.monotonic() + timeout
        while True:
            output = self.output()
            if predicate(output):  # type: ignore[operator]
                return True
            if not self.busy or time.monotonic() > deadline:
                return bool(predicate(self.output()))  # type: ignore[operator]
            with self._lock:
                self._lock.wait(0.5)

    # -- the end -------------------------------------------------------------------------------

    def close(self, grace: float = 5.0) -> None:
        """End the shell and everything it started that stayed in its process group (the
        commands of a terminal, background jobs): SIGTERM, then SIGKILL after ``grace`` s."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _group_alive(self.proc.pid):
                self.proc.poll()
                time.sleep(0.1)
            if not _group_alive(self.proc.pid):
                break
        self.proc.wait(10)
        os.close(self._cmd)
        self._thread.join(5)
        try:
            os.close(self._master)
        except OSError:
            pass
        self._log.close()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie leader keeps the group "alive" until reaped: reap it if it is ours
    return True
