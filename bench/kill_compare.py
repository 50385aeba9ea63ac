"""Kill -9 and restart nodes mid-crawl: crawlplug vs scrapy-redis, same scenario, same run.

    .venv/bin/python bench/kill_compare.py [--items 2000] [--delay 0.02] [--kills 3] [--seed N]

For each system this starts its own redis-server (flushed between systems) and a
demo shop on loopback, runs three ``scrapy crawl shop`` nodes of the demo
project, SIGKILLs a random running node at random moments (``--kills`` times,
drawn from ``random.Random(seed)``, the same draws for both systems) and
restarts it with the same settings, then waits for the crawl to end and prints
one table: pages on the site, pages fetched, pages never fetched (lost), pages
fetched more than once, items in the union of the nodes' feed outputs.

* crawlplug: the project's default (``ADDONS = {"crawlplug.Addon": 0}``). Nodes
  close by themselves once the whole crawl is done.
* scrapy-redis 0.9.1: ``-s ADDONS={}`` switches crawlplug off, then
  ``SCHEDULER=scrapy_redis.scheduler.Scheduler``,
  ``DUPEFILTER_CLASS=scrapy_redis.dupefilter.RFPDupeFilter``,
  ``SCHEDULER_PERSIST=True``. The plain ``shop`` spider closes a node as soon
  as the shared queue looks empty to it, so the supervisor restarts an exited
  node whenever the shared queue still holds requests.

For both systems: the crawl is over when no node runs and the system's Redis
frontier has no work left (crawlplug: nothing queued or leased; scrapy-redis:
nothing queued). The script bounds its run time (``--timeout`` per system) and
kills every process it started, also on Ctrl-C / SIGTERM. It is a benchmark,
not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis

from crawlplug.demo.shop import DemoShop, ShopServer, serve
from crawlplug.frontier.keys import CrawlKeys
from tests.support.nodes import SCRAPY
from tests.support.servers import RedisServer, free_port

NODES = 3
COMMON = {"CONCURRENT_REQUESTS": 8, "TELNETCONSOLE_ENABLED": False}
CRAWLPLUG = {
    "CRAWLPLUG_HEARTBEAT": 0.5,
    "CRAWLPLUG_LEASE_TIMEOUT": 3,
    "CRAWLPLUG_IDLE_CLOSE": 2,
}
SCRAPY_REDIS = {
    "ADDONS": "{}",
    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "SCHEDULER_PERSIST": True,
}
FLUSHED_FEED = {
    "FEED_STORAGES": json.dumps(
        {
            "": "bench.kill_compare.LineFlushedFileFeedStorage",
            "file": "bench.kill_compare.LineFlushedFileFeedStorage",
        }
    )
}

CP_KEYS = CrawlKeys("shop")
SR_QUEUE = "shop:requests"  # scrapy-redis default SCHEDULER_QUEUE_KEY for spider "shop"

#: every process this script started, killed on exit whatever happens
PROCS: list[subprocess.Popen[bytes]] = []


try:  # only needed inside the scrapy nodes, with --feed flushed
    from scrapy.extensions.feedexport import FileFeedStorage

    class LineFlushedFileFeedStorage(FileFeedStorage):
        """A local feed file opened unbuffered: each item reaches the OS as it is exported."""

        def open(self, spider: Any) -> Any:
            path = Path(self.path)
            path.parent.mkdir(parents=True, exist_ok=True)
            return path.open(self.write_mode, buffering=0)
except ImportError:  # pragma: no cover
    pass


@dataclass
class Node:
    proc: subprocess.Popen[bytes]
    log: Path
    items: Path
    killed: bool = False

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class System:
    name: str
    settings: dict[str, object]
    work_left: Callable[[redis.Redis], bool]
    held: Callable[[redis.Redis, int], int | None]


def _cp_work_left(client: redis.Redis) -> bool:
    return bool(client.zcard(CP_KEYS.queue) or client.zcard(CP_KEYS.leases))


def _cp_held(client: redis.Redis, pid: int) -> int:
    marker = f":{pid}:"
    return sum(1 for v in client.hvals(CP_KEYS.leased) if marker in v.decode().rsplit("|", 2)[0])


SYSTEMS = {
    "crawlplug": System("crawlplug", CRAWLPLUG, _cp_work_left, _cp_held),
    "scrapy-redis": System("scrapy-redis", SCRAPY_REDIS, lambda c: bool(c.zcard(SR_QUEUE)), lambda c, pid: None),
}


@dataclass
class Result:
    system: str
    pages: int
    fetched: int = 0
    lost: int = 0
    twice: int = 0
    fetches: int = 0
    items: int = 0
    kills: int = 0
    held_at_deaths: int | None = None
    restarts_idle: int = 0
    seconds: float = 0.0
    status: str = "done"
    notes: list[str] = field(default_factory=list)


def start_node(workdir: Path, n: int, shop_url: str, settings: dict[str, object]) -> Node:
    log = workdir / f"node{n}.log"
    items = workdir / f"node{n}.jsonl"
    cmd = [
        SCRAPY,
        "crawl",
        "shop",
        "-o",
        f"{items}:jsonlines",
        "-a",
        f"base_url={shop_url}",
        "-s",
        f"LOG_FILE={log}",
        "-s",
        "LOG_LEVEL=INFO",
    ]
    for key, value in settings.items():
        cmd += ["-s", f"{key}={value}"]
    env = dict(os.environ)
    env.pop("REDIS_URL", None)
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / f"node{n}.err", "wb"),
        start_new_session=True,
    )
    PROCS.append(proc)
    return Node(proc, log, items)


def kill_all() -> None:
    for proc in PROCS:
        if proc.poll() is None:
            proc.kill()
    for proc in PROCS:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass


def item_urls(nodes: list[Node]) -> set[str]:
    urls = set()
    for node in nodes:
        if not node.items.exists():
            continue
        for line in node.items.read_text(errors="replace").splitlines():
            try:
                urls.add(json.loads(line)["url"])
            except (ValueError, KeyError, TypeError):
                pass  # a line cut by SIGKILL
    return urls


def run_system(system: System, args: argparse.Namespace, redis_url: str, workdir: Path) -> Result:
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    rng = random.Random(args.seed)
    settings = {"REDIS_URL": redis_url, **COMMON, **system.settings}
    if args.feed == "flushed":
        settings.update(FLUSHED_FEED)
    shop: ShopServer = serve(DemoShop(items=args.items, delay=args.delay))
    pages = len(shop.shop.paths())
    result = Result(system.name, pages)
    marks = sorted(int(pages * rng.uniform(0.08, 0.7)) for _ in range(args.kills))
    counter = [0]

    def start() -> Node:
        counter[0] += 1
        return start_node(workdir, counter[0], shop.url, settings)

    began = time.monotonic()
    deadline = began + args.timeout
    slots = [start() for _ in range(NODES)]
    every = list(slots)
    held_total = 0
    try:
        while True:
            now = time.monotonic()
            if now > deadline:
                result.status = f"TIMEOUT after {args.timeout:.0f}s"
                break
            fetched = sum(shop.hits.values())
            # a kill is due: SIGKILL a random running node, restart it
            if marks and fetched >= marks[0]:
                marks.pop(0)
                time.sleep(rng.uniform(0, 0.4))
                slot = rng.randrange(NODES)
                alive = [i for i in range(NODES) if slots[i].alive]
                if alive:
                    if slot not in alive:
                        slot = alive[slot % len(alive)]
                    victim = slots[slot]
                    # kill a node that is crawling, not one still starting up
                    ready_by = time.monotonic() + 30
                    while victim.alive and "Spider opened" not in victim.text() and time.monotonic() < ready_by:
                        time.sleep(0.05)
                    time.sleep(rng.uniform(0.2, 0.6))
                    victim.proc.kill()
                    victim.proc.wait(30)
                    victim.killed = True
                    held = system.held(client, victim.proc.pid)
                    if held is not None:
                        held_total += held
                    result.kills += 1
                    print(
                        f"  [{system.name}] SIGKILL node {slot} (pid {victim.proc.pid}) after "
                        f"{sum(shop.hits.values())} fetches" + (f", holding {held} leases" if held is not None else ""),
                        flush=True,
                    )
                    time.sleep(rng.uniform(0, 1.0))
                    slots[slot] = start()
                    every.append(slots[slot])
                continue
            exited = [i for i in range(NODES) if not slots[i].alive]
            if exited:
                if system.work_left(client):
                    # scrapy-redis: a node closes whenever the shared queue looks empty
                    # to it; bring it back while there is work
                    for i in exited:
                        slots[i] = start()
                        every.append(slots[i])
                        result.restarts_idle += 1
                elif len(exited) == NODES:
                    break
            time.sleep(0.05)
    finally:
        for node in slots:
            if node.alive:  # only on timeout or interruption
                node.proc.kill()
                node.proc.wait(30)
                node.killed = True
        result.seconds = time.monotonic() - began
        hits = shop.hits
        shop.stop()
        client.close()

    site = shop.shop.paths()
    result.fetched = len(set(hits) & site)
    result.lost = len(site - set(hits))
    result.twice = sum(1 for p, n in hits.items() if n > 1)
    result.fetches = sum(hits.values())
    result.items = len(item_urls(every))
    if system.name == "crawlplug":
        result.held_at_deaths = held_total
    bad = [n for n in every if not n.killed and n.proc.returncode not in (0, None)]
    if bad:
        result.notes.append(f"{len(bad)} nodes exited non-zero (see their logs with --keep)")
    unfinished = [n for n in every if not n.killed and "'finish_reason': 'finished'" not in n.text()]
    if unfinished and result.status == "done":
        result.notes.append(f"{len(unfinished)} nodes did not finish normally")
    return result


def print_table(results: list[Result], args: argparse.Namespace) -> None:
    cols = [
        ("system", lambda r: r.system),
        ("pages on site", lambda r: r.pages),
        ("pages fetched", lambda r: r.fetched),
        ("never fetched (lost)", lambda r: r.lost),
        ("fetched >1 time", lambda r: r.twice),
        ("total fetches", lambda r: r.fetches),
        ("items", lambda r: f"{r.items}/{args.items}"),
        ("kills", lambda r: r.kills),
        ("held at deaths", lambda r: "n/a" if r.held_at_deaths is None else r.held_at_deaths),
        ("idle restarts", lambda r: r.restarts_idle),
        ("seconds", lambda r: f"{r.seconds:.1f}"),
        ("status", lambda r: r.status),
    ]
    rows = [[str(name) for name, _ in cols]] + [[str(f(r)) for _, f in cols] for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(cols))]
    line = lambda row: "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |"
    print()
    print(
        f"kill -9 and restart, {NODES} nodes, {args.kills} kills, seed {args.seed}, "
        f"DemoShop(items={args.items}, delay={args.delay}), feed={args.feed}"
    )
    print(line(rows[0]))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows[1:]:
        print(line(row))
    for r in results:
        for note in r.notes:
            print(f"note ({r.system}): {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--delay", type=float, default=0.02, help="seconds the shop waits per page")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=150, help="seconds at most per system")
    parser.add_argument("--systems", default="crawlplug,scrapy-redis")
    parser.add_argument(
        "--feed",
        choices=("default", "flushed"),
        default="default",
        help="default: Scrapy's (block-buffered) local feed files; flushed: unbuffered",
    )
    parser.add_argument("--keep", action="store_true", help="keep the node logs and feeds")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(2**32)

    def on_signal(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    tmp = Path(tempfile.mkdtemp(prefix="kill_compare-"))
    server = None
    results = []
    try:
        server = RedisServer(free_port(), tmp).start()
        if server.proc is not None:
            PROCS.append(server.proc)
        for name in args.systems.split(","):
            workdir = tmp / name
            workdir.mkdir()
            print(f"{name}: crawling (logs in {workdir})", flush=True)
            results.append(run_system(SYSTEMS[name], args, server.url, workdir))
    finally:
        kill_all()
        if server is not None:
            server.stop()
        if not args.keep:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    print_table(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
