"""Request <-> bytes.

The default (and only built-in) format is JSON built on ``Request.to_dict``:
body and header bytes base64-encoded, callbacks stored by name and resolved
against the spider when decoding, the request class checked against an
allow-list. Nothing read from Redis is ever imported or executed beyond
looking up a method *name* on the running spider.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Iterable

from scrapy import Request, Spider
from scrapy.utils.misc import load_object

from .errors import ConfigError, DecodeError, SerializationError

FORMAT_VERSION = 1

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

# Request.__init__ defaults: left out of payloads to keep them small.
_DEFAULTS: dict[str, Any] = {
    "callback": None,
    "errback": None,
    "method": "GET",
    "headers": {},
    "body": b"",
    "cookies": {},
    "meta": {},
    "encoding": "utf-8",
    "priority": 0,
    "dont_filter": False,
    "flags": [],
    "cb_kwargs": {},
}


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


class JsonSerializer:
    """JSON payloads; safe to read from a Redis that others can write to."""

    name = "json"

    def __init__(self, extra_classes: Iterable[str] = ()) -> None:
        self.allowed_classes = frozenset(DEFAULT_REQUEST_CLASSES) | frozenset(extra_classes)
        self._classes: dict[str, type[Request]] = {}  # allowed class path -> class, once loaded

    def dumps(self, request: Request, spider: Spider | None) -> bytes:
        """Encode ``request``; :class:`SerializationError` names what cannot be stored."""
        url = request.url
        scheme = url.split(":", 1)[0].lower()
        if scheme not in URL_SCHEMES:
            raise SerializationError(f"URL scheme {scheme!r} is not crawlable: {url}")
        cls = None
        if type(request) is not Request:
            cls = f"{type(request).__module__}.{type(request).__name__}"
            if cls not in self.allowed_classes:
                raise SerializationError(
                    f"request class {cls} is not allowed; add it to CRAWLPLUG_REQUEST_CLASSES"
                )
        out: dict[str, Any] = {"v": FORMAT_VERSION}
        if cls is not None:
            out["_class"] = cls
        # Reads the attributes directly (what Request.to_dict does, minus the copies
        # and the inspect.getmembers scan per callback): this runs for every request.
        for key in type(request).attributes:
            if key in ("callback", "errback"):
                value = self._method_name(request, key, spider)
            elif key == "headers":
                headers = request.headers
                if headers:
                    out["headers"] = [
                        [_b64(bytes(name)), [_b64(bytes(v)) for v in values]]
                        for name, values in headers.items()
                    ]
                continue
            elif key == "body":
                if request.body:
                    out["body"] = _b64(request.body)
                continue
            elif key == "meta":
                value = request.meta
                if value and any(str(k).startswith(PRIVATE_META_PREFIX) for k in value):
                    value = {k: v for k, v in value.items() if not str(k).startswith(PRIVATE_META_PREFIX)}
            else:
                value = getattr(request, key)
            if key in _DEFAULTS and value == _DEFAULTS[key]:
                continue
            if key in ("meta", "cb_kwargs") and not all(type(k) is str for k in value):
                _check_json(value, key)  # raises, naming the key JSON would silently convert
            out[key] = value
        try:
            return json.dumps(out, separators=(",", ":"), allow_nan=False).encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:
            # find the culprit for a message that says where it is
            _check_json(out.get("meta") or {}, "meta")
            _check_json(out.get("cb_kwargs") or {}, "cb_kwargs")
            raise SerializationError(f"request cannot be stored as JSON: {exc}") from None

    @staticmethod
    def _method_name(request: Request, key: str, spider: Spider | None) -> Any:
        """The spider-method name of ``request.callback``/``errback`` (None stays None)."""
        func = getattr(request, key)
        if func is None:
            return None
        inner = getattr(func, "__func__", None)
        if inner is not None and spider is not None and getattr(func, "__self__", None) is spider:
            name = inner.__name__
            if getattr(getattr(spider, name, None), "__func__", None) is inner:
                return name
        # renamed or aliased methods, partials, plain functions: Scrapy's full lookup
        try:
            return request.to_dict(spider=spider)[key]
        except ValueError as exc:
            raise SerializationError(f"callback/errback must be a spider method ({key}): {exc}") from None

    def loads(self, data: bytes, spider: Spider | None) -> Request:
        """Decode a payload; anything wrong raises :class:`DecodeError`, nothing else."""
        try:
            d = json.loads(data)
        except (UnicodeDecodeError, ValueError, TypeError, RecursionError) as exc:
            raise DecodeError(f"payload is not JSON: {exc}") from None
        if not isinstance(d, dict):
            raise DecodeError("payload is not a JSON object")
        if type(d.get("v")) is not int or d.get("v") != FORMAT_VERSION:
            raise DecodeError(f"unknown payload version {d.get('v')!r}")
        url = d.get("url")
        if not isinstance(url, str) or ":" not in url:
            raise DecodeError(f"payload has no valid url: {url!r}")
        if url.split(":", 1)[0].lower() not in URL_SCHEMES:
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
        kwargs: dict[str, Any] = {}
        for key in request_cls.attributes:
            if key in d and key not in ("callback", "errback", "headers", "body"):
                kwargs[key] = d[key]
        if "body" in d:
            kwargs["body"] = _unb64(d["body"], "body")
        if "headers" in d:
            headers = d["headers"]
            if not isinstance(headers, list):
                raise DecodeError("headers is not a list")
            try:
                kwargs["headers"] = [
                    (_unb64(name, "header name"), _unb64(v, "header value"))
                    for name, values in headers
                    for v in values
                ]
            except (TypeError, ValueError) as exc:
                raise DecodeError(f"malformed headers: {exc}") from None
        for key in ("callback", "errback"):
            name = d.get(key)
            if name is None:
                continue
            kwargs[key] = _spider_method(spider, name, key)
        try:
            return request_cls(**kwargs)
        except (TypeError, ValueError, AttributeError, LookupError) as exc:
            # LookupError: an encoding name Python does not know
            raise DecodeError(f"payload does not make a valid request: {exc}") from None


def _spider_method(spider: Spider | None, name: Any, what: str) -> Any:
    if not isinstance(name, str) or not name.isidentifier() or name.startswith("__"):
        raise DecodeError(f"{what} {name!r} is not a method name")
    if spider is None:
        raise DecodeError(f"{what} {name!r} needs a spider to resolve")
    if name != "parse" and hasattr(Spider, name):
        # Scrapy's own Spider machinery (start, start_requests, closed, log, ...),
        # even where the spider overrides it, is not a callback
        raise DecodeError(f"{what} {name!r} is a method of scrapy.Spider itself, not a callback")
    method = getattr(spider, name, None)
    if method is None or not callable(method) or getattr(method, "__self__", None) is not spider:
        raise DecodeError(f"spider {spider.name!r} has no method {name!r} ({what})")
    return method


def get_serializer(name: str, extra_classes: Iterable[str] = ()) -> JsonSerializer:
    """The serializer named by CRAWLPLUG_SERIALIZER (a name or a class path)."""
    if name == "json":
        return JsonSerializer(extra_classes)
    if name == "pickle":
        raise ConfigError(
            "CRAWLPLUG_SERIALIZER='pickle' is not available: pickle read from a shared Redis "
            "can run arbitrary code; use the default 'json'"
        )
    try:
        cls = load_object(name)
    except (ImportError, NameError, AttributeError, ValueError) as exc:
        raise ConfigError(f"CRAWLPLUG_SERIALIZER={name!r} cannot be loaded: {exc}") from None
    return cls(extra_classes)
