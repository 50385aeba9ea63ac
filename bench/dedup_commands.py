"""Where an exact store's Redis CPU goes: the splitting compact store, the compact store by
generations and the set, side by side, round after round, on links of which a share were
seen before (a crawl's links are mostly seen: 16 of 17 is the default).

Each round gives each store a fresh ``redis-server`` (no persistence, no slow log) and
admits ``--links`` links through ``Frontier.admit`` in calls of ``--batch`` (record-only,
empty payloads), a ``--seen`` share of them links admitted before. Printed per round and
store: Redis CPU a link (``INFO cpu`` delta) and the top ``INFO commandstats`` entries
(microseconds and calls a link). Asserts nothing.

    .venv/bin/python bench/dedup_commands.py --links 300000 --seen 0.94 --rounds 3
    .venv/bin/python bench/dedup_commands.py --links 100000 --seen 0 --rounds 2   # all new
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _store(kind: str) -> Any:
    from crawlplug.frontier.dedup import SetDedup
    from crawlplug.frontier.fphash import HashDedup, HashSpec, SplitSpec

    if kind == "split":
        return HashDedup(SplitSpec())
    if kind == "gens":
        return HashDedup(HashSpec.for_capacity(1_000_000))
    return SetDedup()


def _cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def run(
    kind: str, links: int, seen_share: float, batch: int, seed: int
) -> tuple[float, list[tuple[str, float, float]]]:
    import redis

    from bench.dedup_bench import _server
    from crawlplug.frontier.core import Frontier
    from crawlplug.frontier.keys import CrawlKeys

    proc, port, workdir = _server(shutil.which("redis-server") or "redis-server")
    client = redis.Redis(port=port, socket_timeout=600)
    try:
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        frontier = Frontier(client, CrawlKeys("commands"), dedup=_store(kind), node_id="bench")
        frontier.admit([(os.urandom(20), 0.0, b"")])  # scripts loaded, the Lua heap warm
        client.config_resetstat()
        rnd = random.Random(seed)
        admitted: list[bytes] = []
        before = _cpu(client)
        done = 0
        while done < links:
            calls = []
            for _ in range(batch):
                if admitted and rnd.random() < seen_share:
                    calls.append(admitted[rnd.randrange(len(admitted))])
                else:
                    admitted.append(os.urandom(20))
                    calls.append(admitted[-1])
            frontier.admit([(fp, 0.0, b"") for fp in calls])
            done += batch
        cpu = (_cpu(client) - before) / done * 1e6
        stats = client.info("commandstats")
        top = sorted(
            ((k.removeprefix("cmdstat_"), v["usec"] / done, v["calls"] / done) for k, v in stats.items()),
            key=lambda x: -x[1],
        )[:6]
        return cpu, top
    finally:
        client.close()
        proc.terminate()
        proc.wait()
        subprocess.run(["rm", "-rf", workdir], check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--links", type=int, default=300_000)
    parser.add_argument("--seen", type=float, default=16 / 17, help="share of links admitted before")
    parser.add_argument("--batch", type=int, default=17, help="links a call (a page's)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kinds", default="split,gens,set")
    args = parser.parse_args()
    results: dict[str, list[float]] = {}
    for n in range(args.rounds):
        for kind in args.kinds.split(","):
            cpu, top = run(kind, args.links, args.seen, args.batch, seed=n)
            results.setdefault(kind, []).append(cpu)
            print(
                f"round {n + 1} {kind:5}: {cpu:6.2f} us a link | "
                + "  ".join(f"{name} {us:.2f} us x {calls:.2f}" for name, us, calls in top),
                flush=True,
            )
    for kind, values in results.items():
        print(f"median {kind:5}: {sorted(values)[len(values) // 2]:.2f} us a link over {len(values)} rounds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
