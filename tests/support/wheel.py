"""crawlplug as a user gets it: the sdist and the wheel built from a clean copy of this
checkout (built once per test session: tests/conftest.py's ``dist``), and the
environment of a user's shell that cannot see the checkout."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .nodes import ROOT


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: nothing pointing at this checkout or its venv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "REDIS_URL", "PYTHONHOME") and not k.startswith("SCRAPY_")
    }
    env.update(extra)
    return env


def run(cmd: list[str | Path], cwd: Path, timeout: float = 300, **kwargs: object) -> str:
    """``cmd``'s standard output; AssertionError with its output if it exits non-zero."""
    proc = subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kwargs,
    )  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def source_tree(dest: Path) -> Path:
    """A copy of the checkout as a clean clone has it (plus files not yet committed, minus what
    .gitignore ignores). Building in the checkout itself would reuse its crawlplug.egg-info,
    whose SOURCES.txt setuptools adds to the sdist: a file the package configuration no
    longer ships would still be shipped, and the wheel test would not see it."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=False,
        )
        if shutil.which("git")
        else None
    )
    if listed is None or listed.returncode != 0:  # not a git checkout (an unpacked sdist)
        ignore = shutil.ignore_patterns(
            "*.egg-info", "build", "dist", ".venv", "__pycache__", ".git", "site", ".crawlplug"
        )
        return Path(shutil.copytree(ROOT, dest, ignore=ignore))
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted but not yet committed is listed too
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def build(source: Path, out: Path) -> dict[str, Path]:
    """`python -m build` of ``source`` into ``out``: the sdist, and the wheel built from that
    sdist (so a file the sdist lacks is missing from the wheel too)."""
    run([sys.executable, "-m", "build", "--outdir", out, source], cwd=out, timeout=600)
    (sdist,) = out.glob("crawlplug-*.tar.gz")
    (wheel,) = out.glob("crawlplug-*.whl")
    return {"sdist": sdist, "wheel": wheel}


def shared_build(root: Path) -> dict[str, Path]:
    """The build of this checkout kept in ``root/crawlplug-dist`` (``source``, ``sdist``,
    ``wheel``): made by the first process that asks, under an exclusive lock on
    ``root/crawlplug-dist.lock`` (pytest-xdist's workers share ``root``), and read from its
    ``built.json`` by the others once it is there."""
    out = root / "crawlplug-dist"
    with open(root / "crawlplug-dist.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = out / "built.json"
        if done.exists():
            return {k: Path(v) for k, v in json.loads(done.read_text()).items()}
        if out.exists():  # a build that died half-way
            shutil.rmtree(out)
        (out / "dist").mkdir(parents=True)
        source = source_tree(out / "source" / "crawlplug")
        built = {"source": source, **build(source, out / "dist")}
        done.write_text(json.dumps({k: str(v) for k, v in built.items()}))
        return built


def make_venv(path: Path, *requirements: str | Path) -> Path:
    """A fresh venv at ``path`` with ``requirements`` (and their dependencies) installed."""
    run([sys.executable, "-m", "venv", path], cwd=path.parent)
    if requirements:
        run(
            [path / "bin" / "python", "-m", "pip", "install", "--disable-pip-version-check", "-q", *requirements],
            cwd=path.parent,
            timeout=900,
        )
    return path
