"""`python -m crawlplug.democrawl`: the newcomer's demo runs a real two-node crawl."""

from __future__ import annotations

import re
import subprocess
import sys

from .conftest import ROOT


def _row(summary: str, label: str) -> str:
    match = re.search(rf"^\s+{re.escape(label)}\s{{2,}}(.+)$", summary, re.MULTILINE)
    assert match, f"no {label!r} row in:\n{summary}"
    return match.group(1).strip()


def test_two_node_demo_crawl(redis_url, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "crawlplug.democrawl", "--nodes", "2", "--items", "300",
         "--redis-url", redis_url, "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
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


def test_unreachable_redis_fails_cleanly():
    proc = subprocess.run(
        [sys.executable, "-m", "crawlplug.democrawl", "--redis-url", "redis://:s3cret@127.0.0.1:1/0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "cannot reach Redis at redis://:***@127.0.0.1:1/0" in proc.stderr
    assert "s3cret" not in proc.stderr + proc.stdout and "Traceback" not in proc.stderr
