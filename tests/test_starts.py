"""Start entries (crawlplug.starts) and their leases in Redis (Frontier.take_starts).

Part 1 validates entries without Redis: plain URLs and JSON lines, each
malformed case refused with a DecodeError that says why, a fuzz test that
nothing but DecodeError ever escapes, scrapy-redis's JSON format, callbacks
resolved on a spider, and the canonical one-line form.

Part 2 runs the Lua side against the real test Redis: start entries leased
like requests, put back at the head of start_urls (in their order) when a
lease expires or a node closes, and scrapy-redis's ``<spider>:start_urls``
key read as a list, a set or a sorted set after the crawl's own list.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import scrapy
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from scrapy import FormRequest, Request

from crawlplug import starts
from crawlplug.crawl import Crawl
from crawlplug.errors import DecodeError
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.starts.entry import MAX_ENTRY_BYTES, StartEntry

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the demo project is not installed into the venv
    sys.path.insert(0, str(ROOT))

from spiders.shop import ShopSpider

from .support.fuzz import examples

# -- 1. parse: valid entries ---------------------------------------------------------------


@pytest.mark.parametrize(
    "line, url",
    [
        ("http://example.com/", "http://example.com/"),
        ("https://example.com/a?b=1#c", "https://example.com/a?b=1#c"),
        ("  http://example.com/x  \n", "http://example.com/x"),  # surrounding blanks
        ("HTTP://example.com/up", "http://example.com/up"),  # scheme case
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/"),
        ("http://[::1]:8080/p", "http://[::1]:8080/p"),
        ("http://user:pw@example.com/", "http://user:pw@example.com/"),
        ("http://exämple.com/ö", "http://xn--exmple-cua.com/%C3%B6"),  # IDN and non-ASCII path made safe
    ],
)
def test_plain_url_entries(line, url):
    for data in (line, line.encode()):
        entry = starts.parse(data)
        assert entry == StartEntry(url=url)
        assert entry.dont_filter is True, "a start entry is crawled even if seen, by default"


def test_full_json_entry():
    line = json.dumps(
        {
            "url": "https://example.com/search",
            "method": "post",
            "body": "q=1",
            "headers": {"Content-Type": "application/x-www-form-urlencoded", "X-Many": ["a", "b"]},
            "meta": {"job": 7},
            "priority": -5,
            "callback": "parse_item",
            "errback": "on_error",
            "cb_kwargs": {"page": 1},
            "dont_filter": False,
            "encoding": "latin-1",
        }
    )
    entry = starts.parse(line)
    assert entry == StartEntry(
        url="https://example.com/search",
        method="POST",
        body="q=1",
        headers={"Content-Type": ["application/x-www-form-urlencoded"], "X-Many": ["a", "b"]},
        meta={"job": 7},
        priority=-5,
        callback="parse_item",
        errback="on_error",
        cb_kwargs={"page": 1},
        dont_filter=False,
        formdata=None,
        encoding="latin-1",
    )


def test_minimal_json_entry_equals_plain_url():
    assert starts.parse('{"url": "http://example.com/"}') == starts.parse("http://example.com/")


# -- 1. parse: malformed entries, each with its reason -------------------------------------

BAD = [
    # (id, entry, words the reason must contain)
    ("empty", "", "empty entry"),
    ("blank", "   \t ", "empty entry"),
    ("no scheme", "example.com/path", "no scheme"),
    ("no scheme, relative", "/just/a/path", "no scheme"),
    ("ftp scheme", "ftp://example.com/file", "scheme 'ftp' is not crawlable"),
    ("javascript scheme", "javascript:alert(1)", "not crawlable"),
    ("file scheme", "file:///etc/passwd", "not crawlable"),
    ("no host", "http://", "no host"),
    ("no host, path", "http:///path", "no host"),
    ("no host, userinfo", "http://@/", "no host"),
    ("no host, scheme only", "https:example.com", "no host"),
    ("no host, port only", "http://:80/", "no host"),
    ("two urls on two lines", "http://a.example/\nhttp://b.example/", "one URL on one line"),
    ("bad port", "http://example.com:99999999/", "malformed URL"),
    ("bad ipv6", "http://[::1/", "malformed URL"),
    ("bad JSON", '{"url": "http://example.com/",', "not valid JSON"),
    ("bad JSON quotes", "{'url': 'http://example.com/'}", "not valid JSON"),
    ("JSON without url", '{"method": "GET"}', "url must be a non-empty string"),
    ("JSON url not a string", '{"url": 42}', "url must be a non-empty string"),
    ("JSON url ftp", '{"url": "ftp://example.com/"}', "not crawlable"),
    ("priority string", '{"url": "http://e.com/", "priority": "5"}', "priority must be an integer"),
    ("priority float", '{"url": "http://e.com/", "priority": 1.5}', "priority must be an integer"),
    ("priority bool", '{"url": "http://e.com/", "priority": true}', "priority must be an integer"),
    ("callback dashed", '{"url": "http://e.com/", "callback": "parse-item"}', "callback must be a spider method name"),
    ("callback dotted", '{"url": "http://e.com/", "callback": "os.system"}', "callback must be a spider method name"),
    ("callback dunder", '{"url": "http://e.com/", "callback": "__init__"}', "callback must be a spider method name"),
    ("callback number", '{"url": "http://e.com/", "callback": 3}', "callback must be a spider method name"),
    ("errback dunder", '{"url": "http://e.com/", "errback": "__class__"}', "errback must be a spider method name"),
    ("headers list", '{"url": "http://e.com/", "headers": ["A: b"]}', "headers must be a JSON object"),
    ("headers string", '{"url": "http://e.com/", "headers": "A: b"}', "headers must be a JSON object"),
    ("header value number", '{"url": "http://e.com/", "headers": {"A": 1}}', "header 'A' must be a string"),
    ("header values mixed", '{"url": "http://e.com/", "headers": {"A": ["x", 2]}}', "header 'A' must be a string"),
    ("body number", '{"url": "http://e.com/", "body": 5}', "body must be a string"),
    ("body object", '{"url": "http://e.com/", "body": {"a": 1}}', "body must be a string"),
    ("meta list", '{"url": "http://e.com/", "meta": [1]}', "meta must be a JSON object"),
    ("cb_kwargs string", '{"url": "http://e.com/", "cb_kwargs": "x"}', "cb_kwargs must be a JSON object"),
    ("method with space", '{"url": "http://e.com/", "method": "GET X"}', "method must be an HTTP method name"),
    ("method number", '{"url": "http://e.com/", "method": 1}', "method must be an HTTP method name"),
    ("dont_filter string", '{"url": "http://e.com/", "dont_filter": "no"}', "dont_filter must be true or false"),
    ("encoding number", '{"url": "http://e.com/", "encoding": 8}', "encoding must be a string"),
    ("form field object", '{"url": "http://e.com/", "x": {"a": 1}}', "form field 'x'"),
    ("form field null", '{"url": "http://e.com/", "x": null}', "form field 'x'"),
    ("formdata not object", '{"url": "http://e.com/", "formdata": [1]}', "formdata must be a JSON object"),
]


@pytest.mark.parametrize("line, reason", [pytest.param(b, r, id=i) for i, b, r in BAD])
def test_malformed_entry_is_refused_with_its_reason(line, reason):
    with pytest.raises(DecodeError) as info:
        starts.parse(line)
    assert reason in str(info.value), f"unclear reason for {line!r}: {info.value}"


@pytest.mark.parametrize(
    "line",
    ["[1, 2]", '["http://example.com/"]', '"http://example.com/"', "[]"],
    ids=["array", "array of url", "string", "empty array"],
)
def test_non_object_json_is_refused_as_json(line):
    """A JSON value that is not an object is refused, and the reason says so
    (not "URL has no scheme", which would send the operator looking at the wrong thing)."""
    with pytest.raises(DecodeError) as info:
        starts.parse(line)
    assert "JSON" in str(info.value) and "object" in str(info.value), str(info.value)


def test_huge_entries_are_refused():
    url = "http://example.com/" + "a" * MAX_ENTRY_BYTES
    with pytest.raises(DecodeError, match="larger than"):
        starts.parse(url)
    with pytest.raises(DecodeError, match="larger than"):
        starts.parse(url.encode())
    big_json = json.dumps({"url": "http://example.com/", "body": "x" * MAX_ENTRY_BYTES})
    with pytest.raises(DecodeError, match="larger than"):
        starts.parse(big_json)
    # just under the limit is fine
    assert starts.parse("http://example.com/" + "a" * (MAX_ENTRY_BYTES - 100)).url.startswith("http://example.com/")


def test_not_utf8_and_not_text():
    with pytest.raises(DecodeError, match="not UTF-8"):
        starts.parse(b"http://example.com/\xff\xfe")
    for value in (None, 42, ["http://example.com/"], {"url": "http://example.com/"}):
        with pytest.raises(DecodeError, match="must be text"):
            starts.parse(value)  # type: ignore[arg-type]


def test_deeply_nested_json_is_a_decode_error():
    """A JSON entry nested deeper than Python's recursion limit (well under 1 MiB) must be
    refused with DecodeError, not crash the caller with RecursionError."""
    depth = 100_000
    line = '{"url": "http://example.com/", "meta": {"a": ' + "[" * depth + "]" * depth + "}}"
    assert len(line) < MAX_ENTRY_BYTES
    with pytest.raises(DecodeError):
        starts.parse(line)


# -- 1. fuzz: nothing but DecodeError --------------------------------------------------------

_SPIDER = ShopSpider(base_url="http://shop.test")

_json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
_json = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_urls = st.one_of(
    st.text(max_size=40),
    st.builds(
        lambda s, rest: f"{s}://{rest}", st.sampled_from(["http", "https", "HTTP", "ftp", "x"]), st.text(max_size=30)
    ),
    st.just("http://example.com/"),
)
_keys = st.sampled_from(sorted(starts.KNOWN_KEYS) + ["x", "q", "__class__"])
_entries = st.fixed_dictionaries({"url": _urls}, optional={}).flatmap(
    lambda base: st.dictionaries(_keys, _json | _urls, max_size=6).map(lambda extra: {**extra, **base})
)


def _parse_and_build(data) -> StartEntry | None:
    """parse() then build(): DecodeError is the only exception either may raise."""
    try:
        entry = starts.parse(data)
    except DecodeError:
        return None
    assert isinstance(entry, StartEntry)
    try:
        request = starts.build(entry, _SPIDER)
    except DecodeError:
        return None
    assert isinstance(request, Request)
    return entry


def _round_trip(data) -> None:
    """An accepted entry is stored as to_line(entry) (crawlplug push): that line can be
    stored as UTF-8 and parses back to the same entry, which builds the same request."""
    entry = _parse_and_build(data)
    if entry is None:
        return
    line = starts.to_line(entry)
    line.encode("utf-8")
    again = starts.parse(line)
    assert again == entry
    assert starts.build(again, _SPIDER).url == starts.build(entry, _SPIDER).url


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_fuzz_bytes_raise_only_decode_error(data):
    _parse_and_build(data)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_fuzz_text_raises_only_decode_error(data):
    _parse_and_build(data)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_json)
def test_fuzz_any_json_value_raises_only_decode_error(value):
    _parse_and_build(json.dumps(value))


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.recursive(
        st.text(alphabet=st.characters(min_codepoint=0xD7F0, max_codepoint=0xE010), max_size=5),
        lambda inner: st.dictionaries(st.sampled_from(["meta", "cb_kwargs", "q", "a"]), inner, max_size=3),
        max_leaves=4,
    ).map(lambda extra: {"url": "http://example.com/", **extra} if isinstance(extra, dict) else {"url": extra})
)
def test_fuzz_json_with_surrogate_escapes_round_trip(obj):
    """JSON text may escape lone surrogates (\\ud800), which no UTF-8 text can hold."""
    _round_trip(json.dumps(obj))


@settings(max_examples=examples(600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_entries)
def test_fuzz_json_entries_raise_only_decode_error(obj):
    _parse_and_build(json.dumps(obj))


@settings(max_examples=examples(600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_entries.map(json.dumps), _urls, st.text(max_size=60)))
@example("HTTP://\U0001d400")  # an IDNA host w3lib normalised to "A" the first time, "a" the next
def test_fuzz_accepted_entries_round_trip(data):
    _round_trip(data)


@pytest.mark.parametrize("line", ["HTTP://\x1b", "http://\x00/", '{"url": "http://\\u0007"}'])
def test_a_url_that_normalizes_to_no_host_is_refused(line):
    """The host check must hold for the URL as stored (after safe_url_string drops control
    characters), or push accepts an entry that no node can parse back."""
    try:
        entry = starts.parse(line)
    except DecodeError:
        return
    starts.parse(starts.to_line(entry))


# -- 1. scrapy-redis's JSON format, build(), to_line() ------------------------------------


def test_scrapy_redis_json_builds_a_form_request():
    line = json.dumps({"url": "http://example.com/login", "meta": {"job": 7}, "method": "POST", "x": "1"})
    entry = starts.parse(line)
    assert entry.formdata == {"x": "1"} and entry.method == "POST"
    request = starts.build(entry, None)
    assert type(request) is FormRequest
    assert request.method == "POST"
    assert request.url == "http://example.com/login"
    assert request.body == b"x=1"
    assert request.headers[b"Content-Type"] == b"application/x-www-form-urlencoded"
    assert request.meta == {"job": 7}
    assert request.dont_filter is True


def test_scrapy_redis_json_get_form_fields_go_in_the_query():
    request = starts.build(starts.parse('{"url": "http://example.com/s", "q": "shoes", "page": "2"}'), None)
    assert type(request) is FormRequest and request.method == "GET"
    assert request.url == "http://example.com/s?q=shoes&page=2"


def test_numeric_form_fields_that_parse_accepts_also_build():
    """parse() accepts numbers as form fields ("text, a number or a list of them"), so
    `crawlplug push` lets them in; build() must then make the request, not refuse it
    at crawl time (the entry would end in the dead letters)."""
    entry = starts.parse('{"url": "http://example.com/f", "method": "POST", "n": 1, "f": 1.5, "l": ["a", 2]}')
    request = starts.build(entry, None)
    assert request.body == b"n=1&f=1.5&l=a&l=2"


def test_body_and_form_fields_together_are_refused_by_build():
    entry = starts.parse('{"url": "http://example.com/", "method": "POST", "body": "raw", "x": "1"}')
    with pytest.raises(DecodeError, match="both a body and form fields"):
        starts.build(entry, None)


def test_build_plain_request():
    entry = starts.parse(
        json.dumps(
            {
                "url": "http://example.com/p",
                "method": "PUT",
                "body": "héllo",
                "headers": {"X-A": "1"},
                "meta": {"m": 1},
                "priority": 3,
                "cb_kwargs": {"k": "v"},
                "dont_filter": False,
            }
        )
    )
    request = starts.build(entry, None)
    assert type(request) is Request
    assert (request.method, request.body, request.priority, request.dont_filter) == ("PUT", "héllo".encode(), 3, False)
    assert request.headers.getlist("X-A") == [b"1"] and request.meta == {"m": 1} and request.cb_kwargs == {"k": "v"}


def test_build_resolves_callbacks_on_the_spider():
    spider = ShopSpider(base_url="http://shop.test")
    entry = starts.parse('{"url": "http://shop.test/item/1/", "callback": "parse_item", "errback": "parse_list"}')
    request = starts.build(entry, spider)
    assert request.callback == spider.parse_item
    assert request.errback == spider.parse_list
    # no callback: the spider's default (None)
    assert starts.build(starts.parse("http://shop.test/"), spider).callback is None


@pytest.mark.parametrize(
    "name, reason",
    [
        ("parse_nothing", "has no method 'parse_nothing'"),
        ("base_url", "has no method 'base_url'"),  # an attribute, not a method
        ("log", "a method of scrapy.Spider itself"),  # Scrapy's machinery is no callback
        ("logger", "a method of scrapy.Spider itself"),
        ("from_crawler", "method of scrapy.Spider itself"),  # Scrapy machinery, never a callback
    ],
)
def test_build_refuses_unknown_callbacks(name, reason):
    spider = ShopSpider(base_url="http://shop.test")
    entry = starts.parse(json.dumps({"url": "http://shop.test/", "callback": name}))
    with pytest.raises(DecodeError, match=reason):
        starts.build(entry, spider)
    with pytest.raises(DecodeError):
        starts.build(starts.parse(json.dumps({"url": "http://shop.test/", "errback": name})), spider)


def test_build_refuses_an_overridden_start_as_callback():
    """``start`` is Scrapy's machinery (an async generator taking no response) even when the
    spider overrides it, as every spider with start URLs does; it is no callback."""
    spider = ShopSpider(base_url="http://shop.test")
    with pytest.raises(DecodeError):
        starts.build(starts.parse('{"url": "http://shop.test/", "callback": "start"}'), spider)


def test_build_without_spider_refuses_callbacks():
    with pytest.raises(DecodeError, match="needs a spider"):
        starts.build(starts.parse('{"url": "http://e.com/", "callback": "parse"}'), None)


def test_build_unknown_encoding_is_a_decode_error():
    with pytest.raises(DecodeError, match="valid request"):
        starts.build(starts.parse('{"url": "http://e.com/", "encoding": "no-such-codec"}'), None)


@pytest.mark.parametrize(
    "entry",
    [
        StartEntry(url="http://example.com/"),
        StartEntry(url="http://example.com/", dont_filter=False),
        StartEntry(
            url="https://example.com/s",
            method="POST",
            body="a=1",
            headers={"A": ["1", "2"]},
            meta={"k": [1, {"x": None}]},
            priority=-3,
            callback="parse_item",
            errback="parse_list",
            cb_kwargs={"p": 2},
            encoding="latin-1",
        ),
        StartEntry(url="http://example.com/f", method="POST", formdata={"x": "1", "y": ["a", "b"]}),
        StartEntry(url="http://example.com/ünï", meta={"ü": "é"}),
    ],
)
def test_to_line_parse_round_trip(entry):
    entry = starts.parse(starts.to_line(entry)) if "ü" in entry.url else entry  # make the URL canonical first
    line = starts.to_line(entry)
    assert "\n" not in line
    assert starts.parse(line) == entry
    assert starts.to_line(starts.parse(line)) == line


@pytest.mark.parametrize(
    "line",
    [
        r'{"url": "http://example.com/", "meta": {"x": "\ud800"}}',
        r'{"url": "http://example.com/", "q": "\udfff"}',
        r'{"url": "http://example.com/", "body": "a\ud83d"}',
    ],
)
def test_lone_surrogates_are_refused_or_stored_as_utf8(line):
    """A JSON escape of a lone surrogate is valid JSON but no UTF-8 text: parse must refuse
    it (DecodeError), or to_line must give a line that can be stored."""
    try:
        entry = starts.parse(line)
    except DecodeError:
        return
    starts.to_line(entry).encode("utf-8")


def test_to_line_is_the_plain_url_when_that_says_it_all():
    assert starts.to_line(starts.parse('{"url": "http://example.com/"}')) == "http://example.com/"
    line = starts.to_line(starts.parse('{"url": "http://example.com/", "priority": 2}'))
    assert json.loads(line) == {"url": "http://example.com/", "priority": 2}


# -- 2. Frontier: start entries leased in Redis ---------------------------------------------

KEYS = CrawlKeys("starts")


def _frontier(client, node: str, lease_timeout: float = 30.0) -> Frontier:
    return Frontier(client, KEYS, node_id=node, lease_timeout=lease_timeout, heartbeat=0.1)


def _start_urls(client) -> list[str]:
    return [x.decode() for x in client.lrange(KEYS.start_urls, 0, -1)]


def test_take_starts_leases_entries(r):
    node = _frontier(r, "node-a")
    urls = [f"http://example.com/{i}" for i in range(5)]
    assert Crawl.of(node).push_starts(urls) == 5
    taken = node.take_starts(3)
    assert [raw.decode() for _, raw in taken] == urls[:3], "taken from the head, in order"
    ids = [lease_id for lease_id, _ in taken]
    assert len(set(ids)) == 3
    assert _start_urls(r) == urls[3:]
    # leased like requests: in leases, held by the node, marked "start", payload stored
    assert r.zcard(KEYS.leases) == 3
    for lease_id, raw in taken:
        assert r.hget(KEYS.leased, lease_id).decode() == "node-a|start|1"
        assert r.hget(KEYS.requests, lease_id) == raw
    assert int(r.hget(KEYS.stats, "start_taken")) == 3
    assert Crawl.of(node).status()["in_flight"] == 3 and Crawl.of(node).status()["start_urls"] == 2
    # another node takes the rest, and then there is nothing left
    other = _frontier(r, "node-b")
    assert [raw.decode() for _, raw in other.take_starts(10)] == urls[3:]
    assert other.take_starts(10) == []


def test_acked_start_lease_is_gone_for_good(r):
    node = _frontier(r, "node-a", lease_timeout=0.2)
    Crawl.of(node).push_starts(["http://example.com/0"])
    [(lease_id, _)] = node.take_starts(5)
    # the admission that stores the entry's request acks the lease
    result = node.admit([(b"", 0.0, b'{"url": "http://example.com/0"}')], acks=[lease_id])
    # a start entry is not a page: it is not counted as done, only as a start entry acked
    assert result.acked == 0 and result.admitted == 1
    assert int(r.hget(KEYS.stats, "start_acked")) == 1 and r.hget(KEYS.stats, "acked") is None
    assert r.zcard(KEYS.leases) == 0 and not r.hexists(KEYS.requests, lease_id)
    time.sleep(0.3)
    assert node.reap() == (0, 0)
    assert _start_urls(r) == [], "an acked entry does not come back"


def test_expired_start_leases_return_to_the_head_in_order(r):
    node = _frontier(r, "node-a", lease_timeout=0.3)
    urls = [f"http://example.com/{i}" for i in range(6)]
    Crawl.of(node).push_starts(urls)
    taken = node.take_starts(4)
    assert len(taken) == 4
    assert node.reap() == (0, 0), "not expired yet"
    assert _start_urls(r) == urls[4:]
    Crawl.of(node).push_starts(["http://example.com/late"])
    time.sleep(0.4)
    reaper = _frontier(r, "node-b")
    requeued, dead = reaper.reap()
    assert (requeued, dead) == (4, 0)
    assert _start_urls(r) == urls + ["http://example.com/late"], (
        "expired start entries go back at the head of start_urls, in the order they were taken"
    )
    assert r.zcard(KEYS.leases) == 0 and r.hlen(KEYS.leased) == 0 and r.hlen(KEYS.requests) == 0
    assert int(r.hget(KEYS.stats, "start_returned")) == 4
    # nothing became a dead letter or a queued request
    assert r.llen(KEYS.dead) == 0 and r.zcard(KEYS.queue) == 0


def test_expired_start_lease_never_goes_dead(r):
    """A start entry re-taken and expired more often than max_deliveries stays a start entry."""
    node = Frontier(r, KEYS, node_id="n", lease_timeout=0.1, heartbeat=0.02, max_deliveries=2)
    Crawl.of(node).push_starts(["http://example.com/x"])
    for _ in range(4):
        assert len(node.take_starts(1)) == 1
        time.sleep(0.15)
        node.reap()
    assert _start_urls(r) == ["http://example.com/x"] and r.llen(KEYS.dead) == 0


def test_renewed_start_leases_are_not_reaped(r):
    node = _frontier(r, "node-a", lease_timeout=0.5)
    Crawl.of(node).push_starts(["http://example.com/0", "http://example.com/1"])
    ids = [lease_id for lease_id, _ in node.take_starts(2)]
    for _ in range(4):
        time.sleep(0.2)
        assert node.heartbeat(ids) == []
        assert _frontier(r, "node-b").reap() == (0, 0)
    assert _start_urls(r) == []


def test_release_puts_start_entries_back_at_the_head_in_order(r):
    node = _frontier(r, "node-a")
    urls = [f"http://example.com/{i}" for i in range(5)]
    Crawl.of(node).push_starts(urls)
    ids = [lease_id for lease_id, _ in node.take_starts(3)]
    # another node's release does nothing to them
    assert _frontier(r, "node-b").release(ids, unstarted=True) == 0
    # the scheduler releases its start leases sorted by id (their order in start_urls)
    assert node.release(sorted(ids), unstarted=True) == 3
    assert _start_urls(r) == urls, "released start entries go back first, in their order"
    assert r.zcard(KEYS.leases) == 0 and r.hlen(KEYS.leased) == 0 and r.hlen(KEYS.requests) == 0
    assert r.hlen(KEYS.deliveries) == 0 and r.zcard(KEYS.queue) == 0


LEGACY = "starts:start_urls"


def test_legacy_list_is_read_after_ours(r):
    node = _frontier(r, "n")
    Crawl.of(node).push_starts(["http://ours.example/1", "http://ours.example/2"])
    r.rpush(LEGACY, "http://legacy.example/1", "http://legacy.example/2", "http://legacy.example/3")
    first = [raw.decode() for _, raw in node.take_starts(3, LEGACY)]
    assert first == ["http://ours.example/1", "http://ours.example/2", "http://legacy.example/1"]
    # without the legacy key, only ours is read
    assert node.take_starts(3) == []
    rest = [raw.decode() for _, raw in node.take_starts(5, LEGACY)]
    assert rest == ["http://legacy.example/2", "http://legacy.example/3"]
    assert not r.exists(LEGACY)


def test_legacy_set_is_read_after_ours(r):
    node = _frontier(r, "n")
    Crawl.of(node).push_starts(["http://ours.example/1"])
    legacy = {f"http://legacy.example/{i}" for i in range(4)}
    r.sadd(LEGACY, *legacy)
    first = [raw.decode() for _, raw in node.take_starts(3, LEGACY)]
    assert first[0] == "http://ours.example/1"
    assert len(first) == 3 and set(first[1:]) <= legacy
    rest = [raw.decode() for _, raw in node.take_starts(10, LEGACY)]
    assert set(first[1:]) | set(rest) == legacy and len(rest) == 2
    assert r.scard(LEGACY) == 0


def test_legacy_zset_is_read_highest_score_first(r):
    node = _frontier(r, "n")
    r.zadd(LEGACY, {"http://legacy.example/low": 1, "http://legacy.example/high": 10, "http://legacy.example/mid": 5})
    Crawl.of(node).push_starts(["http://ours.example/1"])
    got = [raw.decode() for _, raw in node.take_starts(3, LEGACY)]
    assert got == ["http://ours.example/1", "http://legacy.example/high", "http://legacy.example/mid"]
    assert [x.decode() for x in r.zrange(LEGACY, 0, -1)] == ["http://legacy.example/low"]
    assert [raw.decode() for _, raw in node.take_starts(3, LEGACY)] == ["http://legacy.example/low"]


def test_legacy_entries_are_leased_and_return_to_our_list(r):
    """An entry taken from scrapy-redis's key is leased too: if its node dies, it is not lost
    (it comes back at the head of the crawl's own start_urls)."""
    node = _frontier(r, "n", lease_timeout=0.2)
    r.sadd(LEGACY, "http://legacy.example/1")
    [(lease_id, _)] = node.take_starts(5, LEGACY)
    assert r.hget(KEYS.leased, lease_id).decode().endswith("|start|1")
    time.sleep(0.3)
    node.reap()
    assert _start_urls(r) == ["http://legacy.example/1"]


def test_legacy_key_of_another_type_is_ignored(r):
    node = _frontier(r, "n")
    r.set(LEGACY, "http://not-a-list.example/")
    r.hset("starts:hash", "a", "http://x.example/")
    Crawl.of(node).push_starts(["http://ours.example/1"])
    assert [raw.decode() for _, raw in node.take_starts(5, LEGACY)] == ["http://ours.example/1"]
    assert node.take_starts(5, "starts:hash") == []
    assert r.get(LEGACY) == b"http://not-a-list.example/"


def test_taken_entries_build_requests_for_a_spider(r):
    """What comes out of Redis is what went in: the entries push stores build the right requests."""
    node = _frontier(r, "n")
    lines = [
        starts.to_line(starts.parse(x))
        for x in (
            "http://shop.test/",
            '{"url": "http://shop.test/item/3/", "callback": "parse_item", "priority": 4}',
        )
    ]
    Crawl.of(node).push_starts(lines)
    spider = ShopSpider(base_url="http://shop.test")
    built = [starts.build(starts.parse(raw), spider) for _, raw in node.take_starts(5)]
    assert [(q.url, q.callback, q.priority) for q in built] == [
        ("http://shop.test/", None, 0),
        ("http://shop.test/item/3/", spider.parse_item, 4),
    ]
    assert all(isinstance(q, scrapy.Request) for q in built)
