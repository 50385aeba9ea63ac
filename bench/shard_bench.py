"""Admission and pop throughput of one crawl on a three-primary Redis Cluster:
unsharded (the crawl in one slot, one primary) against CRAWLPLUG_SHARDS = 3 and 6.

A real cluster (three redis-server processes, ``redis-cli --cluster create``,
as the tests build it); ``--workers`` processes play the nodes, each with its
own cluster client, through the public Frontier / ShardedFrontier classes:

  admission   each worker admits batches of --batch new requests (1,000 hosts)
  pop + ack   each worker leases --batch requests and acks the previous batch,
              one admit_and_pop call per batch (what a node's scheduler does),
              from the requests admitted before; timed until the queue runs dry

Each phase runs --seconds; median of --runs. Beside the rates it prints the
CPU seconds each primary spent (INFO cpu), which shows where the load went,
and the Redis ceiling: requests served per CPU second of the busiest primary,
the rate at which that primary's one core would be saturated. On a 2-core
machine the three primaries and the workers share the two cores, so the
measured rates are bounded by the cores (the workers' CPU), not by Redis;
the ceiling is what sharding raises.

Run: .venv/bin/python bench/shard_bench.py [--workers 2] [--seconds 4] [--runs 3]
Writes bench/results/shards.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crawlplug.connection import client_from_url
from crawlplug.frontier.keys import CrawlKeys

try:  # the tree measured may be older than crawlplug.frontier.core
    from crawlplug.frontier.core import ShardedFrontier, claim_shards
except ImportError:
    from crawlplug.frontier.sharded import ShardedFrontier, claim_shards
try:  # the tree measured may be older than crawlplug.frontier.core
    from crawlplug.frontier.core import Frontier
except ImportError:
    from crawlplug.frontier.single import Frontier
from tests.support.clusters import RedisCluster3

PAYLOAD = b'{"v":1,"url":"https://%s/page/%d","callback":"parse_item"}'


def _frontier(url: str, crawl: str, shards: int, node: str) -> Any:
    client = client_from_url(url)
    keys = CrawlKeys(crawl)
    if shards > 1:
        return ShardedFrontier(client, keys, shards=shards, node_id=node)
    return Frontier(client, keys, node_id=node)


def _items(worker: int, start: int, n: int) -> list[tuple[bytes, float, bytes, str, str]]:
    out = []
    for i in range(start, start + n):
        host = f"site{(i * 7 + worker) % 1000}.example"
        fp = hashlib.sha1(f"{worker}/{i}".encode()).digest()
        out.append((fp, 0.0, PAYLOAD % (host.encode(), i), "", host))
    return out


def _worker(
    url: str, crawl: str, shards: int, phase: str, seconds: float, batch: int, worker: int, go: Any, out: Any
) -> None:
    f = _frontier(url, crawl, shards, f"w{worker}")
    done = i = 0
    acks: list[str] = []
    go.wait()
    start = time.perf_counter()
    end = stop = start + seconds
    while time.perf_counter() < end:
        if phase == "admit":
            done += f.admit(_items(worker, i, batch)).admitted
            i += batch
        else:
            _, leased = f.admit_and_pop([], acks, batch)
            acks = [x.id for x in leased]
            done += len(leased)
            if not leased:  # the queue ran dry: the rate is over the time it had work
                stop = time.perf_counter()
                break
    if acks:
        f.admit([], acks)
    out.put((done, min(stop, time.perf_counter()) - start))


def _phase(url: str, crawl: str, shards: int, phase: str, args: argparse.Namespace) -> tuple[float, int]:
    """(requests per second over all workers, requests handled)."""
    ctx = mp.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(url, crawl, shards, phase, args.seconds, args.batch, w, go, out))
        for w in range(args.workers)
    ]
    for p in procs:
        p.start()
    time.sleep(0.3)
    go.set()
    counts = [out.get(timeout=args.seconds + 60) for _ in procs]
    for p in procs:
        p.join()
    return sum(done / elapsed for done, elapsed in counts), sum(done for done, _ in counts)


def _cpu(cluster: RedisCluster3) -> list[float]:
    out = []
    for node in cluster.nodes:
        c = node.client()
        info = c.info("cpu")
        out.append(float(info["used_cpu_user"]) + float(info["used_cpu_sys"]))
        c.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--shards", default="1,3,6")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "shards.json"))
    args = ap.parse_args()
    cases = [int(x) for x in args.shards.split(",")]
    results: dict[str, Any] = {"workers": args.workers, "batch": args.batch, "seconds": args.seconds, "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        cluster = RedisCluster3(Path(tmp)).start()
        try:
            for shards in cases:
                rows: dict[str, list[float]] = {"admit": [], "pop+ack": []}
                cpu_split: list[list[float]] = []
                served: list[int] = []
                for run in range(args.runs):
                    cluster.flushall()
                    crawl = f"bench{shards}x{run}"
                    client = client_from_url(cluster.url)
                    claim_shards(client, CrawlKeys(crawl), shards)
                    client.close()
                    before = _cpu(cluster)
                    rate, admitted = _phase(cluster.url, crawl, shards, "admit", args)
                    rows["admit"].append(rate)
                    rate, leased = _phase(cluster.url, crawl, shards, "pop", args)
                    rows["pop+ack"].append(rate)
                    cpu_split.append([round(b - a, 2) for a, b in zip(before, _cpu(cluster))])
                    served.append(admitted + leased)
                med = {k: statistics.median(v) for k, v in rows.items()}
                # what the busiest primary could take: requests served per CPU second of it
                ceilings = [n / max(max(cpu), 1e-9) for n, cpu in zip(served, cpu_split)]
                med["ceiling"] = statistics.median(ceilings)
                results["cases"][str(shards)] = {"median": med, "runs": rows, "primary_cpu_s": cpu_split}
                print(
                    f"shards={shards}: admission {med['admit']:9,.0f} req/s   pop+ack {med['pop+ack']:9,.0f} req/s   "
                    f"busiest primary saturates at {med['ceiling']:9,.0f} req/s   "
                    f"CPU s per primary (per run) {cpu_split}",
                    flush=True,
                )
        finally:
            cluster.stop()
    base = results["cases"].get("1", {}).get("median")
    if base:
        print("\nrelative to one shard (same run):")
        for shards, case in results["cases"].items():
            m = case["median"]
            print(
                f"  shards={shards}: admission {m['admit'] / base['admit']:.2f}x   pop+ack {m['pop+ack'] / base['pop+ack']:.2f}x"
                f"   Redis ceiling {m['ceiling'] / base['ceiling']:.2f}x"
            )
    print(f"\n(this machine: {mp.cpu_count()} CPUs shared by 3 primaries and {args.workers} workers)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
