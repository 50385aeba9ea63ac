"""A small multi-host test site on loopback that records every request it answers.

Each host is a distinct loopback IP (127.0.0.2, 127.0.0.3, ...: Linux routes
all of 127/8 to the loopback interface), served by its own server thread on
its own port, so for a crawler (and for crawlplug's per-domain queue) every
IP is a different host. A host's site is::

    /                  start page (page 0): links to its children
    /page/<i>          page i (1..pages): links to its children, and back to /
    /robots.txt        HostSite.robots, or 404 when that is None

With ``fanout=None`` the start page links to every page and pages link to no
new page (a flat site); with ``fanout=F`` page ``i`` links to pages
``i*F+1 .. i*F+F`` (a tree, depth about log_F(pages)). Every start page also
links to the start page of every other host of the site, which a same-host
spider must not follow.

Every answered request is recorded as a :class:`Visit` (host IP addressed,
path, start and end time on ``time.monotonic()``): ``start`` when the request
line and headers have been read, ``end`` right before the response is written
(after the host's ``latency``). The helpers at the bottom compute per-host
maximum concurrency, minimum gap between request starts and request rates
from a list of visits.
"""

from __future__ import annotations

import itertools
import socket
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

ROBOTS_PATH = "/robots.txt"


@dataclass(frozen=True)
class HostSite:
    """Shape and speed of one host's site."""

    pages: int = 12
    """Pages besides the start page: /page/1 .. /page/<pages>."""
    fanout: int | None = None
    """Children linked from each page; None: the start page links to every page."""
    latency: float = 0.0
    """Seconds the server waits before answering each request (robots.txt included)."""
    robots: str | None = None
    """Body of /robots.txt; None answers 404."""

    def children(self, page: int) -> range:
        if self.fanout is None:
            return range(1, self.pages + 1) if page == 0 else range(0)
        first = page * self.fanout + 1
        return range(first, min(first + self.fanout - 1, self.pages) + 1)

    def paths(self) -> set[str]:
        """Every page path a crawl from / reaches (robots.txt not included)."""
        return {"/"} | {page_path(i) for i in range(1, self.pages + 1)}


def page_path(page: int) -> str:
    return "/" if page == 0 else f"/page/{page}"


def page_number(path: str) -> int | None:
    if path == "/":
        return 0
    if path.startswith("/page/") and path[6:].isdigit() and path[6:] == str(int(path[6:])):
        return int(path[6:])
    return None


@dataclass(frozen=True)
class Visit:
    """One answered request, as the server saw it."""

    host: str
    path: str
    start: float
    end: float


def loopback_hosts(count: int, first: int = 2) -> list[str]:
    """``count`` distinct loopback IPs: 127.0.0.<first>, 127.0.0.<first+1>, ..."""
    if count < 1 or first < 1 or first + count - 1 > 254:
        raise ValueError(f"no {count} loopback hosts from 127.0.0.{first} to 127.0.0.254")
    return [f"127.0.0.{first + i}" for i in range(count)]


class _Handler(BaseHTTPRequestHandler):
    server: _HostServer
    protocol_version = "HTTP/1.0"
    server_version = "crawlplug-politesite/1.0"

    def do_GET(self) -> None:
        start = time.monotonic()
        site, host = self.server.site, self.server.host
        spec = site.hosts[host]
        path = urlsplit(self.path).path
        if spec.latency:
            time.sleep(spec.latency)
        status, body, ctype = site.render(host, path)
        site._record(Visit(host, path, start, time.monotonic()))
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """No per-request stderr line."""


class _HostServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    site: PoliteSite
    host: str

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if not isinstance(exc, (ConnectionError, socket.timeout)):
            super().handle_error(request, client_address)


class PoliteSite:
    """Serves ``{ip: HostSite}`` on loopback, one server thread per IP (any free port each)."""

    def __init__(self, hosts: dict[str, HostSite]) -> None:
        self.hosts = dict(hosts)
        self._lock = threading.Lock()
        self._visits: list[Visit] = []
        self._servers: dict[str, _HostServer] = {}
        self._threads: list[threading.Thread] = []

    def start(self) -> PoliteSite:
        try:
            for host in self.hosts:
                httpd = _HostServer((host, 0), _Handler)
                httpd.site, httpd.host = self, host
                self._servers[host] = httpd
                thread = threading.Thread(
                    target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, name=f"politesite-{host}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        servers, self._servers = self._servers, {}
        for httpd in servers.values():
            httpd.shutdown()
            httpd.server_close()
        for thread in self._threads:
            thread.join(5)
        self._threads.clear()

    def __enter__(self) -> PoliteSite:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- addresses ------------------------------------------------------------------
    def base(self, host: str) -> str:
        """``http://<ip>:<port>`` of ``host`` (no trailing slash)."""
        return f"http://{host}:{self._servers[host].server_address[1]}"

    def start_url(self, host: str) -> str:
        return self.base(host) + "/"

    @property
    def start_urls(self) -> list[str]:
        return [self.start_url(h) for h in self.hosts]

    def expected(self) -> set[tuple[str, str]]:
        """Every (host, path) a complete crawl from all start URLs fetches."""
        return {(h, p) for h, spec in self.hosts.items() for p in spec.paths()}

    # -- pages ----------------------------------------------------------------------
    def render(self, host: str, path: str) -> tuple[int, bytes, str]:
        spec = self.hosts[host]
        if path == ROBOTS_PATH:
            if spec.robots is None:
                return 404, b"not found\n", "text/plain"
            return 200, spec.robots.encode(), "text/plain"
        page = page_number(path)
        if page is None or page > spec.pages:
            return 404, b"<html><head><title>404</title></head><body>not found</body></html>", "text/html"
        links = [page_path(c) for c in spec.children(page)]
        if page:
            links.append("/")  # a duplicate the dedup has to filter
        else:
            links += [self.start_url(other) for other in self.hosts if other != host]
        body = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
        html = (
            f"<!DOCTYPE html><html><head><title>{host} page {page}</title></head>"
            f"<body><h1>{host} page {page}</h1><ul>{body}</ul></body></html>"
        )
        return 200, html.encode(), "text/html; charset=utf-8"

    # -- record ---------------------------------------------------------------------
    def _record(self, visit: Visit) -> None:
        with self._lock:
            self._visits.append(visit)

    @property
    def visits(self) -> list[Visit]:
        """Snapshot of every answered request, in the order they were answered."""
        with self._lock:
            return list(self._visits)

    def pages(self, host: str | None = None) -> list[Visit]:
        """Visits of pages (not robots.txt), of ``host`` only if given, sorted by start."""
        return sorted(
            (v for v in self.visits if v.path != ROBOTS_PATH and (host is None or v.host == host)),
            key=lambda v: v.start,
        )

    def reset(self) -> None:
        with self._lock:
            self._visits.clear()


# -- measurements ----------------------------------------------------------------------------


def by_host(visits: Iterable[Visit]) -> dict[str, list[Visit]]:
    """Visits grouped by host, each list sorted by start time."""
    groups: dict[str, list[Visit]] = defaultdict(list)
    for v in visits:
        groups[v.host].append(v)
    return {h: sorted(vs, key=lambda v: v.start) for h, vs in groups.items()}


def max_in_flight(visits: Iterable[Visit]) -> dict[str, int]:
    """Per host, the most requests the server was answering at the same moment.

    A request that ends exactly when another starts does not overlap it.
    """
    result = {}
    for host, vs in by_host(visits).items():
        events = sorted([(v.start, 1) for v in vs] + [(v.end, -1) for v in vs])  # -1 sorts first on ties
        current = peak = 0
        for _, step in events:
            current += step
            peak = max(peak, current)
        result[host] = peak
    return result


def min_start_gap(visits: Iterable[Visit]) -> dict[str, float]:
    """Per host with at least two requests, the smallest time between two consecutive request starts."""
    result = {}
    for host, vs in by_host(visits).items():
        if len(vs) >= 2:
            result[host] = min(b.start - a.start for a, b in itertools.pairwise(vs))
    return result


def start_rate(visits: Iterable[Visit]) -> float:
    """Request starts per second: (n - 1) / (last start - first start)."""
    starts = sorted(v.start for v in visits)
    if len(starts) < 2 or starts[-1] == starts[0]:
        raise ValueError("a rate needs at least two requests at different times")
    return (len(starts) - 1) / (starts[-1] - starts[0])


def mean_in_flight(visits: Iterable[Visit]) -> float:
    """Requests in flight on average between the first start and the last end (all hosts together)."""
    vs = list(visits)
    span = max(v.end for v in vs) - min(v.start for v in vs)
    return sum(v.end - v.start for v in vs) / span if span > 0 else float(len(vs))


def last_end(visits: Iterable[Visit]) -> dict[str, float]:
    """Per host, when the server finished its last request."""
    return {h: max(v.end for v in vs) for h, vs in by_host(visits).items()}
