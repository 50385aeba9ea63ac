"""Redis memory of queued requests: crawlplug's payloads against scrapy-redis's pickles.

    python bench/payload_bench.py [--items 3000] [--repeats 1] [--domain-queue]
                                  [--baseline d7f69e2] [--out bench/results/payload.json]

Three systems in the same run: the working tree, the baseline crawlplug (``--baseline``,
default d7f69e2, the commit before issue 26: bench/common.py ``baseline_tree``) and
scrapy-redis 0.9 (its default ``PriorityQueue`` with the ``picklecompat`` serializer).

1. **Capture.** A real ``scrapy crawl shop`` of the working tree against the demo shop is
   stopped (SIGTERM) once its queue holds ``--capture`` requests; the payloads it queued are
   read back into the Requests the demo spider yielded (a callback, a priority,
   DepthMiddleware's ``depth``, RefererMiddleware's ``Referer``). A second set adds what other
   spiders carry: cb_kwargs on every third request, an extra header on every tenth.
2. **Static.** Each set is queued on a fresh redis-server by each system's own code (a child
   process importing that tree's crawlplug: ``Frontier.admit`` with no fingerprint, so only
   the queue grows; scrapy-redis: ``PriorityQueue.push``), and measured: payload bytes per
   request, ``used_memory`` delta and ``MEMORY USAGE`` of the queue keys per request, for the
   plain queue and the per-domain queue (crawlplug's ``DomainQueue``: ``dq``/``domains``).
3. **Crawl.** A real crawl of a ``--items`` shop by one node of each system on a fresh
   redis-server, sampled every 0.1 s (``used_memory``, queued requests); at each new peak of
   the queue ``MEMORY USAGE`` of the queue keys and of the fingerprints. Reported: peak
   ``used_memory`` over the empty server's, peak queued requests, and bytes per queued request
   at that peak (queue keys only, and all of ``used_memory``).

Results print as tables with ratios against scrapy-redis and the baseline, and go to
``--out`` as JSON. Nothing is asserted: the tests are elsewhere.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    BASELINE,
    ROOT,
    RedisProc,
    Sampler,
    SiteProc,
    baseline_env,
    baseline_tree,
    install_signal_handlers,
    median,
    start_node,
    table,
    wait_for,
)

CRAWL = "shop"
WORKING = "crawlplug (working tree)"
SR = "scrapy-redis"
#: scrapy-redis's queue and fingerprint keys for the spider "shop" (its defaults)
SR_QUEUE, SR_SEEN = "shop:requests", "shop:dupefilter"


def baseline_label(commit: str) -> str:
    return f"crawlplug {commit} (baseline)"


# -- requests: described as JSON, built the same way by every process --------------------------------


def describe(request: Any) -> dict[str, Any]:
    """A plain Request of the shop spider as JSON (bytes as base64; callbacks by name)."""
    return {
        "url": request.url,
        "method": request.method,
        "body": base64.b64encode(request.body).decode(),
        "headers": [
            [base64.b64encode(bytes(k)).decode(), [base64.b64encode(bytes(v)).decode() for v in vs]]
            for k, vs in request.headers.items()
        ],
        "cookies": request.cookies,
        "meta": {k: v for k, v in request.meta.items() if not str(k).startswith("_")},
        "encoding": request.encoding,
        "priority": request.priority,
        "dont_filter": request.dont_filter,
        "flags": request.flags,
        "cb_kwargs": request.cb_kwargs,
        "callback": getattr(request.callback, "__name__", None),
        "errback": getattr(request.errback, "__name__", None),
    }


def build(d: dict[str, Any], spider: Any) -> Any:
    from scrapy import Request

    return Request(
        d["url"],
        method=d["method"],
        body=base64.b64decode(d["body"]),
        cookies=d["cookies"],
        meta=d["meta"],
        headers=[(base64.b64decode(k), base64.b64decode(v)) for k, vs in d["headers"] for v in vs],
        encoding=d["encoding"],
        priority=d["priority"],
        dont_filter=d["dont_filter"],
        flags=d["flags"],
        cb_kwargs=d["cb_kwargs"],
        callback=getattr(spider, d["callback"]) if d["callback"] else None,
        errback=getattr(spider, d["errback"]) if d["errback"] else None,
    )


def with_extras(described: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The captured requests with what other spiders carry: cb_kwargs on every third, a header on every tenth."""
    out = []
    for i, d in enumerate(described):
        d = json.loads(json.dumps(d))
        if i % 3 == 0:
            d["cb_kwargs"] = {"category": str(i % 10 + 1), "page": i % 7 + 1}
        if i % 10 == 0:
            d["headers"].insert(0, [base64.b64encode(b"Accept-Language").decode(), [base64.b64encode(b"en").decode()]])
        out.append(d)
    return out


# -- in a child process: queue the requests with one tree's crawlplug ------------------------------------


def child_queue(redis_url: str, domain_queue: bool) -> dict[str, Any]:
    """Read described requests on stdin, queue them with the importable crawlplug (this tree's or
    the baseline's), print the payload sizes: run with ``python bench/payload_bench.py --child``."""
    import redis

    from crawlplug.frontier.keys import CrawlKeys

    try:  # the tree measured may be older than crawlplug.frontier.core
        from crawlplug.frontier.core import Frontier
    except ImportError:
        from crawlplug.frontier.single import Frontier
    from crawlplug.queues import DomainQueue, PriorityQueue
    from crawlplug.serializers import JsonSerializer
    from spiders.shop import ShopSpider

    spider, serializer = ShopSpider(), JsonSerializer()
    queue = DomainQueue() if domain_queue else PriorityQueue()
    requests = [build(d, spider) for d in json.load(sys.stdin)]
    payloads = [serializer.dumps(r, spider) for r in requests]
    client = redis.Redis.from_url(redis_url)
    frontier = Frontier(client, CrawlKeys(CRAWL), queue=DomainQueue if domain_queue else PriorityQueue)
    items = [(b"", queue.score(r), p, queue.domain(r)) for r, p in zip(requests, payloads)]
    # the first request alone loads the scripts and makes the crawl's fixed keys (stats, seq,
    # the reply key): the memory measured after it is what each further request costs
    frontier.admit(items[:1])
    warm = int(client.info("memory")["used_memory"])
    for start in range(1, len(items), 500):
        frontier.admit(items[start : start + 500])
    import crawlplug

    return {
        "payload_bytes": [len(p) for p in payloads],
        "crawlplug": str(Path(crawlplug.__file__).parent),
        "used_memory_warm": warm,
        "example": payloads[len(payloads) // 2].decode("utf-8", "replace"),
    }


def queue_keys(client: Any, system: str) -> list[str]:
    if system == SR:
        return [SR_QUEUE]
    names = ("requests", "queue", "dq", "domains", "dstate", "seq")
    return [f"crawlplug:{{{CRAWL}}}:{n}" for n in names]


def memory_usage(client: Any, keys: list[str]) -> int:
    return sum(int(client.memory_usage(k, samples=0) or 0) for k in keys)


def static_case(
    workdir: Path, system: str, tree: Path | None, described: list[dict[str, Any]], domain_queue: bool
) -> dict[str, Any]:
    """Queue ``described`` on a fresh redis-server with ``system``'s own code; bytes per request."""
    redis_proc = RedisProc(workdir)
    try:
        client = redis_proc.client
        before = int(client.info("memory")["used_memory"])
        if system == SR:
            from scrapy_redis import picklecompat
            from scrapy_redis.queue import PriorityQueue as SrPriorityQueue

            from spiders.shop import ShopSpider

            spider = ShopSpider()
            queue = SrPriorityQueue(client, spider, SR_QUEUE, picklecompat)
            sizes = [len(queue._encode_request(build(described[0], spider)))]
            queue.push(build(described[0], spider))  # as crawlplug's: the first alone, then the memory
            warm = int(client.info("memory")["used_memory"])
            for d in described[1:]:
                request = build(d, spider)
                sizes.append(len(queue._encode_request(request)))
                queue.push(request)
            info = {
                "payload_bytes": sizes,
                "used_memory_warm": warm,
                "example": repr(queue._encode_request(build(described[len(described) // 2], spider)))[:400],
            }
        else:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", redis_proc.url]
            if domain_queue:
                cmd.append("--domain-queue")
            env = baseline_env(tree)
            if tree is None:  # the working tree's demo spider (crawlplug itself is the venv's editable install)
                env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
            proc = subprocess.run(
                cmd,
                input=json.dumps(described),
                capture_output=True,
                text=True,
                env=env,
                check=False,
                cwd=tree or ROOT / "bench",
                timeout=300,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"{system}: the queueing child failed: {proc.stderr[-2000:]}")
            info = json.loads(proc.stdout)
        after = int(client.info("memory")["used_memory"])
        n = len(described)
        marginal = (after - info["used_memory_warm"]) / (n - 1)
        keys = queue_keys(client, system)
        by_key = {k.rsplit(":", 1)[-1]: int(client.memory_usage(k, samples=0) or 0) for k in keys if client.exists(k)}
        return {
            "system": system,
            "queue": "per-domain" if domain_queue else "plain",
            "requests": n,
            "payload_bytes_median": median(info["payload_bytes"]),
            "payload_bytes_mean": sum(info["payload_bytes"]) / n,
            "used_memory_per_request": marginal,
            "used_memory_with_fixed_costs": (after - before) / n,
            "memory_usage_per_request": sum(by_key.values()) / n,
            "memory_usage_by_key": by_key,
            "example": info.get("example"),
            "crawlplug": info.get("crawlplug"),
        }
    finally:
        redis_proc.stop()


# -- capture: the requests a real crawl queued -----------------------------------------------------------


def capture(workdir: Path, count: int, items: int) -> list[dict[str, Any]]:
    """The requests a real crawl of the working tree queued: stopped once ``count`` wait."""
    from crawlplug.serializers import JsonSerializer
    from spiders.shop import ShopSpider

    run = workdir / "capture"
    run.mkdir()
    redis_proc, site = RedisProc(run), SiteProc(run, items=items)
    try:
        node = start_node(
            run, "capture", site.url, {"REDIS_URL": redis_proc.url, "CONCURRENT_REQUESTS": 4, "CRAWLPLUG_IDLE_CLOSE": 0}
        )
        requests_key = f"crawlplug:{{{CRAWL}}}:requests"
        if not wait_for(lambda: redis_proc.client.hlen(requests_key) >= count or not node.proc.alive, 120, 0.02):
            raise RuntimeError(f"the capture crawl did not queue {count} requests (log: {node.log})")
        node.proc.signal(signal.SIGTERM)  # a graceful stop: its leases go back to the queue
        node.proc.wait(30)
        payloads = redis_proc.client.hvals(requests_key)
    finally:
        site.stop()
        redis_proc.stop()
    spider, serializer = ShopSpider(), JsonSerializer()
    return [describe(serializer.loads(p, spider)) for p in payloads]


# -- crawl: peak memory during a real crawl ---------------------------------------------------------------


def crawl_case(
    workdir: Path, system: str, tree: Path | None, items: int, tag: str, domain_queue: bool = False
) -> dict[str, Any]:
    run = workdir / tag
    run.mkdir()
    redis_proc, site = RedisProc(run), SiteProc(run, items=items)
    client = redis_proc.client
    if system == SR:
        settings: dict[str, Any] = {
            "ADDONS": "{}",
            "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
            "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
            "SCHEDULER_PERSIST": True,
        }
        seen_key, count = SR_SEEN, (lambda: client.zcard(SR_QUEUE))
    else:
        settings = {"CRAWLPLUG_IDLE_CLOSE": 0.5}
        if domain_queue:
            settings["CRAWLPLUG_QUEUE_CLASS"] = "crawlplug.queues.DomainQueue"
        seen_key, requests_key = f"crawlplug:{{{CRAWL}}}:seen", f"crawlplug:{{{CRAWL}}}:requests"
        count = lambda: client.hlen(requests_key)  # queued or leased: the payloads held
    keys = queue_keys(client, system)
    memory = client.info("memory")
    empty = int(memory["used_memory"]) - int(memory.get("used_memory_scripts", 0))
    peak: dict[str, Any] = {"queued": 0}

    def sample() -> tuple[int, int]:
        memory = client.info("memory")
        # the Lua scripts' cache (crawlplug's are large, scrapy-redis sends none): a fixed cost, apart
        used = int(memory["used_memory"]) - int(memory.get("used_memory_scripts", 0))
        queued = int(count())
        if queued > peak["queued"] * 1.02 or (queued > peak["queued"] and time.monotonic() - peak.get("at", 0) > 0.5):
            every = {k.decode(): int(client.memory_usage(k, samples=0) or 0) for k in client.keys("*")}
            stats = client.execute_command("MEMORY", "STATS")
            stats = dict(zip(stats[::2], stats[1::2])) if isinstance(stats, list) else stats
            peak.update(
                queued=queued,
                at=time.monotonic(),
                used_memory=used,
                queue_keys=memory_usage(client, keys),
                seen=every.get(seen_key, 0),
                other_keys=sum(every.values()) - every.get(seen_key, 0) - sum(every.get(k, 0) for k in keys),
                keys=len(every),
                clients=int(stats.get(b"clients.normal", stats.get("clients.normal", 0)) or 0),
            )
        return used, queued

    sampler = Sampler(sample, 0.1)
    try:
        node = start_node(
            run,
            system.split(" ")[0] + "-" + tag,
            site.url,
            {"REDIS_URL": redis_proc.url, "CONCURRENT_REQUESTS": 16, **settings},
            tree=tree,
        )
        sampler.start()
        ended = node.proc.wait(900)
        sampler.stop()
        if ended is None:
            node.proc.kill()
        pages = sum(site.hits().values())
    finally:
        sampler.stop()
        site.stop()
        redis_proc.stop()
    used = [v[0] for _, v in sampler.values]
    queued = peak.get("queued", 0)
    return {
        "system": system,
        "queue": "per-domain" if domain_queue else "plain",
        "items": items,
        "pages": pages,
        "exit": node.proc.returncode,
        "samples": len(used),
        "peak_used_memory_over_empty": (max(used) - empty) if used else None,
        "peak_queued": queued,
        "queue_bytes_per_queued_request": peak["queue_keys"] / queued if queued else None,
        "used_memory_per_queued_request": (peak["used_memory"] - empty) / queued if queued else None,
        "at_peak": {k: peak.get(k) for k in ("queue_keys", "seen", "other_keys", "keys", "clients", "used_memory")},
        "used_memory_at_peak_over_empty": peak["used_memory"] - empty if queued else None,
        "keys_at_peak": (peak["queue_keys"] + peak["seen"] + peak["other_keys"]) if queued else None,
        "log": str(node.log),
    }


# -- report ------------------------------------------------------------------------------------------------


def mb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.2f} MB"


def ratio(value: float | None, against: float | None) -> str:
    return f"{value / against:.2f}" if value and against else "-"


def render(static: list[dict[str, Any]], crawls: list[dict[str, Any]], base: str) -> str:
    out = [
        "Static: the captured requests queued by each system's own code on a fresh redis-server (bytes per",
        "queued request: payload; MEMORY USAGE of the queue keys; used_memory after the first request, which",
        "loads the scripts, to the last; x SR, x base: used_memory over scrapy-redis's / the baseline's)",
    ]
    rows = []
    for c in static:
        group = [s for s in static if s["set"] == c["set"] and s["queue"] == c["queue"]]
        sr = next((s for s in static if s["set"] == c["set"] and s["system"] == SR and s["queue"] == "plain"), None)
        b = next((s for s in group if s["system"] == base), None)
        rows.append(
            [
                f"{c['system']}",
                c["set"],
                c["queue"],
                c["requests"],
                f"{c['payload_bytes_mean']:.0f}",
                f"{c['memory_usage_per_request']:.0f}",
                f"{c['used_memory_per_request']:.0f}",
                ratio(c["used_memory_per_request"], sr and sr["used_memory_per_request"]),
                ratio(c["used_memory_per_request"], b and b["used_memory_per_request"]),
            ]
        )
    out.append(
        table(
            ["system", "requests", "queue", "n", "payload B", "MEMORY USAGE B", "used_memory B", "x SR", "x base"], rows
        )
    )
    if crawls:
        out += ["", "Crawl: one node of each system crawls the demo shop (median of --repeats)"]
        rows = []
        for system, queue in dict.fromkeys((c["system"], c["queue"]) for c in crawls):
            runs = [c for c in crawls if c["system"] == system and c["queue"] == queue]
            m = {
                k: median([r[k] for r in runs if r.get(k) is not None])
                for k in (
                    "peak_used_memory_over_empty",
                    "peak_queued",
                    "queue_bytes_per_queued_request",
                    "keys_at_peak",
                    "pages",
                )
            }
            rows.append((system, queue, m))
        sr = next((m for s, q, m in rows if s == SR), None)
        bm = next((m for s, q, m in rows if s == base and q == "plain"), None)

        def both(m: dict[str, Any], key: str) -> list[str]:
            return [ratio(m[key], sr and sr[key]), ratio(m[key], bm and bm[key])]

        out.append(
            table(
                [
                    "system",
                    "queue",
                    "pages",
                    "peak queued",
                    "keys at peak",
                    "x SR",
                    "x base",
                    "queue B/request",
                    "x SR ",
                    "x base ",
                    "peak used_memory",
                ],
                [
                    [
                        s,
                        q,
                        m["pages"],
                        m["peak_queued"],
                        mb(m["keys_at_peak"]),
                        *both(m, "keys_at_peak"),
                        f"{m['queue_bytes_per_queued_request'] or 0:.0f}",
                        *both(m, "queue_bytes_per_queued_request"),
                        mb(m["peak_used_memory_over_empty"]),
                    ]
                    for s, q, m in rows
                ],
            )
        )
        out += ["", "At the queue's peak, where the memory is (MEMORY USAGE of every key; MEMORY STATS clients):"]
        out.append(
            table(
                ["system", "queue", "used_memory", "queue keys", "fingerprints", "other keys (n)", "clients", "rest"],
                [
                    [
                        c["system"],
                        c["queue"],
                        mb(c["used_memory_at_peak_over_empty"]),
                        mb(c["at_peak"]["queue_keys"]),
                        mb(c["at_peak"]["seen"]),
                        f"{mb(c['at_peak']['other_keys'])} ({c['at_peak']['keys']})",
                        mb(c["at_peak"]["clients"]),
                        mb(c["used_memory_at_peak_over_empty"] - c["keys_at_peak"] - c["at_peak"]["clients"]),
                    ]
                    for c in crawls[: len({(x["system"], x["queue"]) for x in crawls})]
                ],
            )
        )
        out.append(
            "keys at peak: MEMORY USAGE of every key when the queue was at its peak (queue keys, "
            "fingerprints, the rest); queue B/request: of the queue keys (requests, queue, dq, domains, "
            "dstate, seq; scrapy-redis: its zset) over the requests queued or leased then; peak used_memory: "
            "over the empty server's, the scripts' cache (used_memory_scripts) left out. rest: used_memory "
            "no key or client accounts for (the scripts' compiled functions, Redis's own bookkeeping): "
            "nearly fixed, growing slowly with the crawl."
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=3000, help="items of the crawled demo shop (3000: 3,161 pages)")
    ap.add_argument("--repeats", type=int, default=1, help="crawls per system (the table shows medians)")
    ap.add_argument("--capture", type=int, default=2000, help="requests captured from the real crawl")
    ap.add_argument("--domain-queue", action="store_true", help="crawl with crawlplug's DomainQueue too")
    ap.add_argument("--no-crawl", action="store_true", help="only the capture and the static sizes")
    ap.add_argument("--baseline", default=BASELINE, help="the commit measured as today's crawlplug")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "payload.json"))
    ap.add_argument("--child", metavar="REDIS_URL", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child_queue(args.child, args.domain_queue)))
        return 0
    install_signal_handlers()
    sys.path.insert(0, str(ROOT))  # the demo spider, to build and read requests in this process
    started = time.monotonic()
    base, tree = baseline_label(args.baseline), baseline_tree(args.baseline)
    workdir = ROOT / "bench" / "results" / f"payload-{time.strftime('%Y%m%d-%H%M%S')}"
    workdir.mkdir(parents=True)
    print(f"payload_bench: capturing {args.capture} queued requests from a real crawl ...", flush=True)
    shop = capture(workdir, args.capture, max(args.items, 3000))
    sets = {"shop": shop, "shop+extras": with_extras(shop)}
    static = []
    for name, described in sets.items():
        for system, t in ((WORKING, None), (base, tree), (SR, None)):
            for dq in (False, True) if system != SR else (False,):
                res = static_case(workdir, system, t, described, dq)
                res["set"] = name
                static.append(res)
                print(
                    f"  static {name:12} {system:32} {res['queue']:10} payload {res['payload_bytes_mean']:6.0f} B, "
                    f"used_memory {res['used_memory_per_request']:6.0f} B/request",
                    flush=True,
                )
    crawls = []
    if not args.no_crawl:
        systems = [(WORKING, None, False), (base, tree, False), (SR, None, False)]
        if args.domain_queue:
            systems += [(WORKING, None, True), (base, tree, True)]
        for i in range(args.repeats):
            for system, t, dq in systems:
                tag = f"crawl{i}-{len(crawls)}"
                res = crawl_case(workdir, system, t, args.items, tag, dq)
                crawls.append(res)
                print(
                    f"  crawl {system:32} {res['queue']:10} {res['pages']} pages, peak queued {res['peak_queued']}, "
                    f"peak used_memory +{(res['peak_used_memory_over_empty'] or 0) / 1e6:.2f} MB, "
                    f"{res['queue_bytes_per_queued_request'] or 0:.0f} B/queued request",
                    flush=True,
                )
    report = render(static, crawls, base)
    print()
    print(report)
    examples = {f"{s['system']} ({s['set']})": s["example"] for s in static if s["queue"] == "plain"}
    print("\nA payload of each (the middle one):")
    for label, example in examples.items():
        print(f"  {label}: {example[:300]}")
    probe = RedisProc(workdir)
    version = probe.version
    probe.stop()
    print(
        f"\nredis-server {version}, {platform.platform()}, Python {platform.python_version()}; "
        f"total {time.monotonic() - started:.0f}s"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "baseline": args.baseline,
                "items": args.items,
                "repeats": args.repeats,
                "redis_version": version,
                "static": static,
                "crawls": crawls,
                "table": report,
                "seconds": time.monotonic() - started,
            },
            indent=2,
            default=str,
        )
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
