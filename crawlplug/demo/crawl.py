"""A real distributed crawl in one command: the newcomer's demo.

Run it from the repository root::

    python -m crawlplug.demo.crawl                  # 2 nodes, 2000 items, embedded Redis
    python -m crawlplug.demo.crawl --nodes 4 --items 5000 --delay 0.01
    python -m crawlplug.demo.crawl --redis-url redis://127.0.0.1:6379/0

It serves the demo shop (:mod:`crawlplug.demo.shop`) on a free loopback port,
clears the ``shop`` crawl in Redis, starts ``--nodes`` real ``scrapy crawl shop``
processes of this project at once, shows their progress every second and checks
the result against the site: every page fetched, (almost) none twice, every
item exported. Exit status: 0 the crawl is complete, 1 it is not (or a node
failed), 2 the global ``--timeout`` expired, 130 interrupted by Ctrl-C.

Logs and items of each run stay in ``.crawlplug/demo-runs/<timestamp>/``
(``--out`` picks another directory); the 10 most recent runs are kept, older
ones are deleted unless ``--keep`` is given.

Its size: the demo's runner is one script (start Redis, the shop, the nodes, the
dashboard; watch; report); it is out of the core path and nothing imports it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis

from ..crawl import Crawl
from ..crawl.nodes import is_live
from ..defaults import default
from ..errors import CrawlplugError
from ..frontier import CrawlFrontier, open_frontier
from ..frontier.keys import CrawlKeys
from ..frontier.store import redis_ms
from ..ops import status
from ..server import clients, embedded
from .shop import DemoShop, ShopServer, serve

CRAWL = "shop"  # the spider's name, hence the crawl's name
RUNS_KEPT = 10
STOP_GRACE = 10.0  # seconds between SIGTERM and SIGKILL
IDLE_CLOSE = 2  # CRAWLPLUG_IDLE_CLOSE of the nodes: the demo ends soon after the crawl


class DemoError(Exception):
    """A problem reported as one line before any node started."""


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        self.signum = signum


# -- where things are -------------------------------------------------------------


def project_dir() -> Path:
    """The directory holding this project's scrapy.cfg: the package's parent, else the cwd."""
    for candidate in (Path(__file__).resolve().parent.parent, Path.cwd()):
        if (candidate / "scrapy.cfg").is_file():
            return candidate
    raise DemoError("cannot find the crawlplug demo project (scrapy.cfg): run this from the repository root")


def scrapy_executable() -> str:
    path = Path(sys.executable).with_name("scrapy")
    if not path.exists():
        raise DemoError(f"no scrapy executable next to {sys.executable}: is Scrapy installed in this environment?")
    return str(path)


def _new_run_dir(root: Path) -> Path:
    base = root / time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        candidate = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            candidate.mkdir(parents=True)
            return candidate
        except FileExistsError:
            continue
    raise DemoError(f"cannot create a run directory under {root}")


def _prune_runs(root: Path, keep: int, current: Path) -> int:
    runs = sorted((p for p in root.iterdir() if p.is_dir() and p != current), key=lambda p: p.name)
    old = runs[: max(0, len(runs) - (keep - 1))]
    for path in old:
        shutil.rmtree(path, ignore_errors=True)
    return len(old)


def _crawlplug_command(project: Path, url: str, is_embedded: bool, args: str) -> str:
    """How to run ``crawlplug <args>`` on this crawl from a shell here (never with a password)."""
    exe = Path(sys.executable).with_name("crawlplug")
    on_path = shutil.which("crawlplug")
    if on_path and Path(on_path).resolve() == exe.resolve():
        prog = "crawlplug"
    elif exe.exists():
        prog = os.path.relpath(exe) if exe.is_relative_to(Path.cwd()) else str(exe)
    else:
        prog = f"{Path(sys.executable).name} -m crawlplug.cli"
    if is_embedded:
        here = "" if Path.cwd().resolve() == project else f"cd {project} && "
        return f"{here}{prog} {args}"
    if clients.mask_url(url) != url:  # a password is never printed: the command takes it from REDIS_URL
        return f"REDIS_URL='<the Redis URL>' {prog} {args}"
    return f"{prog} --redis-url '{url}' {args}"


def _watch_command(project: Path, url: str, is_embedded: bool) -> str:
    return _crawlplug_command(project, url, is_embedded, f"status --crawl {CRAWL}")


# -- the Redis ------------------------------------------------------------------------


def resolve_redis(explicit: str | None, project: Path) -> tuple[str, bool, bool]:
    """(URL, embedded?, started by this call?): --redis-url, else REDIS_URL, else the
    project's embedded Redis, started if it does not run (the demo then stops it)."""
    url = explicit or os.environ.get("REDIS_URL")
    if url:
        return url, False, False
    directory = embedded_dir(project)
    was_running = embedded.running(directory)
    try:
        return embedded.ensure(directory), True, not was_running
    except OSError as exc:
        raise DemoError(f"could not start the embedded Redis in {directory}: {exc}") from None


def embedded_dir(project: Path) -> Path:
    return project / str(default("CRAWLPLUG_EMBEDDED_DIR"))


def connect_frontier(url: str, is_embedded: bool) -> CrawlFrontier:
    conn = clients.Connection(clients.client_from_url(url), url, is_embedded)
    clients.check(conn)
    return open_frontier(conn.client, CrawlKeys(CRAWL))


def _live_nodes(frontier: CrawlFrontier) -> list[tuple[str, float]]:
    """(node id, seconds until its heartbeat expires) of nodes registered as live."""
    now_ms = redis_ms(frontier.client)
    return [(n, (d - now_ms) / 1000) for n, d in Crawl.of(frontier).status()["nodes"].items() if is_live(d, now_ms)]


# -- the nodes ---------------------------------------------------------------------------


@dataclass
class Node:
    number: int
    proc: subprocess.Popen[bytes]
    log: Path
    items: Path
    err: Path
    _offset: int = 0
    _lines: int = 0

    @property
    def name(self) -> str:
        return f"node{self.number}"

    def item_count(self) -> int:
        """Lines written to the items file so far (read incrementally)."""
        try:
            with open(self.items, "rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
        except FileNotFoundError:
            return self._lines
        self._lines += chunk.count(b"\n")
        self._offset += len(chunk)
        return self._lines

    def tail(self, lines: int = 8) -> str:
        out = []
        for path in (self.err, self.log):
            if path.exists():
                text = path.read_text(errors="replace").strip().splitlines()
                if text:
                    out.append(f"    --- {path.name} (last lines) ---")
                    out += [f"    {line}" for line in text[-lines:]]
        return "\n".join(out)


def node_command(scrapy: str, number: int, out: Path, base_url: str) -> list[str]:
    """The command line of node ``number``. It names no Redis: the URL may hold a
    password, and any local user can read a process's command line (``ps``)."""
    log, items = out / f"node{number}.log", out / f"node{number}.jsonl"
    return [
        scrapy,
        "crawl",
        CRAWL,
        "-a",
        f"base_url={base_url}",
        "-o",
        f"{items}:jsonlines",
        "-s",
        f"LOG_FILE={log}",
        "-s",
        f"CRAWLPLUG_IDLE_CLOSE={IDLE_CLOSE}",
    ]


def node_env(url: str, is_embedded: bool) -> dict[str, str]:
    """The nodes' environment: REDIS_URL names the shared Redis (crawlplug reads it when
    no setting names one); unset for the embedded Redis, which the nodes find themselves."""
    env = dict(os.environ)
    if is_embedded:
        env.pop("REDIS_URL", None)
    else:
        env["REDIS_URL"] = url
    return env


def start_nodes(count: int, project: Path, out: Path, base_url: str, url: str, is_embedded: bool) -> list[Node]:
    scrapy = scrapy_executable()
    env = node_env(url, is_embedded)
    nodes = []
    for k in range(1, count + 1):
        log, items, err = out / f"node{k}.log", out / f"node{k}.jsonl", out / f"node{k}.err"
        cmd = node_command(scrapy, k, out, base_url)
        with open(err, "wb") as err_fh:
            # Own session: a Ctrl-C in the terminal reaches this script only, which
            # then stops the nodes with one SIGTERM (a second signal would make
            # Scrapy skip its graceful shutdown, where the leases are given back).
            proc = subprocess.Popen(
                cmd,
                cwd=project,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=err_fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        nodes.append(Node(k, proc, log, items, err))
    return nodes


def stop_nodes(nodes: Sequence[Node], grace: float = STOP_GRACE) -> None:
    """SIGTERM the running nodes, SIGKILL those still running after ``grace`` seconds."""
    running = [n for n in nodes if n.proc.poll() is None]
    for node in running:
        node.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    try:
        for node in running:
            try:
                node.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
    except Interrupted:
        print("Second interrupt: killing the nodes now.", flush=True)
    for node in nodes:
        if node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait()


# -- progress and the final check --------------------------------------------------------------


def _progress(
    start: float, server: ShopServer, site_pages: int, items: int, nodes: Sequence[Node], frontier: CrawlFrontier
) -> str:
    fetched = sum(server.hits.values())
    got = sum(n.item_count() for n in nodes)
    running = sum(1 for n in nodes if n.proc.poll() is None)
    try:
        st = Crawl.of(frontier).status()
        queue = f"queued {st['queued']:>6}  in flight {st['in_flight']:>4}"
    except redis.RedisError:
        queue = "queue unavailable (Redis error)"
    return (
        f"[{time.monotonic() - start:6.1f}s] pages fetched {fetched:>6}/{site_pages}  "
        f"items {got:>6}/{items}  {queue}  nodes running {running}/{len(nodes)}"
    )


@dataclass
class Outcome:
    rows: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def check(
    shop: DemoShop, server: ShopServer, nodes: Sequence[Node], seconds: float, url: str, is_embedded: bool, out: Path
) -> Outcome:
    result = Outcome()
    hits = server.hits
    site = shop.paths()
    crawled = site & set(hits)
    twice = sorted(p for p, n in hits.items() if n > 1)
    never = sorted(site - set(hits))
    other = sorted(set(hits) - site)
    total_hits = sum(hits.values())

    base = urlsplit(server.url)
    per_node: list[int] = []
    paths_seen: set[str] = set()
    lines = malformed = 0
    for node in nodes:
        count = 0
        if node.items.exists():
            for line in node.items.read_text(encoding="utf-8", errors="replace").splitlines():
                if not line.strip():
                    continue
                count += 1
                try:
                    item_url = json.loads(line)["url"]
                except (ValueError, KeyError, TypeError):
                    malformed += 1
                    continue
                parts = urlsplit(item_url)
                if parts.netloc == base.netloc:
                    paths_seen.add(parts.path)
        per_node.append(count)
        lines += count
    expected_items = shop.item_paths()
    missing_items = sorted(expected_items - paths_seen)

    where = f"{clients.mask_url(url)}{' (embedded)' if is_embedded else ''}"
    result.rows = [
        ("nodes", str(len(nodes))),
        ("node exit codes", ", ".join(str(n.proc.returncode) for n in nodes)),
        ("pages on the site", str(len(site))),
        ("pages crawled (distinct)", str(len(crawled))),
        ("pages fetched twice", str(len(twice))),
        ("pages never fetched", str(len(never))),
    ]
    if other:
        result.rows.append(("other paths fetched", f"{len(other)} (e.g. {', '.join(other[:3])})"))
    result.rows += [
        ("items", f"{lines} lines, {len(paths_seen)} distinct urls (the site has {len(expected_items)})"),
        ("items per node", ", ".join(f"{n.name} {c}" for n, c in zip(nodes, per_node))),
        ("seconds", f"{seconds:.1f}"),
        ("pages/s", _rate(total_hits, seconds, server.hit_log)),
        ("redis", where),
        ("logs and items", str(out)),
    ]

    for node in nodes:
        if node.proc.returncode != 0:
            result.problems.append(
                f"{node.name} exited with status {node.proc.returncode} (log: {node.log})\n{node.tail()}"
            )
    if never:
        result.problems.append(f"{len(never)} pages were never fetched, e.g. {', '.join(never[:5])}")
    if missing_items:
        result.problems.append(f"{len(missing_items)} items are missing, e.g. {', '.join(missing_items[:5])}")
    if malformed:
        result.problems.append(f"{malformed} item lines are not JSON objects with a url")
    return result


def _rate(total_hits: int, seconds: float, hit_log: list[tuple[float, str]]) -> str:
    """Pages per second over the whole run, and over the span from first to last fetch."""
    if seconds <= 0:
        return "-"
    text = f"{total_hits / seconds:.1f}"
    if len(hit_log) > 1:
        span = hit_log[-1][0] - hit_log[0][0]
        if span > 0:
            text += f" ({len(hit_log) / span:.1f} between the first and the last fetch)"
    return text


def print_summary(title: str, outcome: Outcome) -> None:
    width = max(len(label) for label, _ in outcome.rows)
    print(f"\n{title}", flush=False)
    for label, value in outcome.rows:
        print(f"  {label.ljust(width)}  {value}")
    sys.stdout.flush()


# -- main ---------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m crawlplug.demo.crawl",
        description="Crawl the demo shop with several real Scrapy processes sharing one Redis frontier.",
    )
    parser.add_argument("--nodes", type=int, default=2, help="scrapy processes to start (default 2)")
    parser.add_argument("--items", type=int, default=2000, help="items in the demo shop (default 2000)")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds the shop waits before each answer")
    parser.add_argument(
        "--redis-url",
        default=None,
        help="Redis to share the crawl through (default: $REDIS_URL, else the project's embedded Redis)",
    )
    parser.add_argument(
        "--dashboard-port",
        type=int,
        default=8642,
        help="serve the live dashboard on this loopback port while the crawl runs "
        "(a free one if taken; -1: no dashboard)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds (default 600)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="directory for the logs and items (default .crawlplug/demo-runs/<timestamp>)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help=f"keep every earlier run under .crawlplug/demo-runs (default: the {RUNS_KEPT} newest)",
    )
    args = parser.parse_args(argv)
    if args.nodes < 1:
        parser.error("--nodes must be at least 1")
    if args.items < 0:
        parser.error("--items must be >= 0")
    if args.delay < 0:
        parser.error("--delay must be >= 0")
    if args.timeout <= 0:
        parser.error("--timeout must be > 0")
    return args


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    url = args.redis_url or ""
    project: Path | None = None
    is_embedded = started = False
    try:
        project = project_dir()
        scrapy_executable()
        url, is_embedded, started = resolve_redis(args.redis_url, project)
        frontier = connect_frontier(url, is_embedded)
        live = _live_nodes(frontier)
        if live:
            wait = max(s for _, s in live)
            raise DemoError(
                f"{len(live)} node(s) of crawl {CRAWL!r} are registered as live on "
                f"{clients.mask_url(url)} ({', '.join(n for n, _ in live)}): another crawl is "
                f"running, or nodes were killed less than {wait:.0f}s ago; stop it or retry later"
            )
        deleted = frontier.purge()
    except (DemoError, CrawlplugError, redis.RedisError) as exc:
        what = f"Redis error on {clients.mask_url(url)}: {exc}" if isinstance(exc, redis.RedisError) else exc
        print(f"democrawl: error: {what}", file=sys.stderr)
        if started and project is not None:
            embedded.stop(embedded_dir(project))  # started for nothing
        return 1
    code = 1
    try:
        code = _crawl(args, project, url, is_embedded, frontier, deleted)
    finally:
        if is_embedded:
            print(f"\n{_embedded_note(project, url, started)}", flush=True)
    if code == 0:
        print(_next_steps(project, url, is_embedded))
    return code


def _crawl(
    args: argparse.Namespace, project: Path, url: str, is_embedded: bool, frontier: CrawlFrontier, deleted: int
) -> int:
    """Serve the shop (and the dashboard), run the nodes, check the result: the exit status."""
    runs = embedded_dir(project) / "demo-runs"
    out = args.out.resolve() if args.out else _new_run_dir(runs)
    out.mkdir(parents=True, exist_ok=True)
    pruned = 0 if args.keep or args.out else _prune_runs(runs, RUNS_KEPT, out)

    shop = DemoShop(items=args.items, delay=args.delay)
    site_pages = len(shop.paths())
    old_int = signal.signal(signal.SIGINT, _raise_interrupted)
    old_term = signal.signal(signal.SIGTERM, _raise_interrupted)
    nodes: list[Node] = []
    server = serve(shop)
    dash = None
    try:
        where = f"{clients.mask_url(url)}{' (embedded)' if is_embedded else ''}"
        print(f"Demo shop: {args.items} items, {site_pages} pages, at {server.url}")
        print(f"Redis: {where}; crawl {CRAWL!r} purged ({deleted} keys deleted)")
        print(f"Logs and items: {out}" + (f" ({pruned} old runs deleted; --keep keeps them)" if pruned else ""))
        print(f"Watch the crawl from another terminal: {_watch_command(project, url, is_embedded)}")
        if args.dashboard_port >= 0:
            dash = DashboardThread(frontier.client, frontier.keys, url, args.dashboard_port)
            after = "; after the crawl it stays up until you press Enter" if sys.stdin.isatty() else ""
            print(f"Dashboard (while the demo runs{after}): {dash.url}", flush=True)
        print(f"Starting {args.nodes} nodes: scrapy crawl {CRAWL} (cwd {project})", flush=True)
        start = time.monotonic()
        nodes = start_nodes(args.nodes, project, out, server.url, url, is_embedded)
        deadline = start + args.timeout
        timed_out = False
        next_tick = start + 1.0
        while any(n.proc.poll() is None for n in nodes):
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if now >= next_tick:
                print(_progress(start, server, site_pages, args.items, nodes, frontier), flush=True)
                next_tick += 1.0
            time.sleep(min(0.1, max(0.0, next_tick - now)))
        if timed_out:
            print(f"Timeout: the crawl did not end within {args.timeout:.0f}s; stopping the nodes.", flush=True)
            stop_nodes(nodes)
        seconds = time.monotonic() - start
        print(_progress(start, server, site_pages, args.items, nodes, frontier), flush=True)
        outcome = check(shop, server, nodes, seconds, url, is_embedded, out)
        outcome.rows.insert(-2, ("rate (crawlplug status)", _crawl_rate(frontier)))
    except Interrupted as exc:
        print(
            "\nInterrupted: stopping the nodes (SIGTERM, SIGKILL after "
            f"{STOP_GRACE:.0f}s; interrupt again to kill them now).",
            flush=True,
        )
        stop_nodes(nodes)
        print(f"Stopped. Logs and items so far: {out}")
        print("The crawl's state is left in Redis; the next demo run purges it.")
        if dash is not None:
            dash.stop()
            dash = None
        return 130 if exc.signum == signal.SIGINT else 128 + exc.signum
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
        for node in nodes:  # an unexpected error must not leave nodes behind
            if node.proc.poll() is None:
                node.proc.kill()
                node.proc.wait()
        server.stop()  # an unexpected error ends the process, and the dashboard's daemon thread with it

    if timed_out or outcome.problems:
        title = f"Demo crawl TIMED OUT after {args.timeout:.0f}s" if timed_out else "Demo crawl FAILED"
        print_summary(title, outcome)
        if outcome.problems:
            print("\nProblems:", file=sys.stderr)
            for problem in outcome.problems:
                print(f"  - {problem}", file=sys.stderr)
        code = 2 if timed_out else 1
    else:
        print_summary("Demo crawl OK: every page fetched, every item exported", outcome)
        code = 0
    if dash is not None:
        linger(dash)
        dash.stop()
    return code


def _crawl_rate(frontier: CrawlFrontier) -> str:
    """The rate `crawlplug status` and the dashboard show (crawlplug.ops.status), in words."""
    try:
        return str(status.snapshot(frontier.client, frontier.keys)["rate"]["text"])
    except redis.RedisError as exc:
        return f"unknown (Redis error: {exc})"


def linger(dash: DashboardThread, stdin: Any = None) -> bool:
    """In a terminal, keep the dashboard up while the summary is read, until Enter (or
    Ctrl-C); elsewhere (a script, CI) stop at once. True if it waited."""
    stdin = stdin or sys.stdin
    if not stdin.isatty():
        return False
    print(f"\nThe dashboard still shows the finished crawl at {dash.url}: press Enter to stop it and exit.", flush=True)
    try:
        stdin.readline()
    except KeyboardInterrupt:
        print()
    return True


def _embedded_note(project: Path, url: str, started: bool) -> str:
    """What became of the embedded Redis: stopped if this demo started it, else left running (and how to stop it)."""
    directory = embedded_dir(project)
    if started:
        stopped = embedded.stop(directory)
        state = "is stopped" if stopped else "had already stopped"
        return f"The embedded Redis this demo started {state}; its data stays in {directory} (`make clean` deletes it)."
    stop = _crawlplug_command(project, url, True, "embedded stop")
    return f"The embedded Redis at {clients.mask_url(url)} was running before and is left running: `{stop}` stops it."


def _next_steps(project: Path, url: str, is_embedded: bool) -> str:
    rows = [
        (
            _crawlplug_command(project, url, is_embedded, f"status --crawl {CRAWL}"),
            "the crawl as it ended: its rate, nodes and counters",
        ),
        (
            _crawlplug_command(project, url, is_embedded, f"dashboard --crawl {CRAWL}"),
            "the same in the browser (http://127.0.0.1:8642/)",
        ),
        ("make crawl NODES=4 ITEMS=20000", "more nodes, a bigger shop"),
        ("README.md, docs/operations.md", "your own spider, start URLs, kill -9 a node, pause, dead letters"),
    ]
    width = max(len(cmd) for cmd, _ in rows)
    return "\nWhat to try next:\n" + "\n".join(f"  {cmd.ljust(width)}  {what}" for cmd, what in rows)


class DashboardThread:
    """crawlplug's dashboard served from a thread of this process (read-only)."""

    def __init__(self, client: redis.Redis, keys: CrawlKeys, url: str, port: int) -> None:
        import uvicorn  # noqa: PLC0415 - the web extra, only when the demo serves the dashboard

        from ..web import create_app  # noqa: PLC0415 - likewise

        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.bind(("127.0.0.1", 0))  # 8642 taken (another demo?): any free port
        sock.listen(64)
        self.port = sock.getsockname()[1]
        app = create_app(client, keys, None, clients.mask_url(url))
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(5)


if __name__ == "__main__":
    sys.exit(main())
