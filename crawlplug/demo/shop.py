"""A deterministic demo web shop served on loopback.

Tests, benchmarks and ``make crawl`` crawl this site instead of the internet.
Everything about it is a pure function of the :class:`DemoShop` parameters:
the same parameters give byte-identical pages, so a crawl's output can be
checked exactly against :meth:`DemoShop.truth`.

Site layout::

    /                              home: links to every category's first page
    /category/<c>/                 list page 1 of category c
    /category/<c>/page/<n>/        list page n >= 2 of category c
    /item/<id>/                    item page (name, price, SKU, stock, ...)
    /sitemap.xml                   sitemap index: one sitemap per category
    /sitemap/<c>.xml               sitemap of category c's item pages

List pages carry a nav bar (home + every category) and item pages carry
``related`` links to other items, so a crawler meets many duplicate links.

Run it stand-alone with ``python -m crawlplug.demo.shop --port 8000``.

Its size: a whole web shop (catalogue, pages, sitemaps, robots.txt, its HTTP server)
made to be crawled; out of the core path, nothing but the demo and the tests use it.
"""

from __future__ import annotations

import argparse
import collections
import html
import json
import logging
import math
import os
import random
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

logger = logging.getLogger(__name__)

__all__ = ["DemoShop", "ShopServer", "main", "serve"]

HITS_PATH = "/__hits"
"""Control endpoint answering the hit counts as JSON; it is not counted itself."""

_ADJECTIVES = (
    "Sturdy",
    "Gentle",
    "Vintage",
    "Compact",
    "Deluxe",
    "Rustic",
    "Polished",
    "Handmade",
    "Classic",
    "Bright",
    "Quiet",
    "Nimble",
    "Cosy",
    "Bold",
    "Elegant",
    "Tiny",
)
_MATERIALS = (
    "Oak",
    "Steel",
    "Linen",
    "Ceramic",
    "Copper",
    "Bamboo",
    "Glass",
    "Wool",
    "Leather",
    "Marble",
    "Cotton",
    "Brass",
)
_NOUNS = (
    "Lamp",
    "Kettle",
    "Chair",
    "Notebook",
    "Teapot",
    "Backpack",
    "Clock",
    "Mug",
    "Blanket",
    "Vase",
    "Shelf",
    "Salt & Pepper Mill",
    "Cutting Board",
    "Candle",
    "Basket",
    "Umbrella",
)
_BLURBS = (
    "Built to last for years of daily use.",
    "A customer favourite since the shop opened.",
    "Ships in recyclable packaging.",
    "Pairs well with almost anything in the catalogue.",
    "Each piece is inspected by hand before it leaves the workshop.",
    "Easy to clean and easy to love.",
    "Designed in a small studio by people who care about details.",
    "Comes with a two-year warranty.",
    "Looks great on a desk, a shelf or a kitchen counter.",
    "Limited batch: once it is gone, it is gone.",
)

_LIST_RE = re.compile(r"^/category/([1-9][0-9]*)/(?:page/([1-9][0-9]*)/)?$")
_ITEM_RE = re.compile(r"^/item/([1-9][0-9]*)/$")
_SITEMAP_RE = re.compile(r"^/sitemap/([1-9][0-9]*)\.xml$")
SITEMAP_PATH = "/sitemap.xml"
"""The sitemap index (not linked from any page: only sitemap spiders ask for it)."""
_SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"

_NOT_FOUND = (
    b'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
    b"<title>Not found | Demo Shop</title></head>\n"
    b'<body><h1>404 Not Found</h1><p><a href="/">Back to the shop</a></p>'
    b"</body></html>\n"
)


@dataclass
class DemoShop:
    """Parameters and renderer of the demo shop.

    Items are numbered ``1..items`` and dealt round-robin to categories
    ``1..categories`` (item ``i`` is in category ``(i - 1) % categories + 1``).
    Every category has at least one list page, even when it has no items.
    Pages are rendered lazily and cached; rendering is thread-safe.

    :meth:`change` alters the shop between two crawls (new prices, removed items); a
    shop never changed is exactly the pure function of its parameters described above.
    """

    items: int = 2000
    per_page: int = 20
    categories: int = 10
    related: int = 3
    """Number of ``related`` links on each item page (capped at ``items - 1``)."""
    delay: float = 0.0
    """Seconds the server sleeps before answering each page request."""
    seed: int = 0
    """Changes names, prices, stock and related links, not the site's shape."""

    _cache: dict[str, tuple[int, bytes]] = field(default_factory=dict, init=False, repr=False, compare=False)
    # What change() did. Replaced, never mutated (copy on write), so a reader on another
    # thread sees the old or the new value whole; _lock orders change() against rendering.
    _prices: Mapping[int, float] = field(default_factory=dict, init=False, repr=False)
    _removed: frozenset[int] = field(default_factory=frozenset, init=False, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.items < 0:
            raise ValueError(f"items must be >= 0, not {self.items}")
        if self.per_page < 1:
            raise ValueError(f"per_page must be >= 1, not {self.per_page}")
        if self.categories < 1:
            raise ValueError(f"categories must be >= 1, not {self.categories}")
        if self.related < 0:
            raise ValueError(f"related must be >= 0, not {self.related}")
        if self.delay < 0:
            raise ValueError(f"delay must be >= 0, not {self.delay}")

    # ------------------------------------------------------------------ shape

    def category_of(self, item_id: int) -> int:
        """Category number (1-based) of item ``item_id``."""
        self._check_item(item_id)
        return (item_id - 1) % self.categories + 1

    def category_items(self, category: int) -> Sequence[int]:
        """Item ids of ``category`` in the order its list pages show them (a removed item
        left out)."""
        removed = self._removed
        ids = self._category_range(category)
        return [i for i in ids if i not in removed] if removed else ids

    def _category_range(self, category: int) -> range:
        """Every item id ever in ``category``, removed ones included: the list pages' slots."""
        self._check_category(category)
        return range(category, self.items + 1, self.categories)

    def list_pages(self, category: int) -> int:
        """Number of list pages of ``category`` (at least 1). Removing items does not change
        it: a removed item leaves a gap on its page, the later pages stay where they were."""
        return max(1, math.ceil(len(self._category_range(category)) / self.per_page))

    @staticmethod
    def list_path(category: int, page: int = 1) -> str:
        """Path of list page ``page`` of ``category`` (page 1 has no ``page/`` part)."""
        if page == 1:
            return f"/category/{category}/"
        return f"/category/{category}/page/{page}/"

    @staticmethod
    def item_path(item_id: int) -> str:
        """Path of the page of item ``item_id``."""
        return f"/item/{item_id}/"

    def list_paths(self) -> set[str]:
        """Paths of all list pages of all categories."""
        return {self.list_path(c, n) for c in range(1, self.categories + 1) for n in range(1, self.list_pages(c) + 1)}

    def item_paths(self) -> set[str]:
        """Paths of all item pages (a removed item's not among them)."""
        return {self.item_path(i) for i in self.item_ids()}

    def item_ids(self) -> list[int]:
        """Ids of the items in the shop, ascending (a removed item's not among them)."""
        removed = self._removed
        return [i for i in range(1, self.items + 1) if i not in removed]

    def paths(self) -> set[str]:
        """Paths of every page reachable from ``/`` (home, list and item pages)."""
        return {"/"} | self.list_paths() | self.item_paths()

    def sitemap_paths(self) -> set[str]:
        """Paths of the sitemap index and of every category's sitemap."""
        return {SITEMAP_PATH} | {f"/sitemap/{c}.xml" for c in range(1, self.categories + 1)}

    def render_sitemap(self, path: str, base_url: str) -> tuple[int, bytes] | None:
        """Status and XML body of sitemap ``path`` with absolute URLs under ``base_url``
        (sitemaps hold absolute URLs, so they depend on the address asked); None: not a sitemap."""
        base = base_url.rstrip("/")
        if path == SITEMAP_PATH:
            entries = [
                f"<sitemap><loc>{html.escape(base)}/sitemap/{c}.xml</loc></sitemap>"
                for c in range(1, self.categories + 1)
            ]
            tag = "sitemapindex"
        else:
            match = _SITEMAP_RE.match(path)
            if match is None:
                return None
            category = int(match.group(1))
            if category > self.categories:
                return 404, _NOT_FOUND
            entries = [
                f"<url><loc>{html.escape(base + self.item_path(i))}</loc></url>" for i in self.category_items(category)
            ]
            tag = "urlset"
        body = f'<?xml version="1.0" encoding="UTF-8"?>\n<{tag} xmlns="{_SITEMAP_NS}">\n'
        body += "\n".join(entries) + f"\n</{tag}>\n"
        return 200, body.encode("utf-8")

    # ------------------------------------------------------------- item data

    def _rng(self, item_id: int) -> random.Random:
        # String seeds are hashed with SHA-512, so this does not depend on
        # PYTHONHASHSEED or the platform.
        return random.Random(f"crawlplug-demo:{self.seed}:{item_id}")

    def item(self, item_id: int) -> dict[str, Any]:
        """Ground truth of item ``item_id``: exactly the fields a spider should extract.

        Keys: ``url_path``, ``sku``, ``name``, ``price`` (float with 2
        decimals), ``category`` (e.g. ``"Category 3"``), ``in_stock``. The price is the
        one :meth:`change` gave, if any; a removed item raises KeyError.
        """
        self._check_item(item_id)
        if item_id in self._removed:
            raise KeyError(f"item {item_id} was removed from the shop")
        rng = self._rng(item_id)
        name = f"{rng.choice(_ADJECTIVES)} {rng.choice(_MATERIALS)} {rng.choice(_NOUNS)} {item_id}"
        price = rng.randint(99, 99_999) / 100
        in_stock = rng.random() < 0.8
        price = self._prices.get(item_id, price)
        return {
            "url_path": self.item_path(item_id),
            "sku": f"SKU-{item_id:06d}",
            "name": name,
            "price": price,
            "category": f"Category {self.category_of(item_id)}",
            "in_stock": in_stock,
        }

    def description(self, item_id: int) -> str:
        """Plain-text description shown on the item page."""
        self._check_item(item_id)
        rng = random.Random(f"crawlplug-demo-description:{self.seed}:{item_id}")
        return " ".join(rng.sample(_BLURBS, 3))

    def related_ids(self, item_id: int) -> list[int]:
        """Ids linked as ``related`` from item ``item_id`` (distinct, never itself, never a
        removed item: a removed one's link is left out, not replaced)."""
        self._check_item(item_id)
        count = min(self.related, self.items - 1)
        if count <= 0:
            return []
        rng = random.Random(f"crawlplug-demo-related:{self.seed}:{item_id}")
        # Sample from the other ids without building a list of all of them.
        picks = rng.sample(range(1, self.items), count)
        removed = self._removed
        return [k for k in (p if p < item_id else p + 1 for p in picks) if k not in removed]

    def truth(self) -> dict[str, dict[str, Any]]:
        """``{item path: item(id)}`` for every item in the shop (a removed one's not)."""
        return {self.item_path(i): self.item(i) for i in self.item_ids()}

    # ---------------------------------------------------------------- change

    def change(self, prices: Mapping[int, float] | None = None, removed: Iterable[int] = ()) -> None:
        """Change the shop, as a real one changes between two crawls.

        ``prices``: ``{item id: new price}`` (rounded to cents), what :meth:`item`,
        :meth:`truth` and the item's page say from now on. ``removed``: ids of items taken
        out: their pages answer 404, their list pages (whose paths do not move) and other
        items' ``related`` lists stop linking them, their sitemap leaves them out, and
        :meth:`truth`, :meth:`item_paths` and :meth:`paths` no longer have them; removing one
        twice is harmless. Changes add up over calls. Thread-safe: a page rendered after the
        call shows the change (the page cache is emptied). An unknown or already removed id,
        or a negative price, raises and changes nothing.
        """
        new_prices: dict[int, float] = {}
        for item_id, price in (prices or {}).items():
            self._check_item(item_id)
            value = round(float(price), 2)
            if not value >= 0:  # catches NaN too
                raise ValueError(f"price of item {item_id} must be >= 0, not {price!r}")
            new_prices[item_id] = value
        gone = frozenset(removed)
        for item_id in gone:
            self._check_item(item_id)
        with self._lock:
            for item_id in new_prices:
                if item_id in self._removed:
                    raise KeyError(f"item {item_id} was removed from the shop")
            self._prices = {**self._prices, **new_prices}
            self._removed = self._removed | gone
            self._cache.clear()

    # ------------------------------------------------------------- rendering

    def render(self, path: str) -> tuple[int, bytes]:
        """Status and UTF-8 HTML body the server answers for ``path``.

        ``path`` is the path component only (a query string is not stripped
        here). Unknown paths give ``(404, ...)``. Results are cached.
        """
        cached = self._cache.get(path)
        if cached is not None:
            return cached
        # Under the lock: a change() cannot land halfway through a page, nor its emptying of
        # the cache before a page rendered from the old shop is stored.
        with self._lock:
            cached = self._cache.get(path)
            if cached is not None:
                return cached
            result = self._render(path)
            if result[0] == 200:
                self._cache[path] = result
        return result

    def _render(self, path: str) -> tuple[int, bytes]:
        if path == "/":
            return 200, self._render_home()
        match = _LIST_RE.match(path)
        if match:
            category = int(match.group(1))
            page = int(match.group(2)) if match.group(2) else 1
            if (
                category <= self.categories
                and match.group(2) != "1"  # page 1 lives at /category/<c>/ only
                and page <= self.list_pages(category)
            ):
                return 200, self._render_list(category, page)
            return 404, _NOT_FOUND
        match = _ITEM_RE.match(path)
        if match:
            item_id = int(match.group(1))
            if item_id <= self.items and item_id not in self._removed:
                return 200, self._render_item(item_id)
        return 404, _NOT_FOUND

    @staticmethod
    def _page(title: str, body: list[str]) -> bytes:
        head = (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)} | Demo Shop</title></head>\n<body>\n"
        )
        return (head + "\n".join(body) + "\n</body></html>\n").encode("utf-8")

    def _nav(self) -> str:
        links = ['<a href="/">Home</a>'] + [
            f'<a class="cat" href="{self.list_path(c)}">Category {c}</a>' for c in range(1, self.categories + 1)
        ]
        return '<nav class="menu">' + " ".join(links) + "</nav>"

    def _render_home(self) -> bytes:
        body = [
            "<h1>Demo Shop</h1>",
            f"<p>{self.items - len(self._removed)} products in {self.categories} categories.</p>",
            '<ul class="categories">',
            *(f'<li><a href="{self.list_path(c)}">Category {c}</a></li>' for c in range(1, self.categories + 1)),
            "</ul>",
        ]
        return self._page("Home", body)

    def _render_list(self, category: int, page: int) -> bytes:
        ids = self._category_range(category)
        start = (page - 1) * self.per_page
        removed = self._removed
        shown = [i for i in ids[start : start + self.per_page] if i not in removed]
        pages = self.list_pages(category)
        body = [
            self._nav(),
            f"<h1>Category {category}</h1>",
            f'<p class="pager">Page {page} of {pages}</p>',
            '<ul class="products">',
            *(
                f'<li class="product"><a href="{self.item_path(i)}">{html.escape(self.item(i)["name"])}</a></li>'
                for i in shown
            ),
            "</ul>",
        ]
        if page > 1:
            body.append(f'<a class="prev" href="{self.list_path(category, page - 1)}">Previous</a>')
        if page < pages:
            body.append(f'<a class="next" href="{self.list_path(category, page + 1)}">Next</a>')
        return self._page(f"Category {category}, page {page}", body)

    def _render_item(self, item_id: int) -> bytes:
        data = self.item(item_id)
        category = self.category_of(item_id)
        name = html.escape(data["name"])
        body = [
            '<nav class="breadcrumb"><a href="/">Home</a> &gt; '
            f'<a href="{self.list_path(category)}">{data["category"]}</a></nav>',
            f'<div class="product-detail" id="item-{item_id}">',
            f'<h1 class="name">{name}</h1>',
            f'<span class="price">Price: {data["price"]:.2f} USD</span>',
            f'<span class="sku">{data["sku"]}</span>',
            f'<span class="category">{data["category"]}</span>',
            f'<p class="description">{html.escape(self.description(item_id))}</p>',
            f'<span class="stock">{"in stock" if data["in_stock"] else "out of stock"}</span>',
            "</div>",
            "<h2>Related products</h2>",
            '<ul class="related">',
            *(
                f'<li><a class="related" href="{self.item_path(k)}">{html.escape(self.item(k)["name"])}</a></li>'
                for k in self.related_ids(item_id)
            ),
            "</ul>",
        ]
        return self._page(data["name"], body)

    def _check_item(self, item_id: int) -> None:
        if not 1 <= item_id <= self.items:
            raise KeyError(f"no item {item_id} (items are 1..{self.items})")

    def _check_category(self, category: int) -> None:
        if not 1 <= category <= self.categories:
            raise KeyError(f"no category {category} (categories are 1..{self.categories})")


class _Handler(BaseHTTPRequestHandler):
    """Answers GETs from the pre-rendered pages of ``server.shop_server.shop``."""

    server: _HTTPServer
    protocol_version = "HTTP/1.0"
    server_version = "crawlplug-demoshop/1.0"

    def do_GET(self) -> None:
        owner = self.server.shop_server
        path = urlsplit(self.path).path
        if path == HITS_PATH:
            body = json.dumps(dict(owner.hits), sort_keys=True).encode("utf-8")
            self._send(200, body, "application/json")
            return
        owner._open.wait()  # held (ShopServer.hold): the page waits for release()
        shop = owner.shop
        if shop.delay:
            time.sleep(shop.delay)
        content_type = "text/html; charset=utf-8"
        render_sitemap = getattr(shop, "render_sitemap", None)  # other sites served here have none
        sitemap = None
        if render_sitemap is not None:
            sitemap = render_sitemap(path, f"http://{self.headers.get('Host') or owner.url.split('://', 1)[1]}")
        if sitemap is not None:
            status, body = sitemap
            content_type = "application/xml" if status == 200 else content_type
        else:
            status, body = shop.render(path)
        # Count before answering, so a client that has its response also sees
        # the hit counted.
        owner._record(self.path)
        self._send(status, body, content_type)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Drop http.server's per-request stderr line."""


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    shop_server: ShopServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Log handler errors instead of printing tracebacks to stderr.

        Clients that hang up early (crawler shutting down, timeouts) are
        expected and only logged at DEBUG.
        """
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, socket.timeout)):
            logger.debug("demo shop: client %s went away: %r", client_address, exc)
        else:
            logger.exception("demo shop: error answering %s", client_address)


class ShopServer:
    """Serves a :class:`DemoShop` over HTTP from a daemon thread.

    ``hits`` and ``hit_log`` count answered GET requests of any status, keyed
    by the request target as sent (path plus query string, if any); requests
    to ``/__hits`` are not counted.
    """

    def __init__(self, shop: DemoShop, host: str = "127.0.0.1", port: int = 0) -> None:
        self.shop = shop
        self.host = host
        self._requested_port = port
        self._lock = threading.Lock()
        self._hits: collections.Counter[str] = collections.Counter()
        self._hit_log: list[tuple[float, str]] = []
        self._open = threading.Event()
        self._open.set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- control

    def start(self) -> ShopServer:
        """Bind the socket and start serving; returns ``self``. No-op if running."""
        if self._httpd is not None:
            return self
        httpd = _HTTPServer((self.host, self._requested_port), _Handler)
        httpd.shop_server = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"demoshop-{self.port}",
            daemon=True,
        )
        self._thread.start()
        logger.debug("demo shop serving at %s", self.url)
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket. Safe to call twice."""
        self._open.set()  # held requests end with the server
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        logger.debug("demo shop at %s:%s stopped", self.host, httpd.server_address[1])

    def __enter__(self) -> ShopServer:  # noqa: PYI034 - start() returns the server
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def hold(self) -> None:
        """Answer no page until :meth:`release` (the requests wait, connected): a test starts
        several nodes and lets the crawl begin once all of them have joined it."""
        self._open.clear()

    def release(self) -> None:
        """Answer the held requests, and every later one, as usual."""
        self._open.set()

    @property
    def running(self) -> bool:
        return self._httpd is not None

    @property
    def port(self) -> int:
        """The bound port (the real one when started with ``port=0``)."""
        if self._httpd is None:
            raise RuntimeError("ShopServer is not running; call start() first")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL without a trailing slash, e.g. ``http://127.0.0.1:54321``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    # ------------------------------------------------------------ statistics

    def _record(self, target: str) -> None:
        now = time.monotonic()
        with self._lock:
            self._hits[target] += 1
            self._hit_log.append((now, target))

    @property
    def hits(self) -> collections.Counter[str]:
        """Snapshot (a copy) of ``{request target: GET requests answered}``."""
        with self._lock:
            return collections.Counter(self._hits)

    @property
    def hit_log(self) -> list[tuple[float, str]]:
        """Snapshot (a copy) of ``(time.monotonic(), target)`` per answered GET, in order."""
        with self._lock:
            return list(self._hit_log)

    def reset(self) -> None:
        """Forget all hits."""
        with self._lock:
            self._hits.clear()
            self._hit_log.clear()


def serve(shop: DemoShop, host: str = "127.0.0.1", port: int = 0) -> ShopServer:
    """Start serving ``shop`` and return the running server (``port=0``: any free port)."""
    return ShopServer(shop, host, port).start()


def _write_port_file(path: str, port: int) -> None:
    # Write-then-rename so a polling reader never sees an empty file.
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write(f"{port}\n")
    os.replace(tmp, path)


def serve_until_stopped(
    start: Callable[[], ShopServer],
    name: str,
    host: str,
    port: int,
    banner: Callable[[ShopServer], str],
    port_file: str | None = None,
) -> int:
    """Serve what ``start()`` serves (on host:port) until SIGTERM or SIGINT, for the demo
    sites' command lines: 0, or 1 when the port cannot be had."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        server = start()
    except OSError as exc:
        print(f"{name}: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 1
    try:
        if port_file:
            _write_port_file(port_file, server.port)
        print(banner(server), flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command line entry point: serve until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(
        prog="python -m crawlplug.demo.shop",
        description="Serve the deterministic crawlplug demo shop.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--items", type=int, default=DemoShop.items)
    parser.add_argument("--per-page", type=int, default=DemoShop.per_page)
    parser.add_argument("--categories", type=int, default=DemoShop.categories)
    parser.add_argument("--related", type=int, default=DemoShop.related)
    parser.add_argument("--seed", type=int, default=DemoShop.seed)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds to wait before each answer")
    parser.add_argument("--port-file", help="write the bound port to this file once listening")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    try:
        shop = DemoShop(
            items=args.items,
            per_page=args.per_page,
            categories=args.categories,
            related=args.related,
            delay=args.delay,
            seed=args.seed,
        )
    except ValueError as exc:
        parser.error(str(exc))

    return serve_until_stopped(
        lambda: serve(shop, args.host, args.port),
        "demo shop",
        args.host,
        args.port,
        lambda server: f"Demo shop ({shop.items} items, {len(shop.paths())} pages) serving at {server.url}",
        args.port_file,
    )


if __name__ == "__main__":
    sys.exit(main())
