"""The default payload format: JSON built on ``Request.to_dict``.

Callbacks are stored by name and resolved against the spider when decoding
(only names :mod:`crawlplug.serializers.callbacks` accepts as callbacks), the request class
checked against an allow-list. Nothing read from Redis is ever imported or
executed beyond looking up a method *name* on the running spider.

A node writes the compact format (version 3, :mod:`.compact`: short keys, text
stored as text, the Referer relative to the URL) unless CRAWLPLUG_PAYLOAD_FORMAT
is 1, the long-key format with base64 body and header bytes that crawlplug wrote
before (what nodes of older versions read, during a rolling upgrade); it reads
both, whichever wrote a queue, an export file or a dead letter.

A meta value JSON cannot hold is stored only when it holds objects of a type
with a registered codec (:mod:`.metacodecs`; scrapy-playwright's ``PageMethod``
through :mod:`.pagemethods`): such values go to the payload's ``xmeta`` field,
and a payload with one is format version 2, which a node older than this format
refuses (a dead letter saying so) instead of crawling the request without them.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from scrapy import Request, Spider
from scrapy.utils.misc import load_object

from ..defaults import default
from ..errors import ConfigError, DecodeError, SerializationError, checked_number
from . import callbacks, compact, fields, metacodecs, metakeys, pagemethods  # noqa: F401 - pagemethods registers PageMethod's codec

#: The long-key format: what CRAWLPLUG_PAYLOAD_FORMAT = 1 writes, and crawlplug wrote before the compact one.
FORMAT_VERSION = 1
#: The compact format (:mod:`.compact`): what a node writes by default.
COMPACT_VERSION = compact.COMPACT_VERSION
#: CRAWLPLUG_PAYLOAD_FORMAT's values: the versions a node may write.
PAYLOAD_FORMATS = compact.PAYLOAD_FORMATS
#: The version of a payload with meta values stored by a codec (its ``xmeta`` field).
CODECS_FORMAT_VERSION = 2

#: Meta keys crawlplug uses internally; never stored.
PRIVATE_META_PREFIX = "_crawlplug"

#: Request classes a payload may name, besides those in CRAWLPLUG_REQUEST_CLASSES.
DEFAULT_REQUEST_CLASSES = (
    "scrapy.http.request.Request",
    "scrapy.http.request.form.FormRequest",
    "scrapy.http.request.json_request.JsonRequest",
    "scrapy.http.request.rpc.XmlRpcRequest",
)

URL_SCHEMES = ("http", "https")
#: What a URL's scheme looks like (RFC 3986): "127.0.0.1:8000/x" has none, "ftp://..." one.
URL_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")

#: Largest payload stored or read unless CRAWLPLUG_MAX_PAYLOAD_BYTES says otherwise.
DEFAULT_MAX_PAYLOAD_BYTES: int = default("CRAWLPLUG_MAX_PAYLOAD_BYTES")

#: First bytes of a signed pickle payload (crawlplug.serializers.signed): format and version.
PICKLE_MAGIC = b"cpk1"

#: Environment variable read for the pickle key when the CRAWLPLUG_SECRET setting is unset.
SECRET_ENV = "CRAWLPLUG_SECRET"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise DecodeError(f"{what} is not base64 text")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise DecodeError(f"{what} is not valid base64") from None


def _check_json(mapping: dict[str, Any], what: str) -> None:
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise SerializationError(f"{what} key {key!r} is not a string; JSON cannot store it")
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise SerializationError(
                f"{what}[{key!r}] cannot be stored as JSON ({type(value).__name__}: {exc})"
            ) from None


def _check_xmeta(d: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    meta, xmeta = d.get("meta", {}), d["xmeta"]
    if not isinstance(meta, dict) or not isinstance(xmeta, dict):
        raise DecodeError("payload meta / xmeta is not an object")
    if d.get("v") != CODECS_FORMAT_VERSION:
        raise DecodeError(f"payload of version {d.get('v')!r} has xmeta, which version {CODECS_FORMAT_VERSION} brought")
    return meta, xmeta


def payload_limit(value: Any) -> int:
    """CRAWLPLUG_MAX_PAYLOAD_BYTES as an int (0: no limit); :class:`ConfigError` if it is not one."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise ConfigError(f"CRAWLPLUG_MAX_PAYLOAD_BYTES must be a number of bytes (0: no limit), got {value!r}")
    return checked_number(
        value,
        "CRAWLPLUG_MAX_PAYLOAD_BYTES",
        int,
        kind="a number of bytes",
        negative="must be a number of bytes (0: no limit)",
    )


class JsonSerializer:
    """JSON payloads; safe to read from a Redis that others can write to."""

    name = "json"

    def __init__(
        self,
        extra_classes: Iterable[str] = (),
        *,
        max_payload_bytes: Any = DEFAULT_MAX_PAYLOAD_BYTES,
        payload_format: Any = COMPACT_VERSION,
    ) -> None:
        self.allowed_classes = frozenset(DEFAULT_REQUEST_CLASSES) | frozenset(extra_classes)
        self._classes: dict[str, type[Request]] = {}  # allowed class path -> class, once loaded
        #: Largest payload stored or read, in bytes; 0: no limit.
        self.max_payload_bytes = payload_limit(max_payload_bytes)
        #: The version :meth:`dumps` writes (CRAWLPLUG_PAYLOAD_FORMAT); :meth:`loads` reads every one.
        self.payload_format = compact.payload_version(payload_format)

    def _check_request(self, request: Request) -> str | None:
        """The class path a payload must name (None for a plain Request); refuses what no node may crawl."""
        url = request.url
        scheme = url.split(":", 1)[0].lower()
        if scheme not in URL_SCHEMES:
            raise SerializationError(f"URL scheme {scheme!r} is not crawlable: {url}")
        limit = self.max_payload_bytes
        if limit and len(request.body) > limit:  # before encoding 50 MB only to refuse it
            raise SerializationError(
                f"request body of {len(request.body)} bytes exceeds CRAWLPLUG_MAX_PAYLOAD_BYTES ({limit}): {url[:200]}"
            )
        cls = None
        if type(request) is not Request:
            cls = f"{type(request).__module__}.{type(request).__name__}"
            if cls not in self.allowed_classes:
                raise SerializationError(f"request class {cls} is not allowed; add it to CRAWLPLUG_REQUEST_CLASSES")
        return cls

    def _sized(self, payload: bytes, request: Request) -> bytes:
        limit = self.max_payload_bytes
        if limit and len(payload) > limit:
            raise SerializationError(
                f"request payload of {len(payload)} bytes exceeds CRAWLPLUG_MAX_PAYLOAD_BYTES ({limit}): {request.url[:200]}"
            )
        return payload

    def _check_size(self, data: Any) -> None:
        if not isinstance(data, (bytes, bytearray, str)):
            raise DecodeError(f"payload must be bytes, got {type(data).__name__}")
        limit = self.max_payload_bytes
        if limit and len(data) > limit:
            raise DecodeError(f"payload of {len(data)} bytes exceeds CRAWLPLUG_MAX_PAYLOAD_BYTES ({limit})")

    def dumps(self, request: Request, spider: Spider | None) -> bytes:
        """Encode ``request``; :class:`SerializationError` names what cannot be stored."""
        cls = self._check_request(request)
        if self.payload_format == COMPACT_VERSION:
            fields = compact.fields_of(request.url, cls, self._stored_fields(request, spider, cls))
            return self._sized(self._dump(fields, spider, compact_=True), request)
        out: dict[str, Any] = {"v": FORMAT_VERSION}
        if cls is not None:
            out["_class"] = cls
        for key, value in self._stored_fields(request, spider, cls):
            if key == "headers":
                out["headers"] = [
                    [_b64(bytes(name)), [_b64(bytes(v)) for v in values]] for name, values in value.items()
                ]
            else:
                out[key] = _b64(value) if key == "body" else value
        return self._sized(self._dump(out, spider, compact_=False), request)

    def _stored_fields(self, request: Request, spider: Spider | None, cls: str | None) -> Iterator[tuple[str, Any]]:
        """(attribute, value) of every attribute ``request`` does not hold at its default, in
        ``attributes`` order: callbacks as names, meta without crawlplug's private keys, the
        headers object and the body bytes as they are (each format writes them its way)."""
        # Reads the attributes directly (what Request.to_dict does, minus the copies
        # and the inspect.getmembers scan per callback): this runs for every request.
        for key, kind, at_default in fields.plan(type(request)):
            if kind == fields.NAME:
                value = self._method_name(request, key, spider)
                if value is not None:
                    yield key, value
                continue
            value = getattr(request, key)
            if kind == fields.RAW:
                if value:
                    yield key, value
                continue
            if kind == fields.META and value:
                if any(str(k).startswith(PRIVATE_META_PREFIX) for k in value):
                    value = {k: v for k, v in value.items() if not str(k).startswith(PRIVATE_META_PREFIX)}
                if value:
                    value = metakeys.store(value, spider)  # keys naming code: only what the spider allows
            if at_default is not fields.KEEP and value == at_default:
                continue
            if kind != fields.PLAIN and not all(type(k) is str for k in value):
                _check_json(value, key)  # raises, naming the key JSON would silently convert
            yield key, value

    def _dump(self, out: dict[str, Any], spider: Spider | None, *, compact_: bool) -> bytes:
        """``out`` as JSON bytes; meta values of registered types through their codecs; a
        SerializationError that names the meta or cb_kwargs key JSON cannot hold."""
        meta, kwargs = ("m", "a") if compact_ else ("meta", "cb_kwargs")
        try:
            return compact.dump_json(out, compact=compact_)
        except (TypeError, ValueError, RecursionError) as exc:
            # meta values of registered types go through their codecs; else find the
            # culprit for a message that says where it is
            if not self._encode_codec_meta(out, spider, compact_=compact_):
                _check_json(out.get(meta) or {}, "meta")
                _check_json(out.get(kwargs) or {}, "cb_kwargs")
                raise SerializationError(f"request cannot be stored as JSON: {exc}") from None
            try:
                return compact.dump_json(out, compact=compact_)
            except (TypeError, ValueError, RecursionError) as exc2:
                _check_json(out.get(meta) or {}, "meta")
                _check_json(out.get(kwargs) or {}, "cb_kwargs")
                raise SerializationError(f"request cannot be stored as JSON: {exc2}") from None

    @staticmethod
    def _encode_codec_meta(out: dict[str, Any], spider: Spider | None, *, compact_: bool = False) -> bool:
        """Move the meta values holding objects of registered types to ``out["xmeta"]``
        (compact: ``out["x"]``), each through :func:`.metacodecs.encode` (which refuses,
        naming it, what it may not store); False if there is none (what JSON cannot hold
        is something else)."""
        meta_key, xmeta_key = ("m", "x") if compact_ else ("meta", "xmeta")
        meta = out.get(meta_key)
        if not meta:
            return False
        moved = {key: value for key, value in meta.items() if metacodecs.needs_codec(value)}
        if not moved:
            return False
        out[xmeta_key] = {key: metacodecs.encode(value, spider, f"meta[{key!r}]") for key, value in moved.items()}
        plain = {key: value for key, value in meta.items() if key not in moved}
        if plain:
            out[meta_key] = plain
        else:
            del out[meta_key]
        if not compact_:
            out["v"] = CODECS_FORMAT_VERSION
        return True

    @staticmethod
    def _decode_codec_meta(d: dict[str, Any], spider: Spider | None) -> dict[str, Any]:
        """``meta`` and the values of ``xmeta``, each built back by its codec (checked there)."""
        meta, xmeta = _check_xmeta(d)
        out = dict(meta)
        for key, value in xmeta.items():
            out[key] = metacodecs.decode(value, spider, f"meta[{key!r}]")
        return out

    @staticmethod
    def _method_name(request: Request, key: str, spider: Spider | None) -> Any:
        """The spider-method name of ``request.callback``/``errback`` (None stays None)."""
        func = getattr(request, key)
        if func is None:
            return None
        inner = getattr(func, "__func__", None)
        name = None
        if inner is not None and spider is not None and getattr(func, "__self__", None) is spider:
            name = inner.__name__
            if getattr(getattr(spider, name, None), "__func__", None) is not inner:
                name = None
        if name is None:
            # renamed or aliased methods, partials, plain functions: Scrapy's full lookup
            try:
                name = request.to_dict(spider=spider)[key]
            except ValueError as exc:
                raise SerializationError(f"callback/errback must be a spider method ({key}): {exc}") from None
        # what no node would accept back is never stored
        reason = callbacks.refusal(spider, name, key)
        if reason is not None:
            raise SerializationError(f"{reason} (a node reading it back would refuse it)")
        return name

    def loads(self, data: bytes, spider: Spider | None) -> Request:
        """Decode a payload; anything wrong raises :class:`DecodeError`, nothing else."""
        self._check_size(data)
        try:
            d = compact.load_json(data)
        except (UnicodeDecodeError, ValueError, TypeError, RecursionError) as exc:
            if isinstance(data, bytes) and data.startswith(PICKLE_MAGIC):
                raise DecodeError(
                    "payload is a signed pickle (CRAWLPLUG_SERIALIZER='pickle'); this node reads JSON"
                ) from None
            raise DecodeError(f"payload is not JSON: {exc}") from None
        if compact.is_compact(d):
            return self._build(compact.expand(d), spider, compact.raw_bytes)
        return self._build(d, spider)

    def loads_unbound(self, data: bytes) -> Request:
        """The request a payload describes without its callbacks and its codec-stored meta:
        enough to fingerprint it (method, URL, body, headers), with no spider to resolve
        names on (``crawlplug forget --from-dead``). DecodeError as :meth:`loads`."""
        self._check_size(data)
        try:
            d = compact.load_json(data)
        except (UnicodeDecodeError, ValueError, TypeError, RecursionError) as exc:
            raise DecodeError(f"payload is not JSON: {exc}") from None
        to_bytes = _unb64
        if compact.is_compact(d):
            d, to_bytes = compact.expand(d), compact.raw_bytes
        if isinstance(d, dict):
            d = {k: v for k, v in d.items() if k not in ("callback", "errback", "xmeta")}
            if d.get("v") == CODECS_FORMAT_VERSION:
                d["v"] = FORMAT_VERSION
            if isinstance(d.get("meta"), dict):  # keys naming code: nothing to fingerprint, no spider to allow them
                d["meta"] = metakeys.strip(d["meta"])
        return self._build(d, None, to_bytes)

    def _build(self, d: Any, spider: Spider | None, to_bytes: Callable[[Any, str], bytes] = _unb64) -> Request:
        """The request a decoded payload describes, every field checked; ``to_bytes``
        reads body and header bytes as the format holds them (JSON: base64 text)."""
        if not isinstance(d, dict):
            raise DecodeError("payload is not a JSON object")
        if type(d.get("v")) is not int or d.get("v") not in (FORMAT_VERSION, CODECS_FORMAT_VERSION):
            raise DecodeError(f"unknown payload version {d.get('v')!r}")
        if d["v"] == CODECS_FORMAT_VERSION and "xmeta" not in d:
            raise DecodeError(f"payload of version {CODECS_FORMAT_VERSION} has no xmeta, which that version is for")
        url = d.get("url")
        if not isinstance(url, str) or not url:
            raise DecodeError(f"payload has no valid url: {url!r:.200}")
        scheme = URL_SCHEME.match(url)
        if scheme is None:
            raise DecodeError(f"URL has no scheme (http:// or https://): {url[:200]!r}")
        if scheme.group(1).lower() not in URL_SCHEMES:
            raise DecodeError(f"URL scheme is not crawlable: {url[:200]!r}")
        cls_path = d.get("_class", "scrapy.http.request.Request")
        if not isinstance(cls_path, str) or cls_path not in self.allowed_classes:
            raise DecodeError(f"request class {cls_path!r} is not in the allow-list")
        request_cls = self._classes.get(cls_path)
        if request_cls is None:
            try:
                request_cls = self._classes[cls_path] = load_object(cls_path)
            except (ImportError, NameError, AttributeError, ValueError) as exc:
                raise DecodeError(f"request class {cls_path!r} cannot be loaded: {exc}") from None
        plain = fields.plain_kwargs(request_cls)  # a payload holds a few of them: read those
        kwargs: dict[str, Any] = {key: value for key, value in d.items() if key in plain}
        if "body" in d:
            kwargs["body"] = to_bytes(d["body"], "body")
        if "headers" in d:
            headers = d["headers"]
            if not isinstance(headers, list):
                raise DecodeError("headers is not a list")
            try:
                kwargs["headers"] = [
                    (to_bytes(name, "header name"), to_bytes(v, "header value"))
                    for name, values in headers
                    for v in values
                ]
            except (TypeError, ValueError) as exc:
                raise DecodeError(f"malformed headers: {exc}") from None
        for key in ("callback", "errback"):
            name = d.get(key)
            if name is None:
                continue
            kwargs[key] = callbacks.resolve(spider, name, key)
        if "xmeta" in d:
            kwargs["meta"] = self._decode_codec_meta(d, spider)
        if isinstance(kwargs.get("meta"), dict):
            kwargs["meta"] = metakeys.read(kwargs["meta"], spider)  # keys naming code: only what the spider allows
        try:
            return request_cls(**kwargs)
        except (TypeError, ValueError, AttributeError, LookupError) as exc:
            # LookupError: an encoding name Python does not know
            raise DecodeError(f"payload does not make a valid request: {exc}") from None
