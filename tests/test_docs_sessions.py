"""The pages' shell sessions, run as a reader runs them: README.md, Getting started, the
tutorial, Run control, Scrapyd, Alerts and Metrics, each command in a terminal on this
machine, its output compared with the page's (tests/support/docpages.py says how a page
marks what runs in the background, what is skipped, what is only illustrative).

One venv for the whole test session, made from the wheel built from this checkout (a
page's ``python3 -m venv DIR`` links DIR to it; its ``pip install crawlplug``, of a
checkout's path or a wheel, with extras, installs the wheel): what a reader installs,
not the checkout's editable install. Every address a page names (the demo shop's port
8000, ``redis1``'s Redis, ``web1``'s Scrapyd) is rewritten to one this test started on
loopback; a ``web1$`` prompt is a terminal of its own on this machine.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from .support.docpages import Session, environment, run_page
from .support.nodes import ROOT
from .support.servers import free_port
from .support.wheel import make_venv

pytestmark = pytest.mark.e2e  # terminals, nodes, daemons


@pytest.fixture(scope="session")
def docs_install(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(venv, wheel): the one venv of the pages, with the wheel and its dependencies and no
    extra (a page installs the extra it says it needs). ``--docs-venv DIR`` keeps it in DIR
    and uses it again (with the wheel it holds) while one works on a page."""
    kept = request.config.getoption("--docs-venv")
    if kept:
        venv = Path(kept).resolve()
        wheels = sorted(venv.glob("crawlplug-*.whl"))
        if (venv / "bin" / "python").exists() and wheels:
            return venv, wheels[-1]
    dist = request.getfixturevalue("dist")
    venv = Path(kept).resolve() if kept else tmp_path_factory.mktemp("docs") / "venv"
    make_venv(venv, dist["wheel"])
    wheel = venv / dist["wheel"].name
    shutil.copy(dist["wheel"], wheel)
    return venv, wheel


def _stop_embedded_servers(under: Path) -> None:
    """The embedded Redis servers a page started (they daemonize, out of the terminals'
    process groups) and did not stop, stopped."""
    for pidfile in under.rglob(".crawlplug/redis.pid"):
        try:
            pid = int(pidfile.read_text().strip())
            if b"redis-server" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue
            os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            continue


@contextmanager
def session(docs_install: tuple[Path, Path], workdir: Path, env: dict[str, str] | None = None,
            **kwargs: object) -> Iterator[Session]:  # fmt: skip
    workdir.mkdir(parents=True, exist_ok=True)
    venv, wheel = docs_install
    s = Session(workdir, environment(ROOT / ".venv", env), venv, wheel, **kwargs)  # type: ignore[arg-type]
    try:
        yield s
    finally:
        s.close()
        _stop_embedded_servers(workdir)


def _run(path: Path, s: Session) -> None:
    started = time.monotonic()
    skipped = run_page(path, s)
    print(f"{path.name}: {time.monotonic() - started:.0f} s; skipped {skipped}")


def test_getting_started(docs_install, tmp_path):
    shop = free_port()
    with session(docs_install, tmp_path / "gs",
                 addresses={"127.0.0.1:8000": f"127.0.0.1:{shop}", "--port 8000": f"--port {shop}"}) as s:  # fmt: skip
        _run(ROOT / "docs" / "getting-started.md", s)


def _getting_started_spider(into: Path, shop: int) -> Path:
    """The spider of Getting started, step 2, as a file (the tutorial says to save it),
    crawling the demo shop on port ``shop``."""
    text = (ROOT / "docs" / "getting-started.md").read_text()
    match = re.search(r"<!-- doc-test: file shopcrawl/spiders/shop.py -->\n```python\n(.*?)```", text, re.DOTALL)
    assert match, "Getting started has no spider saved as shopcrawl/spiders/shop.py"
    path = into / "getting-started-spider.py"
    path.write_text(match.group(1).replace("127.0.0.1:8000", f"127.0.0.1:{shop}"))
    return path


def test_tutorial(docs_install, tmp_path):
    shop = free_port()
    addresses = {"127.0.0.1:8000": f"127.0.0.1:{shop}", "--port 8000": f"--port {shop}",
                 # the pid of the third node, as the status shows it
                 "kill -9 19772": lambda s: f"kill -9 {s.pid_in('terminal 3')}"}  # fmt: skip
    spider = _getting_started_spider(tmp_path, shop)
    with session(docs_install, tmp_path / "tutorial", addresses=addresses,
                 env={"DOCS_GETTING_STARTED_SPIDER": str(spider)}) as s:  # fmt: skip
        _run(ROOT / "docs" / "tutorial.md", s)
