"""crawlplug as a user gets it: built, checked as PyPI checks it, installed from the wheel
into a fresh venv, and turned on in a project made by `scrapy startproject`, outside
this checkout.

Everywhere else the suite imports crawlplug from the checkout (pytest's ``pythonpath
= .``, the editable install, ``scrapy crawl`` run in the checkout), which would hide a
``.lua`` script or a dashboard file missing from the wheel; here the nodes run from a
directory that cannot see the checkout, and the test asserts they imported the wheel.
The new venv's dependencies come from pip's cache after the first run; the sdist and the
wheel are built once per test session (tests/conftest.py ``dist``), for the docs' tests too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import crawlplug
from crawlplug.demo.shop import DemoShop, serve

from .support.nodes import ROOT
from .support.wheel import clean_env, make_venv, run

VERSION = crawlplug.__version__
#: What the test adds to the generated project's settings.py: the whole of turning crawlplug on.
ADDON_LINE = 'ADDONS = {"crawlplug.Addon": 0}'
#: Passed with -s, not written into settings.py: the template's DOWNLOAD_DELAY = 1 and one
#: request at a time per domain would make 331 pages take minutes; a short idle grace.
FAST = {
    "DOWNLOAD_DELAY": "0",
    "CONCURRENT_REQUESTS_PER_DOMAIN": "16",
    "CRAWLPLUG_IDLE_CLOSE": "2",
    "CRAWLPLUG_HEARTBEAT": "1",
}

#: The spider of docs/getting-started.md (and of the tutorial), as a reader copies it.
GUIDE = ROOT / "docs" / "getting-started.md"
#: Added to it: where crawlplug was imported from, logged when the spider closes (the log is
#: set up by then), for the test to check it is the wheel's copy.
SPIDER_TAIL = """
    def closed(self, reason):
        import crawlplug

        self.logger.info("crawlplug imported from %s", crawlplug.__file__)
"""


def guide_spider(base_url: str) -> str:
    """The guide's spider, crawling ``base_url`` instead of the port the guide serves the shop on."""
    match = re.search(r"```python\n(import scrapy\n.*?)```", GUIDE.read_text(), re.DOTALL)
    assert match, f"no spider (a python block starting with 'import scrapy') in {GUIDE}"
    code = match.group(1)
    assert code.count('"http://127.0.0.1:8000/"') == 1, "the guide's spider no longer starts at the demo shop"
    return code.replace('"http://127.0.0.1:8000/"', f'"{base_url}/"') + SPIDER_TAIL


_clean_env = clean_env
_run = run


def _package_files() -> set[str]:
    """Every file of the crawlplug package in the checkout (modules, .lua, static files, py.typed)."""
    package = ROOT / "crawlplug"
    return {
        p.relative_to(ROOT).as_posix()
        for p in package.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


@pytest.mark.e2e  # starts processes of its own
def test_sdist_and_wheel_pass_twine_check_and_carry_every_package_file(dist):
    assert dist["wheel"].name == f"crawlplug-{VERSION}-py3-none-any.whl"
    assert dist["sdist"].name == f"crawlplug-{VERSION}.tar.gz"
    out = _run([sys.executable, "-m", "twine", "check", "--strict", dist["sdist"], dist["wheel"]], cwd=ROOT)
    assert out.count("PASSED") == 2, out

    package = _package_files()
    assert {"crawlplug/frontier/lua/admit.lua", "crawlplug/web/static/index.html", "crawlplug/py.typed"} <= package
    with zipfile.ZipFile(dist["wheel"]) as whl:
        names = set(whl.namelist())
        info = f"crawlplug-{VERSION}.dist-info"
        metadata = Parser().parsestr(whl.read(f"{info}/METADATA").decode())
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
    assert not package - names, f"missing from the wheel: {sorted(package - names)}"
    assert f"{info}/licenses/LICENSE" in names
    assert metadata["Version"] == VERSION
    assert metadata["License-Expression"] == "BSD-3-Clause"
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert "crawlplug = crawlplug.cli:main" in entry_points

    with tarfile.open(dist["sdist"]) as tar:
        top = f"crawlplug-{VERSION}/"
        members = {m.name.removeprefix(top) for m in tar.getmembers() if m.isfile()}
    missing = (package | {"LICENSE", "CHANGELOG.md", "README.md", "setup.cfg", "pyproject.toml"}) - members
    assert not missing, f"missing from the sdist: {sorted(missing)}"


@pytest.fixture
def venv(dist, tmp_path: Path) -> Path:
    """A fresh venv with only the wheel (and its dependencies) installed."""
    return make_venv(tmp_path / "venv", dist["wheel"])


def _stop_embedded(venv: Path, project: Path) -> None:
    data = project / ".crawlplug"
    if not data.exists():
        return
    subprocess.run(
        [str(venv / "bin" / "crawlplug"), "embedded", "stop"],
        cwd=project,
        env=_clean_env(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    pid = data / "redis.pid"
    if pid.exists():  # the stop failed (the test's own failure says why): leave no server behind
        try:
            os.kill(int(pid.read_text()), 9)
        except (ProcessLookupError, ValueError):
            pass


@pytest.mark.e2e  # starts processes of its own
def test_wheel_in_a_fresh_venv_runs_a_two_node_crawl_of_a_startproject_project(venv, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    assert not work.resolve().is_relative_to(ROOT.resolve())
    bin_ = venv / "bin"
    site_packages = Path(
        _run([bin_ / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=work).strip()
    )
    shown = _run(
        [bin_ / "python", "-c", "import crawlplug; print(crawlplug.__file__, crawlplug.__version__)"], cwd=work
    ).split()
    assert Path(shown[0]).is_relative_to(site_packages) and shown[1] == VERSION, shown
    assert _run([bin_ / "crawlplug", "--version"], cwd=work).strip() == f"crawlplug {VERSION}"

    _run([bin_ / "scrapy", "startproject", "shopcrawl"], cwd=work)
    project = work / "shopcrawl"
    settings = project / "shopcrawl" / "settings.py"
    text = settings.read_text()
    assert "\nADDONS = {}\n" in text, "Scrapy's project template changed: it has no `ADDONS = {}` line"
    settings.write_text(text.replace("\nADDONS = {}\n", f"\n{ADDON_LINE}\n"))
    if shutil.which("git"):
        _run(["git", "init", "-q", "."], cwd=project)

    shop = DemoShop(items=300)
    nodes: list[tuple[subprocess.Popen[bytes], object]] = []
    with serve(shop) as server:
        (project / "shopcrawl" / "spiders" / "shop.py").write_text(guide_spider(server.url))
        try:
            for n in (1, 2):  # started together: one of them starts the embedded Redis, under its lock
                cmd = [
                    str(bin_ / "scrapy"),
                    "crawl",
                    "shop",
                    "-O",
                    f"items{n}.jsonl",
                    "-s",
                    f"LOG_FILE=node{n}.log",
                    "-s",
                    "LOG_LEVEL=INFO",
                ]
                for key, value in FAST.items():
                    cmd += ["-s", f"{key}={value}"]
                err = open(project / f"node{n}.err", "wb")
                nodes.append(
                    (subprocess.Popen(cmd, cwd=project, env=_clean_env(), stdout=subprocess.DEVNULL, stderr=err), err)
                )
            for n, (proc, err) in enumerate(nodes, 1):
                code = proc.wait(240)
                err.close()
                assert code == 0, (project / f"node{n}.log").read_text()[-3000:]
            hits, base = server.hits, server.url
        finally:
            for proc, _ in nodes:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(30)
            untracked = (
                _run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=project)
                if (project / ".git").exists()
                else None
            )
            _stop_embedded(venv, project)

    logs = [(project / f"node{n}.log").read_text() for n in (1, 2)]
    for log in logs:
        assert "'finish_reason': 'finished'" in log
        imported = log.split("crawlplug imported from ", 1)[1].split()[0]
        assert Path(imported).is_relative_to(site_packages), imported
        # the node's first line from crawlplug names the version (and, but in the node that
        # started the embedded Redis, the crawl)
        lines = [line for line in log.splitlines() if re.match(r"\S+ \S+ \[crawlplug\.[\w.]+\] ", line)]
        assert lines and f"INFO: crawlplug {VERSION}: " in lines[0], lines[:3]
        # the add-on by its name; no WARNING for the features a startproject project does not use
        assert "[crawlplug.Addon]" in log and "WARNING: Disabled crawlplug" not in log
        assert any(f"INFO: crawlplug {VERSION}: crawl 'shop' on the embedded Redis" in line for line in lines[:2])
    # one node started the embedded Redis, the other joined it
    assert sum(f"crawlplug {VERSION}: started the embedded Redis" in log for log in logs) == 1

    # every page fetched exactly once (robots.txt is asked by each node's middleware, outside the crawl)
    pages = {path: count for path, count in hits.items() if path != "/robots.txt"}
    assert set(pages) == shop.paths()
    assert {path: n for path, n in pages.items() if n > 1} == {}
    items = [json.loads(line) for n in (1, 2) for line in (project / f"items{n}.jsonl").read_text().splitlines()]
    assert sorted(i["url"].removeprefix(base) for i in items) == sorted(shop.item_paths())
    truth = shop.truth()
    assert all(i["name"] == truth[i["url"].removeprefix(base)]["name"] for i in items)
    assert all(i["price"] == f"Price: {truth[i['url'].removeprefix(base)]['price']:.2f} USD" for i in items)
    # both nodes did real work: one crawl shared by two processes
    assert all((project / f"items{n}.jsonl").read_text().strip() for n in (1, 2))

    # the embedded Redis's data stays out of the user's git; the rest of the project shows
    if untracked is not None:
        assert ".crawlplug" not in untracked, untracked
        assert "shopcrawl/settings.py" in untracked, untracked
