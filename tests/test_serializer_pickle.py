"""The opt-in pickle serializer and the payload size limit (crawlplug.serializers).

No Redis needed: the serializers are pure. A "forged" payload models what anyone
with write access to the crawl's Redis could store; "signed with the right key"
models a leaked CRAWLPLUG_SECRET, which must still run no code. Every malicious
pickle here would create a marker file if it were ever unpickled unrestricted.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import pickle
import subprocess
from pathlib import Path

import pytest
from scrapy import FormRequest, Request
from scrapy.http import JsonRequest
from scrapy.settings import Settings

from crawlplug.defaults import default
from crawlplug.errors import ConfigError, DecodeError, SerializationError
from crawlplug.serializers import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    PICKLE_MAGIC,
    JsonSerializer,
    PickleSerializer,
    get_serializer,
    payload_limit,
    serializer_from_settings,
)
from tests.support.spiders import ShopSpider

SECRET = "test-secret-0123456789abcdef"


@pytest.fixture
def spider() -> ShopSpider:
    return ShopSpider()


@pytest.fixture
def ser() -> PickleSerializer:
    return PickleSerializer(secret=SECRET)


def sign(body: bytes, secret: str = SECRET) -> bytes:
    """A payload as an attacker who knows ``secret`` would write it (the documented format)."""
    mac = hmac.new(secret.encode(), PICKLE_MAGIC + body, hashlib.sha256).digest()
    return PICKLE_MAGIC + mac + body


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
    assert dict(b.headers) == dict(a.headers)


# -- round trips ------------------------------------------------------------------------------


def test_round_trip_keeps_what_json_cannot_hold(ser, spider):
    req = Request(
        "https://example.com/a?b=1",
        method="PUT",
        callback=spider.parse_item,
        errback=spider.on_error,
        headers={"Accept": ["text/html", "application/xml"], "X-Bin": [b"\x00\xff"]},
        body=bytes(range(256)),
        cookies=[{"name": "s", "value": "1", "domain": "example.com"}],
        meta={
            "raw": b"\x00\xff",
            "pair": (1, "a"),
            "tags": {"x", "y"},
            "frozen": frozenset({1}),
            7: "int key",
            "nested": {"t": ((1, 2), [b"z"])},
            "big": 10**40,
            "inf": float("inf"),
        },
        cb_kwargs={"page": 2, "key": b"k"},
        priority=-7,
        dont_filter=True,
        flags=["seed"],
        encoding="latin-1",
    )
    data = ser.dumps(req, spider)
    assert data.startswith(PICKLE_MAGIC)
    back = ser.loads(data, spider)
    assert_same(req, back)
    assert type(back.meta["pair"]) is tuple and type(back.meta["tags"]) is set
    assert back.callback.__self__ is spider


@pytest.mark.parametrize(
    "make",
    [
        lambda s: FormRequest(
            "http://example.com/login", formdata={"user": "ann", "pw": "s3cr\u00e9t"}, callback=s.parse_item
        ),
        lambda s: FormRequest("http://example.com/search", method="GET", formdata={"q": "shoes"}),
        lambda s: JsonRequest("http://example.com/api", data={"q": [1, 2]}, dumps_kwargs={"sort_keys": True}),
        lambda s: Request("http://example.com/"),
    ],
    ids=["form-post", "form-get", "json", "plain"],
)
def test_request_classes_round_trip(ser, spider, make):
    req = make(spider)
    back = ser.loads(ser.dumps(req, spider), spider)
    assert_same(req, back)
    if isinstance(req, JsonRequest):
        assert back.dumps_kwargs == req.dumps_kwargs


def test_callbacks_are_stored_by_name_not_pickled(ser, spider):
    data = ser.dumps(Request("http://example.com/", callback=spider.parse_item), spider)
    body = data[len(PICKLE_MAGIC) + 32 :]
    assert pickle.loads(body)["callback"] == "parse_item"  # a name, resolved on the spider when read
    for name, ok in (("parse_item", True), ("no_such_method", False)):
        fields = pickle.loads(body) | {"callback": name}
        payload = sign(pickle.dumps(fields))
        if ok:
            assert ser.loads(payload, spider).callback == spider.parse_item
        else:
            with pytest.raises(DecodeError, match="has no method 'no_such_method'"):
                ser.loads(payload, spider)


def test_private_meta_is_dropped_and_the_request_left_alone(ser, spider):
    req = Request("http://example.com/", meta={"_crawlplug_lease": object(), "keep": 1})
    assert ser.loads(ser.dumps(req, spider), spider).meta == {"keep": 1}
    assert "_crawlplug_lease" in req.meta


def test_a_pickle_node_reads_json_payloads(ser, spider):
    """crawlplug's tools (dead requeue, import, migrate) write JSON; JSON is never unpickled."""
    req = Request("http://example.com/j", callback=spider.parse, meta={"a": [1]})
    assert_same(req, ser.loads(JsonSerializer().dumps(req, spider), spider))


def test_a_json_node_refuses_pickle_payloads_saying_why(ser, spider):
    data = ser.dumps(Request("http://example.com/"), spider)
    with pytest.raises(DecodeError, match="signed pickle .*this node reads JSON"):
        JsonSerializer().loads(data, spider)


# -- what is refused when storing ---------------------------------------------------------------


class Opaque:
    pass


@pytest.mark.parametrize(
    "value",
    [Opaque(), __import__("datetime").date(2026, 1, 1), 1 + 2j, ValueError("x")],
    ids=["project-class", "date", "complex", "exception"],
)
def test_values_the_restricted_unpickler_refuses_are_refused_at_store(ser, spider, value):
    """A node never stores what no node could read back: the error names the key."""
    with pytest.raises(SerializationError, match=r"meta\['the_key'\]"):
        ser.dumps(Request("http://example.com/", meta={"fine": 1, "the_key": value}), spider)
    with pytest.raises(SerializationError, match=r"cb_kwargs\['arg'\]"):
        ser.dumps(Request("http://example.com/", callback=spider.parse, cb_kwargs={"arg": value}), spider)


def test_unpicklable_values_and_foreign_callbacks_are_refused(ser, spider):
    with pytest.raises(SerializationError, match="meta"):
        ser.dumps(Request("http://example.com/", meta={"f": lambda: None}), spider)
    with pytest.raises(SerializationError, match="spider method"):
        ser.dumps(Request("http://example.com/", callback=lambda r: None), spider)
    with pytest.raises(SerializationError, match="scheme"):
        ser.dumps(Request("ftp://example.com/f"), spider)


class TrackedRequest(Request):
    pass


def test_request_classes_outside_the_allow_list(spider):
    tracked = f"{TrackedRequest.__module__}.{TrackedRequest.__qualname__}"
    req = TrackedRequest("http://example.com/t", callback=spider.parse)
    with pytest.raises(SerializationError, match="not allowed"):
        PickleSerializer(secret=SECRET).dumps(req, spider)
    wide = PickleSerializer([tracked], secret=SECRET)
    data = wide.dumps(req, spider)
    assert type(wide.loads(data, spider)) is TrackedRequest
    with pytest.raises(DecodeError, match="allow-list"):  # a node without the extension
        PickleSerializer(secret=SECRET).loads(data, spider)


# -- what is refused when reading: nothing runs ------------------------------------------------


class _Touch:
    """Unpickled unrestricted, creates the marker file (through os.system, subprocess...)."""

    def __init__(self, how: str, marker: Path) -> None:
        self.how, self.marker = how, marker

    def __reduce__(self):
        if self.how == "os.system":
            return (os.system, (f"touch {self.marker}",))
        if self.how == "subprocess":
            return (subprocess.call, (["touch", str(self.marker)],))
        if self.how == "eval":
            return (eval, (f"open({str(self.marker)!r}, 'w').close()",))
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


EVIL_KINDS = ["os.system", "subprocess", "eval", "exec"]


def evil_pickles(marker: Path) -> dict[str, bytes]:
    """Malicious pickle bodies: bare, hidden in a request's meta, and hand-written protocol 0."""
    out = {}
    for how in EVIL_KINDS:
        out[how] = pickle.dumps(_Touch(how, marker), protocol=2)
        out[f"{how}-in-meta"] = pickle.dumps(
            {"v": 1, "url": "http://example.com/", "meta": {"x": _Touch(how, marker)}}, protocol=5
        )
    out["protocol-0"] = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
    # allowed globals used as gadgets: a huge bytes(), another codec
    out["bytes-bomb"] = b"\x80\x02c__builtin__\nbytes\nJ\x00\x00\x00\x40\x85R."
    out["codec"] = b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00xX\x06\x00\x00\x00base64\x86R."
    return out


@pytest.mark.parametrize(
    "name", [*EVIL_KINDS, *(f"{k}-in-meta" for k in EVIL_KINDS), "protocol-0", "bytes-bomb", "codec"]
)
def test_a_malicious_pickle_runs_under_no_serializer(ser, spider, tmp_path, name):
    marker = tmp_path / "pwned"
    body = evil_pickles(marker)[name]
    cases = {
        "json node, raw pickle": (JsonSerializer(), body, "not JSON"),
        "json node, signed pickle": (JsonSerializer(), sign(body), "this node reads JSON"),
        "unsigned": (ser, body, "neither JSON nor a signed crawlplug pickle"),
        "magic, no signature": (ser, PICKLE_MAGIC + body, "signature does not match|truncated"),
        "signed with another key": (ser, sign(body, "another-secret-0123456789"), "signature does not match"),
        "signed with the right key": (ser, sign(body), "refused by the restricted unpickler|is not allowed"),
    }
    for case, (serializer, payload, reason) in cases.items():
        with pytest.raises(DecodeError, match=reason):
            serializer.loads(payload, spider)
        assert not marker.exists(), case


def test_a_tampered_signed_payload_is_not_unpickled(ser, spider):
    data = bytearray(ser.dumps(Request("http://example.com/", meta={"a": 1}), spider))
    for pos in (0, 5, len(PICKLE_MAGIC) + 31, len(data) - 2):
        changed = bytearray(data)
        changed[pos] ^= 0x01
        with pytest.raises(DecodeError):
            ser.loads(bytes(changed), spider)
    for cut in (len(PICKLE_MAGIC), len(PICKLE_MAGIC) + 32, len(data) - 1):
        with pytest.raises(DecodeError):
            ser.loads(bytes(data[:cut]), spider)


@pytest.mark.parametrize(
    "value, reason",
    [
        ([1, 2], "not a JSON object"),
        ({"v": 1, "url": "http://example.com/", "body": "text, not bytes"}, "body is not bytes"),
        ({"v": 1, "url": "http://example.com/", "headers": [[b"A", "x"]]}, "header value is not bytes"),
        ({"v": 1, "url": "http://example.com/", "_class": "os.system"}, "allow-list"),
        ({"v": 1, "url": "file:///etc/passwd"}, "not crawlable"),
        ({"v": 1, "url": "http://example.com/", "meta": 5}, "valid request"),
        ({"v": 1, "url": "http://example.com/", "encoding": "no-such-codec"}, "valid request"),
    ],
)
def test_signed_but_malformed_fields_are_decode_errors(ser, spider, value, reason):
    with pytest.raises(DecodeError, match=reason):
        ser.loads(sign(pickle.dumps(value)), spider)


def test_a_signed_request_object_is_not_a_payload(ser, spider):
    """restricted_loads may build a Scrapy request (the migration reads those); a crawl
    payload is a dict of fields, so a request object is refused whole."""
    body = pickle.dumps(Request("http://example.com/"), protocol=2)
    with pytest.raises(DecodeError):
        ser.loads(sign(body), spider)


# -- the secret --------------------------------------------------------------------------------


@pytest.mark.parametrize("secret", [None, "", b""])
def test_pickle_needs_a_secret(monkeypatch, secret):
    monkeypatch.delenv("CRAWLPLUG_SECRET", raising=False)
    with pytest.raises(ConfigError, match="needs CRAWLPLUG_SECRET"):
        PickleSerializer(secret=secret)
    with pytest.raises(ConfigError, match="needs CRAWLPLUG_SECRET"):
        serializer_from_settings(Settings({"CRAWLPLUG_SERIALIZER": "pickle"}))


def test_a_short_secret_is_refused_without_showing_it():
    with pytest.raises(ConfigError, match="too short") as info:
        PickleSerializer(secret="hunter2")
    assert "hunter2" not in str(info.value)
    with pytest.raises(ConfigError, match="must be text") as info:
        PickleSerializer(secret=1234567890123456789)  # type: ignore[arg-type]
    assert "1234567890123456789" not in str(info.value)


def test_the_secret_comes_from_the_setting_else_the_environment(monkeypatch, spider):
    req = Request("http://example.com/")
    monkeypatch.setenv("CRAWLPLUG_SECRET", SECRET)
    from_env = serializer_from_settings(Settings({"CRAWLPLUG_SERIALIZER": "pickle"}))
    assert isinstance(from_env, PickleSerializer)
    assert from_env.loads(PickleSerializer(secret=SECRET).dumps(req, spider), spider).url == req.url
    other = "setting-secret-0123456789abcdef"
    from_setting = serializer_from_settings(Settings({"CRAWLPLUG_SERIALIZER": "pickle", "CRAWLPLUG_SECRET": other}))
    with pytest.raises(DecodeError, match="signature"):
        from_setting.loads(from_env.dumps(req, spider), spider)  # the setting wins over the environment
    assert SECRET not in repr(from_env) and other not in repr(from_setting)
    assert SECRET not in repr(vars(from_env)).replace(repr(SECRET.encode()), "")  # only the key bytes hold it


def test_get_serializer_names_and_class_paths(monkeypatch):
    monkeypatch.delenv("CRAWLPLUG_SECRET", raising=False)
    assert type(get_serializer("pickle", secret=SECRET)) is PickleSerializer
    assert type(get_serializer("crawlplug.serializers.PickleSerializer", secret=SECRET)) is PickleSerializer
    with pytest.raises(ConfigError, match="needs CRAWLPLUG_SECRET"):
        get_serializer("crawlplug.serializers.PickleSerializer")
    assert type(get_serializer("json", secret=SECRET)) is JsonSerializer  # json ignores the key


# -- CRAWLPLUG_MAX_PAYLOAD_BYTES -----------------------------------------------------------------


def test_the_default_limit():
    assert DEFAULT_MAX_PAYLOAD_BYTES == default("CRAWLPLUG_MAX_PAYLOAD_BYTES") == 10 * 1024 * 1024
    assert JsonSerializer().max_payload_bytes == DEFAULT_MAX_PAYLOAD_BYTES
    assert serializer_from_settings(Settings()).max_payload_bytes == DEFAULT_MAX_PAYLOAD_BYTES
    assert serializer_from_settings(Settings({"CRAWLPLUG_MAX_PAYLOAD_BYTES": "2048"})).max_payload_bytes == 2048


@pytest.mark.parametrize(
    "make", [JsonSerializer, lambda **kw: PickleSerializer(secret=SECRET, **kw)], ids=["json", "pickle"]
)
def test_a_payload_over_the_limit_is_never_stored_nor_read(spider, make):
    small = make(max_payload_bytes=4096)
    ok = Request("http://example.com/", body=b"x" * 1000)
    assert small.loads(small.dumps(ok, spider), spider).body == ok.body
    for big in (
        Request("http://example.com/", body=b"x" * 5000),  # the body alone
        Request("http://example.com/", body=b"\x00" * 4050),  # the encoded payload (base64)
        Request("http://example.com/", meta={"m": "y" * 5000}),
    ):
        with pytest.raises(SerializationError, match="exceeds CRAWLPLUG_MAX_PAYLOAD_BYTES"):
            small.dumps(big, spider)
        payload = make(max_payload_bytes=0).dumps(big, spider)  # 0: no limit
        assert len(payload) > 4096
        with pytest.raises(
            DecodeError, match=rf"payload of {len(payload)} bytes exceeds CRAWLPLUG_MAX_PAYLOAD_BYTES \(4096\)"
        ):
            small.loads(payload, spider)


def test_a_50_mb_entry_is_refused_before_it_is_parsed(spider):
    body = b"x" * (50 * 1024 * 1024)
    huge = json.dumps({"v": 1, "url": "http://example.com/", "body": "eHh4" * (len(body) // 3)}).encode()
    for serializer in (JsonSerializer(), PickleSerializer(secret=SECRET)):
        with pytest.raises(DecodeError, match="exceeds CRAWLPLUG_MAX_PAYLOAD_BYTES"):
            serializer.loads(huge, spider)
        with pytest.raises(SerializationError, match="request body of 52428800 bytes exceeds"):
            serializer.dumps(Request("http://example.com/", method="POST", body=body), spider)


@pytest.mark.parametrize("value", ["lots", -1, True, [1]])
def test_a_bad_limit_is_a_config_error(value):
    with pytest.raises(ConfigError, match="CRAWLPLUG_MAX_PAYLOAD_BYTES"):
        payload_limit(value)
    with pytest.raises(ConfigError, match="CRAWLPLUG_MAX_PAYLOAD_BYTES"):
        serializer_from_settings(Settings({"CRAWLPLUG_MAX_PAYLOAD_BYTES": value}))


def test_non_bytes_payloads_are_decode_errors(spider):
    for serializer in (JsonSerializer(), PickleSerializer(secret=SECRET)):
        for value in (None, 5, ["x"]):
            with pytest.raises(DecodeError):
                serializer.loads(value, spider)  # type: ignore[arg-type]
