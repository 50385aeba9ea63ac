"""Every path a request can take through Scrapy ends in exactly one ack or one requeue.

A small site with one URL per path (success, redirect, retries then errback,
HTTP error, connection refused, IgnoreRequest from a downloader middleware,
offsite and depth filtering, an exception in the callback) is crawled by a
real `scrapy crawl` process; afterwards Redis must hold no lease, no payload
and no queued id, and the crawl-wide counters must balance.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import redis

from crawlplug.crawl import Crawl
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys

from .support.nodes import SCRAPY

SPIDER = """
import scrapy
from scrapy.exceptions import CloseSpider, IgnoreRequest


class IgnoreMiddleware:
    def process_request(self, request, spider=None):
        if "ignore" in request.url:
            raise IgnoreRequest("ignored by the test middleware")
        return None


class PathsSpider(scrapy.Spider):
    name = "paths"
    allowed_domains = ["127.0.0.1"]
    custom_settings = {
        "DOWNLOADER_MIDDLEWARES": {"spiders.paths.IgnoreMiddleware": 50},
        "RETRY_TIMES": 2,
        "DEPTH_LIMIT": 3,
        "DOWNLOAD_TIMEOUT": 10,
    }

    async def start(self):
        yield scrapy.Request(self.settings["SITE"] + self.settings.get("START", "/"),
                             callback=self.parse, errback=self.on_error)

    def parse(self, response):
        if "/raise" in response.url:
            raise ValueError("callback failure on purpose")
        if "/close" in response.url:
            raise CloseSpider("test_close")
        yield {"url": response.url, "status": response.status}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse, errback=self.on_error)

    def on_error(self, failure):
        yield {"error": failure.request.url, "type": type(failure.value).__name__}
"""


class Site(BaseHTTPRequestHandler):
    pages: dict[str, tuple[int, str]] = {}
    hits: list[str] = []
    lock = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        with self.lock:
            self.hits.append(self.path)
        if self.path.startswith("/slow/"):
            time.sleep(2)
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/ok/redirected")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        status, body = self.pages.get(self.path, (200, "")) if not self.path.startswith("/fail500") else (500, "")
        if self.path == "/notfound":
            status = 404
        data = f"<html><body>{body}</body></html>".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def links(*hrefs: str) -> str:
    return "".join(f'<a href="{h}">x</a>' for h in hrefs)


@pytest.fixture
def site() -> Iterator[str]:
    Site.hits = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Site)
    server.daemon_threads = True
    port = server.server_address[1]
    Site.pages = {
        "/": (
            200,
            links(
                "/ok/1",
                "/ok/2",
                "/ok/1",
                "/redirect",
                "/fail500",
                "/notfound",
                "/ignore-me",
                "/raise",
                "/deep/1",
                f"http://localhost:{port}/offsite",
                "http://127.0.0.1:1/refused",
            ),
        ),
        "/deep/1": (200, links("/deep/2")),
        "/deep/2": (200, links("/deep/3")),
        "/deep/3": (200, links("/deep/4")),
        "/deep/4": (200, links("/deep/5")),
        "/closing": (200, links("/close", *[f"/ok/{i}" for i in range(100)])),
        "/slowstart": (200, links(*[f"/slow/{i}" for i in range(40)])),
    }
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    server.shutdown()
    server.server_close()


def _start(project: Path, redis_url: str, site: str, start: str = "/", **settings: object) -> subprocess.Popen[str]:
    (project / "spiders" / "paths.py").write_text(SPIDER)
    cmd = [
        SCRAPY,
        "crawl",
        "paths",
        "-o",
        str(project / "items.jsonl") + ":jsonlines",
        "-s",
        f"REDIS_URL={redis_url}",
        "-s",
        f"SITE={site}",
        "-s",
        f"START={start}",
        "-s",
        "CRAWLPLUG_IDLE_CLOSE=1",
        "-s",
        "CRAWLPLUG_HEARTBEAT=0.5",
        "-s",
        "CRAWLPLUG_LEASE_TIMEOUT=5",
    ]
    for key, value in settings.items():
        cmd += ["-s", f"{key}={value}"]
    env = dict(os.environ)
    env.pop("REDIS_URL", None)
    return subprocess.Popen(cmd, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _balance(client: redis.Redis) -> dict[str, int]:
    keys = CrawlKeys("paths")
    status = Crawl.of(Frontier(client, keys)).status()
    stats = status["stats"]
    assert status["in_flight"] == 0, "no lease is left behind"
    assert client.hlen(keys.leased) == 0
    # every payload still stored belongs to a queued request: nothing is lost or leaked
    assert client.hlen(keys.requests) == status["queued"]
    # every lease ended exactly once: acked, or given back to the queue
    assert stats.get("leased", 0) == stats.get("acked", 0) + stats.get("released", 0), stats
    return {**stats, "queued": status["queued"]}


def test_every_path_is_acked_exactly_once(project_copy, site, redis_url):
    proc = _start(project_copy, redis_url, site)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert "'finish_reason': 'finished'" in err
    items = [json.loads(x) for x in (project_copy / "items.jsonl").read_text().splitlines()]
    urls = {i.get("url", "").replace(site, "") for i in items}
    errors = {i["error"].replace(site, ""): i["type"] for i in items if "error" in i}
    assert {"/", "/ok/1", "/ok/2", "/ok/redirected", "/deep/1", "/deep/2", "/deep/3"} <= urls
    assert "/deep/4" not in urls, "DEPTH_LIMIT filtered it"
    assert errors["/fail500"] == "HttpError"
    assert errors["/notfound"] == "HttpError"
    assert errors["/ignore-me"] == "IgnoreRequest"
    assert "http://127.0.0.1:1/refused" in errors
    assert Site.hits.count("/fail500") == 3, "one try and RETRY_TIMES=2 retries"
    assert "/offsite" not in Site.hits
    assert "ValueError: callback failure on purpose" in err
    stats = _balance(redis.Redis.from_url(redis_url))
    assert stats["queued"] == 0
    assert stats.get("released", 0) == 0
    # redirect and retries re-entered the scheduler as new requests: their
    # parents were acked in the same call that stored them
    assert stats["acked"] == stats["enqueued"]


def test_close_spider_leaves_the_rest_queued(project_copy, site, redis_url):
    proc = _start(project_copy, redis_url, site, start="/closing", CONCURRENT_REQUESTS=2)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert "'finish_reason': 'test_close'" in err
    stats = _balance(redis.Redis.from_url(redis_url))
    assert stats["queued"] > 0, "what was not crawled is still queued for the next run"
    assert stats["enqueued"] == stats["acked"] + stats["queued"]


def test_shutdown_with_requests_in_flight(project_copy, site, redis_url):
    proc = _start(project_copy, redis_url, site, start="/slowstart", CONCURRENT_REQUESTS=4)
    deadline = time.monotonic() + 60
    while sum(h.startswith("/slow/") for h in Site.hits) < 4:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)  # graceful: in-flight downloads finish, then close
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    stats = _balance(redis.Redis.from_url(redis_url))
    slow_fetched = sum(h.startswith("/slow/") for h in Site.hits)
    assert stats["acked"] == 1 + slow_fetched, "every fetched page was acked"
    assert stats["queued"] == 40 - slow_fetched, "every other page is back in the queue"
