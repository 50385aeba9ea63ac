"""A second deterministic demo site, shaped unlike the shop: car brands, series, models.

Site spiders (``docs/sites.md``) are shown on two sites of different shapes:
the demo shop (:mod:`crawlplug.demo.shop`: list pages, then item pages) and this
one, three steps deep, with tables, labelled values and links a spider must
*not* follow::

    /brand/<b>.html                 brand page: its series (div.series-list), popular models
                                    (aside.popular), a nav bar of every brand, a footer
    /series/<b>-<s>.html            series page 1: models in table.models, a pager (div.pages),
    /series/<b>-<s>-p<n>.html       page n >= 2;  "compare" links to other series' models
    /model/<id>.html                model page: breadcrumbs, h2.title, table.spec with
                                    "Year", "Price: 123,400 yuan" (or "Price: on request"),
                                    "Electric: yes/no", "5 seats"; links to similar models
    /, /about.html, /dealers/<b>.html   pages outside the brand -> series -> model walk

Everything is a pure function of the :class:`DemoCars` parameters, so a crawl
is checked exactly against :meth:`DemoCars.truth` and :meth:`DemoCars.crawl_paths`.
It is served by :class:`crawlplug.demo.shop.ShopServer` (which serves any object
with ``render(path)`` and ``delay``)::

    python -m crawlplug.demo.cars --port 8001
"""

from __future__ import annotations

import argparse
import html
import logging
import random
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from .shop import ShopServer, serve_until_stopped

__all__ = ["DemoCars", "main", "serve"]

logger = logging.getLogger(__name__)

_BRANDS = (
    "Aurora",
    "Borealis",
    "Cobalt",
    "Dynamo",
    "Ember",
    "Falcon",
    "Glacier",
    "Horizon",
    "Ion",
    "Juniper",
    "Kestrel",
    "Lumen",
)
_SERIES = ("Coupe", "Tourer", "Roadster", "Wagon", "Cross", "Sport")
_TRIMS = ("1.5T", "2.0", "2.0T", "Hybrid", "EV", "3.0 V6", "Base", "Luxury", "Long Range")
_SEATS = (2, 4, 5, 5, 5, 7)

_BRAND_RE = re.compile(r"^/brand/([1-9][0-9]*)\.html$")
_SERIES_RE = re.compile(r"^/series/([1-9][0-9]*)-([1-9][0-9]*)(?:-p([1-9][0-9]*))?\.html$")
_MODEL_RE = re.compile(r"^/model/([1-9][0-9]*)\.html$")
_DEALER_RE = re.compile(r"^/dealers/([1-9][0-9]*)\.html$")

_NOT_FOUND = (
    b'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>Not found</title></head>'
    b"<body><h1>404</h1></body></html>\n"
)


@dataclass
class DemoCars:
    """Parameters and renderer of the car catalogue.

    Brand ``b`` (1..brands) has 2-4 series; each series has 3-9 models, shown
    ``per_page`` to a series page. Models are numbered 1.. in brand, series order.
    """

    brands: int = 6
    per_page: int = 4
    delay: float = 0.0
    """Seconds the server sleeps before answering each page request."""
    seed: int = 0

    _cache: dict[str, tuple[int, bytes]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _series: dict[tuple[int, int], list[int]] = field(default_factory=dict, init=False, repr=False)
    _model_of: dict[int, tuple[int, int]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.brands < 1 or self.per_page < 1 or self.delay < 0:
            raise ValueError("brands and per_page must be >= 1, delay >= 0")
        next_id = 1
        for b in range(1, self.brands + 1):
            for s in range(1, self.series_count(b) + 1):
                count = 3 + self._rng("models", b, s).randrange(7)
                ids = list(range(next_id, next_id + count))
                next_id += count
                self._series[(b, s)] = ids
                for i in ids:
                    self._model_of[i] = (b, s)

    def _rng(self, *parts: object) -> random.Random:
        return random.Random("crawlplug-cars:" + ":".join(map(str, (self.seed, *parts))))

    # -- shape -------------------------------------------------------------------------
    def brand_name(self, b: int) -> str:
        base = _BRANDS[(b - 1) % len(_BRANDS)]
        return base if b <= len(_BRANDS) else f"{base} {b}"

    def series_count(self, b: int) -> int:
        return 2 + self._rng("series", b).randrange(3)

    def series_name(self, b: int, s: int) -> str:
        return _SERIES[(b + s) % len(_SERIES)] if s <= len(_SERIES) else f"Series {s}"

    def series_pages(self, b: int, s: int) -> int:
        return -(-len(self._series[(b, s)]) // self.per_page)

    @staticmethod
    def series_path(b: int, s: int, page: int = 1) -> str:
        return f"/series/{b}-{s}.html" if page == 1 else f"/series/{b}-{s}-p{page}.html"

    @property
    def models(self) -> int:
        return len(self._model_of)

    def crawl_paths(self) -> set[str]:
        """Every page of the brand -> series -> model walk from the brand pages (and none else)."""
        paths = {f"/brand/{b}.html" for b in range(1, self.brands + 1)}
        for b, s in self._series:
            paths |= {self.series_path(b, s, p) for p in range(1, self.series_pages(b, s) + 1)}
        return paths | {f"/model/{i}.html" for i in self._model_of}

    # -- data ----------------------------------------------------------------------------
    def model(self, model_id: int) -> dict[str, Any]:
        """Ground truth of a model: exactly what a definition should extract from its page."""
        b, s = self._model_of[model_id]
        rng = self._rng("model", model_id)
        trim = rng.choice(_TRIMS)
        electric = trim == "EV" or rng.random() < 0.2
        price = None if rng.random() < 0.15 else rng.randrange(60, 900) * 1000 + rng.choice((0, 400, 900))
        return {
            "url_path": f"/model/{model_id}.html",
            "name": f"{self.brand_name(b)} {self.series_name(b, s)} {trim}",
            "brand": self.brand_name(b),
            "series": self.series_name(b, s),
            "year": 2012 + rng.randrange(14),
            "price": price,
            "electric": electric,
            "seats": rng.choice(_SEATS),
        }

    def truth(self) -> dict[str, dict[str, Any]]:
        """``{model path: model(id)}`` for every model."""
        return {f"/model/{i}.html": self.model(i) for i in sorted(self._model_of)}

    # -- pages ---------------------------------------------------------------------------
    def render(self, path: str) -> tuple[int, bytes]:
        cached = self._cache.get(path)
        if cached is None:
            cached = self._render(path)
            if cached[0] == 200:
                self._cache[path] = cached
        return cached

    def _render(self, path: str) -> tuple[int, bytes]:
        if path == "/":
            return 200, self._home()
        if path == "/about.html":
            return 200, self._page("About", ["<h1>About the catalogue</h1>", "<p>Every car, every year.</p>"])
        m = _DEALER_RE.match(path)
        if m and int(m.group(1)) <= self.brands:
            return 200, self._page("Dealers", [f"<h1>{self.brand_name(int(m.group(1)))} dealers</h1>"])
        m = _BRAND_RE.match(path)
        if m and int(m.group(1)) <= self.brands:
            return 200, self._brand(int(m.group(1)))
        m = _SERIES_RE.match(path)
        if m:
            b, s, page = int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)
            if (b, s) in self._series and m.group(3) != "1" and page <= self.series_pages(b, s):
                return 200, self._series_page(b, s, page)
        m = _MODEL_RE.match(path)
        if m and int(m.group(1)) in self._model_of:
            return 200, self._model_page(int(m.group(1)))
        return 404, _NOT_FOUND

    @staticmethod
    def _page(title: str, body: list[str]) -> bytes:
        head = (
            f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)} | Demo Cars</title></head>\n<body>\n"
        )
        return (head + "\n".join(body) + "\n</body></html>\n").encode("utf-8")

    def _nav(self) -> str:
        links = " ".join(
            f'<a href="/brand/{b}.html">{html.escape(self.brand_name(b))}</a>' for b in range(1, self.brands + 1)
        )
        return f'<nav class="top"><a href="/">Home</a> {links}</nav>'

    def _footer(self, b: int = 1) -> str:
        return f'<footer><a href="/about.html">About</a> <a href="/dealers/{b}.html">Dealers</a></footer>'

    def _home(self) -> bytes:
        return self._page("Home", [self._nav(), "<h1>Demo Cars</h1>", self._footer()])

    def _brand(self, b: int) -> bytes:
        name = html.escape(self.brand_name(b))
        series = [
            f'<li><a href="{self.series_path(b, s)}">{name} {self.series_name(b, s)}</a></li>'
            for s in range(1, self.series_count(b) + 1)
        ]
        popular = self._rng("popular", b).sample(sorted(self._model_of), min(3, self.models))
        return self._page(
            self.brand_name(b),
            [
                self._nav(),
                f"<h1>{name}</h1>",
                '<div class="series-list"><h2>Series</h2><ul>',
                *series,
                "</ul></div>",
                '<aside class="popular"><h3>Popular right now</h3>',
                *(f'<a href="/model/{i}.html">{html.escape(self.model(i)["name"])}</a>' for i in popular),
                "</aside>",
                self._footer(b),
            ],
        )

    def _series_page(self, b: int, s: int, page: int) -> bytes:
        ids = self._series[(b, s)]
        shown = ids[(page - 1) * self.per_page : page * self.per_page]
        title = f"{self.brand_name(b)} {self.series_name(b, s)}"
        rows = [
            f'<tr><td><a href="/model/{i}.html">{html.escape(self.model(i)["name"])}</a></td>'
            f"<td>{self.model(i)['year']}</td></tr>"
            for i in shown
        ]
        pager = []
        if page > 1:
            pager.append(f'<a class="prev" href="{self.series_path(b, s, page - 1)}">previous</a>')
        if page < self.series_pages(b, s):
            pager.append(f'<a class="next" href="{self.series_path(b, s, page + 1)}">next</a>')
        others = [i for i in self._model_of if self._model_of[i] != (b, s)]
        compare = self._rng("compare", b, s, page).sample(others, min(2, len(others)))
        return self._page(
            title,
            [
                self._nav(),
                f'<div class="crumbs"><a href="/brand/{b}.html">{html.escape(self.brand_name(b))}</a></div>',
                f"<h1>{html.escape(title)}</h1>",
                '<table class="models"><tr><th>Model</th><th>Year</th></tr>',
                *rows,
                "</table>",
                f'<div class="pages">Page {page} of {self.series_pages(b, s)} {" ".join(pager)}</div>',
                '<aside class="compare">Compare with: ',
                *(f'<a href="/model/{i}.html">{html.escape(self.model(i)["name"])}</a>' for i in compare),
                "</aside>",
                self._footer(b),
            ],
        )

    def _model_page(self, model_id: int) -> bytes:
        m = self.model(model_id)
        b, s = self._model_of[model_id]
        price = "Price: on request" if m["price"] is None else f"Price: {m['price']:,} yuan"
        similar = [i for i in self._series[(b, s)] if i != model_id][:2]
        crumbs = (
            f'<div class="crumbs"><a href="/">Home</a> &rsaquo; <a href="/brand/{b}.html">{html.escape(m["brand"])}'
            f'</a> &rsaquo; <a href="{self.series_path(b, s)}">{html.escape(m["series"])}</a></div>'
        )
        return self._page(
            m["name"],
            [
                crumbs,
                f'<h2 class="title">{html.escape(m["name"])}</h2>',
                '<table class="spec">',
                f"<tr><th>Year</th><td>{m['year']}</td></tr>",
                f"<tr><th>Price</th><td>{price}</td></tr>",
                f"<tr><th>Electric</th><td>{'yes' if m['electric'] else 'no'}</td></tr>",
                f"<tr><th>Seats</th><td>{m['seats']} seats</td></tr>",
                "</table>",
                '<div class="similar"><h3>Similar</h3>',
                *(f'<a href="/model/{i}.html">{html.escape(self.model(i)["name"])}</a>' for i in similar),
                "</div>",
                self._footer(b),
            ],
        )


def serve(cars: DemoCars, host: str = "127.0.0.1", port: int = 0) -> ShopServer:
    """Start serving ``cars`` on loopback (``port=0``: any free port); returns the running server."""
    return ShopServer(cars, host, port).start()  # type: ignore[arg-type] # any render()/delay object


def main(argv: list[str] | None = None) -> int:
    """Serve the car catalogue until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m crawlplug.demo.cars", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001, help="0 picks a free port")
    parser.add_argument("--brands", type=int, default=DemoCars.brands)
    parser.add_argument("--per-page", type=int, default=DemoCars.per_page)
    parser.add_argument("--seed", type=int, default=DemoCars.seed)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds to wait before each answer")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        cars = DemoCars(brands=args.brands, per_page=args.per_page, seed=args.seed, delay=args.delay)
    except ValueError as exc:
        parser.error(str(exc))
    return serve_until_stopped(
        lambda: serve(cars, args.host, args.port),
        "demo cars",
        args.host,
        args.port,
        lambda server: (
            f"Demo cars ({cars.models} models, {len(cars.crawl_paths())} pages to crawl) serving at {server.url}"
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
