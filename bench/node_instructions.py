"""Instructions a crawling node executes per page, counted by valgrind's callgrind: stock
Scrapy beside crawlplug at several commits, the node-CPU figure a loaded machine does not
move (issue 37: these 2-core VMs spread a crawl's CPU per page by 20 % between rounds).

Each system crawls the demo shop (instant pages, about 17 links a page) with one node,
twice, under ``valgrind --tool=callgrind``: a small shop and a large one. Instructions per
page are (large - small) / (pages large - pages small), so what a node does once (imports,
start, joining, closing) drops out and what is left is the cost of a page. The node runs
exactly as in bench/throughput.py's instant-site crawls (same settings, same fresh
redis-server, which is not under valgrind), only slower (callgrind runs Python about 50
times slower), so the mix of what a pop finds ready may differ from a crawl at full speed.

    .venv/bin/python bench/node_instructions.py --baseline 5ee3ff1 [--baseline2 C] [--tree C]
                                                [--small 300] [--large 1300] [--concurrency 64]

Prints a table (instructions per page, x stock, x baseline) and writes JSON (--out). It
asserts nothing; it needs valgrind on PATH (Debian's valgrind).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import throughput as tp
from bench.common import baseline_tree

_TOTALS = re.compile(rb"^(?:summary|totals):\s+(\d+)", re.MULTILINE)


def instructions(out_file: Path) -> int:
    """The Ir total of one callgrind output file (a process and all its threads)."""
    found = _TOTALS.findall(out_file.read_bytes())
    if not found:
        raise RuntimeError(f"{out_file}: no totals line (did valgrind finish?)")
    return int(found[-1])


def measure(system: tp.System, items: int, concurrency: int, workdir: Path, log: Any) -> dict[str, Any]:
    """One crawl of ``items`` under callgrind: pages fetched and instructions executed."""
    out_file = workdir / f"{system.name.replace(' ', '_').replace('(', '').replace(')', '')}-{items}.callgrind"
    wrapper = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}", sys.executable]
    crawl = tp.Crawl(system, 1, items, 0.0, concurrency, timeout=3600.0, label=system.name, wrapper=wrapper)
    began = time.monotonic()
    result = tp._run_crawl_once(crawl, workdir, f"{system.name}-{items}", log)
    if result.get("status") != "done":
        raise RuntimeError(f"{system.name} {items} items: {result.get('status')}")
    count = instructions(out_file)
    log(
        f"  {system.name:<20} {items:>6} items: {result['pages']} pages, {count / 1e9:.3f} G instructions "
        f"({time.monotonic() - began:.0f} s under valgrind)"
    )
    return {"items": items, "pages": result["pages"], "instructions": count}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default=None, help="crawlplug at this commit too")
    parser.add_argument("--baseline2", default=None, help="and at this one")
    parser.add_argument(
        "--tree", default=None, help="measure this commit's copy as crawlplug (default: the working tree)"
    )
    parser.add_argument("--small", type=int, default=300, help="items of the small shop")
    parser.add_argument("--large", type=int, default=1300, help="items of the large shop")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--no-stock", action="store_true", help="leave stock Scrapy out")
    parser.add_argument("--bloom", action="store_true", help="crawlplug with Bloom dedup (RedisBloomDupeFilter)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "node_instructions.json")
    opts = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("node_instructions: valgrind is not on PATH (apt-get install valgrind)", file=sys.stderr)
        return 2
    found = tp._systems()
    chosen: list[tp.System] = [] if opts.no_stock else [found[tp.STOCK]]
    cp = found[tp.CP_BLOOM if opts.bloom else tp.CP_SET]
    chosen.append(replace(cp, tree=baseline_tree(opts.tree) if opts.tree else None))
    for name, commit in (("baseline", opts.baseline), ("baseline2", opts.baseline2)):
        if commit:
            chosen.append(replace(cp, name=f"{name} {commit}", tree=baseline_tree(commit)))
    workdir = Path(tempfile.mkdtemp(prefix="bench-instructions-"))

    def log(line: str) -> None:
        print(line, flush=True)

    log(
        f"instructions per page under callgrind, {opts.small} and {opts.large} items, {opts.concurrency} concurrent; "
        f"files in {workdir}"
    )
    rows: dict[str, dict[str, Any]] = {}
    try:
        for system in chosen:
            small = measure(system, opts.small, opts.concurrency, workdir, log)
            large = measure(system, opts.large, opts.concurrency, workdir, log)
            per_page = (large["instructions"] - small["instructions"]) / (large["pages"] - small["pages"])
            rows[system.name] = {"small": small, "large": large, "per_page": per_page}
    finally:
        tp.kill_all()
    stock = rows.get(tp.STOCK, {}).get("per_page")
    base = next((r["per_page"] for name, r in rows.items() if name.startswith("baseline ")), None)
    print()
    print(f"{'system':<28} {'instructions/page':>18} {'x stock':>8} {'x baseline':>10}")
    for name, row in rows.items():
        x_stock = f"{row['per_page'] / stock:.3f}" if stock else "-"
        x_base = f"{row['per_page'] / base:.3f}" if base else "-"
        print(f"{name:<28} {row['per_page'] / 1e6:>16.3f} M {x_stock:>8} {x_base:>10}")
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps({"options": vars(opts) | {"out": str(opts.out)}, "systems": rows}, indent=2))
    print(f"\nResults in {opts.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
