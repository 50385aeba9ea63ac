"""The pages' shell sessions, run as a reader runs them: README.md, Getting started, the
tutorial, Run control, Scrapyd, Alerts and Metrics, each command in a terminal on this
machine, its output compared with the page's (tests/support/docsteps.py says how a page
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from .support.docpages import Session, environment, run_page
from .support.nodes import ROOT
from .support.patience import patient
from .support.servers import RedisServer, free_port
from .support.wheel import make_venv

# terminals, nodes, daemons; a page such as run-control.md runs a dozen crawls (about two
# minutes on a quiet machine), so the suite's 300 s per test is stretched as every wait is
# (CRAWLPLUG_TEST_PATIENCE: 3 on CI's three workers, where one such page once took longer)
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(patient(300))]


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
def session(
    docs_install: tuple[Path, Path], workdir: Path, env: dict[str, str] | None = None, **kwargs: object
) -> Iterator[Session]:
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
    with session(
        docs_install,
        tmp_path / "gs",
        addresses={"127.0.0.1:8000": f"127.0.0.1:{shop}", "--port 8000": f"--port {shop}"},
    ) as s:
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
    addresses = {
        "127.0.0.1:8000": f"127.0.0.1:{shop}",
        "--port 8000": f"--port {shop}",
        # the pid of the third node, as the status shows it
        "kill -9 19772": lambda s: f"kill -9 {s.pid_in('terminal 3')}",
    }
    spider = _getting_started_spider(tmp_path, shop)
    with session(
        docs_install, tmp_path / "tutorial", addresses=addresses, env={"DOCS_GETTING_STARTED_SPIDER": str(spider)}
    ) as s:
        _run(ROOT / "docs" / "tutorial.md", s)


def _shop(port: int | None = None) -> dict[str, str | Callable[[Session], str]]:
    """The rewrites of the demo shop's port 8000 to a free one."""
    port = port or free_port()
    return {"127.0.0.1:8000": f"127.0.0.1:{port}", "--port 8000": f"--port {port}"}


def test_readme(docs_install, tmp_path):
    with session(docs_install, tmp_path / "readme", addresses=_shop()) as s:
        _run(ROOT / "README.md", s)


def test_alerts(docs_install, tmp_path):
    with session(docs_install, tmp_path / "alerts") as s:
        _run(ROOT / "docs" / "alerts.md", s)


def test_metrics(docs_install, tmp_path):
    control, dashboard = free_port(), free_port()
    addresses = {
        **_shop(),
        "--metrics-port 9642": f"--metrics-port {control}",
        "127.0.0.1:9642": f"127.0.0.1:{control}",
        # the dashboard on loopback, not every interface, on a free port
        "--host 0.0.0.0": f"--host 127.0.0.1 --port {dashboard}",
        "0.0.0.0:8642": f"127.0.0.1:{dashboard}",
        "127.0.0.1:8642": f"127.0.0.1:{dashboard}",
        "example.org:8642": f"example.org:{dashboard}",
    }
    with session(docs_install, tmp_path / "metrics", addresses=addresses) as s:
        _run(ROOT / "docs" / "metrics.md", s)


def test_console(docs_install, tmp_path):
    port = free_port()
    addresses = {**_shop(), "--port 8643": f"--port {port}", "127.0.0.1:8643": f"127.0.0.1:{port}"}
    with session(docs_install, tmp_path / "console", addresses=addresses) as s:
        _run(ROOT / "docs" / "console.md", s)


def test_run_control(docs_install, dist, tmp_path):
    """From a checkout: the clean copy the wheel was built from stands for the clone."""
    shop = free_port()
    addresses = {**_shop(shop), "git clone <this repository> crawlplug": f"cp -r {dist['source']} crawlplug"}
    # the demo project's spider crawls port 8000 unless told (the shop's rewritten port)
    env = {"DEMO_SHOP_URL": f"http://127.0.0.1:{shop}"}
    with session(docs_install, tmp_path / "rc", env=env, addresses=addresses) as s:
        _run(ROOT / "docs" / "run-control.md", s)


def test_scrapyd(docs_install, dist, tmp_path):
    """Three machines on this one: ``redis1`` a Redis server of the test's, ``web1`` and
    ``web2`` Scrapyd daemons on free ports (each with a scrapyd.conf naming its port, as
    the page says to bind one), the project the demo project of the checkout; the shop
    is big and slow enough (20,000 items, 2 s a page: the four nodes would take ten
    minutes; 2,000 were done before the page's stop on the suite's workers) for the run
    to be running when the page stops it, on a quiet machine or a busy one."""
    venv, _ = docs_install
    repo = tmp_path / "shop.git"  # what `git clone` of the project gets
    repo.mkdir()
    for name in ("scrapy.cfg", "settings", "spiders"):
        source = dist["source"] / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, repo / name)
    # Scrapy imports every spider of the project: the demo project's `site` needs crawlplug's [sites]
    (repo / "requirements.txt").write_text("pydantic>=2.5\nPyYAML>=6.0\n")
    web1, web2, shop = free_port(), free_port(), free_port()
    (tmp_path / "redis").mkdir()
    redis = RedisServer(free_port(), tmp_path / "redis").start()
    machines = {name: tmp_path / name for name in ("web1", "redis1")}
    for path in machines.values():
        path.mkdir()
    srv = machines["web1"] / "srv" / "shop"
    srv.parent.mkdir()
    addresses = {
        "git clone https://git.example.com/crawlers/shop.git /srv/shop && cd /srv/shop": f"cp -r {repo} {srv} && cd {srv} && "
        f"printf '[scrapyd]\\nbind_address = 127.0.0.1\\nhttp_port = {web1}\\n' > scrapyd.conf",
        "redis://10.0.0.5:6379/0": redis.url,
        "http://10.0.0.11:6800": f"http://127.0.0.1:{web1}",
        "http://10.0.0.12:6800": f"http://127.0.0.1:{web2}",
        "https://shop.example.com": f"http://127.0.0.1:{shop}",
    }
    # the page's machines have crawlplug and Scrapyd on their PATH (web1's venv is the page's own)
    env = {
        "PATH": f"{venv / 'bin'}{os.pathsep}{environment(ROOT / '.venv')['PATH']}",
        "DOCS_PROJECT": str(repo),
        "DOCS_WEB2": str(tmp_path / "web2"),
        "DOCS_WEB2_PORT": str(web2),
    }
    try:
        with session(docs_install, tmp_path / "main", env=env, addresses=addresses, hosts=machines) as s:
            s.main.run(f"python -m crawlplug.demo.shop --port {shop} --items 20000 --delay 2 > shop.log 2>&1 &", 30)
            _run(ROOT / "docs" / "scrapyd.md", s)
    finally:
        redis.stop()
