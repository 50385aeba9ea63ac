"""Bloom dedup at the scale of a billion-URL crawl: 10^8 fingerprints through the real admission path.

    .venv/bin/python bench/bloom_scale.py [--count 2000000] [--workers 3] [--drain trim|ack]
                                          [--compare-count N] [--out bench/results/bloom_scale.json]
    make bench-bloom-scale BENCH_ARGS="--count 100000000"      # the documented full size

A benchmark, not a test: it asserts nothing, prints tables and writes JSON
(``bench/results/`` is git-ignored). ``--count`` defaults to 2*10^6 (a minute or
two); 10^8 is the full size of issue 26: at the 27-34 Redis CPU us per admission measured,
45-60 minutes of one whole Redis core, much longer on a machine shared with other work
(``--max-seconds`` stops the fill and measures what it reached).

**The fill.** ``--workers`` processes each drive their own
:class:`crawlplug.frontier.Frontier` with the strategy of ``RedisBloomDupeFilter``
(:class:`~crawlplug.frontier.dedup.BloomDedup` of ``BloomSpec(--capacity,
--error-rate)``, by default CRAWLPLUG_BLOOM_CAPACITY = 10^7 and error rate 0.001,
prepared by :func:`~crawlplug.frontier.dedup.prepare_bloom` as a node does) and
admit distinct SHA-1 fingerprints in batches of ``--batch`` (CRAWLPLUG_BATCH_SIZE,
200) with a real payload each (the JSON serializer's output for a request, its URL
numbered): ``Frontier.admit`` and ``admit.lua``, the code path of a crawl. So that
the payloads do not fill the machine:

* ``--drain trim`` (default): the coordinator deletes the queue and the payloads
  (one MULTI of UNLINKs) whenever more than ``--trim-at`` requests wait. The Redis
  CPU then is that of admission (and of the deletions);
* ``--drain ack``: each worker leases what it admitted and acknowledges it in its
  next call (``admit_and_pop``: a node's steady state, admission + pop + ack).

Redis runs with ``--maxmemory`` (default 3gb, noeviction): the ceiling of the
whole run; the Bloom filter of 10^8 at the defaults is about 360 MB and the queue
at most ``--trim-at`` payloads (about 150 MB at 500,000). The peak ``used_memory``
is reported.

Every fingerprint of the fill is new, so any "0" flag during the fill is a false
positive (reported per step). Every ``--step`` (count/10 by default: 10^7 at the
full size) the coordinator notes the wall clock, the server's CPU (``INFO cpu``
used_cpu_user + used_cpu_sys) and memory, interpolated to the step boundary:
admissions per second and Redis CPU microseconds per admission as the filter fills.

**After the fill.** Memory: ``used_memory`` minus that of the empty server (with
the queue trimmed), and ``MEMORY USAGE`` of every key of the filter (its layers'
bit strings, its meta and spec hashes): bytes per fingerprint, against the 1.44 *
log2(1/p) bits = 1.8 bytes of an optimal Bloom filter at p = 0.001. False
positives: ``--fresh`` (10^6, at most count) fingerprints never added, admitted
through the same path: the "0" flags among them, against the target p and the
filter's own estimate from its fill (``bloom_info``: BITCOUNT of each layer).

**What growth layers cost** (``--compare-count`` fingerprints, default the count
up to 10^7): two fills on a fresh server, one right-sized layer (capacity =
compare count) against a capacity of ``--fraction`` (1/10) of it, so that the
filter chains layers of c, 2c, 4c, 8c as a crawl outgrowing its
CRAWLPLUG_BLOOM_CAPACITY does: bytes per fingerprint and admissions per second.

RedisBloom's native BF.* is compared only if the server has it (Debian's Redis
7.0 does not; the row is then skipped, and says so).

The machine is shared: read Redis's CPU per admission, which other processes
disturb less than the wall-clock rates.

Its size: the fill (workers, coordinator, trimming, per-step samples), the memory and
false-positive measurements and the report of one benchmark.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RedisProc, install_signal_handlers, kill_all, table
from crawlplug.connection import client_from_url
from crawlplug.frontier.bloom import BloomSpec
from crawlplug.frontier.dedup import BloomDedup, bloom_info, has_native_bloom, prepare_bloom
from crawlplug.frontier.keys import CrawlKeys

try:  # the tree measured may be older than crawlplug.frontier.core
    from crawlplug.frontier.core import Frontier
except ImportError:
    from crawlplug.frontier.single import Frontier

#: log2(e): an optimal Bloom filter spends log2(e) * log2(1/p) bits per item
OPTIMAL_BITS_PER_ITEM = 1.4427


def optimal_bytes(error_rate: float) -> float:
    """Bytes per item of an optimal Bloom filter: log2(e) * log2(1/p) bits."""
    import math

    return OPTIMAL_BITS_PER_ITEM * math.log2(1 / error_rate) / 8


def payload_template() -> bytes:
    """A real payload (the JSON serializer's) whose URL carries a number to fill in."""
    from scrapy import Request

    from crawlplug.serializers import JsonSerializer
    from spiders.shop import ShopSpider

    spider = ShopSpider()
    request = Request("https://site.example/item/NUMBER", callback=spider.parse_item)
    return JsonSerializer().dumps(request, spider).replace(b"NUMBER", b"%d")


def _frontier(url: str, crawl: str, capacity: int, error_rate: float, node: str) -> Frontier:
    spec = BloomSpec(capacity, error_rate)
    f = Frontier(client_from_url(url), CrawlKeys(crawl), dedup=BloomDedup(spec), node_id=node)
    prepare_bloom(f, spec, native=False, generations=0)
    return f


def _driver(
    url: str,
    crawl: str,
    capacity: int,
    error_rate: float,
    namespace: bytes,
    lo: int,
    hi: int,
    batch: int,
    drain: str,
    template: bytes,
    worker: int,
    go: Any,
    stop: Any,
    out: Any,
) -> None:
    """Admit fingerprints ``lo..hi`` of ``namespace`` (until ``stop`` is set); report (false
    positives, seconds, client CPU s)."""
    try:
        f = _frontier(url, crawl, capacity, error_rate, f"bloomscale-{worker}")
        argument = f.dedup.argument
        sha1 = hashlib.sha1
        go.wait()
        t0, c0 = time.perf_counter(), time.process_time()
        filtered = 0
        acks: list[str] = []
        for start in range(lo, hi, batch):
            if stop.is_set():
                break
            items = [
                (argument(sha1(b"%s:%d" % (namespace, i)).digest()), 0.0, template % i, "")
                for i in range(start, min(start + batch, hi))
            ]
            if drain == "ack":
                result, leased = f.admit_and_pop(items, acks, len(items))
                acks = [x.id for x in leased]
            else:
                result = f.admit(items)
            assert result is not None
            filtered += result.flags.count("0")
        if acks:
            f.admit([], acks)
        out.put((worker, filtered, time.perf_counter() - t0, time.process_time() - c0, None))
    except Exception as exc:  # noqa: BLE001 - reported by the coordinator, which stops the run
        out.put((worker, 0, 0.0, 0.0, f"{type(exc).__name__}: {exc}"))


def _cpu(info: dict[str, Any]) -> float:
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _trim(client: Any, keys: CrawlKeys, *, wait: bool = False) -> None:
    """Delete the queue and the payloads (UNLINK: freed by Redis's background thread; ``wait``
    until it has, so that ``used_memory`` counts only what is left)."""
    pipe = client.pipeline(transaction=True)
    pipe.unlink(keys.queue, keys.requests)
    pipe.execute()
    deadline = time.monotonic() + 120
    while wait and int(client.info("memory").get("lazyfree_pending_objects", 0)) and time.monotonic() < deadline:
        time.sleep(0.05)


def fill(
    rp: RedisProc,
    crawl: str,
    *,
    count: int,
    capacity: int,
    error_rate: float,
    workers: int,
    batch: int,
    drain: str,
    trim_at: int,
    step: int,
    namespace: bytes,
    log: Any,
    progress: Path | None = None,
    max_seconds: float = 0,
) -> dict[str, Any]:
    """Admit ``count`` new fingerprints from ``workers`` processes; the samples and totals
    (the samples so far also written to ``progress`` every 30 s: a long fill cut short leaves them)."""
    client, keys = rp.client, CrawlKeys(crawl)
    template = payload_template()
    ctx = mp.get_context("fork")
    go, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    share = -(-count // workers)
    ranges = [(w * share, min(count, (w + 1) * share)) for w in range(workers)]
    procs = [
        ctx.Process(
            target=_driver,
            args=(rp.url, crawl, capacity, error_rate, namespace, lo, hi, batch, drain, template, w, go, stop, out),
            daemon=True,
        )
        for w, (lo, hi) in enumerate(ranges)
        if hi > lo
    ]
    workers_of = {w: p for w, p in zip([w for w, (lo, hi) in enumerate(ranges) if hi > lo], procs)}
    for p in procs:
        p.start()
    _frontier(rp.url, crawl, capacity, error_rate, "bloomscale-setup")  # the spec recorded before the clock runs
    time.sleep(0.5)

    def done_count() -> int:
        raw = client.hmget(keys.stats, "enqueued", "filtered")
        return sum(int(x or 0) for x in raw)

    base_done = done_count()
    info = client.info()
    start = (time.monotonic(), 0, _cpu(info), int(info["used_memory"]))
    samples = [start]
    go.set()
    reports: list[tuple[Any, ...]] = []
    trims = 0
    next_log = time.monotonic() + 30
    peak = int(info["used_memory"])
    while len(reports) < len(procs):
        if max_seconds and not stop.is_set() and time.monotonic() - start[0] > max_seconds:
            stop.set()
            log(f"    --max-seconds {max_seconds:g} reached: the fill stops here and is measured as it is")
        with contextlib.suppress(Exception):
            reports.append(out.get(timeout=0.5))
            continue
        info = client.info()
        done = done_count() - base_done
        used = int(info["used_memory"])
        peak = max(peak, used)
        samples.append((time.monotonic(), done, _cpu(info), used))
        if drain == "trim" and int(client.zcard(keys.queue)) > trim_at:
            _trim(client, keys)
            trims += 1
        if time.monotonic() >= next_log:
            next_log += 30
            if progress is not None:
                progress.write_text(json.dumps({"count": count, "capacity": capacity, "samples": samples}))
            t, d, c, _ = samples[-1]
            log(
                f"    {d:>12,} of {count:,} admitted, {d / max(t - start[0], 1e-9):9,.0f}/s, "
                f"Redis {1e6 * (c - start[2]) / max(d, 1):.1f} us per admission, used_memory {used / 2**20:,.0f} MiB"
            )
        reported = {r[0] for r in reports}
        if any(not p.is_alive() and w not in reported for w, p in workers_of.items()):
            time.sleep(1.0)  # its report may still be on its way
            if out.empty():
                raise RuntimeError("a fill worker died without a report")
    for p in procs:
        p.join(30)
    errors = [r[4] for r in reports if r[4]]
    if errors:
        raise RuntimeError(f"a fill worker failed: {errors[0]}")
    info = client.info()
    samples.append((time.monotonic(), done_count() - base_done, _cpu(info), int(info["used_memory"])))
    peak = max(peak, int(info["used_memory_peak"]))
    if drain == "trim":
        _trim(client, keys, wait=True)
    t_end, done, cpu_end, _ = samples[-1]
    steps = []
    for k in range(1, -(-done // step) + 1):
        target = min(k * step, done)
        prev = steps[-1]["at"] if steps else 0
        if target <= prev:
            break
        a, b = _at(samples, prev), _at(samples, target)
        steps.append(
            {
                "at": target,
                "seconds": b[0] - a[0],
                "redis_cpu_s": b[1] - a[1],
                "per_s": (target - prev) / max(b[0] - a[0], 1e-9),
                "redis_us_per_admission": 1e6 * (b[1] - a[1]) / (target - prev),
                "used_memory": b[2],
            }
        )
    fp_total = sum(r[1] for r in reports)
    return {
        "count": done,
        "count_asked": count,
        "stopped_early": stop.is_set(),
        "capacity": capacity,
        "error_rate": error_rate,
        "workers": len(procs),
        "batch": batch,
        "drain": drain,
        "trims": trims,
        "admitted_and_filtered": done,
        "seconds": t_end - start[0],
        "per_s": done / max(t_end - start[0], 1e-9),
        "redis_cpu_s": cpu_end - start[2],
        "redis_us_per_admission": 1e6 * (cpu_end - start[2]) / max(done, 1),
        "client_cpu_s": sum(r[3] for r in reports),
        "false_positives_during_fill": fp_total,
        "used_memory_peak": peak,
        "steps": steps,
    }


def _at(samples: list[tuple[float, int, float, int]], done: int) -> tuple[float, float, int]:
    """(wall, Redis CPU, used_memory) interpolated at ``done`` admissions."""
    for (t0, d0, c0, _), (t1, d1, c1, m1) in itertools.pairwise(samples):
        if d1 >= done:
            f = (done - d0) / (d1 - d0) if d1 > d0 else 1.0
            return t0 + f * (t1 - t0), c0 + f * (c1 - c0), m1
    t, _, c, m = samples[-1]
    return t, c, m


def memory(rp: RedisProc, crawl: str, capacity: int, error_rate: float, empty_used: int, count: int) -> dict[str, Any]:
    """The filter's memory: used_memory over the empty server's, MEMORY USAGE of its keys, its estimate."""
    client, keys = rp.client, CrawlKeys(crawl)
    spec = BloomSpec(capacity, error_rate)
    f = Frontier(client, keys, dedup=BloomDedup(spec))
    prepare_bloom(f, spec, native=False, generations=0)
    strategy = f.dedup
    assert isinstance(strategy, BloomDedup)
    layers = int(client.hget(strategy.meta_key(keys), "layers") or 0)
    filter_keys = [strategy.seen_key(keys), strategy.meta_key(keys), *strategy.layer_keys(keys, layers)]
    usage = {k: int(client.memory_usage(k, samples=0) or 0) for k in filter_keys}
    info = client.info("memory")
    est = bloom_info(f, spec, strategy)
    used = int(info["used_memory"]) - empty_used
    return {
        "layers": layers,
        "layer_capacities": [x["capacity"] for x in est["layers"]],
        "layer_bytes": [-(-x["bits"] // 8) for x in est["layers"]],
        "used_memory_delta": used,
        "memory_usage_keys": sum(usage.values()),
        "bytes_per_fp_used_memory": used / count,
        "bytes_per_fp_memory_usage": sum(usage.values()) / count,
        "estimated_count": est["estimated_count"],
        "estimated_fp_rate": est["false_positive_rate"],
        "used_memory_rss": int(info["used_memory_rss"]),
    }


def run_case(
    workdir: Path, args: argparse.Namespace, *, count: int, capacity: int, fresh: int, step: int, label: str, log: Any
) -> dict[str, Any]:
    """One fresh server: fill, memory, then the false-positive test."""
    rp = RedisProc(workdir, "--maxmemory", args.maxmemory, "--maxmemory-policy", "noeviction")
    try:
        crawl = "bloomscale"
        empty_used = int(rp.client.info("memory")["used_memory"])
        log(f"  {label}: {count:,} fingerprints, capacity {capacity:,}, {args.workers} workers, drain {args.drain}")
        result = {"label": label, "redis_version": rp.version, "empty_used_memory": empty_used}
        result["fill"] = fill(
            rp,
            crawl,
            count=count,
            capacity=capacity,
            error_rate=args.error_rate,
            workers=args.workers,
            batch=args.batch,
            drain=args.drain,
            trim_at=args.trim_at,
            step=step,
            namespace=b"fill",
            log=log,
            progress=Path(f"{args.out}.progress.json"),
            max_seconds=args.max_seconds,
        )
        count = result["fill"]["count"]  # fewer than asked if --max-seconds cut the fill short
        # the reply records of the workers are the only other keys: a few hundred bytes
        result["memory"] = memory(rp, crawl, capacity, args.error_rate, empty_used, count)
        if fresh:
            fp = fill(
                rp,
                crawl,
                count=fresh,
                capacity=capacity,
                error_rate=args.error_rate,
                workers=args.workers,
                batch=args.batch,
                drain=args.drain,
                trim_at=args.trim_at,
                step=fresh,
                namespace=b"fresh",
                log=log,
            )
            result["fresh"] = {
                "count": fresh,
                "false_positives": fp["false_positives_during_fill"],
                "rate": fp["false_positives_during_fill"] / fresh,
                "per_s": fp["per_s"],
                "redis_us_per_admission": fp["redis_us_per_admission"],
            }
        result["used_memory_peak"] = int(rp.client.info("memory")["used_memory_peak"])
        result["native_bloom"] = has_native_bloom(rp.client)
        m = result["memory"]
        log(
            f"  {label}: {result['fill']['per_s']:,.0f} admissions/s, {result['fill']['redis_us_per_admission']:.1f} "
            f"Redis us each; {m['bytes_per_fp_used_memory']:.2f} B/fp (used_memory), "
            f"{m['bytes_per_fp_memory_usage']:.2f} (MEMORY USAGE), {m['layers']} layers"
            + (f"; false positives {result['fresh']['rate']:.5f}" if fresh else "")
        )
        return result
    finally:
        rp.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=2_000_000, help="fingerprints to fill (10^8: the full size)")
    ap.add_argument(
        "--capacity",
        type=int,
        default=None,
        help="the filter's first-layer capacity (default CRAWLPLUG_BLOOM_CAPACITY, 10^7; "
        "below 10^8/10 it chains layers, as a crawl that outgrows its setting)",
    )
    ap.add_argument("--error-rate", type=float, default=None, help="default CRAWLPLUG_BLOOM_ERROR_RATE (0.001)")
    ap.add_argument("--workers", type=int, default=3, help="driver processes")
    ap.add_argument("--batch", type=int, default=None, help="requests per admission call (CRAWLPLUG_BATCH_SIZE)")
    ap.add_argument("--drain", choices=("trim", "ack"), default="trim")
    ap.add_argument("--trim-at", type=int, default=500_000, help="queued requests before a trim (--drain trim)")
    ap.add_argument("--step", type=int, default=None, help="fingerprints per reported step (default count/10)")
    ap.add_argument("--fresh", type=int, default=1_000_000, help="fresh fingerprints for the false-positive rate")
    ap.add_argument(
        "--compare-count",
        type=int,
        default=None,
        help="fingerprints of the layer comparison (default: the count, at most 10^7; 0 skips it)",
    )
    ap.add_argument("--fraction", type=float, default=0.1, help="capacity / count of the chained comparison run")
    ap.add_argument(
        "--max-seconds",
        type=float,
        default=0,
        help="stop the main fill after this long and measure what it reached (0: no limit)",
    )
    ap.add_argument("--maxmemory", default="3gb", help="the Redis server's memory ceiling (noeviction)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "bloom_scale.json"))
    args = ap.parse_args()
    from crawlplug.defaults import SETTINGS

    args.capacity = args.capacity or int(SETTINGS["CRAWLPLUG_BLOOM_CAPACITY"][0])
    args.error_rate = args.error_rate or float(SETTINGS["CRAWLPLUG_BLOOM_ERROR_RATE"][0])
    args.batch = args.batch or int(SETTINGS["CRAWLPLUG_BATCH_SIZE"][0])
    step = args.step or max(1, args.count // 10)
    fresh = min(args.fresh, args.count)
    compare = min(args.count, 10_000_000) if args.compare_count is None else args.compare_count
    install_signal_handlers()
    began = time.monotonic()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - began:7.0f}s] {text}", flush=True)

    report: dict[str, Any] = {
        "args": vars(args),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "optimal_bytes_per_fp": optimal_bytes(args.error_rate),
        "right_sized_bytes_per_fp": _layer_bytes(args.count, args.error_rate) / args.count,
        "command": " ".join([".venv/bin/python", "bench/bloom_scale.py", *sys.argv[1:]]),
    }
    try:
        with tempfile.TemporaryDirectory(prefix="bloomscale-") as tmp:
            workdir = Path(tmp)
            report["main"] = run_case(
                workdir, args, count=args.count, capacity=args.capacity, fresh=fresh, step=step, label="fill", log=log
            )
            if compare:
                report["compare"] = [
                    run_case(workdir, args, count=compare, capacity=cap, fresh=0, step=compare, label=label, log=log)
                    for cap, label in (
                        (compare, "one right-sized layer"),
                        (max(1, int(compare * args.fraction)), f"capacity {args.fraction:g} x count"),
                    )
                ]
    finally:
        kill_all()
    report["seconds"] = time.monotonic() - began
    print_report(report)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"\nwritten: {args.out}")
    return 0


def _layer_bytes(capacity: int, error_rate: float) -> int:
    """Bytes of the first layer of a filter sized for ``capacity`` (its error p/2: lua Bloom's layer 0)."""
    layer = BloomSpec(capacity, error_rate).layer(0)
    return -(-layer.bits // 8)


def print_report(report: dict[str, Any]) -> None:
    main_case = report["main"]
    fill_, mem = main_case["fill"], main_case["memory"]
    n = fill_["count"]
    print(
        f"\nBloom dedup, {n:,} fingerprints through Frontier.admit (admit.lua), capacity {fill_['capacity']:,}, "
        f"p = {fill_['error_rate']}, {fill_['workers']} workers, batches of {fill_['batch']}, drain {fill_['drain']}, "
        f"Redis {main_case['redis_version']}, {report['machine']['cpus']} CPUs shared"
    )
    if fill_.get("stopped_early"):
        print(f"(cut short by --max-seconds: {n:,} of the {fill_['count_asked']:,} asked)")
    rows = [
        [f"{s['at']:,}", f"{s['per_s']:,.0f}", f"{s['redis_us_per_admission']:.2f}", f"{s['used_memory'] / 2**20:,.0f}"]
        for s in fill_["steps"]
    ]
    print(table(["filled to", "admissions/s", "Redis us/admission", "used_memory MiB"], rows))
    print(
        f"whole fill: {fill_['per_s']:,.0f} admissions/s over {fill_['seconds']:,.0f} s; Redis "
        f"{fill_['redis_us_per_admission']:.2f} us per admission ({fill_['redis_cpu_s']:,.0f} CPU s); clients "
        f"{fill_['client_cpu_s']:,.0f} CPU s; false positives during the fill "
        f"{fill_['false_positives_during_fill']:,} ({fill_['false_positives_during_fill'] / n:.5f})"
    )
    print(
        f"memory: {mem['layers']} layers (capacities {', '.join(f'{c:,}' for c in mem['layer_capacities'])}); "
        f"used_memory +{mem['used_memory_delta'] / 2**20:,.1f} MiB = {mem['bytes_per_fp_used_memory']:.2f} B/fp; "
        f"MEMORY USAGE of the filter's keys {mem['memory_usage_keys'] / 2**20:,.1f} MiB = "
        f"{mem['bytes_per_fp_memory_usage']:.2f} B/fp; optimal at p={fill_['error_rate']}: "
        f"{report['optimal_bytes_per_fp']:.2f} B/fp, one right-sized layer (computed): "
        f"{report['right_sized_bytes_per_fp']:.2f} B/fp; peak used_memory "
        f"{main_case['used_memory_peak'] / 2**20:,.0f} MiB (ceiling {report['args']['maxmemory']})"
    )
    fresh = main_case.get("fresh")
    if fresh:
        print(
            f"false positives over {fresh['count']:,} fresh fingerprints: {fresh['false_positives']:,} = "
            f"{fresh['rate']:.5f} (target {fill_['error_rate']}; the filter's estimate from its fill "
            f"{mem['estimated_fp_rate']:.5f})"
        )
    compare = report.get("compare")
    if compare:
        one = compare[0]
        rows = []
        for case in compare:
            f, m = case["fill"], case["memory"]
            rows.append(
                [
                    case["label"],
                    f"{f['capacity']:,}",
                    m["layers"],
                    f"{m['bytes_per_fp_used_memory']:.2f}",
                    f"{m['bytes_per_fp_memory_usage']:.2f}",
                    f"{m['bytes_per_fp_memory_usage'] / one['memory']['bytes_per_fp_memory_usage']:.2f}x",
                    f"{f['per_s']:,.0f}",
                    f"{f['redis_us_per_admission']:.2f}",
                    f"{f['redis_us_per_admission'] / one['fill']['redis_us_per_admission']:.2f}x",
                ]
            )
        print(f"\nwhat growth layers cost ({compare[0]['fill']['count']:,} fingerprints each, same run):")
        print(
            table(
                [
                    "case",
                    "capacity",
                    "layers",
                    "B/fp used_memory",
                    "B/fp MEMORY USAGE",
                    "bytes vs one",
                    "admissions/s",
                    "Redis us/adm",
                    "CPU vs one",
                ],
                rows,
            )
        )
    if main_case.get("native_bloom"):
        print("\nthis Redis has BF.*: the native filter is not measured by this script yet (bench/bloom_bench.py does)")
    else:
        print("\nnative BF.*: this Redis has no BF.* commands (RedisBloom / Redis 8); not compared")


if __name__ == "__main__":
    sys.exit(main())
