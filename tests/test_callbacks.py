"""Which names a stored request may call (crawlplug.serializers.callbacks), on real spiders and in real crawls.

A payload in Redis names its callback; whoever can write to Redis writes that name.
Accepted: public methods of the user's spider class, the callbacks Scrapy's and
crawlplug's generic spiders put on requests themselves, and what the spider lists in
``crawlplug_callbacks``; refused, with the reason naming it: everything else (Scrapy's
hooks, private helpers, RedisMixin's and CrawlSpider's machinery). Real crawls show the
refused ones dead-lettered and the generic spiders (CrawlSpider rules through
RedisCrawlSpider, SitemapSpider) crawling whole sites.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
from collections import Counter
from pathlib import Path

import pytest
import redis
import scrapy
import scrapy_redis.spiders
from scrapy import Request

from crawlplug import starts
from crawlplug.crawl import Crawl
from crawlplug.errors import DecodeError, SerializationError
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.serializers import JsonSerializer, callbacks, describe_payload
from crawlplug.sites.spider import SiteSpider
from spiders.redisrules import RedisRulesSpider
from spiders.redisshop import RedisShopSpider
from spiders.shop import ShopSpider
from spiders.sitemapshop import SitemapShopSpider

from .support.nodes import start_joined
from .test_redisspider import items_of, push

FAST = {"CRAWLPLUG_IDLE_CLOSE": 1, "CRAWLPLUG_HEARTBEAT": 0.5, "CRAWLPLUG_LEASE_TIMEOUT": 5}
SER = JsonSerializer()


class ScrapyRedisShop(scrapy_redis.spiders.RedisSpider):
    name = "srshop"

    def parse_item(self, response):  # pragma: no cover - never called here
        return ()


class OptIn(ShopSpider):
    name = "optin"
    crawlplug_callbacks = ("_hidden", "closed", "pick", "_missing")

    def _hidden(self, response):  # pragma: no cover
        return ()

    @classmethod
    def pick(cls, response):  # pragma: no cover
        return ()


class OneName(ShopSpider):
    name = "onename"
    crawlplug_callbacks = "_hidden"  # a string: one name, not its letters

    def _hidden(self, response):  # pragma: no cover
        return ()

    def _h(self, response):  # pragma: no cover
        return ()


def payload(**fields) -> bytes:
    return json.dumps({"v": 1, "url": "http://shop.test/item/1/", **fields}).encode()


def spider_of(cls: type) -> scrapy.Spider:
    if cls is SiteSpider:
        return cls(site="demo")
    return cls()


ACCEPTED = [
    (ShopSpider, "parse_item"),
    (ShopSpider, "parse_list"),
    (ShopSpider, "resolve_base_url"),
    (ShopSpider, "parse"),  # Scrapy's default callback (it raises NotImplementedError when not defined)
    (RedisShopSpider, "parse_item"),
    (RedisRulesSpider, "_callback"),
    (RedisRulesSpider, "_errback"),
    (RedisRulesSpider, "parse_item"),
    (SitemapShopSpider, "_parse_sitemap"),
    (SitemapShopSpider, "parse_item"),
    (SiteSpider, "parse_page"),
    (SiteSpider, "page_failed"),
    (SiteSpider, "parse"),
    (ScrapyRedisShop, "parse_item"),
    (OptIn, "_hidden"),
    (OptIn, "closed"),
    (OptIn, "parse_item"),
    (OneName, "_hidden"),
]

REFUSED = [  # (spider class, name, words the reason holds)
    (ShopSpider, "closed", "'closed' is the spider's close hook"),
    (ShopSpider, "_own_links", "'_own_links' is a private method of spiders.shop.ShopSpider"),
    (ShopSpider, "start", "'start' is a method of scrapy.Spider itself"),  # the class overrides it
    (ShopSpider, "from_crawler", "'from_crawler' is a method of scrapy.Spider itself"),
    (ShopSpider, "update_settings", "'update_settings' is a method of scrapy.Spider itself"),
    (ShopSpider, "log", "'log' is a method of scrapy.Spider itself"),
    (ShopSpider, "_set_crawler", "'_set_crawler' is a method of scrapy.Spider itself"),
    (ShopSpider, "_parse", "'_parse' is a method of scrapy.Spider itself"),
    (ShopSpider, "base_url", "has no method 'base_url'"),
    (ShopSpider, "no_such", "has no method 'no_such'"),
    (ShopSpider, "__init__", "not a method name"),
    (RedisShopSpider, "make_request_from_data", "is a method of crawlplug.spiders.RedisMixin itself"),
    (RedisShopSpider, "_entry_encoding", "is a method of crawlplug.spiders.RedisMixin itself"),
    (RedisRulesSpider, "_parse_response", "is a method of scrapy.spiders.crawl.CrawlSpider itself"),
    (RedisRulesSpider, "_requests_to_follow", "is a method of scrapy.spiders.crawl.CrawlSpider itself"),
    (RedisRulesSpider, "_build_request", "is a method of scrapy.spiders.crawl.CrawlSpider itself"),
    (RedisRulesSpider, "parse_with_rules", "is a method of scrapy.spiders.crawl.CrawlSpider itself"),
    (RedisRulesSpider, "parse_start_url", "is a method of scrapy.spiders.crawl.CrawlSpider itself"),
    (RedisRulesSpider, "make_request_from_data", "is a method of crawlplug.spiders.RedisMixin itself"),
    (RedisRulesSpider, "rules", "has no method 'rules'"),
    (SitemapShopSpider, "sitemap_filter", "is a method of scrapy.spiders.sitemap.SitemapSpider itself"),
    (SitemapShopSpider, "_get_sitemap_body", "is a method of scrapy.spiders.sitemap.SitemapSpider itself"),
    (SiteSpider, "refresh", "is a method of crawlplug.sites.spider.SiteSpider itself"),
    (SiteSpider, "_closed", "is a method of crawlplug.sites.spider.SiteSpider itself"),
    (ScrapyRedisShop, "next_requests", "is a method of scrapy_redis.spiders.RedisMixin itself"),
    (ScrapyRedisShop, "make_request_from_data", "is a method of scrapy_redis.spiders.RedisMixin itself"),
    (ScrapyRedisShop, "spider_idle", "is a method of scrapy_redis.spiders.RedisMixin itself"),
    (OptIn, "pick", "has no method 'pick'"),  # listed, but a classmethod is not bound to the spider
    (OptIn, "_missing", "has no method '_missing'"),  # listed, but not there
    (OneName, "_h", "private method"),
]


@pytest.mark.parametrize(("cls", "name"), ACCEPTED, ids=[f"{c.__name__}.{n}" for c, n in ACCEPTED])
def test_callbacks_are_accepted(cls, name):
    spider = spider_of(cls)
    for key in ("callback", "errback"):
        request = SER.loads(payload(**{key: name}), spider)
        method = getattr(request, key)
        assert method.__self__ is spider and method.__func__ is getattr(cls, name)
        # stored by name and read back: what a node stores, a node reads
        assert describe_payload(SER.dumps(request, spider))[key] == name


@pytest.mark.parametrize(("cls", "name", "words"), REFUSED, ids=[f"{c.__name__}.{n}" for c, n, _ in REFUSED])
def test_names_that_are_not_callbacks_are_refused_naming_them(cls, name, words):
    spider = spider_of(cls)
    for key in ("callback", "errback"):
        with pytest.raises(DecodeError) as info:
            SER.loads(payload(**{key: name}), spider)
        assert words in str(info.value) and key in str(info.value)
        entry = starts.StartEntry(url="http://shop.test/", **{key: name})  # as parse() leaves it
        with pytest.raises(DecodeError, match=words.replace("(", r"\(")):
            starts.build(entry, spider)


def test_the_reason_says_how_to_opt_in():
    with pytest.raises(DecodeError, match=r"list it in ShopSpider\.crawlplug_callbacks"):
        SER.loads(payload(callback="_own_links"), ShopSpider())


@pytest.mark.parametrize("name", ["closed", "_own_links", "start"])
def test_a_request_no_node_would_read_back_is_never_stored(name):
    spider = ShopSpider()
    request = Request("http://shop.test/", callback=getattr(spider, name))
    with pytest.raises(SerializationError, match=f"'{name}'.*a node reading it back would refuse it"):
        SER.dumps(request, spider)


def _request_callbacks(module) -> list[tuple[type, str]]:
    """(class, name) of every ``self._x`` a class of ``module`` passes to a Request as its
    callback or errback: keyword, or Request's second positional argument."""
    tree = ast.parse(Path(inspect.getsourcefile(module)).read_text())
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        cls = getattr(module, node.name)
        for call in ast.walk(node):
            if not isinstance(call, ast.Call) or not getattr(call.func, "id", getattr(call.func, "attr", "")).endswith(
                "Request"
            ):
                continue
            args = [kw.value for kw in call.keywords if kw.arg in ("callback", "errback")] + call.args[1:2]
            for arg in args:
                if isinstance(arg, ast.Attribute) and getattr(arg.value, "id", None) == "self":
                    found.append((cls, arg.attr))
    return found


GENERIC_MODULES = [
    "scrapy.spiders",
    "scrapy.spiders.crawl",
    "scrapy.spiders.sitemap",
    "scrapy.spiders.feed",
    "crawlplug.spiders",
    "crawlplug.sites.spider",
]


def test_every_callback_the_generic_spiders_put_on_requests_is_accepted():
    """Read from the installed Scrapy's source: an upgrade that adds or renames one fails here."""
    found = [pair for name in GENERIC_MODULES for pair in _request_callbacks(importlib.import_module(name))]
    names = {(cls.__name__, name) for cls, name in found}
    assert {
        ("CrawlSpider", "_callback"),
        ("CrawlSpider", "_errback"),
        ("SitemapSpider", "_parse_sitemap"),
        ("SiteSpider", "parse_page"),
        ("SiteSpider", "page_failed"),
    } <= names
    for cls, name in found:
        assert callbacks.refusal(cls, name) is None, (cls, name, callbacks.refusal(cls, name))


def test_the_allow_list_names_real_methods():
    for path, names in callbacks.GENERIC_CALLBACKS.items():
        module, _, qualname = path.rpartition(".")
        cls = getattr(importlib.import_module(module), qualname)
        for name in names:
            assert callable(getattr(cls, name, None)), (path, name)


# -- in real crawls ---------------------------------------------------------------------------


def reasons(frontier: Frontier) -> dict[bytes, str]:
    return {d.payload: d.header["reason"] for d in Crawl.of(frontier).dead_letters()}


def test_hooks_and_helpers_named_by_payloads_are_dead_lettered_and_never_run(crawl, make_shop, redis_url):
    shop = make_shop(items=60)
    keys = CrawlKeys("shop")
    client = redis.Redis.from_url(redis_url)
    frontier = Frontier(client, keys)
    item = shop.url + "/item/1/"
    queue = {  # payload -> words of its dead letter's reason
        payload(url=item, callback="closed"): "callback 'closed' is the spider's close hook",
        payload(url=item, errback="closed"): "errback 'closed' is the spider's close hook",
        payload(url=item, callback="_own_links"): "callback '_own_links' is a private method",
        payload(url=item, callback="start"): "callback 'start' is a method of scrapy.Spider itself",
        payload(url=item, callback="update_settings"): "'update_settings' is a method of scrapy.Spider itself",
        payload(url=item, callback="_set_crawler"): "'_set_crawler' is a method of scrapy.Spider itself",
    }
    start_lines = {
        json.dumps({"url": item + "?via=closed", "callback": "closed"}): "'closed' is the spider's close hook",
        json.dumps({"url": item + "?via=helper", "callback": "_own_links"}): "'_own_links' is a private method",
    }
    frontier.admit([(b"", -100.0, p) for p in queue])
    client.rpush(keys.start_urls, *start_lines)

    node = crawl(args={"base_url": shop.url}, settings={"REDIS_URL": redis_url, **FAST})
    assert node.wait(120) == 0, node.text()[-3000:]
    text = node.text()
    assert "'finish_reason': 'finished'" in text
    # the close hook ran once, at the end, and never with a response for a reason
    assert text.count("shop spider closed: ") == 1 and "shop spider closed: finished" in text
    assert set(shop.hits) == shop.shop.paths(), "the refused entries fetched nothing"
    dead = reasons(frontier)
    assert len(dead) == len(queue) + len(start_lines)
    for raw, words in queue.items():
        assert words in dead[raw], (raw, dead[raw])
    for line, words in start_lines.items():
        assert dead[line.encode()].startswith("invalid start entry: ") and words in dead[line.encode()]
    assert f"'crawlplug/undecodable': {len(queue)}" in text


def test_a_redis_crawl_spider_runs_its_rules_and_refuses_its_machinery(crawl, make_shop, redis_url):
    shop = make_shop(items=80)
    keys = CrawlKeys("redisrules")
    client = redis.Redis.from_url(redis_url)
    frontier = Frontier(client, keys)
    item = shop.url + "/item/2/?via=rule"
    queue = {
        payload(
            url=item, callback="_parse_response"
        ): "'_parse_response' is a method of scrapy.spiders.crawl.CrawlSpider",
        payload(url=item, callback="_requests_to_follow"): "'_requests_to_follow' is a method of scrapy.spiders.crawl",
        payload(url=item, callback="make_request_from_data"): "is a method of crawlplug.spiders.RedisMixin itself",
        payload(url=item, callback="parse_start_url"): "'parse_start_url' is a method of scrapy.spiders.crawl",
    }
    # a rule's own request, as CrawlSpider makes it (rule 0 sends item pages to parse_item)
    good = payload(url=item, callback="_callback", errback="_errback", meta={"rule": 0, "link_text": "x"})
    frontier.admit([(b"", -100.0, p) for p in [*queue, good]])

    node = crawl("redisrules", settings={"REDIS_URL": redis_url, **FAST})
    push(redis_url, "redisrules", shop.url + "/")
    assert node.wait(120) == 0, node.text()[-3000:]
    text = node.text()
    assert "'finish_reason': 'finished'" in text
    urls = Counter(i["url"].split(shop.url, 1)[1] for i in items_of([node]))
    assert set(urls) == shop.shop.item_paths() | {"/item/2/?via=rule"} and max(urls.values()) == 1
    assert shop.hits["/item/2/?via=rule"] == 1, "the refused entries fetched nothing, the rule's one once"
    dead = reasons(frontier)
    assert len(dead) == len(queue)
    for raw, words in queue.items():
        assert words in dead[raw], (raw, dead[raw])


def test_a_sitemap_spider_crawls_the_shop_on_two_nodes(crawl, make_shop, redis_url):
    """SitemapSpider's requests carry its private ``_parse_sitemap``; through Redis, every
    sitemap and every item page is fetched, once, by one of two nodes."""
    shop = make_shop(items=150, categories=6)
    settings = {"REDIS_URL": redis_url, **FAST, "CRAWLPLUG_IDLE_CLOSE": 2}
    nodes = start_joined(lambda: crawl("sitemapshop", args={"base_url": shop.url}, settings=settings), shop, 2)
    for node in nodes:
        assert node.wait(120) == 0, node.text()[-3000:]
        assert "'finish_reason': 'finished'" in node.text()
        assert "undecodable" not in node.text()
    items = items_of(nodes)
    assert sorted(i["url"].split(shop.url, 1)[1] for i in items) == sorted(shop.shop.item_paths())
    assert set(shop.hits) == shop.shop.item_paths() | shop.shop.sitemap_paths()
    assert max(shop.hits.values()) == 1
    frontier = Frontier(redis.Redis.from_url(redis_url), CrawlKeys("sitemapshop"))
    assert Crawl.of(frontier).dead_letters() == []
    # the sitemaps went through Redis: the crawl-wide stats count them with the items
    assert int(Crawl.of(frontier).status()["stats"]["enqueued"]) == len(shop.shop.sitemap_paths()) + shop.shop.items
