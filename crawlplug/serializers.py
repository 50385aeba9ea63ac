"""Request <-> bytes.

The default format is JSON built on ``Request.to_dict``: body and header
bytes base64-encoded, callbacks stored by name and resolved against the
spider when decoding (only names :mod:`crawlplug.callbacks` accepts as
callbacks), the request class checked against an allow-list.
Nothing read from Redis is ever imported or executed beyond looking up a
method *name* on the running spider.

``CRAWLPLUG_SERIALIZER = "pickle"`` (opt-in, :class:`PickleSerializer`) pickles
the same fields (callbacks still by name, the class still by allow-listed
path) for ``meta`` values JSON cannot hold (bytes, tuples, sets). It needs
``CRAWLPLUG_SECRET``: every payload carries an HMAC-SHA256 signature, a payload
whose signature does not verify is never unpickled, and one that does is read
through :mod:`crawlplug.safepickle`'s restricted unpickler all the same.

Both refuse a payload larger than ``CRAWLPLUG_MAX_PAYLOAD_BYTES``: on encode
(:class:`SerializationError`: a node never stores one) and on decode
(:class:`DecodeError`: the scheduler moves it to the dead letters).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import pickle
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from scrapy import Request, Spider
from scrapy.utils.misc import load_object

from . import callbacks
from .config import setting
from .defaults import default
from .errors import ConfigError, DecodeError, SerializationError

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

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
#: What a URL's scheme looks like (RFC 3986): "127.0.0.1:8000/x" has none, "ftp://..." one.
URL_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")

#: Largest payload stored or read unless CRAWLPLUG_MAX_PAYLOAD_BYTES says otherwise.
DEFAULT_MAX_PAYLOAD_BYTES: int = default("CRAWLPLUG_MAX_PAYLOAD_BYTES")

#: Environment variable read for the pickle key when the CRAWLPLUG_SECRET setting is unset.
SECRET_ENV = "CRAWLPLUG_SECRET"

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
#: Defaults a Request subclass may change (XmlRpcRequest: POST and dont_filter=True;
#: JsonRequest with a body: POST): always stored for a subclass, or a GET or a
#: filtered request of that class would come back as a POST or an unfiltered one.
_SUBCLASS_DEFAULTS = frozenset({"method", "dont_filter"})


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

    def __init__(
        self, extra_classes: Iterable[str] = (), *, max_payload_bytes: Any = DEFAULT_MAX_PAYLOAD_BYTES
    ) -> None:
        self.allowed_classes = frozenset(DEFAULT_REQUEST_CLASSES) | frozenset(extra_classes)
        self._classes: dict[str, type[Request]] = {}  # allowed class path -> class, once loaded
        #: Largest payload stored or read, in bytes; 0: no limit.
        self.max_payload_bytes = payload_limit(max_payload_bytes)

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
                raise SerializationError(
                    f"request class {cls} is not allowed; add it to CRAWLPLUG_REQUEST_CLASSES"
                )
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
            if key in _DEFAULTS and value == _DEFAULTS[key] and (cls is None or key not in _SUBCLASS_DEFAULTS):
                continue
            if key in ("meta", "cb_kwargs") and not all(type(k) is str for k in value):
                _check_json(value, key)  # raises, naming the key JSON would silently convert
            out[key] = value
        try:
            payload = json.dumps(out, separators=(",", ":"), allow_nan=False).encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:
            # find the culprit for a message that says where it is
            _check_json(out.get("meta") or {}, "meta")
            _check_json(out.get("cb_kwargs") or {}, "cb_kwargs")
            raise SerializationError(f"request cannot be stored as JSON: {exc}") from None
        return self._sized(payload, request)

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
            d = json.loads(data)
        except (UnicodeDecodeError, ValueError, TypeError, RecursionError) as exc:
            if isinstance(data, bytes) and data.startswith(PICKLE_MAGIC):
                raise DecodeError(
                    "payload is a signed pickle (CRAWLPLUG_SERIALIZER='pickle'); this node reads JSON"
                ) from None
            raise DecodeError(f"payload is not JSON: {exc}") from None
        return self._build(d, spider)

    def _build(
        self, d: Any, spider: Spider | None, to_bytes: Callable[[Any, str], bytes] = _unb64
    ) -> Request:
        """The request a decoded payload describes, every field checked; ``to_bytes``
        reads body and header bytes as the format holds them (JSON: base64 text)."""
        if not isinstance(d, dict):
            raise DecodeError("payload is not a JSON object")
        if type(d.get("v")) is not int or d.get("v") != FORMAT_VERSION:
            raise DecodeError(f"unknown payload version {d.get('v')!r}")
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
        kwargs: dict[str, Any] = {}
        for key in request_cls.attributes:
            if key in d and key not in ("callback", "errback", "headers", "body"):
                kwargs[key] = d[key]
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
        try:
            return request_cls(**kwargs)
        except (TypeError, ValueError, AttributeError, LookupError) as exc:
            # LookupError: an encoding name Python does not know
            raise DecodeError(f"payload does not make a valid request: {exc}") from None


# -- pickle, opt-in and signed ---------------------------------------------------------------

#: First bytes of a pickle payload: format and version.
PICKLE_MAGIC = b"cpk1"
#: Fixed, so that payloads do not change with the Python version of a node.
PICKLE_PROTOCOL = 5
_MAC_BYTES = hashlib.sha256().digest_size
#: Shortest CRAWLPLUG_SECRET accepted: payloads and their signatures sit in Redis for
#: anyone who can read it to try keys against.
MIN_SECRET_BYTES = 16


def _secret_key(secret: Any) -> bytes:
    """The HMAC key from CRAWLPLUG_SECRET. Messages never show the value."""
    if secret is None or secret == "" or secret == b"":
        raise ConfigError(
            "CRAWLPLUG_SERIALIZER='pickle' needs CRAWLPLUG_SECRET: set the setting or the CRAWLPLUG_SECRET "
            "environment variable to the same random key on every node (e.g. the output of "
            "`python -c 'import secrets; print(secrets.token_hex(32))'`); unsigned pickle read from a shared "
            "Redis can run arbitrary code. Or use the default CRAWLPLUG_SERIALIZER='json'"
        )
    if isinstance(secret, str):
        key = secret.encode("utf-8", "surrogatepass")
    elif isinstance(secret, (bytes, bytearray)):
        key = bytes(secret)
    else:
        raise ConfigError(f"CRAWLPLUG_SECRET must be text, got {type(secret).__name__}")
    if len(key) < MIN_SECRET_BYTES:
        raise ConfigError(
            f"CRAWLPLUG_SECRET is too short ({len(key)} bytes, at least {MIN_SECRET_BYTES}): "
            "use a random key, e.g. `python -c 'import secrets; print(secrets.token_hex(32))'`"
        )
    return key


class PickleSerializer(JsonSerializer):
    """Signed pickle payloads (``CRAWLPLUG_SERIALIZER = "pickle"``): opt-in.

    A payload is ``PICKLE_MAGIC + HMAC-SHA256(secret, PICKLE_MAGIC + body) + body``
    where body pickles the fields of :meth:`Request.to_dict` (callbacks by name,
    the class by path, ``meta`` minus crawlplug's private keys). ``loads``
    unpickles nothing whose signature does not verify (compared with
    :func:`hmac.compare_digest`), and unpickles what does through
    :func:`crawlplug.safepickle.restricted_loads`, which builds containers,
    strings, bytes and numbers only: a key that leaked still runs no code.
    ``dumps`` refuses what that unpickler could not read back (a ``datetime``
    in meta, say), naming the key. JSON payloads (crawlplug's tools write
    them) are read too; they are never unpickled.
    """

    name = "pickle"

    def __init__(
        self,
        extra_classes: Iterable[str] = (),
        *,
        secret: str | bytes | None,
        max_payload_bytes: Any = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        super().__init__(extra_classes, max_payload_bytes=max_payload_bytes)
        self._key = _secret_key(secret)
        from . import safepickle  # here, not at the top: safepickle imports this module

        self._unpickle: Callable[[bytes], Any] = safepickle.restricted_loads
        self._refused: type[Exception] = safepickle.RefusedGlobal

    def __repr__(self) -> str:
        return f"<{type(self).__name__} HMAC-SHA256, key not shown>"

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self._key, PICKLE_MAGIC + body, hashlib.sha256).digest()

    def dumps(self, request: Request, spider: Spider | None) -> bytes:
        cls = self._check_request(request)
        fields: dict[str, Any] = {"v": FORMAT_VERSION}
        if cls is not None:
            fields["_class"] = cls
        for key in type(request).attributes:
            if key in ("callback", "errback"):
                value = self._method_name(request, key, spider)
            elif key == "headers":
                value = [[bytes(name), [bytes(v) for v in values]] for name, values in request.headers.items()]
                if not value:
                    continue
            elif key == "meta":
                value = {k: v for k, v in request.meta.items() if not str(k).startswith(PRIVATE_META_PREFIX)}
            else:
                value = getattr(request, key)
            if (key in _DEFAULTS and type(value) is type(_DEFAULTS[key]) and value == _DEFAULTS[key]
                    and (cls is None or key not in _SUBCLASS_DEFAULTS)):  # fmt: skip
                continue
            fields[key] = value
        try:
            body = pickle.dumps(fields, protocol=PICKLE_PROTOCOL)
            self._unpickle(body)  # what no node could read back is never stored
        except Exception as exc:  # noqa: BLE001 (pickle raises whatever a __reduce__ raises)
            raise SerializationError(self._culprit(fields) or f"request cannot be pickled: {exc}") from None
        return self._sized(PICKLE_MAGIC + self._mac(body) + body, request)

    def _culprit(self, fields: dict[str, Any]) -> str | None:
        """Which meta/cb_kwargs/cookies value the restricted unpickler would refuse, said plainly."""
        for what in ("meta", "cb_kwargs", "cookies"):
            mapping = fields.get(what)
            items = mapping.items() if isinstance(mapping, dict) else enumerate(mapping or ())
            for key, value in items:
                try:
                    self._unpickle(pickle.dumps(value, protocol=PICKLE_PROTOCOL))
                except Exception as exc:  # noqa: BLE001
                    return (
                        f"{what}[{key!r}] cannot be stored with CRAWLPLUG_SERIALIZER='pickle' "
                        f"({type(value).__name__}: {exc}); payloads hold only str, bytes, numbers, "
                        "bool, None, list, tuple, dict, set and frozenset"
                    )
        return None

    def loads(self, data: bytes, spider: Spider | None) -> Request:
        """Decode a payload; anything wrong raises :class:`DecodeError`, nothing else."""
        self._check_size(data)
        if isinstance(data, str) or data[:64].lstrip()[:1] == b"{":
            return super().loads(data, spider)  # JSON: safe to read, never unpickled
        data = bytes(data)
        if not data.startswith(PICKLE_MAGIC):
            raise DecodeError("payload is neither JSON nor a signed crawlplug pickle; not unpickled")
        head = len(PICKLE_MAGIC) + _MAC_BYTES
        if len(data) <= head:
            raise DecodeError("signed pickle payload is truncated; not unpickled")
        mac, body = data[len(PICKLE_MAGIC) : head], data[head:]
        if not hmac.compare_digest(mac, self._mac(body)):
            raise DecodeError(
                "pickle payload signature does not match CRAWLPLUG_SECRET (forged, altered, or signed "
                "with another key); not unpickled"
            )
        try:
            d = self._unpickle(body)
        except self._refused as exc:
            raise DecodeError(f"signed pickle refused by the restricted unpickler: {exc}") from None
        except Exception as exc:  # noqa: BLE001 (signed but corrupt: whatever pickle raises)
            raise DecodeError(f"signed pickle cannot be read: {type(exc).__name__}: {exc}") from None
        try:
            return self._build(d, spider, _pickled_bytes)
        except DecodeError:
            raise
        except Exception as exc:  # noqa: BLE001 (values of any type the unpickler builds)
            raise DecodeError(f"payload does not make a valid request: {type(exc).__name__}: {exc}") from None


def _pickled_bytes(value: Any, what: str) -> bytes:
    if type(value) is not bytes:
        raise DecodeError(f"{what} is not bytes")
    return value


# -- choosing one ----------------------------------------------------------------------------


def payload_limit(value: Any) -> int:
    """CRAWLPLUG_MAX_PAYLOAD_BYTES as an int (0: no limit); :class:`ConfigError` if it is not one."""
    if value is None:
        return 0
    try:
        limit = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"CRAWLPLUG_MAX_PAYLOAD_BYTES must be a number of bytes, got {value!r}") from None
    if limit < 0 or isinstance(value, bool):
        raise ConfigError(f"CRAWLPLUG_MAX_PAYLOAD_BYTES must be a number of bytes (0: no limit), got {value!r}")
    return limit


def get_serializer(
    name: str,
    extra_classes: Iterable[str] = (),
    *,
    secret: str | bytes | None = None,
    max_payload_bytes: Any = DEFAULT_MAX_PAYLOAD_BYTES,
) -> JsonSerializer:
    """The serializer named by CRAWLPLUG_SERIALIZER ("json", "pickle" or a class path).

    ``secret`` is the pickle key (None: the CRAWLPLUG_SECRET environment variable).
    """
    if name == "json":
        return JsonSerializer(extra_classes, max_payload_bytes=max_payload_bytes)
    if secret is None:
        secret = os.environ.get(SECRET_ENV)
    if name == "pickle":
        return PickleSerializer(extra_classes, secret=secret, max_payload_bytes=max_payload_bytes)
    try:
        cls = load_object(name)
    except (ImportError, NameError, AttributeError, ValueError) as exc:
        raise ConfigError(f"CRAWLPLUG_SERIALIZER={name!r} cannot be loaded: {exc}") from None
    if isinstance(cls, type) and issubclass(cls, PickleSerializer):
        return cls(extra_classes, secret=secret, max_payload_bytes=max_payload_bytes)
    if isinstance(cls, type) and issubclass(cls, JsonSerializer):
        return cls(extra_classes, max_payload_bytes=max_payload_bytes)
    return cls(extra_classes)


def serializer_from_settings(settings: BaseSettings) -> JsonSerializer:
    """The serializer a node's settings ask for: CRAWLPLUG_SERIALIZER, CRAWLPLUG_REQUEST_CLASSES,
    CRAWLPLUG_SECRET (else the environment variable), CRAWLPLUG_MAX_PAYLOAD_BYTES."""
    return get_serializer(
        setting(settings, "CRAWLPLUG_SERIALIZER"),
        setting(settings, "CRAWLPLUG_REQUEST_CLASSES", "getlist"),
        secret=settings.get("CRAWLPLUG_SECRET"),
        max_payload_bytes=setting(settings, "CRAWLPLUG_MAX_PAYLOAD_BYTES"),
    )
