"""Redis going back in time under a real crawl, many times, beside CPU burners (issue 31).

Each run: the 321-page demo shop served slowly (50 ms a page) by its own process, two real
``scrapy crawl shop`` nodes, and a redis-server saving an RDB snapshot every second
(``save 1 1``). After a third of the pages, Redis is SIGKILLed and started again 1.5 s later
from its snapshot: everything written since that snapshot is gone (the links admitted by
pages the nodes still hold, their leases, acks). Then the nodes finish the crawl, and the
shop's own hit counts say which pages were never fetched and how many were fetched twice.
``--burners`` processes spin beside it (``python3 -c 'while 1: pass'``) the whole time: the
loss this guards against showed under load (1 run in 3 to 5 lost pages before the record).

``--early`` crashes Redis after the first 10 pages instead, while its one snapshot is the one
Redis took at the crawl's first write (``save 1 1`` after a second of quiet saves at once): the
nodes' join, before the spider's start request was admitted. No lease stands behind a start
request, so only the node's resend log brings it back (10 of 321 pages lost in CI before it).
A run whose Redis came back without the run (no snapshot yet, or one of a write before the
join: a loss the nodes report, not a rollback) is counted apart. Without ``--early``, the crash waits for a snapshot taken after
the crawl began.

``--baseline COMMIT`` runs the same crawls on that commit's crawlplug (a ``git archive``
copy, bench/common.py), interleaved with the working tree's, run for run.

    python bench/rollback_bench.py --runs 20 --burners 2 [--baseline 0d7a08d]

Prints a table: runs, runs that lost pages, pages lost, pages fetched twice (median and
most), and how often a node found that Redis went back (its log line).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    Proc,
    SiteProc,
    baseline_tree,
    free_port,
    install_signal_handlers,
    median,
    redis_server_binary,
    spawn,
    start_node,
    table,
)
from crawlplug.demo.shop import DemoShop

SETTINGS = {
    "CRAWLPLUG_HEARTBEAT": 0.5,
    "CRAWLPLUG_LEASE_TIMEOUT": 8,
    "CRAWLPLUG_IDLE_CLOSE": 2,
    "CONCURRENT_REQUESTS": 2,
    "LOG_LEVEL": "INFO",
}


@dataclass
class Run:
    tree: str
    pages: int
    at_crash: int
    lost: int
    twice: int
    found: int  # node log lines "Redis went back in time"
    exits: list[int | None]
    snapshots: int  # RDB snapshots Redis had taken when it was killed (0: it came back without the run)


class Redis:
    """A redis-server on a fixed port and directory, started again after a SIGKILL."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="redis-", dir=workdir))
        self.proc: Proc | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = spawn(
            [
                redis_server_binary(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.dir),
                "--appendonly",
                "no",
            ],
            "redis-server",
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.config_set("save", "1 1")  # a snapshot every second with a write
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.02)
        client.close()

    def crash(self) -> None:
        assert self.proc is not None
        self.proc.signal(signal.SIGKILL)
        self.proc.wait(10)


def _persistence(port: int) -> dict:
    client = redis.Redis(port=port)
    try:
        return client.info("persistence")
    finally:
        client.close()


def one_run(workdir: Path, tree: Path | None, label: str, items: int, early: bool = False) -> Run:
    shop = DemoShop(items=items)
    paths = shop.paths()
    site = SiteProc(workdir, items=items, delay=0.05)
    server = Redis(workdir)
    server.start()
    nodes = [
        start_node(workdir, f"{label}-node{i}", site.url, {**SETTINGS, "REDIS_URL": server.url}, tree=tree)
        for i in range(2)
    ]
    try:
        deadline = time.monotonic() + 120
        while site.total() < 1:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{label}: the crawl did not begin")
            time.sleep(0.01)
        began = time.time()
        while site.total() < (10 if early else len(paths) // 3):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{label}: the crawl did not get a third of the way")
            time.sleep(0.01 if early else 0.05)
        while not early:  # a snapshot forked after the crawl began (LASTSAVE: whole seconds, at its end)
            info = _persistence(server.port)
            if not info["rdb_bgsave_in_progress"] and info["rdb_last_save_time"] > began + 1:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{label}: no snapshot since the crawl began")
            time.sleep(0.05)
        while early and _persistence(server.port)["rdb_bgsave_in_progress"]:
            time.sleep(0.005)  # not while a snapshot is being written (it may or may not land)
        snapshots = int(_persistence(server.port).get("rdb_saves", -1))
        server.crash()
        at_crash = site.total()
        time.sleep(1.5)
        server.start()
        # what the snapshot held of the run (before the nodes reconnect, seconds from now): none
        # is Redis come back empty of it (the first snapshot may be of a write before the join)
        client = redis.Redis(port=server.port)
        if not client.exists("crawlplug:{shop}:epoch"):
            snapshots = 0
        client.close()
        # Redis with no snapshot came back empty: the nodes report the loss and wait for an operator
        exits = [node.proc.wait(240 if snapshots else 1) for node in nodes]
        hits = site.hits()
    finally:
        for node in nodes:
            node.proc.stop(5)
        if server.proc is not None:
            server.proc.stop(5)
        site.stop()
        shutil.rmtree(server.dir, ignore_errors=True)
    fetched = {p for p in hits if p in paths}
    return Run(
        label,
        len(paths),
        at_crash,
        len(paths - fetched),
        sum(n - 1 for n in hits.values() if n > 1),
        sum(node.text().count("Redis went back in time") for node in nodes),
        exits,
        snapshots,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--burners", type=int, default=2, help="busy-looping processes beside the crawl")
    parser.add_argument("--items", type=int, default=300, help="the demo shop's items (300: 321 pages)")
    parser.add_argument("--baseline", default=None, help="also run this commit's crawlplug, interleaved")
    parser.add_argument(
        "--early", action="store_true", help="crash after 10 pages, while the one snapshot predates the start request"
    )
    parser.add_argument(
        "--tree",
        default=None,
        help="run this commit's crawlplug as 'this tree' (a copy: the working tree may change while the bench runs)",
    )
    args = parser.parse_args(argv)
    install_signal_handlers()
    trees: list[tuple[str, Path | None]] = [("this tree", baseline_tree(args.tree) if args.tree else None)]
    if args.baseline:
        trees.append((args.baseline, baseline_tree(args.baseline)))
    burners = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(args.burners)]
    results: dict[str, list[Run]] = {name: [] for name, _ in trees}
    try:
        with tempfile.TemporaryDirectory(prefix="rollback-bench-") as tmp:
            for i in range(args.runs):
                for name, tree in trees:
                    run = one_run(Path(tmp), tree, f"{name.replace(' ', '-')}-{i}", args.items, args.early)
                    results[name].append(run)
                    print(
                        f"run {i + 1}/{args.runs} {name}: crash after {run.at_crash} of {run.pages}; "
                        f"lost {run.lost}, fetched twice {run.twice}, rollbacks found {run.found}, "
                        f"exits {run.exits}, snapshots {run.snapshots}",
                        flush=True,
                    )
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    rows = []
    for name, every in results.items():
        runs = [r for r in every if r.snapshots != 0]  # those whose Redis came back empty: apart
        twice = [r.twice for r in runs]
        rows.append(
            [
                name,
                len(runs),
                len(every) - len(runs),
                sum(1 for r in runs if r.lost),
                sum(r.lost for r in runs),
                max((r.lost for r in runs), default=0),
                median(twice),
                max(twice, default=0),
                sum(1 for r in runs if r.found),
                sum(1 for r in runs if r.exits != [0, 0]),
            ]
        )
    print()
    when = "its first 10 pages" if args.early else "a third"
    print(
        f"Redis SIGKILLed after {when} of a 321-page crawl and started again from its "
        f"once-a-second RDB snapshot; {args.burners} CPU burners beside"
    )
    print(
        table(
            [
                "tree",
                "runs",
                "left out (no snapshot yet)",
                "runs losing pages",
                "pages lost",
                "most lost in a run",
                "fetched twice (median)",
                "fetched twice (most)",
                "runs where a node found the rollback",
                "runs with a node exit != 0",
            ],
            rows,
        )
    )
    return 0 if all(r.lost == 0 for r in results["this tree"] if r.snapshots != 0) else 1


if __name__ == "__main__":
    raise SystemExit(main())
