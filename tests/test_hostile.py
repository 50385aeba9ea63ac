"""Hostile or broken input in a real crawl: real `scrapy crawl` processes, the suite's Redis.

Whatever anyone with write access to the crawl's Redis plants (queue entries, start
entries, pickles built to run code) ends in the dead letters with its reason, runs
nothing, and the node crawls the whole site all the same. The pickle serializer works
end to end with its secret, and the secret never reaches a log.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import pickle
import subprocess
from pathlib import Path

import pytest
import redis
from scrapy import Request

from crawlplug.crawl import Crawl
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.serializers import PICKLE_MAGIC, JsonSerializer

from .support.nodes import ROOT, SCRAPY

FAST = {"CRAWLPLUG_IDLE_CLOSE": 1, "CRAWLPLUG_HEARTBEAT": 0.5, "CRAWLPLUG_LEASE_TIMEOUT": 5}
SECRET = "s3cret-7f1c0d9e4b2a68355e0c1a2b3c4d5e6f"  # distinctive: grep-able in any log
MB = 1024 * 1024
KEYS = CrawlKeys("shop")


class _Touch:
    """Unpickled unrestricted, it creates ``marker`` (os.system or subprocess.call)."""

    def __init__(self, marker: Path, how: str = "os.system") -> None:
        self.marker, self.how = marker, how

    def __reduce__(self):
        if self.how == "subprocess":
            return (subprocess.call, (["touch", str(self.marker)],))
        return (os.system, (f"touch {self.marker}",))


def sign(body: bytes, secret: str = SECRET) -> bytes:
    """A pickle payload in crawlplug's signed format, as a holder of ``secret`` makes it."""
    return PICKLE_MAGIC + hmac.new(secret.encode(), PICKLE_MAGIC + body, hashlib.sha256).digest() + body


def reasons_by_payload(frontier: Frontier) -> dict[bytes, str]:
    return {d.payload: d.header["reason"] for d in Crawl.of(frontier).dead_letters()}


def test_every_kind_of_bad_entry_is_dead_lettered_and_the_whole_site_crawled(crawl, shop, redis_url, tmp_path):
    client = redis.Redis.from_url(redis_url)
    frontier = Frontier(client, KEYS)
    marker = tmp_path / "pwned"
    # both formats every node reads: the long-key one (what crawlplug wrote before the compact one)
    good = json.loads(JsonSerializer(payload_format=1).dumps(Request(shop.url + "/item/1/"), None))
    compact = json.loads(JsonSerializer().dumps(Request(shop.url + "/item/1/"), None))
    host = shop.url.split("://", 1)[1]  # 127.0.0.1:<port>

    def entry(**fields) -> bytes:
        return json.dumps({**good, **fields}).encode()

    def centry(**fields) -> bytes:
        return json.dumps({**compact, **fields}).encode()

    queue = {  # queue payload -> words its dead letter's reason must hold
        b"\x80\x04garbage\xff\x00": "not JSON",
        b'{"v": 1, "url": "http://127.0.0.1/': "not JSON",
        b"[1, 2, 3]": "not a JSON object",
        entry(v=99): "unknown payload version",
        entry(url=5): "no valid url",
        entry(url=f"{host}/item/2/"): "no scheme",
        entry(url="ftp://127.0.0.1/file"): "not crawlable",
        entry(url="file:///etc/passwd"): "not crawlable",
        entry(callback="no_such_method"): "has no method 'no_such_method'",
        entry(errback="__init__"): "not a method name",
        entry(callback="start"): "a method of scrapy.Spider itself",
        entry(_class="os.system"): "allow-list",
        entry(_class="spiders.shop.ShopSpider"): "allow-list",
        entry(method="POST", body=base64.b64encode(b"x" * (50 * MB)).decode()): "exceeds CRAWLPLUG_MAX_PAYLOAD_BYTES",
        centry(u=5): "no valid url",
        centry(u=f"{host}/item/2/"): "no scheme",
        centry(url=shop.url + "/item/2/"): "a version 3 payload has no field 'url'",
        centry(c="no_such_method"): "has no method 'no_such_method'",
        centry(e="closed"): "'closed' is the spider's close hook",
        centry(C="os.system"): "allow-list",
        centry(b={"b64": "!!"}): "body is not valid base64",
        centry(h=[[{"b64": "QQ=="}, 5]]): "header value is neither text nor",
        centry(o={"url": "http://127.0.0.1/"}): "the other attributes (o)",
        centry(r="/item/9/", u="http:item"): "a relative Referer (r) needs a URL with an origin",
        # meta keys that name code: refused by a spider that did not opt in, playwright or not
        centry(m={"playwright_page_init_callback": "os.getcwd"}): "it imports a function by the path it names",
        pickle.dumps(_Touch(marker)): "not JSON",
        sign(pickle.dumps(_Touch(marker))): "signed pickle",
    }
    starts = {  # start entry -> words its dead letter's reason must hold
        b"\xff\xfe\x00garbage": "not UTF-8",
        b'{"url": "' + shop.url.encode() + b'/item/3/",': "not valid JSON",
        b'["' + shop.url.encode() + b'/item/3/"]': "must be an object",
        f"{host}/item/3/".encode(): "no scheme",
        b"ftp://127.0.0.1/file": "scheme 'ftp' is not crawlable",
        b"javascript:alert(1)": "not crawlable",
        json.dumps(
            {"url": shop.url + "/item/4/", "callback": "parse_nothing"}
        ).encode(): "has no method 'parse_nothing'",
        json.dumps({"url": shop.url + "/item/4/", "callback": "os.system"}).encode(): "must be a spider method name",
        json.dumps({"url": shop.url + "/item/5/", "_class": "os.system"}).encode(): "allow-list",
        b'{"url": "' + shop.url.encode() + b'/item/6/", "meta": {"x": 1e999}}': "out of range",
        json.dumps({"url": shop.url + "/item/7/", "method": "POST", "body": "x" * (50 * MB)}).encode(): "larger than",
        # under the 1 MiB of a start entry, but its request is over this crawl's payload limit
        json.dumps(
            {"url": shop.url + "/item/8/", "method": "POST", "body": "x" * 700_000}
        ).encode(): "exceeds CRAWLPLUG_MAX_PAYLOAD_BYTES (600000)",
        pickle.dumps(_Touch(marker), protocol=2): "not UTF-8",
        pickle.dumps(_Touch(marker), protocol=0): "one URL on one line",  # protocol 0 is text
    }
    # popped first (score -100), mixed with the real crawl; the good start entry comes last
    frontier.admit([(b"", -100.0, payload) for payload in queue])
    client.rpush(
        KEYS.start_urls, *starts, json.dumps({"url": shop.url + "/item/1/?via=start", "callback": "parse_item"})
    )

    limit = {"CRAWLPLUG_MAX_PAYLOAD_BYTES": 600_000}
    node = crawl(args={"base_url": shop.url}, settings={"REDIS_URL": redis_url, **FAST, **limit})
    assert node.wait(180) == 0, node.text()[-3000:]
    text = node.text()
    assert "'finish_reason': 'finished'" in text
    assert not marker.exists()
    hits = shop.hits
    assert set(hits) == shop.shop.paths() | {"/item/1/?via=start"}
    assert any("/item/1/?via=start" in line for line in node.item_lines())
    assert f"'crawlplug/undecodable': {len(queue)}" in text
    assert f"'crawlplug/start_entries_invalid': {len(starts)}" in text

    dead = reasons_by_payload(frontier)
    assert len(Crawl.of(frontier).dead_letters()) == len(queue) + len(starts)
    for payload, words in queue.items():
        assert words in dead[payload], (payload[:80], dead[payload])
    for line, words in starts.items():
        assert dead[line].startswith("invalid start entry: ") and words in dead[line], (line[:80], dead[line])
    status = Crawl.of(frontier).status()
    assert (status["queued"], status["in_flight"], status["start_urls"]) == (0, 0, 0)
    assert status["stats"]["dead"] == len(queue) + len(starts)


def _attacks(tmp_path: Path, shop_url: str) -> dict[str, tuple[bytes, Path]]:
    """Pickles an attacker writes into the queue, each with the marker file it would create."""
    out = {}
    for name in ("raw", "magic-no-signature", "wrong-key", "right-key", "right-key-in-meta"):
        marker = tmp_path / f"pwned-{name}"
        if name == "right-key-in-meta":
            body = pickle.dumps(
                {
                    "v": 1,
                    "url": shop_url + "/item/2/",
                    "callback": "parse_item",
                    "meta": {"x": _Touch(marker, "subprocess")},
                },
                protocol=5,
            )
        else:
            body = pickle.dumps(_Touch(marker), protocol=2)
        payload = {
            "raw": body,
            "magic-no-signature": PICKLE_MAGIC + bytes(32) + body,
            "wrong-key": sign(body, "another-key-" + SECRET),
            "right-key": sign(body),
            "right-key-in-meta": sign(body),
        }[name]
        out[name] = (payload, marker)
    return out


EXPECTED = {
    "json": {
        "raw": "not JSON",
        "magic-no-signature": "this node reads JSON",
        "wrong-key": "this node reads JSON",
        "right-key": "this node reads JSON",
        "right-key-in-meta": "this node reads JSON",
    },
    "pickle": {
        "raw": "neither JSON nor a signed crawlplug pickle; not unpickled",
        "magic-no-signature": "signature does not match CRAWLPLUG_SECRET",
        "wrong-key": "signature does not match CRAWLPLUG_SECRET",
        "right-key": "refused by the restricted unpickler: refused global posix.system",
        "right-key-in-meta": "refused by the restricted unpickler: refused global subprocess.call",
    },
}


@pytest.mark.parametrize(
    "serializer, secret_from",
    [("json", None), ("pickle", "setting"), ("pickle", "environment")],
    ids=["json", "pickle-secret-setting", "pickle-secret-env"],
)
def test_a_planted_pickle_runs_under_no_serializer(crawl, make_shop, redis_url, tmp_path, serializer, secret_from):
    shop = make_shop(items=40)
    client = redis.Redis.from_url(redis_url)
    frontier = Frontier(client, KEYS)
    attacks = _attacks(tmp_path, shop.url)
    planted = [(b"", -100.0, payload) for payload, _ in attacks.values()]
    if serializer == "pickle":
        # a request signed by the test with the documented format: the node reads it, so it
        # holds the same key, and callbacks travel by name
        fields = {"v": 1, "url": shop.url + "/item/1/?signed=1", "callback": "parse_item", "meta": {"t": (1, b"x")}}
        planted.append((b"", -100.0, sign(pickle.dumps(fields, protocol=5))))
    frontier.admit(planted)

    settings: dict[str, object] = {
        "REDIS_URL": redis_url,
        **FAST,
        "CRAWLPLUG_SERIALIZER": serializer,
        "LOG_LEVEL": "DEBUG",
    }
    env = {"CRAWLPLUG_SECRET": ""}
    if secret_from == "setting":
        settings["CRAWLPLUG_SECRET"] = SECRET
    elif secret_from == "environment":
        env["CRAWLPLUG_SECRET"] = SECRET
    node = crawl(args={"base_url": shop.url}, settings=settings, env=env)
    assert node.wait(180) == 0, node.text()[-3000:]
    text = node.text()
    assert "'finish_reason': 'finished'" in text

    for name, (_, marker) in attacks.items():
        assert not marker.exists(), f"{name}: the planted pickle ran"
    dead = reasons_by_payload(frontier)
    assert len(dead) == len(attacks)
    for name, (payload, _) in attacks.items():
        assert EXPECTED[serializer][name] in dead[payload], (name, dead[payload])
    assert f"'crawlplug/undecodable': {len(attacks)}" in text

    expected = shop.shop.paths() | ({"/item/1/?signed=1"} if serializer == "pickle" else set())
    assert set(shop.hits) == expected
    if serializer == "pickle":
        payloads = client.hvals(KEYS.requests)
        assert not payloads  # all acknowledged
        err = node.log.with_suffix(".err").read_text(errors="replace")
        for where, content in (("log", text), ("stderr", err)):
            assert SECRET not in content, f"the secret is in the node's {where}"
            assert SECRET[:12] not in content
        assert "Overridden settings" in text  # Scrapy's settings line was logged, without it


def test_pickle_without_a_secret_refuses_to_start(crawl, redis_url):
    node = crawl(settings={"REDIS_URL": redis_url, "CRAWLPLUG_SERIALIZER": "pickle"}, env={"CRAWLPLUG_SECRET": ""})
    assert node.wait(120) != 0
    text = node.text()
    errors = [line for line in text.splitlines() if " ERROR: " in line]
    assert len(errors) == 1 and "CRAWLPLUG_SERIALIZER='pickle' needs CRAWLPLUG_SECRET" in errors[0], text[-2000:]
    assert "Traceback" not in text
    assert "'finish_reason': 'config_error'" in text


@pytest.mark.integration  # starts processes of its own
def test_a_short_secret_refuses_to_start_without_showing_it(redis_url):
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "CRAWLPLUG_SECRET")}
    env["CRAWLPLUG_SECRET"] = "tiny-s3cret"
    proc = subprocess.run(
        [SCRAPY, "crawl", "shop", "-s", f"REDIS_URL={redis_url}", "-s", "CRAWLPLUG_SERIALIZER=pickle"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0
    assert "CRAWLPLUG_SECRET is too short (11 bytes, at least 16)" in proc.stderr
    assert "tiny-s3cret" not in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
