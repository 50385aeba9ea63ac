"""One simulated crawl node of bench/capacity.py: a node's frontier calls, without HTTP.

    python bench/capacity_driver.py '<json config>'      (started by bench/capacity.py)

Run by path, never with ``-m``: its directory (``bench/``) is then first on ``sys.path``
and the repository root is not, so ``crawlplug`` comes from ``PYTHONPATH`` (the baseline
tree of :func:`bench.common.baseline_tree`) or else from the installed working tree. It
imports nothing of the working tree's crawlplug itself; everything it calls on a
frontier exists in the baseline commit too (``open_frontier``, ``prepare_bloom``,
``admit_and_pop``, ``heartbeat_and_reap``).

**crawlplug** (``"system": "crawlplug"``): the Scheduler's steady state (crawlplug.scheduler.batch,
crawlplug.scheduler.liveness) with ``concurrency`` requests in flight: each call
finishes the ``pages_per_call`` oldest in-flight pages, admits the links they
produced that pass the node's local fingerprint cache (``sent`` per page on average:
exactly ``new`` new URLs, the rest duplicates of URLs admitted before, so the dedup
filters them in Redis), acknowledges those pages and leases as many new ones:
one ``admit_and_pop`` (items, acks, n), as ``Batch.flush(pop=free slots)``. Every
``beat_pages`` pages (the pages a node fetching at the reference rate finishes in
one CRAWLPLUG_HEARTBEAT) it sends ``heartbeat_and_reap`` with its held leases and the
metrics and counts a node's heartbeat carries. Items carry their host as the route
(5th field), as the Scheduler's do for a sharded crawl.

**scrapy-redis** (``"system": "scrapy-redis"``): its Scheduler's calls: one
``PriorityQueue.pop()`` per request handed to the engine, and for every link of a
page (``links``: scrapy-redis has no local cache) ``RFPDupeFilter.request_seen``
(one SADD) and, if new, ``PriorityQueue.push`` (one ZADD of the pickled request).

It prints one JSON line: pages, seconds, client CPU seconds, client round trips and
commands (counted as bench.common.BenchProbe counts them), flags seen.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

from common import _patch_redis, _redis_counts  # bench/common.py: stdlib-only at import

_HOST = re.compile(rb"https?://([^/\"]+)")


def _host_of(payload: bytes) -> str:
    m = _HOST.search(payload)
    return m.group(1).decode() if m else "site0.example"


def make_dedup(name: str, cfg: dict[str, Any]) -> Any:
    """A dedup strategy of crawlplug.frontier.dedup by mode name, built as the dupefilters build theirs."""
    from crawlplug.frontier import dedup as dd

    if name == "set":
        return dd.SetDedup()
    if name == "bloom":
        from crawlplug.frontier.bloom import BloomSpec

        return dd.BloomDedup(BloomSpec(int(cfg["bloom_capacity"]), float(cfg["bloom_error_rate"])))
    if name == "hash":  # the compact store as the tree's dupefilter builds it by default
        try:
            from crawlplug.frontier import fphash
        except ImportError:
            fphash = None
        if fphash is not None:
            split = getattr(fphash, "SplitSpec", None)  # a tree before the splitting store: generations
            return fphash.HashDedup(split() if split else fphash.HashSpec.for_capacity(1_000_000))
    # a strategy added later, wherever in crawlplug.frontier it lives
    import importlib
    import pkgutil

    import crawlplug.frontier as package

    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        try:
            importlib.import_module(info.name)
        except Exception:  # noqa: BLE001, S112 - a module that cannot be imported here holds no strategy we can use
            continue
    todo, found = [dd.Dedup], []
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if getattr(cls, "mode", None) == name:
            found.append(cls)
    expected = int(cfg["expected"])
    for cls in found:
        for args, kwargs in (((), {}), ((expected,), {}), ((), {"expected": expected}), ((), {"capacity": expected})):
            try:
                return cls(*args, **kwargs)
            except TypeError:
                continue
        raise SystemExit(f"cannot build dedup {name!r} ({cls.__name__}): unknown constructor")
    raise SystemExit(f"this crawlplug has no dedup strategy {name!r}")


def _wait_go(path: str) -> None:
    print(json.dumps({"ready": True}), flush=True)
    while not os.path.exists(path):
        time.sleep(0.005)


class Links:
    """The links a finished page produces: new URLs and duplicates of earlier ones."""

    def __init__(self, cfg: dict[str, Any], template: bytes) -> None:
        self.rng = random.Random(f"{cfg['seed']}:{cfg['node']}")
        self.node = cfg["node"]
        self.hosts = int(cfg["hosts"])
        self.offsite = float(cfg["offsite"])
        self.new = int(cfg["new"])
        self.template = template
        self.i = 0
        self.recent: deque[tuple[bytes, str, bytes]] = deque(maxlen=4096)  # (fingerprint, host, payload)

    def count(self, mean: float) -> int:
        whole = int(mean)
        return whole + (1 if self.rng.random() < mean - whole else 0)

    def fresh(self, host: str) -> tuple[bytes, str, bytes]:
        self.i += 1
        if self.rng.random() < self.offsite:
            host = f"site{self.rng.randrange(self.hosts)}.example"
        fp = hashlib.sha1(b"%d:%d:%d" % (os.getpid(), self.node, self.i)).digest()
        return fp, host, self.template % (host.encode(), self.i)

    def page(self, host: str, sent: float) -> tuple[list[tuple[bytes, str, bytes]], list[tuple[bytes, str, bytes]]]:
        """(new links, duplicate links) of one page of ``host`` reaching Redis."""
        n = self.count(sent)
        new = [self.fresh(host) for _ in range(min(self.new, n))]
        dups = [self.rng.choice(self.recent) for _ in range(n - len(new))] if self.recent else []
        self.recent.extend(new)
        return new, dups


def seed_links(links: Links, n: int) -> list[tuple[bytes, str, bytes]]:
    out = []
    for _ in range(n):
        out.append(links.fresh(f"site{links.rng.randrange(links.hosts)}.example"))
    links.recent.extend(out)
    return out


def run_crawlplug(cfg: dict[str, Any]) -> dict[str, Any]:
    from crawlplug.connection import client_from_url
    from crawlplug.frontier.keys import CrawlKeys

    try:  # the tree measured may be older than crawlplug.frontier.core
        from crawlplug.frontier.core import open_frontier
    except ImportError:
        from crawlplug.frontier.sharded import open_frontier

    client = client_from_url(cfg["url"])
    keys = CrawlKeys(cfg["crawl"])
    shards = int(cfg.get("shards") or 1)
    f = open_frontier(
        client,
        keys,
        shards=shards if shards > 1 else None,
        dedup_factory=lambda: make_dedup(cfg["dedup"], cfg),
        node_id=f"capacity-{cfg['node']}",
        lease_timeout=30.0,
        heartbeat=float(cfg["heartbeat"]),
    )
    if cfg["dedup"] == "bloom":
        from crawlplug.frontier.bloom import BloomSpec
        from crawlplug.frontier.dedup import prepare_bloom

        prepare_bloom(
            f, BloomSpec(int(cfg["bloom_capacity"]), float(cfg["bloom_error_rate"])), native=False, generations=0
        )
    argument = f.dedup.argument
    links = Links(cfg, cfg["template"].encode())
    concurrency, per_call = int(cfg["concurrency"]), int(cfg["pages_per_call"])
    in_flight: deque[tuple[str, str]] = deque()

    def item(link: tuple[bytes, str, bytes]) -> tuple[Any, ...]:
        fp, host, payload = link
        return (argument(fp), 0.0, payload, "", host)

    # this node's share of the crawl's start: admitted before the clock runs
    seeds = [item(x) for x in seed_links(links, int(cfg["seed_per_node"]))]
    for start in range(0, len(seeds), 200):  # CRAWLPLUG_BATCH_SIZE
        f.admit(seeds[start : start + 200])
    _, leased = f.admit_and_pop([], [], concurrency)
    in_flight.extend((x.id, _host_of(x.payload)) for x in leased)
    _wait_go(cfg["go"])
    _patch_redis()
    # the node totals' keyword: totals (since issue 35's rename), counts before it
    import inspect

    totals_word = "totals" if "totals" in inspect.signature(f.heartbeat_and_reap).parameters else "counts"
    t0, c0 = time.perf_counter(), time.process_time()
    pages = beats = calls = admitted = filtered = sent = 0
    beat_pages = max(1, int(cfg["beat_pages"]))
    next_beat = beat_pages
    started = int(time.time() * 1000)
    while pages < int(cfg["pages"]):
        if not in_flight:  # the queue ran dry (a tiny crawl): lease again
            _, leased = f.admit_and_pop([], [], concurrency)
            calls += 1
            if not leased:
                break
            in_flight.extend((x.id, _host_of(x.payload)) for x in leased)
            continue
        k = min(per_call, len(in_flight))
        finished = [in_flight.popleft() for _ in range(k)]
        items: list[tuple[Any, ...]] = []
        for _, host in finished:
            new, dups = links.page(host, float(cfg["sent"]))
            items += [item(x) for x in new + dups]
        result, leased = f.admit_and_pop(items, [lease for lease, _ in finished], k)
        calls += 1
        sent += len(items)
        if result is not None:
            admitted += result.flags.count("1")
            filtered += result.flags.count("0")
        in_flight.extend((x.id, _host_of(x.payload)) for x in leased)
        pages += k
        if pages >= next_beat:
            next_beat += beat_pages
            beats += 1
            held = [lease for lease, _ in in_flight]
            f.heartbeat_and_reap(
                held,
                producing=False,
                metrics={
                    "pid": os.getpid(),
                    "started": started,
                    "leases": len(held),
                    "acked": pages,
                    "pages_per_min": 0,
                    "paused": 0,
                },
                **{totals_word: {"items": 0, "errors": 0, "spider_errors": 0}},
            )
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    roundtrips, commands = _redis_counts["roundtrips"], _redis_counts["commands"]
    if in_flight:  # give the rest back (outside the measurement)
        f.release([lease for lease, _ in in_flight], unstarted=True)
    return {
        "pages": pages,
        "seconds": seconds,
        "client_cpu_s": cpu,
        "roundtrips": roundtrips,
        "commands": commands,
        "calls": calls,
        "heartbeats": beats,
        "sent": sent,
        "admitted": admitted,
        "filtered": filtered,
    }


def run_scrapy_redis(cfg: dict[str, Any]) -> dict[str, Any]:
    import redis
    from scrapy import Request
    from scrapy_redis import picklecompat
    from scrapy_redis.dupefilter import RFPDupeFilter
    from scrapy_redis.queue import PriorityQueue

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the demo project's spider, for its callbacks
    from spiders.shop import ShopSpider

    spider = ShopSpider()
    server = redis.Redis.from_url(cfg["url"])
    df = RFPDupeFilter(server, key=f"{cfg['crawl']}:dupefilter")
    queue = PriorityQueue(server, spider, f"{cfg['crawl']}:requests", serializer=picklecompat)
    links = Links(cfg, b"https://%s/item/%d")

    def request(link: tuple[bytes, str, bytes]) -> Request:
        return Request(link[2].decode(), callback=spider.parse_item)

    def enqueue(req: Request) -> bool:  # scrapy_redis.scheduler.Scheduler.enqueue_request
        if not req.dont_filter and df.request_seen(req):
            return False
        queue.push(req)
        return True

    for link in seed_links(links, int(cfg["seed_per_node"])):
        enqueue(request(link))
    concurrency = int(cfg["concurrency"])
    in_flight: deque[str] = deque()

    def pop() -> None:  # scrapy_redis.scheduler.Scheduler.next_request: one pop per request
        req = queue.pop()
        if req is not None:
            in_flight.append(re.match(r"https?://([^/]+)", req.url).group(1))  # type: ignore[union-attr]

    for _ in range(concurrency):
        pop()
    _wait_go(cfg["go"])
    _patch_redis()
    t0, c0 = time.perf_counter(), time.process_time()
    pages = admitted = filtered = sent = 0
    while pages < int(cfg["pages"]) and in_flight:
        host = in_flight.popleft()
        new, dups = links.page(host, float(cfg["links"]))
        for link in new + dups:
            sent += 1
            if enqueue(request(link)):
                admitted += 1
            else:
                filtered += 1
        pages += 1
        pop()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "pages": pages,
        "seconds": seconds,
        "client_cpu_s": cpu,
        "roundtrips": _redis_counts["roundtrips"],
        "commands": _redis_counts["commands"],
        "calls": 0,
        "heartbeats": 0,
        "sent": sent,
        "admitted": admitted,
        "filtered": filtered,
    }


def main() -> int:
    cfg = json.loads(sys.argv[1])
    run = run_scrapy_redis if cfg["system"] == "scrapy-redis" else run_crawlplug
    out = run(cfg)
    if cfg["system"] != "scrapy-redis":
        import crawlplug

        out["crawlplug"] = str(Path(crawlplug.__file__).resolve().parent)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
