"""Where a node's CPU per page goes: cProfile of one ``scrapy crawl`` node, two trees side by side.

    .venv/bin/python bench/node_profile.py [--base 5ee3ff1] [--tree COMMIT] [--items 5000]
                                           [--concurrency 64] [--runs 1] [--bloom] [--top 40] [--out DIR]

Each run crawls the demo shop (``--items`` items, served on loopback by its own process)
with one node of the demo project on a fresh ``redis-server``, once per tree (interleaved
when ``--runs`` > 1): ``--base`` (a ``git archive`` copy, bench.common.baseline_tree) and
the working tree (or ``--tree``'s copy). The node runs under ``python -m cProfile``;
profiles are merged per tree and every function's calls, self time and cumulative time are
divided by the pages crawled (``response_received_count``), so two trees compare per page.

Printed: the node's CPU per page (rusage, profiler overhead included: compare within the
run, not with bench/throughput.py's figures), then the functions whose self and cumulative
time per page grew most from base to tree, with calls per page. Names are matched by
file path relative to the tree (``crawlplug/...``, ``scrapy/...``) and function name, so a
function that moved between modules shows as one gone and one new. Profiles (``.prof``)
are kept in ``--out`` for ``python -m pstats`` / snakeviz. Asserts nothing.
"""

from __future__ import annotations

import argparse
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import (
    RedisProc,
    SiteProc,
    baseline_tree,
    install_signal_handlers,
    kill_all,
    start_node,
    table,
)

Key = tuple[str, str]  # (file relative to its tree or package root, function name)


def _norm(path: str, line: int, name: str) -> Key:
    """A function's name independent of where its tree lives (a baseline copy or the working tree)."""
    for marker in ("/site-packages/", "/bench/results/trees/", str(ROOT) + "/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            if marker == "/bench/results/trees/":
                path = path.split("/", 1)[1]  # drop the tree's sha
            break
    return (path, name)


def run_one(tree: Path | None, label: str, args: argparse.Namespace, workdir: Path) -> tuple[Path, int, float]:
    """One profiled crawl; returns (profile, pages, node CPU s: the process's own, from BenchProbe)."""
    run_dir = workdir / label
    run_dir.mkdir(parents=True)
    redis_proc = RedisProc(run_dir)
    site = SiteProc(run_dir, items=args.items, delay=0.0)
    prof = run_dir / ("node.spy" if args.spy else "node.prof")
    wrapper = None
    if args.spy:
        spy = str(Path(sys.executable).with_name("py-spy"))
        wrapper = [spy, "record", "--rate", str(args.rate), "--format", "raw", "--output", str(prof), "--"]
    settings: dict[str, Any] = {
        "CONCURRENT_REQUESTS": args.concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": args.concurrency,
        "CRAWLPLUG_IDLE_CLOSE": 0.5,
        "REDIS_URL": redis_proc.url,
        **(
            {"DUPEFILTER_CLASS": "crawlplug.dupefilters.RedisBloomDupeFilter", "CRAWLPLUG_BLOOM_CAPACITY": 100_000}
            if args.bloom
            else {}
        ),
    }
    node = start_node(
        run_dir, "node1", site.url, settings, profile=None if args.spy else prof, tree=tree, wrapper=wrapper
    )
    try:
        if node.proc.wait(args.timeout) is None:
            node.proc.kill()
            raise RuntimeError(f"{label}: the crawl did not finish in {args.timeout} s (logs in {run_dir})")
    finally:
        site.stop()
        redis_proc.stop()
    stats = node.stats()
    pages = int(stats.get("response_received_count", 0))
    if not pages or not prof.exists():
        raise RuntimeError(f"{label}: no pages or no profile (logs in {run_dir})")
    return prof, pages, float(stats.get("bench/cpu_at_close", 0.0))


def _spy_frame(frame: str) -> Key:
    """``name (file:line)`` of py-spy's raw format as a Key."""
    name, _, where = frame.rpartition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    return _norm(path, 0, name.rpartition(".")[2] if "." in name and "<" not in name else name)


def per_page_spy(
    profiles: list[tuple[Path, int, float]], rate: int
) -> tuple[dict[Key, tuple[float, float, float]], float, float]:
    """As :func:`per_page` from py-spy's raw stacks: (0, self us, inclusive us) per page (no call counts)."""
    self_t: dict[Key, int] = {}
    incl: dict[Key, int] = {}
    pages = sum(p for _, p, _ in profiles)
    cpu = sum(c for _, _, c in profiles)
    for prof, _, _ in profiles:
        for line in prof.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            frames = [_spy_frame(f) for f in stack.split(";")]
            n = int(count)
            self_t[frames[-1]] = self_t.get(frames[-1], 0) + n
            for key in set(frames):
                incl[key] = incl.get(key, 0) + n
    us = 1e6 / rate / pages
    out = {k: (0.0, self_t.get(k, 0) * us, incl[k] * us) for k in incl}
    return out, 1000 * cpu / pages, sum(v[1] for v in out.values()) / 1000


def per_page(profiles: list[tuple[Path, int, float]]) -> tuple[dict[Key, tuple[float, float, float]], float, float]:
    """{function: (calls, self us, cumulative us) per page} over the profiles; (CPU ms, profile ms) per page."""
    total: dict[Key, list[float]] = {}
    pages = sum(p for _, p, _ in profiles)
    cpu = sum(c for _, _, c in profiles)
    for prof, _, _ in profiles:
        st = pstats.Stats(str(prof))
        for (path, line, name), (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
            acc = total.setdefault(_norm(path, line, name), [0.0, 0.0, 0.0])
            acc[0] += nc
            acc[1] += tt
            acc[2] += ct
    out = {k: (v[0] / pages, 1e6 * v[1] / pages, 1e6 * v[2] / pages) for k, v in total.items()}
    prof_total = sum(v[1] for v in out.values()) / 1000
    return out, 1000 * cpu / pages, prof_total


def _label(key: Key) -> str:
    path, name = key
    return f"{path}:{name}"


def compare(
    base: dict[Key, tuple[float, float, float]], tree: dict[Key, tuple[float, float, float]], column: int, top: int
) -> str:
    """The ``top`` functions whose time per page (column 1: self, 2: cumulative) grew most."""
    zero = (0.0, 0.0, 0.0)
    keys = set(base) | set(tree)
    rows = sorted(keys, key=lambda k: tree.get(k, zero)[column] - base.get(k, zero)[column], reverse=True)[:top]
    return table(
        ["function", "base us/pg", "tree us/pg", "diff", "base calls/pg", "tree calls/pg"],
        [
            [
                _label(k)[-90:],
                f"{base.get(k, zero)[column]:.1f}",
                f"{tree.get(k, zero)[column]:.1f}",
                f"{tree.get(k, zero)[column] - base.get(k, zero)[column]:+.1f}",
                f"{base.get(k, zero)[0]:.2f}",
                f"{tree.get(k, zero)[0]:.2f}",
            ]
            for k in rows
        ],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="5ee3ff1", help="the commit to compare against (git archive copy)")
    parser.add_argument("--tree", default=None, help="profile this commit's copy instead of the working tree")
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--bloom",
        action="store_true",
        help="Bloom dedup (RedisBloomDupeFilter, capacity 100,000), as bench/redis_cpu.py's Bloom crawls",
    )
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument(
        "--spy",
        action="store_true",
        help="sample with py-spy (pip install py-spy into the venv) instead of cProfile: less overhead, no call counts",
    )
    parser.add_argument("--rate", type=int, default=400, help="py-spy's samples per second")
    parser.add_argument("--out", type=Path, default=None, help="where the profiles go (default: a temp dir)")
    args = parser.parse_args(argv)
    install_signal_handlers()
    workdir = args.out or Path(tempfile.mkdtemp(prefix="bench-node-profile-"))
    workdir.mkdir(parents=True, exist_ok=True)
    trees = {"base": baseline_tree(args.base), "tree": baseline_tree(args.tree) if args.tree else None}
    found: dict[str, list[tuple[Path, int, float]]] = {"base": [], "tree": []}
    try:
        for rnd in range(args.runs):
            for label, tree in trees.items():
                began = time.monotonic()
                found[label].append(run_one(tree, f"{label}-r{rnd}", args, workdir))
                _, pages, cpu = found[label][-1]
                print(
                    f"{label} round {rnd + 1}: {pages} pages, node CPU {cpu:.2f} s "
                    f"({1000 * cpu / pages:.2f} ms/page), {time.monotonic() - began:.0f} s",
                    flush=True,
                )
    finally:
        kill_all()
    if args.spy:
        base, base_cpu, base_prof = per_page_spy(found["base"], args.rate)
        tree, tree_cpu, tree_prof = per_page_spy(found["tree"], args.rate)
    else:
        base, base_cpu, base_prof = per_page(found["base"])
        tree, tree_cpu, tree_prof = per_page(found["tree"])
    print(
        f"\nnode CPU per page (under cProfile): base {base_cpu:.2f} ms, tree {tree_cpu:.2f} ms; "
        f"profiled self time per page: base {base_prof:.2f} ms, tree {tree_prof:.2f} ms"
    )
    print("\nself time per page, largest increases:")
    print(compare(base, tree, 1, args.top))
    print("\ncumulative time per page, largest increases:")
    print(compare(base, tree, 2, args.top))
    print(f"\nprofiles in {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
