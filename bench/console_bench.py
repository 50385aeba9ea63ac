"""The console's read calls against today's dashboard on the same data (issue 39).

One crawl with 100,000 queued requests and 20 live nodes (each holding leases, with its
metrics), and 49 more small crawls, in a private redis-server. Both servers run as the
commands an operator runs, each a process of its own on loopback, and are asked over real
HTTP (httpx): ``crawlplug dashboard --crawl big`` (``/api/...``, read-only without a token)
and ``crawlplug console`` (``/api/v1/...``, with a viewer's token). Each
read call is made ``--calls`` times, alternating between the two; p50 and p95 of the
latency are printed side by side, then the listing of the 50 crawls, the console's
``GET /api/v1/crawls`` against ``crawlplug crawls --json`` run as a command (the command's
wall time includes its Python start, reported apart).

    .venv/bin/python bench/console_bench.py [--queued 100000] [--nodes 20] [--crawls 50] [--calls 50]

It asserts nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import RedisProc, kill_all


def _serve(args: list[str], env: dict[str, str], log: Path) -> tuple[str, subprocess.Popen[bytes]]:
    """Start ``crawlplug ARGS`` (a server); its address, once it printed it."""
    cli = str(Path(sys.executable).with_name("crawlplug"))
    proc = subprocess.Popen([cli, *args, "--port", "0"], stdout=subprocess.DEVNULL, stderr=open(log, "wb"), env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = re.search(r"on (http://127\.0\.0\.1:\d+)/", log.read_text(errors="replace"))
        if found:
            return found.group(1), proc
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError(f"crawlplug {args[-1] if args else ''} did not start: {log.read_text(errors='replace')[-500:]}")


def _fill(client: Any, queued: int, nodes: int, crawls: int) -> None:
    from crawlplug.crawl import registry, runs
    from crawlplug.frontier.core import Frontier
    from crawlplug.frontier.keys import CrawlKeys

    big = CrawlKeys("big")
    joined = runs.join(client, big, node_id="filler", ttl_ms=600_000)
    filler = Frontier(client, big, node_id="filler", epoch=joined.epoch, run_id=joined.run)
    batch = []
    for i in range(queued + nodes * 4):
        fp = hashlib.sha1(f"u{i}".encode()).digest()
        batch.append((filler.dedup.argument(fp), float(i % 7), b'{"v":2,"url":"http://shop.test/item/%d/"}' % i))
        if len(batch) == 2000:
            filler.admit(batch)
            batch = []
    if batch:
        filler.admit(batch)
    for n in range(nodes):
        node = Frontier(client, big, node_id=f"node-{n}", epoch=joined.epoch, run_id=joined.run)
        held = node.pop(4)
        node.heartbeat([x.id for x in held], producing=True, metrics={"rps": 3, "pages": 100 + n})
    for c in range(1, crawls):
        keys = CrawlKeys(f"small{c:02d}")
        runs.join(client, keys, node_id="filler", ttl_ms=600_000)
        Frontier(client, keys, node_id="filler").admit(
            [(hashlib.sha1(f"{c}-{i}".encode()).digest(), 0.0, b'{"v":2,"url":"http://a.test/"}') for i in range(10)]
        )
        registry.register(client, keys)


def _timed(http: Any, url: str, headers: dict[str, str]) -> float:
    began = time.perf_counter()
    res = http.get(url, headers=headers)
    took = time.perf_counter() - began
    if res.status_code != 200:
        raise RuntimeError(f"{url}: {res.status_code} {res.text[:200]}")
    return took


def _p(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))] * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--crawls", type=int, default=50)
    parser.add_argument("--calls", type=int, default=50)
    opts = parser.parse_args(argv)

    import httpx

    from crawlplug.access import users
    from crawlplug.server.clients import client_from_url

    work = Path(tempfile.mkdtemp(prefix="bench-console-"))
    server = RedisProc(work)
    try:
        url = f"redis://127.0.0.1:{server.port}/0"
        client = client_from_url(url)
        began = time.monotonic()
        _fill(client, opts.queued, opts.nodes, opts.crawls)
        print(
            f"filled: crawl 'big' with {opts.queued} queued and {opts.nodes} nodes, {opts.crawls - 1} small crawls "
            f"({time.monotonic() - began:.0f} s)"
        )
        token = users.add(client, "bench", "viewer", by="bench")
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("REDIS_URL", "CRAWLPLUG_CRAWL", "CRAWLPLUG_DASHBOARD_TOKEN")
        }
        dash_url, dash = _serve(["--redis-url", url, "dashboard", "--crawl", "big"], env, work / "dashboard.log")
        con_url, con = _serve(["--redis-url", url, "console"], env, work / "console.log")
        servers = [dash, con]
        pairs = [
            ("status", "/api/status", "/api/v1/crawls/big"),
            ("runs", "/api/runs", "/api/v1/crawls/big/runs"),
            ("history", "/api/history?since=1h", "/api/v1/crawls/big/history?since=1h"),
            ("nodes", "/api/nodes", "/api/v1/crawls/big/nodes"),
            ("domains", "/api/domains", "/api/v1/crawls/big/domains"),
            ("dead", "/api/dead", "/api/v1/crawls/big/dead"),
            ("alerts", "/api/alerts", "/api/v1/crawls/big/alerts"),
            ("report", "/api/report", "/api/v1/crawls/big/report"),
        ]
        auth = {"Authorization": f"Bearer {token}"}
        print(f"\nread calls, {opts.calls} each, alternating (ms): dashboard /api/... vs console /api/v1/...")
        print(f"{'call':<10} {'dash p50':>9} {'dash p95':>9} {'console p50':>12} {'console p95':>12} {'x p50':>6}")
        with httpx.Client(timeout=60) as http:
            for name, old, new in pairs:
                a: list[float] = []
                b: list[float] = []
                for _ in range(opts.calls):
                    a.append(_timed(http, dash_url + old, {}))
                    b.append(_timed(http, con_url + new, auth))
                print(
                    f"{name:<10} {_p(a, 0.5):>9.1f} {_p(a, 0.95):>9.1f} {_p(b, 0.5):>12.1f} {_p(b, 0.95):>12.1f} "
                    f"{_p(b, 0.5) / _p(a, 0.5):>6.2f}"
                )
            listing = [_timed(http, con_url + "/api/v1/crawls", auth) for _ in range(opts.calls)]
        cli = str(Path(sys.executable).with_name("crawlplug"))
        walls = []
        for _ in range(5):
            t0 = time.perf_counter()
            subprocess.run([cli, "--redis-url", url, "crawls", "--json"], check=True, capture_output=True, env=env)
            walls.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        subprocess.run([cli, "--version"], check=True, capture_output=True, env=env)
        start_only = time.perf_counter() - t0
        print(f"\nthe {opts.crawls} crawls listed:")
        print(f"  console GET /api/v1/crawls: p50 {_p(listing, 0.5):.1f} ms, p95 {_p(listing, 0.95):.1f} ms")
        print(
            f"  crawlplug crawls --json: median {statistics.median(walls) * 1000:.0f} ms as a command "
            f"(of which about {start_only * 1000:.0f} ms is starting Python and crawlplug: crawlplug --version)"
        )
        for proc in servers:
            proc.terminate()
            proc.wait(10)
        client.close()
    finally:
        server.stop()
        kill_all()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
