"""Request <-> bytes (crawlplug.serializers): round trips, refusals, hostile payloads.

No Redis needed: the serializer is pure. Hostile payloads model what anyone
with write access to the crawl's Redis could store.
"""

from __future__ import annotations

import base64
import json
import string

import pytest
import scrapy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scrapy import FormRequest, Request
from scrapy.http import JsonRequest

from crawlplug.errors import ConfigError, DecodeError, SerializationError
from crawlplug.serializers import (
    COMPACT_VERSION,
    DEFAULT_REQUEST_CLASSES,
    FORMAT_VERSION,
    JsonSerializer,
    compact,
    get_serializer,
)
from tests.support.fuzz import examples, mutated
from tests.support.spiders import ShopSpider

# keep hypothesis' caches out of the work tree (there is no .gitignore entry for them)
FAST = settings(max_examples=examples(200), deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


class TrackedRequest(Request):
    """A project-specific Request subclass, outside the default allow-list."""


TRACKED_PATH = f"{TrackedRequest.__module__}.{TrackedRequest.__qualname__}"


@pytest.fixture
def spider() -> ShopSpider:
    return ShopSpider()


@pytest.fixture(params=[COMPACT_VERSION, FORMAT_VERSION], ids=["compact", "v1"])
def ser(request) -> JsonSerializer:
    """Both formats a node may write (CRAWLPLUG_PAYLOAD_FORMAT), each read back by the same reader."""
    return JsonSerializer(payload_format=request.param)


def stored(data: bytes) -> dict:
    """A payload's fields by their long names, whichever format wrote it."""
    d = json.loads(data)
    return compact.expand(d) if compact.is_compact(d) else d


def roundtrip(ser: JsonSerializer, request: Request, spider) -> Request:
    data = ser.dumps(request, spider)
    assert isinstance(data, bytes)
    json.loads(data)  # the payload itself is plain JSON
    return ser.loads(data, spider)


def assert_same(a: Request, b: Request) -> None:
    assert type(b) is type(a)
    assert b.url == a.url
    assert b.method == a.method
    assert dict(b.headers) == dict(a.headers)
    assert b.body == a.body
    assert b.cookies == a.cookies
    assert b.meta == a.meta
    assert b.cb_kwargs == a.cb_kwargs
    assert b.priority == a.priority
    assert b.dont_filter == a.dont_filter
    assert b.flags == a.flags
    assert b.encoding == a.encoding
    assert b.callback == a.callback
    assert b.errback == a.errback


def payload(**fields) -> bytes:
    d = {"v": FORMAT_VERSION, "url": "http://example.com/"}
    d.update(fields)
    return json.dumps(d).encode()


# -- round trips -------------------------------------------------------------------


def test_get_request_round_trip(ser, spider):
    req = Request(
        "http://example.com/a?b=1",
        callback=spider.parse_item,
        errback=spider.on_error,
        headers={"Accept": ["text/html", "application/xml"], "X-Bin": [b"\x00\xff\x80", b"\r\x01"]},
        cookies={"session": "abc", "lang": "fr"},
        meta={"depth": 3, "tags": ["a", "b"], "nested": {"x": None, "y": 1.5, "z": True}},
        cb_kwargs={"page": 2, "cat": "shoes"},
        priority=-7,
        dont_filter=True,
        flags=["seed", "retry"],
        encoding="latin-1",
    )
    back = roundtrip(ser, req, spider)
    assert_same(req, back)
    assert back.headers.getlist("Accept") == [b"text/html", b"application/xml"]
    assert back.headers.getlist("X-Bin") == [b"\x00\xff\x80", b"\r\x01"]
    assert back.callback == spider.parse_item and back.callback.__self__ is spider
    assert back.errback == spider.on_error


def test_post_request_with_binary_body_round_trip(ser, spider):
    body = bytes(range(256)) * 3
    req = Request(
        "https://example.com/upload",
        method="POST",
        body=body,
        headers={"Content-Type": "application/octet-stream"},
        priority=12,
        callback=spider.parse,
    )
    back = roundtrip(ser, req, spider)
    assert_same(req, back)
    assert back.body == body
    assert back.method == "POST"


def test_default_request_round_trip_is_small(ser, spider):
    req = Request("http://example.com/")
    data = ser.dumps(req, spider)
    if ser.payload_format == COMPACT_VERSION:
        assert data == b'{"v":3,"u":"http://example.com/"}'
    else:
        assert json.loads(data) == {"v": FORMAT_VERSION, "url": "http://example.com/"}
    assert_same(req, ser.loads(data, spider))


def test_form_request_round_trip(ser, spider):
    req = FormRequest(
        "http://example.com/login",
        formdata={"user": "ann", "pass": "s3cr\u00e9t"},
        callback=spider.parse_item,
        meta={"step": "login"},
    )
    data = ser.dumps(req, spider)
    assert stored(data)["_class"] == "scrapy.http.request.form.FormRequest"
    back = ser.loads(data, spider)
    assert isinstance(back, FormRequest)
    assert_same(req, back)
    assert back.method == "POST"


def test_json_request_round_trip(ser, spider):
    req = JsonRequest("http://example.com/api", data={"q": "shoes", "n": [1, 2]}, callback=spider.parse)
    data = ser.dumps(req, spider)
    assert stored(data)["_class"] == "scrapy.http.request.json_request.JsonRequest"
    back = ser.loads(data, spider)
    assert isinstance(back, JsonRequest)
    assert_same(req, back)
    assert json.loads(back.body) == {"q": "shoes", "n": [1, 2]}


def test_private_meta_keys_are_dropped(ser, spider):
    req = Request(
        "http://example.com/",
        meta={"_crawlplug_lease": "0000000000000001", "_crawlplug_anything": object(), "keep": 1},
    )
    data = ser.dumps(req, spider)
    assert b"_crawlplug" not in data
    assert ser.loads(data, spider).meta == {"keep": 1}
    assert "_crawlplug_lease" in req.meta, "dumps must not mutate the request"


@pytest.mark.parametrize(
    "value", [object(), b"raw bytes", {1, 2}, float("nan"), float("inf")], ids=["object", "bytes", "set", "nan", "inf"]
)
def test_unstorable_meta_value_names_the_key(ser, spider, value):
    req = Request("http://example.com/", meta={"fine": 1, "the_bad_key": value})
    with pytest.raises(SerializationError, match="the_bad_key"):
        ser.dumps(req, spider)


def test_unstorable_cb_kwargs_value_names_the_key(ser, spider):
    req = Request("http://example.com/", callback=spider.parse_item, cb_kwargs={"when": object()})
    with pytest.raises(SerializationError, match="when"):
        ser.dumps(req, spider)


def test_non_string_meta_key_is_refused(ser, spider):
    req = Request("http://example.com/", meta={("tuple", "key"): 1})
    with pytest.raises(SerializationError, match="tuple"):
        ser.dumps(req, spider)


def test_unstorable_cookie_is_a_serialization_error(ser, spider):
    req = Request("http://example.com/", cookies={"c": b"bytes"})
    with pytest.raises(SerializationError):
        ser.dumps(req, spider)


def _plain_function(response):  # pragma: no cover
    pass


@pytest.mark.parametrize("callback", [lambda response: None, _plain_function], ids=["lambda", "module-function"])
def test_callback_that_is_not_a_spider_method_is_refused(ser, spider, callback):
    with pytest.raises(SerializationError):
        ser.dumps(Request("http://example.com/", callback=callback), spider)
    with pytest.raises(SerializationError):
        ser.dumps(Request("http://example.com/", errback=callback), spider)


class OtherSpider(scrapy.Spider):
    name = "other"

    def parse_other(self, response):  # pragma: no cover
        pass


def test_method_of_another_spider_class_is_refused(ser, spider):
    other = OtherSpider()
    with pytest.raises(SerializationError):
        ser.dumps(Request("http://example.com/", callback=other.parse_other), spider)


def test_callback_without_spider_is_refused(ser, spider):
    with pytest.raises(SerializationError):
        ser.dumps(Request("http://example.com/", callback=spider.parse), None)


@pytest.mark.parametrize("url", ["ftp://example.com/f", "file:///etc/passwd", "data:,hello", "s3://bucket/k"])
def test_non_http_scheme_is_refused(ser, spider, url):
    with pytest.raises(SerializationError, match="scheme"):
        ser.dumps(Request(url), spider)


def test_subclass_outside_allow_list_is_refused_then_allowed_by_extension(spider):
    req = TrackedRequest("http://example.com/t", meta={"a": 1}, callback=spider.parse)
    with pytest.raises(SerializationError, match="not allowed"):
        JsonSerializer().dumps(req, spider)
    wide = JsonSerializer(extra_classes=[TRACKED_PATH])
    data = wide.dumps(req, spider)
    assert stored(data)["_class"] == TRACKED_PATH
    back = wide.loads(data, spider)
    assert type(back) is TrackedRequest
    assert_same(req, back)
    # a node without the extension refuses the payload instead of loading it
    with pytest.raises(DecodeError, match="allow-list"):
        JsonSerializer().loads(data, spider)
    # the extension adds to the defaults, it does not replace them
    assert set(DEFAULT_REQUEST_CLASSES) <= wide.allowed_classes


def test_get_serializer(monkeypatch):
    assert isinstance(get_serializer("json"), JsonSerializer)
    assert TRACKED_PATH in get_serializer("json", [TRACKED_PATH]).allowed_classes
    monkeypatch.delenv("CRAWLPLUG_SECRET", raising=False)
    with pytest.raises(ConfigError, match="'pickle' needs CRAWLPLUG_SECRET"):
        get_serializer("pickle")  # pickle only signed (tests/test_serializer_pickle.py)
    with pytest.raises(ConfigError, match="no.such.Serializer"):
        get_serializer("no.such.Serializer")


# -- hostile payloads: DecodeError and nothing else -----------------------------------

GOOD_B64 = base64.b64encode(b"x").decode()

BAD_PAYLOADS = {
    "garbage-bytes": b"\x80\x81\xfe\xff garbage",
    "empty": b"",
    "truncated-json": b'{"v": 1, "url": "http://exa',
    "json-array": b"[1, 2, 3]",
    "json-string": b'"http://example.com/"',
    "json-number": b"42",
    "json-null": b"null",
    "no-version": json.dumps({"url": "http://example.com/"}).encode(),
    "wrong-version": payload(v=2),
    "version-as-string": payload(v="1"),
    "missing-url": json.dumps({"v": FORMAT_VERSION}).encode(),
    "url-not-string": payload(url=["http://example.com/"]),
    "url-without-scheme": payload(url="example.com/page"),
    "ftp-url": payload(url="ftp://example.com/file"),
    "file-url": payload(url="file:///etc/passwd"),
    "javascript-url": payload(url="javascript:alert(1)"),
    "class-os-system": payload(_class="os.system"),
    "class-builtins-eval": payload(_class="builtins.eval"),
    "class-subprocess": payload(_class="subprocess.Popen"),
    "callback-missing": payload(callback="no_such_method"),
    "errback-missing": payload(errback="no_such_method"),
    "callback-dunder-init": payload(callback="__init__"),
    "callback-dunder-class": payload(callback="__class__"),
    "callback-dotted": payload(callback="os.system"),
    "callback-not-identifier": payload(callback="parse; import os"),
    "callback-not-string": payload(callback=["parse"]),
    "callback-attribute-not-method": payload(callback="name"),
    "callback-classmethod": payload(callback="from_crawler"),
    "body-invalid-base64": payload(body="not base64 !!"),
    "body-not-string": payload(body=[1, 2]),
    "header-name-invalid-base64": payload(headers=[["***", [GOOD_B64]]]),
    "header-value-invalid-base64": payload(headers=[[GOOD_B64, ["%%%"]]]),
    "headers-not-list": payload(headers={"Accept": "x"}),
    "header-entry-not-pair": payload(headers=[[GOOD_B64]]),
    "header-entry-number": payload(headers=[5]),
    "meta-not-mapping": payload(meta=5),
    "priority-not-int": payload(priority="high"),
    "flags-not-list": payload(flags=5),
    "encoding-not-string": payload(encoding=5),
    "unicode-surrogate-url": b'{"v":1,"url":"http://\\ud800/"}',
}


@pytest.mark.parametrize("data", list(BAD_PAYLOADS.values()), ids=list(BAD_PAYLOADS))
def test_bad_payload_raises_decode_error(ser, spider, data):
    with pytest.raises(DecodeError):
        ser.loads(data, spider)


def test_callback_payload_without_spider_is_decode_error(ser):
    with pytest.raises(DecodeError):
        ser.loads(payload(callback="parse"), None)


@pytest.mark.parametrize("encoding", ["no-such-codec", "base64"])
def test_unknown_encoding_is_decode_error(ser, spider, encoding):
    with pytest.raises(DecodeError):
        ser.loads(payload(encoding=encoding), spider)


@pytest.mark.parametrize("cls", [["scrapy.http.request.Request"], {"a": 1}], ids=["list", "object"])
def test_non_string_class_is_decode_error(ser, spider, cls):
    with pytest.raises(DecodeError):
        ser.loads(payload(_class=cls), spider)


def test_scrapy_internal_spider_method_is_not_a_callback(ser, spider):
    with pytest.raises(DecodeError):
        ser.loads(payload(callback="_set_crawler"), spider)


# -- property-based ---------------------------------------------------------------

_valid = payload(
    callback="parse_item",
    meta={"a": [1, 2]},
    headers=[[GOOD_B64, [GOOD_B64, GOOD_B64]]],
    body=base64.b64encode(b"\x00body").decode(),
)


@FAST
@given(st.one_of(st.binary(max_size=300), mutated(_valid)))
def test_arbitrary_bytes_never_raise_anything_but_decode_error(data):
    ser, spider = JsonSerializer(), ShopSpider()
    try:
        request = ser.loads(data, spider)
    except DecodeError:
        return
    # whatever decodes is a crawlable request bound to this spider only
    assert isinstance(request, Request)
    assert request.url.split(":", 1)[0] in ("http", "https")
    for fn in (request.callback, request.errback):
        assert fn is None or fn.__self__ is spider


json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=10)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)
hostile_fields = {
    # non-string _class values are test_non_string_class_is_decode_error (a known bug)
    "_class": st.sampled_from([*DEFAULT_REQUEST_CLASSES, "os.system"]) | st.text(max_size=30) | st.none(),
    "method": st.sampled_from(["GET", "POST", "", "\n"]) | json_values,
    "headers": json_values,
    "body": st.sampled_from(["", GOOD_B64, "!!"]) | json_values,
    "cookies": json_values,
    "meta": json_values,
    # invalid codec *names* are test_unknown_encoding_is_decode_error (a known bug)
    "encoding": st.sampled_from(["utf-8", "latin-1", "cp1252"]) | st.integers() | st.lists(st.text()),
    "priority": json_values,
    "dont_filter": json_values,
    "flags": json_values,
    "cb_kwargs": json_values,
    "callback": st.sampled_from(["parse", "parse_item", "__init__", "nope"]) | json_values,
    "errback": st.sampled_from(["on_error", "__del__"]) | json_values,
    "dumps_kwargs": json_values,
}


@FAST
@given(
    st.fixed_dictionaries(
        {
            "v": st.just(FORMAT_VERSION) | json_values,
            "url": st.sampled_from(["http://example.com/", "https://x.org/a?b", "http://[", "http:", "http://x:99999/"])
            | st.text(max_size=12),
        },
        optional=hostile_fields,
    )
)
def test_hostile_json_objects_never_raise_anything_but_decode_error(d):
    ser, spider = JsonSerializer(), ShopSpider()
    try:
        request = ser.loads(json.dumps(d).encode(), spider)
    except DecodeError:
        return
    assert isinstance(request, Request)
    assert type(request).__module__ + "." + type(request).__name__ in DEFAULT_REQUEST_CLASSES


_host = st.from_regex(r"[a-z][a-z0-9-]{0,12}(\.[a-z]{2,6}){1,2}", fullmatch=True)
_path = st.text(alphabet=string.ascii_letters + string.digits + "-._~/", max_size=20)
_query = st.dictionaries(
    st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=5),
    st.text(alphabet=string.ascii_letters + string.digits, max_size=5),
    max_size=3,
)
urls = st.builds(
    lambda scheme, host, port, path, query: (
        f"{scheme}://{host}{port}/{path}" + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
    ),
    st.sampled_from(["http", "https"]),
    _host,
    st.sampled_from(["", ":8080", ":443"]),
    _path,
    _query,
)
meta_values = st.dictionaries(
    st.text(max_size=10).filter(lambda k: not k.startswith("_crawlplug")), json_values, max_size=5
)
header_names = st.text(alphabet=string.ascii_letters + string.digits + "-", min_size=1, max_size=12)
headers = st.dictionaries(header_names, st.lists(st.binary(max_size=20), min_size=1, max_size=3), max_size=4)


@FAST
@given(
    url=urls,
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"]),
    headers=headers,
    body=st.binary(max_size=200),
    meta=meta_values,
    cb_kwargs=st.dictionaries(
        st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=6), json_values, max_size=3
    ),
    priority=st.integers(-(10**9), 10**9),
    dont_filter=st.booleans(),
    with_callback=st.booleans(),
)
def test_generated_requests_round_trip(
    url, method, headers, body, meta, cb_kwargs, priority, dont_filter, with_callback
):
    ser, spider = JsonSerializer(), ShopSpider()
    req = Request(
        url,
        method=method,
        headers=headers,
        body=body,
        meta=meta,
        cb_kwargs=cb_kwargs,
        priority=priority,
        dont_filter=dont_filter,
        callback=spider.parse_item if with_callback else None,
    )
    back = ser.loads(ser.dumps(req, spider), spider)
    assert back.url == req.url
    assert back.method == req.method
    assert dict(back.headers) == dict(req.headers)
    assert back.body == req.body
    assert back.meta == req.meta
    assert back.priority == req.priority
    assert back.dont_filter == req.dont_filter
    assert back.cb_kwargs == req.cb_kwargs
    assert back.callback == req.callback
