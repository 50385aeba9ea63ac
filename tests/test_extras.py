"""A project that only wants the scheduler installs no web server and no YAML parser:
crawlplug's core, its command and a crawl work without the [web] and [sites] extras,
and the features that need one say which to install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .support.nodes import ROOT, SCRAPY

CRAWLPLUG = str(Path(sys.executable).with_name("crawlplug"))
BLOCKER = Path(__file__).parent / "support" / "noextras"


def _env(redis_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(BLOCKER), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["REDIS_URL"] = redis_url
    return env


def _run(cmd: list[str], redis_url: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=_env(redis_url), capture_output=True, text=True, timeout=120, check=False, **kwargs)  # type: ignore[call-overload]


@pytest.mark.integration  # starts processes of its own
def test_the_blocker_really_blocks(redis_url):
    proc = _run([sys.executable, "-c", "import starlette"], redis_url)
    assert proc.returncode != 0 and "blocked: the extras are not installed" in proc.stderr


def test_core_and_command_work_without_the_extras(redis_url, shop):
    imports = "import crawlplug, crawlplug.scheduler, crawlplug.dupefilters, crawlplug.spiders, crawlplug.cli"
    proc = _run([sys.executable, "-c", imports], redis_url)
    assert proc.returncode == 0, proc.stderr
    for args in (
        ["--version"],
        ["crawls"],
        ["push", "--crawl", "other", "http://example.com/"],
        ["status", "--crawl", "other"],
    ):
        proc = _run([CRAWLPLUG, *args], redis_url)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    # a real crawl, with only the core installed (the demo project's spiders minus the site spider)
    crawl = _run(
        [
            SCRAPY,
            "crawl",
            "shop",
            "-a",
            f"base_url={shop.url}",
            "-s",
            "CRAWLPLUG_IDLE_CLOSE=1",
            "-s",
            "SPIDER_MODULES=spiders.shop",
            "-s",
            "LOG_LEVEL=INFO",
        ],
        redis_url,
        cwd=ROOT,
    )
    assert crawl.returncode == 0, crawl.stderr[-3000:]
    assert "'finish_reason': 'finished'" in crawl.stderr
    assert set(shop.hits) == shop.shop.paths()


@pytest.mark.integration  # starts processes of its own
def test_features_that_need_an_extra_say_which(redis_url):
    proc = _run([CRAWLPLUG, "dashboard", "--crawl", "shop", "--port", "0"], redis_url)
    assert proc.returncode == 1
    assert (
        "the dashboard needs crawlplug's [web] extra" in proc.stderr and "pip install 'crawlplug[web]'" in proc.stderr
    )
    proc = _run([CRAWLPLUG, "sites", "list"], redis_url)
    assert proc.returncode == 1
    assert "site definitions need crawlplug's [sites] extra" in proc.stderr
    assert "Traceback" not in proc.stderr
