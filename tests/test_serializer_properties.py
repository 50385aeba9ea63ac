"""Property-based tests of both serializers (hypothesis), beyond tests/test_serializers.py:

* every request Scrapy can make (Request, FormRequest, JsonRequest, XmlRpcRequest; any
  method, headers, cookies, meta, cb_kwargs, priority, flags, encoding, callbacks)
  round-trips exactly: same class, same attributes, callbacks bound to the same spider;
* arbitrary bytes, and under pickle arbitrary *signed* bytes and signed Python values,
  never raise anything but DecodeError;
* the size limit holds for whatever is generated.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import pickle
import string
import xmlrpc.client

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from scrapy import FormRequest, Request
from scrapy.http import JsonRequest, XmlRpcRequest

from crawlplug.errors import DecodeError, SerializationError
from crawlplug.serializers import PICKLE_MAGIC, JsonSerializer, PickleSerializer
from tests.support.fuzz import examples, mutated
from tests.support.spiders import ShopSpider

PROPS = settings(max_examples=examples(150), deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

SECRET = "property-secret-0123456789"


SPIDER = ShopSpider()
JSON = JsonSerializer()
V1 = JsonSerializer(payload_format=1)
PICKLE = PickleSerializer(secret=SECRET)

# -- what a request can hold ---------------------------------------------------------------------

_text = st.text(max_size=12)
_json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _text
#: What JSON holds exactly (lists, not tuples; str keys; finite floats).
json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=10,
)
_hashable = st.none() | st.booleans() | st.integers() | _text | st.binary(max_size=8)
#: What the pickle format holds exactly: bytes, tuples, sets, non-str keys too.
pickle_values = st.recursive(
    _json_scalars | st.floats(allow_nan=False) | st.binary(max_size=12) | st.frozensets(_hashable, max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.sets(_hashable, max_size=3)
        | st.dictionaries(_hashable, inner, max_size=3)
    ),
    max_leaves=10,
)

_host = st.from_regex(r"[a-z][a-z0-9-]{0,10}(\.[a-z]{2,6}){1,2}", fullmatch=True) | st.sampled_from(
    ["127.0.0.1", "[::1]", "xn--exmple-cua.com"]
)
_path = st.text(alphabet=string.ascii_letters + string.digits + "-._~/%!$&'()*+,;=:@", max_size=20)
urls = st.builds(
    lambda scheme, host, port, path, query, fragment: f"{scheme}://{host}{port}/{path}{query}{fragment}",
    st.sampled_from(["http", "https", "HTTP"]),
    _host,
    st.sampled_from(["", ":8080", ":443"]),
    _path | st.text(max_size=8),  # non-ASCII too: Request makes it safe, in its encoding
    st.sampled_from(["", "?a=1&b=2", "?q=caf%C3%A9", "?x"]),
    st.sampled_from(["", "#frag"]),
)
_header_names = st.text(alphabet=string.ascii_letters + string.digits + "-", min_size=1, max_size=12)
headers = st.dictionaries(
    _header_names,
    st.lists(st.binary(max_size=16) | st.text(alphabet=string.printable, max_size=16), min_size=1, max_size=3),
    max_size=4,
)
cookies = st.dictionaries(_text, _text | st.integers(), max_size=3) | st.lists(
    st.fixed_dictionaries({"name": _text, "value": _text}, optional={"domain": _text, "path": _text}),
    max_size=2,
)
encodings = st.sampled_from(["utf-8", "latin-1", "cp1252", "utf-16", "ascii", "shift_jis", "koi8-r"])


@st.composite
def any_request(draw, values):
    """A request of any of Scrapy's classes, as a spider could make it."""
    meta_keys = _text.filter(lambda k: not k.startswith("_crawlplug"))
    common = {
        "headers": draw(headers),
        "cookies": draw(cookies),
        "meta": draw(st.dictionaries(meta_keys, values, max_size=4)),
        "cb_kwargs": draw(st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), values, max_size=3)),
        "priority": draw(st.integers(-(2**40), 2**40)),
        "dont_filter": draw(st.booleans()),
        "flags": draw(st.lists(_text, max_size=3)),
        "encoding": draw(encodings),
        "callback": draw(st.sampled_from([None, SPIDER.parse, SPIDER.parse_item])),
        "errback": draw(st.sampled_from([None, SPIDER.on_error])),
    }
    request = draw(_make(draw(urls), common))
    if request.encoding == "utf-16":
        # Request escapes the query in its encoding, and escaping a UTF-16 query again changes
        # it: no format built on the constructor (Scrapy's request_from_dict neither) keeps it
        assume("?" not in request.url)
    return request


@st.composite
def _make(draw, url, common):
    kind = draw(st.sampled_from(["Request", "FormRequest", "JsonRequest", "XmlRpcRequest"]))
    try:
        if kind == "Request":
            body = draw(st.binary(max_size=64) | st.text(max_size=32))
            method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "get"]))
            return Request(url, method=method, body=body, **common)
        if kind == "FormRequest":
            formdata = draw(st.dictionaries(_text, _text | st.lists(_text, max_size=2), max_size=3))
            method = draw(st.sampled_from(["POST", "GET"]))
            return FormRequest(url, method=method, formdata=formdata, **common)
        if kind == "JsonRequest":
            dumps_kwargs = draw(st.sampled_from([{}, {"sort_keys": True}, {"indent": 1}]))
            return JsonRequest(url, data=draw(json_values), dumps_kwargs=dumps_kwargs, **common)
        params = tuple(draw(st.lists(st.integers(-(2**31), 2**31 - 1) | _text.filter(str.isprintable), max_size=3)))
        return XmlRpcRequest(url, params=params, methodname="shop.items", **common)
    except (UnicodeError, ValueError, TypeError, xmlrpc.client.Error, OverflowError):
        assume(False)  # a request Scrapy itself cannot make
        raise AssertionError  # unreachable


def assert_same(a: Request, b: Request) -> None:
    assert type(b) is type(a)
    for attr in (
        "url",
        "method",
        "body",
        "cookies",
        "meta",
        "cb_kwargs",
        "priority",
        "dont_filter",
        "flags",
        "encoding",
        "callback",
        "errback",
    ):
        assert getattr(b, attr) == getattr(a, attr), attr
    for attr in ("meta", "cb_kwargs"):  # == holds for 1 and True, (1,) and [1]: compare types too
        assert _shape(getattr(b, attr)) == _shape(getattr(a, attr)), attr
    assert list(b.headers.items()) == list(a.headers.items())
    if isinstance(a, JsonRequest):
        assert b.dumps_kwargs == a.dumps_kwargs
    for fn in (b.callback, b.errback):
        assert fn is None or fn.__self__ is SPIDER


def _shape(value):
    if isinstance(value, dict):
        return ("dict", sorted((repr(k), type(k).__name__, _shape(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_shape(v) for v in value])
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, sorted(repr(v) for v in value))
    return (type(value).__name__, repr(value))


@PROPS
@given(any_request(json_values))
def test_every_request_round_trips_exactly_through_json(req):
    data = JSON.dumps(req, SPIDER)
    back = JSON.loads(data, SPIDER)
    assert_same(req, back)
    assert JSON.dumps(back, SPIDER) == data  # and is stored the same way again


@PROPS
@given(any_request(json_values))
def test_every_request_written_in_the_old_format_is_read_exactly(req):
    """A queue, an export or a dead letter written before the compact format (the long-key
    writer is byte for byte d7f69e2's: tests/test_payload_upgrade.py) reads as it was, and a
    node writing it again writes the compact payload it would have written for the original."""
    old = V1.dumps(req, SPIDER)
    assert json.loads(old)["v"] in (1, 2)
    back = JSON.loads(old, SPIDER)
    assert_same(req, back)
    assert JSON.dumps(back, SPIDER) == JSON.dumps(req, SPIDER)


_bytes_values = _text | st.fixed_dictionaries({"b64": st.sampled_from(["", "eA==", "!!", "eA"]) | _text}) | json_values
_compact_fields = {
    "C": st.sampled_from(["scrapy.http.request.form.FormRequest", "os.system"]) | json_values,
    "c": st.sampled_from(["parse", "parse_item", "__init__", "closed"]) | json_values,
    "e": st.sampled_from(["on_error", "__del__"]) | json_values,
    "M": st.sampled_from(["GET", "POST", ""]) | json_values,
    "h": st.lists(st.lists(_bytes_values, max_size=3), max_size=3) | json_values,
    "r": st.sampled_from(["/a/", "http://x.org/", "", "//evil"]) | json_values,
    "b": _bytes_values,
    "k": json_values,
    "m": json_values,
    "a": json_values,
    "f": json_values,
    "n": json_values,
    "p": json_values,
    "d": json_values,
    "x": json_values,
    "o": st.dictionaries(st.sampled_from(["dumps_kwargs", "url", "callback", "_class", "v"]), json_values, max_size=2)
    | json_values,
    "url": json_values,
}


@PROPS
@given(
    st.fixed_dictionaries(
        {
            "v": st.just(3),
            "u": st.sampled_from(["http://example.com/", "https://x.org/a?b", "ftp://x/", "/rel", "http:"])
            | json_values,
        },
        optional=_compact_fields,
    )
)
def test_hostile_compact_payloads_never_raise_anything_but_decode_error(d):
    """What anyone able to write to the crawl's Redis could store as a compact payload."""
    try:
        data = json.dumps(d).encode()
    except ValueError:
        assume(False)
    _only_decode_errors(JSON, data)


@PROPS
@given(any_request(pickle_values))
def test_every_request_round_trips_exactly_through_pickle(req):
    back = PICKLE.loads(PICKLE.dumps(req, SPIDER), SPIDER)
    assert_same(req, back)


@PROPS
@given(any_request(json_values), st.integers(200, 2000))
def test_the_size_limit_holds_for_any_request(req, limit):
    for serializer in (
        JsonSerializer(max_payload_bytes=limit),
        PickleSerializer(secret=SECRET, max_payload_bytes=limit),
    ):
        try:
            data = serializer.dumps(req, SPIDER)
        except SerializationError as exc:
            assert "exceeds CRAWLPLUG_MAX_PAYLOAD_BYTES" in str(exc)
            data = type(serializer)(
                **({"secret": SECRET} if serializer.name == "pickle" else {}), max_payload_bytes=0
            ).dumps(req, SPIDER)
            assert len(data) > limit
            try:
                serializer.loads(data, SPIDER)
            except DecodeError as exc:
                assert "exceeds CRAWLPLUG_MAX_PAYLOAD_BYTES" in str(exc)
            else:
                raise AssertionError("an oversized payload was read")
        else:
            assert len(data) <= limit
            assert_same(req, serializer.loads(data, SPIDER))


# -- arbitrary input: DecodeError and nothing else --------------------------------------------------


def _sign(body: bytes) -> bytes:
    return PICKLE_MAGIC + hmac.new(SECRET.encode(), PICKLE_MAGIC + body, hashlib.sha256).digest() + body


def _only_decode_errors(serializer, data: bytes) -> None:
    try:
        request = serializer.loads(data, SPIDER)
    except DecodeError:
        return
    assert isinstance(request, Request)
    assert request.url.split(":", 1)[0].lower() in ("http", "https")
    for fn in (request.callback, request.errback):
        assert fn is None or fn.__self__ is SPIDER


_valid_pickle = pickle.dumps(
    {
        "v": 1,
        "url": "http://example.com/",
        "callback": "parse_item",
        "meta": {"a": (1, b"x")},
        "headers": [[b"Accept", [b"text/html"]]],
        "body": b"\x00body",
        "priority": 3,
    },
    protocol=5,
)


@PROPS
@given(
    st.binary(max_size=300) | st.binary(max_size=300).map(lambda b: PICKLE_MAGIC + b) | mutated(_sign(_valid_pickle))
)
def test_arbitrary_bytes_never_raise_anything_but_decode_error_under_pickle(data):
    _only_decode_errors(PICKLE, data)
    _only_decode_errors(JSON, data)


@PROPS
@given(st.binary(max_size=300) | mutated(_valid_pickle))
def test_arbitrary_signed_bytes_never_raise_anything_but_decode_error(body):
    """Even a key holder's garbage (or a leaked key) gets only a DecodeError."""
    _only_decode_errors(PICKLE, _sign(body))


_field_values = pickle_values | st.sampled_from(
    [
        b"",
        "GET",
        "parse",
        "parse_item",
        "__init__",
        "os.system",
        "scrapy.http.request.form.FormRequest",
        [[b"A", [b"1"]]],
    ]
)


@PROPS
@given(
    st.fixed_dictionaries(
        {
            "v": st.just(1) | pickle_values,
            "url": st.sampled_from(["http://example.com/", "ftp://x/", "x"]) | pickle_values,
        },
        optional={
            key: _field_values for key in (*Request.attributes, "_class", "dumps_kwargs", "formdata") if key != "url"
        },
    )
    | pickle_values
)
def test_signed_python_values_never_raise_anything_but_decode_error(value):
    _only_decode_errors(PICKLE, _sign(pickle.dumps(value, protocol=5)))
