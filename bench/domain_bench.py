"""Pop throughput of DomainQueue with many domains, beside PriorityQueue, same run.

A real redis-server (the embedded one) on a free port; the public Frontier
class; requests already admitted, then leased in batches of --batch (the
scheduler's prefetch) until --pops requests are out; median of --runs.

Cases:
  PriorityQueue                       one shared queue (the reference)
  DomainQueue, no limits              10,000 domains, no delay, no concurrency cap
  DomainQueue, polite                 10,000 domains, 1 s delay, concurrency 1:
                                      every domain gives one request per batch at most
  DomainQueue, one domain             all requests of one domain, no limits

Run: .venv/bin/python bench/domain_bench.py [--domains 10000] [--per-domain 5]
Writes bench/results/domains.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RedisProc

from crawlplug.frontier.domains import Domains
from crawlplug.frontier.keys import CrawlKeys

try:  # the tree measured may be older than crawlplug.frontier.core
    from crawlplug.frontier.core import Frontier
except ImportError:
    from crawlplug.frontier.single import Frontier
from crawlplug.queues import DomainQueue, PriorityQueue

PAYLOAD = b'{"v":1,"url":"https://%s/page/%d","callback":"parse_item"}'


def fill(frontier: Frontier, domains: int, per_domain: int, with_domain: bool) -> int:
    items = []
    for d in range(domains):
        host = f"site{d}.example"
        for i in range(per_domain):
            fp = hashlib.sha1(f"{host}/{i}".encode()).digest()
            items.append((fp, -(i % 3), PAYLOAD % (host.encode(), i), host if with_domain else ""))
    # interleave domains the way a crawl discovers them: by page, not by site
    items.sort(key=lambda x: x[1])
    for start in range(0, len(items), 2000):
        frontier.admit(items[start : start + 2000])
    return len(items)


def pop_rate(frontier: Frontier, pops: int, batch: int) -> tuple[float, int, int]:
    """(requests leased per second, requests leased, round trips)."""
    got = calls = 0
    events: list[tuple[str, str]] = []
    t0 = time.perf_counter()
    while got < pops:
        # as a node does: "sent" reports (a domain's first request, or one with a delay)
        # ride in the next call, with the pop
        if events:
            _, leased = frontier.admit_and_pop([], [], batch, events)
        else:
            leased = frontier.pop(batch)
        calls += 1
        if not leased:
            break
        got += len(leased)
        events = [(x.id, "s") for x in leased if "s" in x.report]
    return got / (time.perf_counter() - t0), got, calls


def run_case(client: redis.Redis, name: str, args: argparse.Namespace) -> dict[str, Any]:
    rates, per_call = [], []
    for rnd in range(args.runs):
        client.flushall()
        keys = CrawlKeys(f"bench{rnd}")
        domains, per = args.domains, args.per_domain
        if name == "PriorityQueue":
            frontier = Frontier(client, keys, queue=PriorityQueue)
        else:
            frontier = Frontier(client, keys, queue=DomainQueue())
            limits = {"DomainQueue, polite": "1000 1"}.get(name, "0 0")
            Domains(client, keys).configure({"s:*": limits})
            if name == "DomainQueue, one domain":
                domains, per = 1, args.domains * args.per_domain
        total = fill(frontier, domains, per, name != "PriorityQueue")
        pops = min(args.pops, total if name != "DomainQueue, polite" else domains)
        rate, got, calls = pop_rate(frontier, pops, args.batch)
        rates.append(rate)
        per_call.append(got / max(calls, 1))
    return {
        "case": name,
        "pops_per_s": statistics.median(rates),
        "rounds": rates,
        "requests_per_call": statistics.median(per_call),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--domains", type=int, default=10_000)
    ap.add_argument("--per-domain", type=int, default=5)
    ap.add_argument("--pops", type=int, default=10_000, help="requests to lease per run")
    ap.add_argument("--batch", type=int, default=32, help="requests asked per pop call")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "domains.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-domains-") as tmp:
        server = RedisProc(Path(tmp))
        try:
            client = redis.Redis.from_url(server.url)
            results = [
                run_case(client, name, args)
                for name in (
                    "PriorityQueue",
                    "DomainQueue, no limits",
                    "DomainQueue, polite",
                    "DomainQueue, one domain",
                )
            ]
        finally:
            server.stop()
    ref = results[0]["pops_per_s"]
    print(
        f"\nPop throughput, {args.domains} domains x {args.per_domain} requests, batches of {args.batch}, "
        f"median of {args.runs} runs (Frontier.pop, one round trip per call)"
    )
    print(f"{'case':<26} {'requests/s':>11} {'x PriorityQueue':>16} {'requests per call':>18}")
    for r in results:
        r["ratio_vs_priority_queue"] = r["pops_per_s"] / ref
        print(
            f"{r['case']:<26} {r['pops_per_s']:>11.0f} {r['ratio_vs_priority_queue']:>16.2f} "
            f"{r['requests_per_call']:>18.1f}"
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"params": vars(args), "results": results}, indent=2))
    print(f"JSON: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
