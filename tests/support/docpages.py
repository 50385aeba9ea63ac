"""A page's shell sessions, run: the steps of a page (tests/support/docsteps.py, which
says how a page marks its blocks) evaluated in order, in the terminals of a
:class:`Session` (tests/support/terminal.py), by Sybil
(`Sybil <https://sybil.readthedocs.io/>`_: the page's fenced blocks, its
``<!-- skip: next -->`` comments, positions for the failure message)."""

from __future__ import annotations

import ast
import os
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sybil import Example, Sybil
from sybil.parsers.markdown import SkipParser

from . import docmatch
from .docsteps import PROMPT, Options, Step, parse_steps
from .terminal import Terminal


def sybil() -> Sybil:
    """Sybil with the parsers of a page's sessions (and its skip comments)."""
    return Sybil(parsers=[lambda document: parse_steps(document, evaluate), SkipParser()])


# -- running ---------------------------------------------------------------------------------------


@dataclass
class Session:
    """The terminals of one page, in ``workdir``, with the test's rewrites: ``addresses``
    (the page's hosts and ports -> the test's loopback ones), the one ``venv`` every page
    uses (a page's ``python3 -m venv DIR`` links DIR to it) and the ``wheel`` (what a page's
    ``pip install`` of crawlplug installs), ``hosts`` (a console prompt's host -> the
    directory its terminal starts in)."""

    workdir: Path
    env: dict[str, str]
    venv: Path
    wheel: Path
    addresses: dict[str, str | Callable[[Session], str]] = field(default_factory=dict)
    hosts: dict[str, Path] = field(default_factory=dict)
    terminals: dict[str, Terminal] = field(default_factory=dict)
    backgrounds: int = 0

    def __post_init__(self) -> None:
        self.logs = self.workdir / "terminals"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.main = self.open("main", self.workdir, self.env)

    def open(self, name: str, cwd: Path, env: dict[str, str]) -> Terminal:
        slug = re.sub(r"\W+", "-", name)
        terminal = Terminal(name, cwd, env, log=self.logs / f"{len(self.terminals) + 1}-{slug}.log")
        self.terminals[name] = terminal
        return terminal

    def terminal(self, name: str | None, like: str | None = None) -> Terminal:
        """The terminal ``name`` (the page's first one for None), opened where the first one
        is (or where terminal ``like`` is: another terminal on the same host)."""
        if name is None or name == "main":
            return self.main
        if name not in self.terminals:
            if like in self.terminals:
                cwd, env = self.state(self.terminals[like])  # type: ignore[index]
            else:
                cwd, env = self.state()
                cwd = self.hosts.get(name) or (self.hosts.get(like) if like else None) or cwd
            self.open(name, cwd, env)
        return self.terminals[name]

    def state(self, of: Terminal | None = None) -> tuple[Path, dict[str, str]]:
        """The directory and exported environment of terminal ``of`` (the first one), now."""
        out = self.workdir / ".state"
        (of or self.main).run(f"pwd > {shlex.quote(str(out))}.cwd; env -0 > {shlex.quote(str(out))}", timeout=30)
        env = dict(item.split("=", 1) for item in out.read_text().split("\0") if "=" in item)
        return Path(Path(f"{out}.cwd").read_text().strip()), env

    def rewrite(self, text: str, options: Options) -> str:
        """The page's text with the test's addresses, venv and wheel put in."""
        if not options.as_written:
            for old, new in sorted(self.addresses.items(), key=lambda kv: -len(kv[0])):
                if old in text:
                    text = text.replace(old, new if isinstance(new, str) else new(self))
        return text

    def pid_in(self, name: str) -> int:
        """The pid of the command running in terminal ``name`` (a child of its shell)."""
        children = Path(f"/proc/{self.terminals[name].proc.pid}/task/{self.terminals[name].proc.pid}/children")
        pids = children.read_text().split()
        assert len(pids) == 1, f"terminal {name!r} runs {len(pids)} commands, not one: {pids}"
        return int(pids[0])

    def commands(self, text: str, options: Options) -> str:
        text = self.rewrite(text, options)
        text = re.sub(
            r"\bpython3? -m venv (\S+)", lambda m: f"ln -sfn {shlex.quote(str(self.venv))} {m.group(1)}", text
        )
        return "\n".join(self._pip(line) for line in text.split("\n"))

    def _pip(self, line: str) -> str:
        """A `pip install` of crawlplug (by name, a checkout's path or ``.``, a wheel), with
        its extras, becomes one of the test's wheel."""
        if not re.search(r"\bpip3? install\b", line):
            return line

        def wheel(match: re.Match[str]) -> str:
            return shlex.quote(f"{self.wheel}{match.group('extras') or ''}")

        line = re.sub(
            r"(?<![\w./~-])(['\"]?)(?:[\w./~-]*/)?crawlplug(?:-[\w.]+-py3-none-any\.whl)?"
            r"(?P<extras>\[[\w,]+\])?\1(?![\w./-])",
            wheel,
            line,
        )
        # the checkout the reader is in: `pip install .` or `pip install '.[web]'`
        return re.sub(r"(?<=install )(['\"]?)\.(?P<extras>\[[\w,]+\])?\1(?=\s|$)", wheel, line)

    def close(self) -> None:
        for terminal in reversed(list(self.terminals.values())):
            terminal.close()


def evaluate(example: Example) -> str | None:
    """Sybil's evaluator of every step: None if it did what the page says, else why not."""
    session: Session = example.namespace["session"]
    step: Step = example.parsed
    return {"commands": _commands, "excerpt": _excerpt, "file": _file, "hidden": _hidden, "orphan": _orphan}[step.kind](
        session, step
    )


def _orphan(session: Session, step: Step) -> str:
    return (
        "a block of output that no command prints: put it right after its commands, or mark it "
        "(excerpt of terminal NAME / file PATH, illustrative)"
    )


def _hidden(session: Session, step: Step) -> str | None:
    result = session.main.run(session.commands(step.options.hidden or "", step.options), step.options.timeout)
    if result.failed:
        return f"the set-up commands failed: {result.failed}\n{result.output[-3000:]}"
    return None


def _commands(session: Session, step: Step) -> str | None:
    assert step.block is not None
    options = step.options
    if step.block.language == "console":
        return _console(session, step)
    commands = session.commands(step.block.source, options)
    expected = session.rewrite(step.expected, options) if step.expected is not None else None
    if options.background:
        session.backgrounds += 1
        terminal = session.terminal(options.terminal or f"background {session.backgrounds}")
        terminal.send(commands)
        if expected is None or options.illustrative:
            return None
        return _wait_excerpt(terminal, expected, options.timeout)
    return _check(session.terminal(options.terminal), commands, expected, options)


def _check(terminal: Terminal, commands: str, expected: str | None, options: Options) -> str | None:
    result = terminal.run(commands, options.timeout)
    if not options.fails and result.status not in (0, -1) and not result.failed:
        # a failure bash's ERR trap does not report: in an && or || list, not its last command
        result.failed.append((result.status, commands.strip().splitlines()[-1]))
    if result.failed and not options.fails:
        failed = "\n".join(f"  exit {code}: {command}" for code, command in result.failed)
        return f"a command failed:\n{failed}\nit printed:\n{result.output[-4000:]}"
    if options.fails and not result.failed:
        return f"the page says a command of this block fails (`fails`), and none did; they printed:\n{result.output}"
    if expected is None or options.illustrative:
        return None
    why = docmatch.whole(expected, result.output)
    deadline = time.monotonic() + 10  # a background job of the block may still be printing
    while why and time.monotonic() < deadline:
        time.sleep(0.5)
        why = docmatch.whole(expected, terminal.output())
    return why


def _console(session: Session, step: Step) -> str | None:
    """``host$ command`` lines, each with what follows it up to the next prompt as its output."""
    assert step.block is not None
    entries: list[tuple[str, list[str], list[str]]] = []  # host, command lines, output lines
    for line in step.block.source.splitlines():
        prompt = PROMPT.match(line)
        if prompt and not (entries and entries[-1][1][-1].endswith("\\") and not entries[-1][2]):
            entries.append((prompt.group("host"), [prompt.group("command")], []))
        elif entries and entries[-1][1][-1].endswith("\\") and not entries[-1][2]:
            entries[-1][1].append(line)
        elif entries:
            entries[-1][2].append(line)
    if not entries:
        return "a console block without a `host$ ` prompt"
    options = step.options
    if options.background and len(entries) > 1:
        return "a background console block may hold one command only"
    for host, command, output in entries:
        name = host if host in session.hosts or host else None
        commands = session.commands("\n".join(command), options)
        expected = session.rewrite("\n".join(output), options) if "".join(output).strip() else None
        if options.background:
            session.backgrounds += 1
            terminal = session.terminal(options.terminal or f"{host} background {session.backgrounds}", like=name)
            terminal.send(commands)
            return _wait_excerpt(terminal, expected, options.timeout) if expected and not options.illustrative else None
        why = _check(session.terminal(name), commands, expected, options)
        if why:
            return f"{host}$ {command[0]}\n{why}"
    return None


def _wait_excerpt(terminal: Terminal, expected: str, timeout: float) -> str | None:
    if terminal.wait_for(lambda out: docmatch.excerpt(expected, out) is None, timeout):
        return None
    return f"terminal {terminal.name!r}: " + (docmatch.excerpt(expected, terminal.output()) or "")


def _excerpt(session: Session, step: Step) -> str | None:
    options = step.options
    expected = session.rewrite(step.expected or "", options)
    source = options.excerpt_of or ""
    if source.startswith("file "):
        cwd, _ = session.state()
        path = cwd / source.removeprefix("file ").strip()
        deadline = time.monotonic() + options.timeout
        while True:
            text = path.read_text(errors="replace") if path.exists() else ""
            why = docmatch.excerpt(expected, text)
            if why is None or time.monotonic() > deadline:
                return f"{path}: {why}" if why else None
            time.sleep(0.5)
    if re.search(r"\bor\b", source):  # any one of them
        names = [n.strip() for n in re.split(r"\bor\b", source)]
        missing = [n for n in names if n not in session.terminals]
        if missing:
            return f"no terminal {missing} was opened before this excerpt"
        deadline = time.monotonic() + options.timeout
        while True:
            whys = [docmatch.excerpt(expected, session.terminals[n].output()) for n in names]
            if None in whys:
                return None
            if time.monotonic() > deadline or not any(session.terminals[n].busy for n in names):
                return f"in none of {names}: {whys[0]}"
            time.sleep(0.5)
    for name in (n.strip() for n in re.split(r"\band\b", source)):
        if name not in session.terminals:
            return f"no terminal {name!r} was opened before this excerpt"
        terminal = session.terminals[name]
        if options.ended:
            try:
                terminal.result(options.timeout)
            except AssertionError as exc:
                return str(exc)
            why = docmatch.excerpt(expected, terminal.output())
            if why:
                return f"terminal {name!r}: {why}"
        else:
            why = _wait_excerpt(terminal, expected, options.timeout)
            if why:
                return why
    return None


def _file(session: Session, step: Step) -> str | None:
    assert step.block is not None and step.options.file_action is not None
    action, name = step.options.file_action
    cwd, _ = session.state()
    path = cwd / name
    text = session.rewrite(step.block.source, step.options)
    if action == "file":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return None
    if not path.exists():
        return f"{path} does not exist"
    current = path.read_text()
    if action == "in":
        have = {line.strip() for line in current.splitlines()}
        missing = [
            line
            for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#") and line.strip() not in have
        ]
        return f"{path} has no line {missing}" if missing else None
    path.write_text(set_assignments(current, text))
    return None


def set_assignments(module: str, assignments: str) -> str:
    """``module`` (Python source) with each top-level ``NAME = ...`` of ``assignments`` in
    place of its own assignment of NAME, or added at the end."""
    lines = module.splitlines(keepends=True)
    tree = ast.parse(module)
    for node in ast.parse(assignments).body:
        if not isinstance(node, ast.Assign) or not all(isinstance(t, ast.Name) for t in node.targets):
            raise ValueError(f"not an assignment: {ast.unparse(node)}")
        names = {t.id for t in node.targets}  # type: ignore[attr-defined]
        new = ast.get_source_segment(assignments, node) + "\n"  # type: ignore[operator]
        old = next(
            (
                n
                for n in tree.body
                if isinstance(n, ast.Assign) and {t.id for t in n.targets if isinstance(t, ast.Name)} & names
            ),
            None,
        )
        if old is None:
            lines.append(("\n" if lines and not lines[-1].endswith("\n") else "") + new)
        else:
            start, end = old.lineno - 1, old.end_lineno or old.lineno
            lines[start:end] = [new] + [""] * (end - start - 1)
        module = "".join(lines)
        lines = module.splitlines(keepends=True)
        tree = ast.parse(module)
    return module


def run_page(path: Path, session: Session) -> list[str]:
    """Every step of the page at ``path``, in order, in ``session``; the reasons of the steps
    skipped. The first step that does not do what the page says raises SybilFailure."""
    from unittest import SkipTest

    document = sybil().parse(path)
    document.namespace["session"] = session
    skipped = []
    for example in document.examples():
        try:
            example.evaluate()
        except SkipTest as exc:
            skipped.append(f"line {example.line}: {exc}")
    return skipped


def environment(checkout_venv: Path, extra: dict[str, Any] | None = None) -> dict[str, str]:
    """The environment of a reader's shell: PATH without this checkout's venv, no variable of
    the test run (REDIS_URL, a Scrapy settings module, CRAWLPLUG_*) left in it."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "REDIS_URL", "PYTHONHOME", "PS1")
    env = {
        k: v for k, v in os.environ.items() if k not in drop and not k.startswith(("SCRAPY_", "CRAWLPLUG_", "PYTEST_"))
    }
    paths = env.get("PATH", "").split(os.pathsep)
    env["PATH"] = os.pathsep.join(p for p in paths if not Path(p).resolve().is_relative_to(checkout_venv.resolve()))
    env["TERM"] = "dumb"
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env
