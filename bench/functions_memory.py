"""What a crawl's Lua costs Redis in memory as scripts, and what it would as one Redis
Functions library (issue 37's used_memory mark; docs/scaling.md).

A crawl loads its scripts with SCRIPT LOAD: each is the shared pieces it uses
(crawlplug.frontier.luatext) plus its own text, so the pieces sit in the script
cache once per script. A Functions library (Redis 7) holds the pieces once and
each script as a function (crawlplug.frontier.lualib, not yet what crawlplug's calls
run). This loads both into a private redis-server and prints, after the server has
trimmed the client's query buffer:

* the allocated bytes each adds (MEMORY STATS total.allocated; lua.caches and
  functions.caches), for the scripts a plain crawl loads (``--scripts``);
* Redis CPU per call of a few read-mostly scripts, EVALSHA against FCALL,
  interleaved (INFO commandstats usec_per_call), with ``--cpu``.

    .venv/bin/python bench/functions_memory.py [--cpu]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import RedisProc, kill_all
from crawlplug.frontier.lualib import library
from crawlplug.frontier.scripts import source

#: the scripts a one-node crawl of the demo shop had loaded at its end (SCRIPT EXISTS, 2026-12-02)
CRAWL = [
    "admit",
    "pop",
    "heartbeat",
    "reap",
    "idle",
    "domainconf",
    "starts",
    "join",
    "runstart",
    "runclear",
    "finish",
    "history",
    "runctl",
    "stats",
]


def _allocated(client, settle: float) -> dict[str, int]:
    time.sleep(settle)  # serverCron trims an idle client's query buffer (a SCRIPT LOAD's text)
    stats = client.memory_stats()
    return {k: int(stats.get(k, 0)) for k in ("total.allocated", "lua.caches", "functions.caches")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scripts", default=",".join(CRAWL), help="comma-separated script names")
    parser.add_argument("--cpu", action="store_true", help="also Redis CPU per call, EVALSHA against FCALL")
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--calls", type=int, default=2000)
    opts = parser.parse_args()
    names = [n for n in opts.scripts.split(",") if n]
    work = Path(tempfile.mkdtemp(prefix="bench-functions-"))
    server = RedisProc(work)
    try:
        c = server.client
        if int(server.version.split(".")[0]) < 7:
            print(f"Redis {server.version} has no Functions (7.0 and later)")
            return 1
        lib = library(tuple(names))
        text = lib.text
        c.flushall()
        before = _allocated(c, opts.settle)
        for n in names:
            c.script_load(source(n, True))
        scripts = _allocated(c, opts.settle)
        c.script_flush()
        middle = _allocated(c, opts.settle)
        c.function_load(text, replace=True)
        functions = _allocated(c, opts.settle)
        script_text = sum(len(source(n, True)) for n in names)
        print(f"Redis {server.version}, {len(names)} scripts: {', '.join(names)}")
        print(
            f"  as scripts:  {script_text:7d} B of text, {scripts['total.allocated'] - before['total.allocated']:7d} B "
            f"allocated (lua.caches {scripts['lua.caches']})"
        )
        print(
            f"  as a library: {len(text):6d} B of text, {functions['total.allocated'] - middle['total.allocated']:7d} B "
            f"allocated (functions.caches {functions['functions.caches']})"
        )
        if opts.cpu:
            _cpu(c, [n for n in ("idle", "pop") if n in names], opts.calls, lib.functions)
    finally:
        server.stop()
        kill_all()
    return 0


def _cpu(client, names: list[str], calls: int, functions: dict[str, str]) -> None:
    from crawlplug.frontier.core import Frontier
    from crawlplug.frontier.keys import CrawlKeys
    from crawlplug.queues import PriorityQueue

    part = Frontier(client, CrawlKeys("bench"), queue=PriorityQueue(), node_id="n1").base
    made = {"idle": part.idle_call(), "pop": part.pop_call(5)}
    for name in names:
        _, keys, args = made[name]
        sha = client.script_load(source(name, True))
        got: dict[str, list[float]] = {"evalsha": [], "fcall": []}
        for kind in ("evalsha", "fcall") * 3:
            client.config_resetstat()
            pipe = client.pipeline(transaction=False)
            for _ in range(calls):
                if kind == "evalsha":
                    pipe.evalsha(sha, len(keys), *keys, *args)
                else:
                    pipe.fcall(functions[name], len(keys), *keys, *args)
            replies = pipe.execute(raise_on_error=False)
            if isinstance(replies[0], Exception):
                raise replies[0]
            got[kind].append(client.info("commandstats")[f"cmdstat_{kind}"]["usec_per_call"])
        print(f"  {name}: Redis us a call, EVALSHA {sorted(got['evalsha'])}, FCALL {sorted(got['fcall'])}")


if __name__ == "__main__":
    sys.exit(main())
