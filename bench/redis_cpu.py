"""Redis CPU per crawled page: crawlplug beside today's crawlplug and scrapy-redis, one run.

    .venv/bin/python bench/redis_cpu.py [--items 3000] [--runs 2] [--nodes 1,2]
                                        [--baseline d7f69e2] [--no-breakdown] [--out FILE]
                                        [--remote-delay-ms 1 [--remote-only]]

Every crawl is a real crawl: ``scrapy crawl shop`` nodes of the demo project (one, then
two) against the demo shop served on loopback by its own process (``--items`` items, about
17 links a page), each crawl on its own fresh ``redis-server``. Systems, interleaved within
a round (``--runs`` rounds, medians reported):

* ``crawlplug`` (this working tree) and ``baseline`` (crawlplug at ``--baseline``, the
  commit before issue 26, run from a ``git archive`` copy: bench.common.baseline_tree),
  each with exact dedup (the default dupefilter, the fingerprint set) and with Bloom dedup
  (``RedisBloomDupeFilter``, capacity 100,000);
* ``scrapy-redis``: its Scheduler and RFPDupeFilter on the same demo project.

What is reported, per crawl:

* **Redis CPU per page**: the server's own counters (``INFO cpu``: used_cpu_user +
  used_cpu_sys), from just before the first node starts to just after the last one
  exits, divided by the pages crawled (``response_received_count`` summed over the
  nodes). It includes everything the crawl made Redis do: start-up (script loading, the
  run's bookkeeping), the crawl, the idle wait before closing, and the server's own
  timer work meanwhile. "net of idle" takes out that timer work: the server's CPU rate
  measured idle for 2 s before the crawl, times the crawl's wall time;
* **EVALSHA us per page** and the **commands scripts run** (``INFO commandstats``: calls
  and microseconds per page, each command scripts send counted once; an EVALSHA's time
  includes that of the commands it ran);
* **client round trips per page**, counted inside the nodes by ``bench.common.BenchProbe``
  (one redis-py ``send_packed_command`` = one round trip);
* the load of other processes on the machine meanwhile (2 cores shared: CPU counters are
  disturbed less than wall clock, but a loaded machine still inflates them; compare
  ratios within the run).

With ``--remote-delay-ms N``, every round also crawls with crawlplug (exact dedup) reaching
its Redis through bench/delayproxy.py, N ms each way (a process of its own, so its CPU
counts against neither side): the pages/s of those crawls against the loopback ones' is the
remote-Redis ratio (a node's calls block its reactor for a round trip each, unless its pops
run in a worker thread: CRAWLPLUG_ASYNC_CALLS, which turns on by itself for such a Redis).
``--remote-only`` leaves out the other crawls of a round (baseline, Bloom, scrapy-redis),
so more rounds fit: each round is then crawlplug exact on loopback and through the proxy.

Then, unless ``--no-instructions`` (or valgrind is missing), the number that a loaded machine
does not move: the instructions the Redis server executes per page in a fixed admit-and-pop
loop (no HTTP), counted by valgrind's callgrind, for both trees.

And unless ``--no-breakdown``, one more crawl per crawlplug tree (exact dedup, one node)
with ``SLOWLOG`` recording every command (slowlog-log-slower-than 0): per script (by its
SHA, named from each tree's own sources) calls per page, microseconds per call and per
page. SLOWLOG's own bookkeeping makes that crawl dearer: it is reported apart, never
mixed into the medians.

Results go to ``bench/results/redis_cpu.json`` (git-ignored), with the issue's targets
(20 us per page with exact dedup, 30 with Bloom) and whether the median meets them. The
script asserts nothing and kills everything it started on exit.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import (
    BASELINE,
    CpuSampler,
    RedisProc,
    SiteProc,
    baseline_env,
    baseline_tree,
    expected_pages,
    install_signal_handlers,
    kill_all,
    median,
    start_node,
    table,
)
from bench.delayproxy import DelayProxyProc

CRAWLPLUG, BASE, SR = "crawlplug", "baseline", "scrapy-redis"
SET, BLOOM = "exact", "Bloom"
TARGETS = {SET: 20.0, BLOOM: 30.0}  # issue 26: Redis CPU us per page
CRAWLPLUG_SETTINGS = {"CRAWLPLUG_IDLE_CLOSE": 0.5}
BLOOM_SETTINGS = {"DUPEFILTER_CLASS": "crawlplug.dupefilters.RedisBloomDupeFilter", "CRAWLPLUG_BLOOM_CAPACITY": 100_000}
SR_SETTINGS = {
    "ADDONS": "{}",
    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "SCHEDULER_PERSIST": True,
}


def settings_of(system: str, dedup: str) -> dict[str, Any]:
    if system == SR:
        return dict(SR_SETTINGS)
    return {**CRAWLPLUG_SETTINGS, **(BLOOM_SETTINGS if dedup == BLOOM else {})}


def cpu_of(info: dict[str, Any]) -> float:
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def script_names(tree: Path | None) -> dict[str, str]:
    """SHA1 -> script name for the sources of ``tree`` (None: this working tree), as sent
    with and without Redis 7's flags line; computed in a child that imports that tree."""
    code = (
        "import hashlib, json; from crawlplug.frontier.scripts import NAMES, source; "
        "print(json.dumps({hashlib.sha1(source(n, f).encode()).hexdigest(): n "
        "for n in NAMES for f in (False, True)}))"
    )
    cwd = tree or ROOT / "bench"  # never the repository root: it would come first on sys.path
    out = subprocess.run(
        [sys.executable, "-c", code], env=baseline_env(tree), cwd=cwd, check=True, capture_output=True, text=True
    ).stdout
    return dict(json.loads(out))


def ping_cost_us(client: Any, idle_rate: float, n: int = 5000) -> float:
    """Redis CPU of one PING, a round trip each (not pipelined), net of the server's idle
    CPU over the time they took: what any call costs Redis before it does anything."""
    cpu0, t0 = cpu_of(client.info("cpu")), time.monotonic()
    for _ in range(n):
        client.ping()
    spent = cpu_of(client.info("cpu")) - cpu0 - idle_rate * (time.monotonic() - t0)
    return max(0.0, spent) / n * 1e6


def crawl(
    system: str,
    dedup: str,
    nodes: int,
    items: int,
    workdir: Path,
    tag: str,
    *,
    tree: Path | None,
    slowlog: bool = False,
    timeout: float = 600.0,
    delay_ms: float = 0.0,
) -> dict[str, Any]:
    """One crawl on a fresh redis-server; its Redis counters per page. ``delay_ms``: the nodes
    reach Redis through bench/delayproxy.py, that many milliseconds each way."""
    run_dir = workdir / tag
    run_dir.mkdir(parents=True)
    redis_proc = RedisProc(run_dir)
    site = SiteProc(run_dir, items=items)
    client = redis_proc.client
    if slowlog:
        client.config_set("slowlog-max-len", 10_000_000)
        client.config_set("slowlog-log-slower-than", 0)
    idle0 = cpu_of(client.info("cpu"))
    time.sleep(2.0)
    idle_rate = (cpu_of(client.info("cpu")) - idle0) / 2.0
    client.config_resetstat()
    if slowlog:
        client.slowlog_reset()
    sampler = CpuSampler(0.2)
    sampler.start()
    cpu0, began = cpu_of(client.info("cpu")), time.monotonic()
    proxy = DelayProxyProc(run_dir, redis_proc.port, delay_ms) if delay_ms > 0 else None
    proxy_ping = proxy.ping_ms() if proxy else None
    settings = {
        "CONCURRENT_REQUESTS": 16,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 16,
        "REDIS_URL": proxy.url if proxy else redis_proc.url,
        **settings_of(system, dedup),
    }
    started = [start_node(run_dir, f"node{i + 1}", site.url, settings, tree=tree) for i in range(nodes)]
    status = "done"
    deadline = time.monotonic() + timeout
    try:
        for node in started:
            if node.proc.wait(max(1.0, deadline - time.monotonic())) is None:
                status = "TIMEOUT"
                node.proc.kill()
    finally:
        for node in started:
            if node.proc.alive:
                node.proc.kill()
        sampler.stop()
    wall = time.monotonic() - began
    info = client.info("all")
    cpu = cpu_of(info) - cpu0
    ended = time.time()
    ping_us = ping_cost_us(client, idle_rate)
    entries = client.slowlog_get(10_000_000) if slowlog else []
    hits = site.hits()
    site.stop()
    if proxy is not None:
        proxy.stop()
    redis_proc.stop()
    stats = [node.stats() for node in started]
    elapsed = max([float(s.get("elapsed_time_seconds", 0) or 0) for s in stats] or [0.0])
    pages = sum(int(s.get("response_received_count", 0)) for s in stats)
    roundtrips = sum(int(s.get("bench/redis_roundtrips", 0)) for s in stats)
    fetched = [s for s in stats if s.get("response_received_count")]
    span = (
        max(s["bench/last_response_at"] for s in fetched) - min(s["bench/first_response_at"] for s in fetched)
        if fetched
        else 0.0
    )
    node_cpu = sum(node.proc.cpu or 0.0 for node in started)  # each node's own CPU, user + system (wait4)
    commands = {
        key.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
        for key, v in info.items()
        if key.startswith("cmdstat_") and isinstance(v, dict)
    }
    commands.pop("config|resetstat", None)
    commands.pop("info", None)
    # a script call: EVALSHA of a script, or FCALL of the library's function (Redis 7)
    calls = [commands.get(name, (0, 0)) for name in ("evalsha", "fcall", "fcall_ro")]
    evalsha = (sum(c for c, _ in calls), sum(u for _, u in calls))
    inner = {
        name: cu
        for name, cu in commands.items()
        if name not in ("evalsha", "eval", "fcall", "fcall_ro")
        and not name.startswith(("script", "function", "config", "slowlog"))
    }
    per_sha: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for entry in entries:
        args = entry["command"].split()
        if args and args[0].lower() in (b"evalsha", b"fcall") and len(args) > 1:
            row = per_sha[args[1].decode()]
            row[0] += 1
            row[1] += int(entry["duration"])
    notes = []
    if len(hits) < expected_pages(items):
        notes.append(f"{expected_pages(items) - len(hits)} pages never fetched")
    if sum(hits.values()) > len(hits):
        notes.append(f"{sum(hits.values()) - len(hits)} pages fetched twice")
    per_page = (lambda x: x / pages) if pages else (lambda x: None)
    foreign = sampler.foreign_between(ended - wall, ended)
    return {
        "system": system,
        "dedup": dedup,
        "nodes": nodes,
        "items": items,
        "status": status,
        "tag": tag,
        "pages": pages,
        "pages_per_node": [int(s.get("response_received_count", 0)) for s in stats],
        "wall_s": round(wall, 2),
        "redis_cpu_s": cpu,
        "idle_cpu_per_s": idle_rate,
        "redis_us_per_page": per_page(cpu * 1e6),
        "redis_us_per_page_net_of_idle": per_page((cpu - idle_rate * wall) * 1e6),
        "evalsha_calls_per_page": per_page(evalsha[0]),
        "evalsha_us_per_page": per_page(evalsha[1]),
        "script_commands_per_page": per_page(sum(c for c, _ in inner.values())),
        "script_commands_us_per_page": per_page(sum(u for _, u in inner.values())),
        "commands": {
            name: {"calls_per_page": per_page(c), "us_per_page": per_page(u), "us_per_call": u / c if c else None}
            for name, (c, u) in sorted(commands.items(), key=lambda kv: -kv[1][1])
        },
        "roundtrips_per_page": per_page(roundtrips),
        # the floor: what the round trips alone would cost Redis, each as dear as a PING
        "ping_us": ping_us,
        "floor_us_per_page": per_page(roundtrips * ping_us),
        "pages_per_s": pages / elapsed if elapsed else None,
        # between the first and the last fetch (bench/throughput.py's pages/s): start-up, joining,
        # the idle close and the closing calls left out, which a remote Redis slows by their round trips
        "fetch_pages_per_s": pages / span if span else None,
        "delay_ms": delay_ms,
        "proxy_ping_ms": proxy_ping,
        "node_cpu_ms_per_page": per_page(node_cpu * 1000),
        "slowlog_per_sha": {sha: {"calls": c, "usec": u} for sha, (c, u) in per_sha.items()},
        "slowlog_entries": len(entries),
        "foreign_cpu_busy": foreign,
        "redis_version": redis_proc.version,
        "notes": notes,
        "logs": str(run_dir),
    }


#: the fixed frontier loop counted under callgrind (run in a child importing the tree measured):
#: a crawl-like state (3,000 queued requests), then batches of 5 new requests, 2 duplicates,
#: the acks of the 5 leases taken by the last call and a pop of 5, as admit_and_pop sends them
_LOOP = """
import glob, json, os, subprocess, sys, time
import redis
from scrapy import Request
from crawlplug.frontier.keys import CrawlKeys
try:  # the tree measured may be older than crawlplug.frontier.core
    from crawlplug.frontier.core import Frontier
except ImportError:
    from crawlplug.frontier.single import Frontier
from crawlplug.serializers import JsonSerializer
port, out, n, b = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), 5
proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, "--instr-atstart=no",
                         sys.argv[4], "--port", str(port), "--save", "", "--appendonly", "no"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
client = redis.Redis(port=port)
for _ in range(1200):
    try:
        client.ping()
        break
    except redis.ConnectionError:
        time.sleep(0.1)
f = Frontier(client, CrawlKeys("shop"))
payload = JsonSerializer().dumps(Request("http://127.0.0.1:8000/item/1234", priority=0), None)
f.admit([(os.urandom(20), 0.0, payload) for _ in range(3000)])
_, held = f.admit_and_pop([], [], b)
for _ in range(20):  # warm: every script loaded, the state settled
    _, held = f.admit_and_pop([(os.urandom(20), 0.0, payload) for _ in range(b)], [x.id for x in held], b)
subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], capture_output=True, check=True)
for _ in range(n):
    items = [(os.urandom(20), 0.0, payload) for _ in range(b)] + [(b"d" * 20, 0.0, payload)] * 2
    _, held = f.admit_and_pop(items, [x.id for x in held], b)
subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], capture_output=True, check=True)
client.shutdown(nosave=True)
proc.wait()
total = 0
for name in glob.glob(out + "*"):
    for line in open(name):
        if line.startswith(("summary:", "totals:")):
            total = max(total, int(line.split()[1]))
print(json.dumps({"instructions_per_page": total / (n * b), "pages": n * b}))
"""


def instructions(tree: Path | None, workdir: Path, label: str, calls: int = 300) -> dict[str, Any] | None:
    """Instructions the Redis server executes per page in a fixed admit-and-pop loop, counted
    by valgrind's callgrind (deterministic: a loaded machine does not change it); None
    without valgrind. The server's timer work while valgrind slows it is counted too."""
    import shutil

    from bench.common import free_port, redis_server_binary

    if not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        return None
    out = workdir / f"callgrind-{label}.out"
    cwd = tree or ROOT / "bench"
    done = subprocess.run(
        [sys.executable, "-c", _LOOP, str(free_port()), str(out), str(calls), redis_server_binary()],
        env=baseline_env(tree),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def fmt(value: float | None, digits: int = 1) -> str | None:
    return None if value is None else f"{value:.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=3000, help="items of the demo shop (3,000 = 3,151 pages)")
    parser.add_argument("--runs", type=int, default=2, help="rounds; medians are reported")
    parser.add_argument("--nodes", default="1,2", help="node counts, comma-separated")
    parser.add_argument("--baseline", default=BASELINE, help="the commit measured as today's crawlplug")
    parser.add_argument(
        "--tree",
        default=None,
        help="measure this commit's copy as 'crawlplug' (default: the "
        "working tree, which must then not change during the run)",
    )
    parser.add_argument("--no-scrapy-redis", action="store_true")
    parser.add_argument(
        "--remote-only",
        action="store_true",
        help="with --remote-delay-ms: each round crawls only crawlplug (exact) on loopback and through the proxy",
    )
    parser.add_argument("--no-breakdown", action="store_true", help="skip the SLOWLOG crawls (per-script times)")
    parser.add_argument(
        "--no-instructions",
        action="store_true",
        help="skip the callgrind count of instructions per page (needs valgrind; ~2 min)",
    )
    parser.add_argument(
        "--remote-delay-ms",
        type=float,
        default=0.0,
        help="also crawl (crawlplug, exact dedup) with Redis this many ms away each way, through "
        "bench/delayproxy.py, in every round: the remote-Redis ratio of pages/s",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "redis_cpu.json")
    args = parser.parse_args()
    install_signal_handlers()
    log = print
    workdir = ROOT / "bench" / "results" / f"redis_cpu-{time.strftime('%Y%m%d-%H%M%S')}"
    workdir.mkdir(parents=True)
    base = baseline_tree(args.baseline)
    trees: dict[str, Path | None] = {CRAWLPLUG: baseline_tree(args.tree) if args.tree else None, BASE: base, SR: None}
    node_counts = [int(x) for x in args.nodes.split(",") if x.strip()]
    combos = [
        (system, dedup, n)
        for n in node_counts
        for system, dedup in [(CRAWLPLUG, SET), (BASE, SET), (CRAWLPLUG, BLOOM), (BASE, BLOOM), (SR, SET)]
        if not (system == SR and args.no_scrapy_redis)
        and not (args.remote_only and (system, dedup) != (CRAWLPLUG, SET))
    ]
    log(
        f"Redis CPU per page: {args.items} items ({expected_pages(args.items)} pages), {args.runs} rounds of "
        f"{len(combos)} crawls; baseline {args.baseline}; logs in {workdir}"
    )
    results: list[dict[str, Any]] = []
    remote: list[dict[str, Any]] = []
    try:
        for round_no in range(args.runs):
            for n in node_counts if args.remote_delay_ms > 0 else ():
                tag = f"r{round_no + 1}-remote-{n}n"
                res = crawl(
                    CRAWLPLUG, SET, n, args.items, workdir, tag, tree=trees[CRAWLPLUG], delay_ms=args.remote_delay_ms
                )
                res["round"] = round_no + 1
                remote.append(res)
                log(
                    f"  {tag}: {res['pages']} pages, {fmt(res['pages_per_s'])} pages/s with Redis "
                    f"{args.remote_delay_ms:g} ms away each way (a PING {fmt(res['proxy_ping_ms'], 2)} ms), "
                    f"{fmt(res['roundtrips_per_page'], 3)} round trips/page, "
                    f"node CPU {fmt(res['node_cpu_ms_per_page'], 2)} ms/page {'; '.join(res['notes'])}"
                )
            for system, dedup, n in combos:
                tag = f"r{round_no + 1}-{system}-{dedup}-{n}n".replace(" ", "")
                res = crawl(system, dedup, n, args.items, workdir, tag, tree=trees[system])
                res["round"] = round_no + 1
                results.append(res)
                log(
                    f"  {tag}: {res['pages']} pages, Redis {fmt(res['redis_us_per_page'])} us/page "
                    f"(net of idle {fmt(res['redis_us_per_page_net_of_idle'])}), EVALSHA "
                    f"{fmt(res['evalsha_us_per_page'])} us/page, {fmt(res['script_commands_per_page'])} script "
                    f"commands/page, {fmt(res['roundtrips_per_page'], 3)} round trips/page, node CPU "
                    f"{fmt(res['node_cpu_ms_per_page'], 2)} ms/page, other load "
                    f"{fmt((res['foreign_cpu_busy'] or 0) * 100, 0)}% {'; '.join(res['notes'])}"
                )
        breakdown: list[dict[str, Any]] = []
        if not args.no_breakdown:
            for system in (CRAWLPLUG, BASE):
                res = crawl(system, SET, 1, args.items, workdir, f"slowlog-{system}", tree=trees[system], slowlog=True)
                names = script_names(trees[system])
                pages = res["pages"] or 1
                res["scripts"] = {
                    names.get(sha, sha[:12]): {
                        "calls_per_page": v["calls"] / pages,
                        "us_per_call": v["usec"] / v["calls"],
                        "us_per_page": v["usec"] / pages,
                    }
                    for sha, v in sorted(res["slowlog_per_sha"].items(), key=lambda kv: -kv[1]["usec"])
                }
                breakdown.append(res)
        counted: dict[str, Any] = {}
        if not args.no_instructions:
            for system in (CRAWLPLUG, BASE):
                counted[system] = instructions(trees[system], workdir, system)
    finally:
        kill_all()
    report(results, breakdown, args, log, counted, remote)
    return 0


def report(
    results: list[dict[str, Any]],
    breakdown: list[dict[str, Any]],
    args: Any,
    log: Any,
    counted: dict[str, Any] | None = None,
    remote: list[dict[str, Any]] | None = None,
) -> None:
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for res in results:
        if res["status"] == "done" and res["pages"]:
            groups[(res["system"], res["dedup"], res["nodes"])].append(res)

    def med(key: tuple[str, str, int], field: str) -> float | None:
        return median([r[field] for r in groups.get(key, []) if r.get(field) is not None])

    medians = {
        f"{s}|{d}|{n}": {
            field: med((s, d, n), field)
            for field in (
                "redis_us_per_page",
                "redis_us_per_page_net_of_idle",
                "evalsha_us_per_page",
                "evalsha_calls_per_page",
                "script_commands_per_page",
                "script_commands_us_per_page",
                "roundtrips_per_page",
                "node_cpu_ms_per_page",
                "foreign_cpu_busy",
                "ping_us",
                "floor_us_per_page",
            )
        }
        for (s, d, n) in groups
    }
    rows = []
    for system, dedup, n in sorted(groups, key=lambda k: (k[2], k[1], [CRAWLPLUG, BASE, SR].index(k[0]))):
        us = med((system, dedup, n), "redis_us_per_page")
        vs_base = vs_sr = None
        if system == CRAWLPLUG:
            b, s = med((BASE, dedup, n), "redis_us_per_page"), med((SR, SET, n), "redis_us_per_page")
            vs_base = fmt(us / b, 2) if us and b else None
            vs_sr = fmt(us / s, 3) if us and s else None
        target = TARGETS[dedup] if system == CRAWLPLUG else None
        rows.append(
            [
                f"{system} ({dedup})" if system != SR else system,
                n,
                len(groups[(system, dedup, n)]),
                fmt(us),
                fmt(med((system, dedup, n), "redis_us_per_page_net_of_idle")),
                fmt(med((system, dedup, n), "evalsha_us_per_page")),
                fmt(med((system, dedup, n), "evalsha_calls_per_page"), 2),
                fmt(med((system, dedup, n), "script_commands_per_page")),
                fmt(med((system, dedup, n), "roundtrips_per_page"), 3),
                fmt(med((system, dedup, n), "node_cpu_ms_per_page"), 2),
                vs_base,
                vs_sr,
                None if target is None else f"{target:.0f}: {'met' if us and us <= target else 'not met'}",
                fmt((med((system, dedup, n), "foreign_cpu_busy") or 0) * 100, 0),
            ]
        )
    for system, dedup, n in sorted(groups):
        floor, ping = med((system, dedup, n), "floor_us_per_page"), med((system, dedup, n), "ping_us")
        if floor is not None:
            log(
                f"  floor {system} ({dedup}, {n} node(s)): {fmt(floor)} us/page = a PING's {fmt(ping, 1)} us x "
                f"{fmt(med((system, dedup, n), 'roundtrips_per_page'), 3)} round trips/page"
            )
    log("\nRedis CPU per crawled page (medians; Redis's own INFO cpu; pages = responses received)")
    log(
        table(
            [
                "system",
                "nodes",
                "runs",
                "us/page",
                "net of idle",
                "EVALSHA us/pg",
                "EVALSHA/pg",
                "cmds in scripts/pg",
                "round trips/pg",
                "node CPU ms/pg",
                "vs baseline",
                "vs scrapy-redis",
                "target",
                "other load %",
            ],
            rows,
        )
    )
    # the commands scripts ran, per page, working tree beside the baseline (exact dedup, 1 node, medians)
    cmd_rows = []
    mine = groups.get((CRAWLPLUG, SET, 1), [])
    theirs = groups.get((BASE, SET, 1), [])
    names = sorted(
        {c for r in mine + theirs for c in r["commands"] if c not in ("evalsha", "fcall")},
        key=lambda c: -(median([r["commands"].get(c, {}).get("us_per_page") or 0 for r in theirs]) or 0),
    )
    for c in names:

        def m(rs: list[dict[str, Any]], field: str, c: str = c) -> float | None:
            return median([(r["commands"].get(c) or {}).get(field) or 0 for r in rs]) if rs else None

        cmd_rows.append(
            [
                c,
                fmt(m(theirs, "calls_per_page"), 2),
                fmt(m(theirs, "us_per_page"), 2),
                fmt(m(mine, "calls_per_page"), 2),
                fmt(m(mine, "us_per_page"), 2),
            ]
        )
    if cmd_rows:
        log("\nCommands per page (INFO commandstats; exact dedup, 1 node, medians): baseline | working tree")
        log(table(["command", "base calls/pg", "base us/pg", "calls/pg", "us/pg"], cmd_rows))
    for res in breakdown:
        log(
            f"\nPer script, {res['system']} (exact dedup, 1 node, SLOWLOG of every command: its bookkeeping "
            f"inflates these; {res['pages']} pages, Redis {fmt(res['redis_us_per_page'])} us/page in this crawl)"
        )
        log(
            table(
                ["script", "calls/page", "us/call", "us/page"],
                [
                    [name, fmt(v["calls_per_page"], 3), fmt(v["us_per_call"]), fmt(v["us_per_page"], 2)]
                    for name, v in res.get("scripts", {}).items()
                ],
            )
        )
    counted = counted or {}
    mine, theirs = counted.get(CRAWLPLUG) or {}, counted.get(BASE) or {}
    if mine.get("instructions_per_page") and theirs.get("instructions_per_page"):
        log(
            "\nInstructions Redis executes per page, fixed admit-and-pop loop under callgrind (5 new requests, 2 "
            "duplicates, 5 acks, a pop of 5 per call): crawlplug "
            f"{mine['instructions_per_page']:,.0f}, baseline {theirs['instructions_per_page']:,.0f}: "
            f"{mine['instructions_per_page'] / theirs['instructions_per_page']:.2f}x"
        )
    elif counted:
        log(f"\nInstructions per page: not counted ({counted})")
    remote_rows = []
    for n in sorted({r["nodes"] for r in remote or ()}):
        near_runs = [r for r in groups.get((CRAWLPLUG, SET, n), []) if r.get("pages_per_s")]
        far_runs = [r for r in remote or () if r["nodes"] == n and r["status"] == "done" and r.get("pages_per_s")]
        row: list[Any] = [n, len(far_runs)]
        for key in ("fetch_pages_per_s", "pages_per_s"):
            near = median([r[key] for r in near_runs if r.get(key)])
            far = median([r[key] for r in far_runs if r.get(key)])
            row += [fmt(near), fmt(far), fmt(far / near, 2) if far and near else None]
        # each round's own ratio (its remote crawl against its loopback one), fetch span
        by_round = {r["tag"].split("-")[0]: r for r in near_runs}
        rounds = [
            far["fetch_pages_per_s"] / by_round[far["tag"].split("-")[0]]["fetch_pages_per_s"]
            for far in far_runs
            if far.get("fetch_pages_per_s") and by_round.get(far["tag"].split("-")[0], {}).get("fetch_pages_per_s")
        ]
        row += [", ".join(f"{x:.2f}" for x in rounds), fmt(median([r["roundtrips_per_page"] for r in far_runs]), 3)]
        remote_rows.append(row)
    if remote_rows:
        log(
            f"\nRedis {args.remote_delay_ms:g} ms away each way (bench/delayproxy.py), crawlplug exact, medians: "
            "pages/s against loopback's (target: at least 0.95x), between the first and the last fetch "
            "(as bench/throughput.py) and over the spider's whole life (start-up, joining and the idle close in)"
        )
        log(
            table(
                [
                    "nodes",
                    "runs",
                    "loopback pages/s",
                    "remote pages/s",
                    "ratio",
                    "loopback, whole life",
                    "remote, whole life",
                    "ratio",
                    "ratio per round",
                    "round trips/pg",
                ],
                remote_rows,
            )
        )
    out = {
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "remote": remote or [],
        "instructions_per_page": counted,
        "args": {k: str(v) for k, v in vars(args).items()},
        "targets_us_per_page": TARGETS,
        "medians": medians,
        "runs": results,
        "breakdown": [{k: v for k, v in r.items() if k != "slowlog_per_sha"} for r in breakdown],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2, default=str))
    log(f"\nResults in {args.out}")


if __name__ == "__main__":
    sys.exit(main())
