"""Tests of the demo shop (crawlplug.demo.shop): shape, content, server, CLI."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the project is not installed into the venv
    sys.path.insert(0, str(ROOT))

from crawlplug.demo.shop import DemoShop, ShopServer, serve

SMALL = {"items": 50, "per_page": 4, "categories": 3, "related": 3, "seed": 7}


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs.extend(v for k, v in attrs if k == "href" and v is not None)


def reachable(get) -> set[str]:
    """Every path reachable by links from the home page, ``get(path)`` giving (status, body);
    each must answer 200."""
    seen, todo = {"/"}, ["/"]
    while todo:
        status, body = get(todo.pop())
        assert status == 200
        for href in links(body):
            if href not in seen:
                seen.add(href)
                todo.append(href)
    return seen


def links(body: bytes) -> list[str]:
    parser = _Links()
    parser.feed(body.decode("utf-8"))
    return parser.hrefs


def fetch(url: str) -> tuple[int, bytes, str]:
    """Status, body and Content-Type of a GET, without raising on 404."""
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read(), resp.headers["Content-Type"]
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read(), err.headers["Content-Type"]


@pytest.fixture
def shop() -> DemoShop:
    return DemoShop(**SMALL)


@pytest.fixture
def server(shop: DemoShop) -> Iterator[ShopServer]:
    with serve(shop) as srv:
        yield srv


def test_every_page_answers_and_site_is_closed_under_links(shop: DemoShop, server: ShopServer) -> None:
    paths = shop.paths()
    seen_links: set[str] = set()
    for path in sorted(paths):
        status, body, ctype = fetch(server.url + path)
        assert status == 200, path
        assert ctype == "text/html; charset=utf-8"
        page_links = links(body)
        assert page_links or path.startswith("/item/"), f"{path} has no links"
        seen_links.update(page_links)
    assert seen_links <= paths, sorted(seen_links - paths)[:10]


def test_everything_is_reachable_from_home(shop: DemoShop) -> None:
    assert reachable(lambda path: shop.render(path)) == shop.paths()


def test_page_count(shop: DemoShop) -> None:
    per_category = [len(range(c, shop.items + 1, shop.categories)) for c in (1, 2, 3)]
    assert per_category == [17, 17, 16]
    list_pages = sum(math.ceil(n / shop.per_page) for n in per_category)
    assert len(shop.list_paths()) == list_pages == 14
    assert len(shop.item_paths()) == shop.items
    assert len(shop.paths()) == 1 + list_pages + shop.items
    assert len(DemoShop().paths()) == 1 + 10 * 10 + 2000


def test_list_pages_have_products_pager_and_nav(shop: DemoShop) -> None:
    body = shop.render("/category/2/page/2/")[1].decode()
    products = re.findall(r'<li class="product"><a href="(/item/\d+/)">', body)
    assert products == ["/item/14/", "/item/17/", "/item/20/", "/item/23/"]
    assert '<ul class="products">' in body
    assert '<a class="next" href="/category/2/page/3/">' in body
    assert 'href="/"' in body
    for c in (1, 2, 3):
        assert f'href="/category/{c}/"' in body
    last = shop.render("/category/2/page/5/")[1].decode()
    assert 'class="next"' not in last
    assert len(re.findall(r'class="product"', last)) == 1  # 17 = 4 * 4 + 1


def test_item_page_matches_truth(shop: DemoShop, server: ShopServer) -> None:
    for item_id in (1, 17, 50):
        truth = shop.item(item_id)
        status, body, _ = fetch(server.url + f"/item/{item_id}/")
        assert status == 200
        text = body.decode()
        name = re.search(r'<h1 class="name">(.*?)</h1>', text).group(1)
        assert name.replace("&amp;", "&") == truth["name"]
        price = re.search(r'<span class="price">Price: ([\d.]+) USD</span>', text).group(1)
        assert float(price) == truth["price"] and price == f"{truth['price']:.2f}"
        assert f'<span class="sku">{truth["sku"]}</span>' in text
        assert f'<span class="category">{truth["category"]}</span>' in text
        stock = "in stock" if truth["in_stock"] else "out of stock"
        assert f'<span class="stock">{stock}</span>' in text
        assert '<p class="description">' in text
        related = re.findall(r'<a class="related" href="(/item/\d+/)">', text)
        assert related == [f"/item/{k}/" for k in shop.related_ids(item_id)]
        assert len(set(related)) == 3 and f"/item/{item_id}/" not in related


def test_truth_fields(shop: DemoShop) -> None:
    truth = shop.truth()
    assert set(truth) == shop.item_paths()
    item = truth["/item/5/"]
    assert set(item) == {"url_path", "sku", "name", "price", "category", "in_stock"}
    assert item["url_path"] == "/item/5/"
    assert item["sku"] == "SKU-000005"
    assert item["category"] == "Category 2"
    assert isinstance(item["price"], float) and round(item["price"], 2) == item["price"]
    assert isinstance(item["in_stock"], bool)
    assert len({t["name"] for t in truth.values()}) == shop.items
    assert {t["in_stock"] for t in truth.values()} == {True, False}


@pytest.mark.parametrize(
    "path",
    [
        "/nope",
        "/item/0/",
        "/item/51/",
        "/item/007/",
        "/item/5",
        "/category/4/",
        "/category/1/page/1/",
        "/category/1/page/6/",
        "/category/0/",
    ],
)
def test_unknown_path_is_404(server: ShopServer, path: str) -> None:
    status, body, ctype = fetch(server.url + path)
    assert status == 404
    assert ctype == "text/html; charset=utf-8"
    assert server.hits[path] == 1


def test_hits_count_requests(server: ShopServer) -> None:
    fetch(server.url + "/")
    fetch(server.url + "/")
    fetch(server.url + "/item/3/")
    fetch(server.url + "/missing")
    assert server.hits == {"/": 2, "/item/3/": 1, "/missing": 1}
    log = server.hit_log
    assert [p for _, p in log] == ["/", "/", "/item/3/", "/missing"]
    assert all(a[0] <= b[0] for a, b in zip(log, log[1:]))
    status, body, ctype = fetch(server.url + "/__hits")
    assert status == 200 and ctype == "application/json"
    assert json.loads(body) == {"/": 2, "/item/3/": 1, "/missing": 1}
    assert "/__hits" not in server.hits
    server.reset()
    assert server.hits == {} and server.hit_log == []


def test_delay_slows_answers() -> None:
    with serve(DemoShop(items=5, delay=0.2)) as srv:
        started = time.monotonic()
        assert fetch(srv.url + "/item/1/")[0] == 200
        assert time.monotonic() - started >= 0.2


def test_a_held_shop_answers_once_released(server: ShopServer) -> None:
    got: list[int] = []
    server.hold()
    reader = threading.Thread(target=lambda: got.append(fetch(server.url + "/item/2/")[0]))
    reader.start()
    reader.join(0.5)
    assert reader.is_alive() and got == [] and server.hits == {}, "no page while held"
    assert fetch(server.url + "/__hits")[0] == 200, "the hit counter answers while held"
    server.release()
    reader.join(10)
    assert got == [200] and server.hits == {"/item/2/": 1}
    ended: list[str] = []

    def held() -> None:
        try:
            fetch(server.url + "/")
        except OSError as exc:  # the server went away: the request ends either way
            ended.append(type(exc).__name__)
        else:
            ended.append("answered")

    server.hold()
    holder = threading.Thread(target=held)
    holder.start()
    time.sleep(0.2)
    server.stop()  # a held request ends with the server
    holder.join(10)
    assert ended, "the held request ended when the server stopped"


def test_server_lifecycle(shop: DemoShop) -> None:
    srv = ShopServer(shop)
    with pytest.raises(RuntimeError):
        srv.port
    srv.start()
    try:
        url = srv.url
        assert url == f"http://127.0.0.1:{srv.port}"
        assert fetch(url + "/")[0] == 200
    finally:
        srv.stop()
    srv.stop()  # idempotent
    assert not srv.running
    with pytest.raises(OSError):  # connection refused: the socket is closed
        urllib.request.urlopen(url + "/", timeout=2)


def test_deterministic_bytes() -> None:
    a, b = DemoShop(**SMALL), DemoShop(**SMALL)
    for path in sorted(a.paths()) + ["/nope"]:
        assert a.render(path) == b.render(path), path
    assert a.truth() == b.truth()
    other = DemoShop(**{**SMALL, "seed": 8})
    assert other.render("/item/1/") != a.render("/item/1/")
    assert other.paths() == a.paths()


def test_change_prices_shows_on_the_page_and_in_truth(shop: DemoShop, server: ShopServer) -> None:
    before = shop.truth()
    assert fetch(server.url + "/item/5/")[0] == 200  # cached before the change: the change empties the cache
    shop.change(prices={5: 12.5, 17: 999.999})
    after = shop.truth()
    assert after["/item/5/"] == {**before["/item/5/"], "price": 12.5}
    assert after["/item/17/"]["price"] == 1000.0  # rounded to cents
    assert shop.item(5)["price"] == 12.5
    unchanged = set(before) - {"/item/5/", "/item/17/"}
    assert {p: after[p] for p in unchanged} == {p: before[p] for p in unchanged}
    for item_id, shown in ((5, "12.50"), (17, "1000.00")):
        status, body, _ = fetch(server.url + f"/item/{item_id}/")
        assert status == 200
        assert f'<span class="price">Price: {shown} USD</span>' in body.decode()
    assert shop.paths() == DemoShop(**SMALL).paths()
    shop.change(prices={5: 13})  # changes add up
    assert shop.item(5)["price"] == 13.0 and shop.item(17)["price"] == 1000.0


def test_removed_item_is_404_and_linked_from_nowhere(shop: DemoShop, server: ShopServer) -> None:
    unchanged = DemoShop(**SMALL)
    for path in sorted(shop.paths()):  # every page cached before the change
        assert fetch(server.url + path)[0] == 200
    gone = 14  # on /category/2/page/2/, and a related link of item 32
    assert gone in unchanged.related_ids(32)
    shop.change(removed=[gone, 50])
    shop.change(removed=[50])  # again: harmless

    status, _, _ = fetch(server.url + f"/item/{gone}/")
    assert status == 404
    assert fetch(server.url + "/item/50/")[0] == 404
    assert f"/item/{gone}/" not in shop.item_paths() and "/item/50/" not in shop.truth()
    assert shop.item_paths() == unchanged.item_paths() - {f"/item/{gone}/", "/item/50/"}
    assert shop.list_paths() == unchanged.list_paths()  # list pages stay where they were
    with pytest.raises(KeyError):
        shop.item(gone)

    page2 = fetch(server.url + "/category/2/page/2/")[1].decode()
    products = re.findall(r'<li class="product"><a href="(/item/\d+/)">', page2)
    assert products == ["/item/17/", "/item/20/", "/item/23/"]
    assert '<a class="next" href="/category/2/page/3/">' in page2
    assert fetch(server.url + "/category/2/page/5/")[0] == 200  # the last page stays
    assert "/item/14/" not in links(fetch(server.url + "/item/32/")[1])
    assert len(shop.related_ids(32)) == 2

    # what is left is closed under links and all of it reachable from home, and the rest is as it was
    assert reachable(lambda path: fetch(server.url + path)[:2]) == shop.paths()
    assert shop.truth() == {p: t for p, t in unchanged.truth().items() if p in shop.item_paths()}
    sitemap = fetch(server.url + "/sitemap/2.xml")[1].decode()
    assert "/item/14/<" not in sitemap and "/item/17/<" in sitemap

    with pytest.raises(KeyError):
        shop.change(prices={gone: 1.0})  # a removed item has no price to change
    with pytest.raises(KeyError):
        shop.change(removed=[51])
    with pytest.raises(ValueError):
        shop.change(prices={1: -1.0})
    assert shop.item(1) == unchanged.item(1)  # a refused change changes nothing


def test_unchanged_shop_is_the_pure_function_of_its_parameters(shop: DemoShop) -> None:
    changed = DemoShop(**SMALL)
    changed.change()  # nothing to change
    assert changed == shop
    assert [changed.render(p) for p in sorted(shop.paths())] == [shop.render(p) for p in sorted(shop.paths())]
    changed.change(prices={1: 1.0})
    assert changed != shop


@pytest.mark.integration  # starts processes of its own
def test_cli_port_file(tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [sys.executable, "-m", "crawlplug.demo.shop", "--port", "0", "--items", "20", "--port-file", str(port_file)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no port file"
            time.sleep(0.05)
        port = int(port_file.read_text())
        status, body, _ = fetch(f"http://127.0.0.1:{port}/")
        assert status == 200 and b"Category 1" in body
        assert fetch(f"http://127.0.0.1:{port}/item/20/")[0] == 200
        assert json.loads(fetch(f"http://127.0.0.1:{port}/__hits")[1]) == {"/": 1, "/item/20/": 1}
        line = proc.stdout.readline()
        assert line.rstrip().endswith(f"http://127.0.0.1:{port}")
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert os.path.exists(port_file)
