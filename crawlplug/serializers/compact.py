"""The compact JSON payload (format version 3): what a node writes by default.

A queued request sits in Redis as one field of the ``requests`` hash until it is
acknowledged, so its payload is most of what a crawl's queue costs in memory. The
compact format is the JSON format with short keys, every field at its default left
out, bytes stored as text where they are text, and the ``Referer`` header (which
Scrapy's RefererMiddleware puts on nearly every request a spider yields) stored
relative to the request's own URL when it shares its origin::

    {"v":3,"u":"https://shop.example/item/7/","c":"parse_item","m":{"depth":2},"r":"/category/4/"}

======  ==============================================================================
key     holds
======  ==============================================================================
``v``   3, the format version (versions 1 and 2 have long keys: ``{"v":1,"url":...}``)
``u``   the URL, once
``C``   the request class's path, for a subclass only (allow-listed when read)
``c``   callback, ``e`` errback: spider method names, resolved against the spider
``M``   method (left out when it is ``GET``; always there for a subclass)
``h``   headers: ``[[name, value, value...], ...]`` in their order, each a *bytes value*
``r``   the last header, when it is a single ``Referer`` value: the part after the
        request URL's origin (``/category/4/``, starting with ``/``), or the whole value
        when it has another origin (never starting with ``/``)
``b``   body, a *bytes value*
``k``   cookies, ``m`` meta (JSON values only), ``a`` cb_kwargs, ``f`` flags
``n``   encoding, ``p`` priority, ``d`` dont_filter
``x``   meta values stored by a registered codec (:mod:`.metacodecs`), as version 2's xmeta
``o``   attributes of a Request subclass beyond Request's own (JsonRequest's
        ``dumps_kwargs``), by their own names
======  ==============================================================================

A *bytes value* is a JSON string when the bytes are UTF-8 text without control
characters (tab, CR and LF allowed), else ``{"b64": "<base64>"}``. Reading, a key the
format does not have is a DecodeError (a field this node does not understand is never
dropped silently); a new field or meaning gets a new version number, and a node reads
every version it knows (:func:`expand` turns version 3 into the long-key shape that
versions 1 and 2 have, which :class:`~.jsoncodec.JsonSerializer` checks field by field).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable
from typing import Any

from scrapy.http import Headers

from ..errors import ConfigError, DecodeError

#: The version of a compact payload.
COMPACT_VERSION = 3
#: The long-key versions: 1, and 2 (1 with meta stored by codecs, ``xmeta``).
LONG_VERSIONS = (1, 2)
#: CRAWLPLUG_PAYLOAD_FORMAT's values: the versions a node may write (2 is 1 with xmeta).
PAYLOAD_FORMATS = (LONG_VERSIONS[0], COMPACT_VERSION)

#: Request attribute -> its key in a compact payload.
SHORT: dict[str, str] = {
    "url": "u",
    "callback": "c",
    "errback": "e",
    "method": "M",
    "headers": "h",
    "body": "b",
    "cookies": "k",
    "meta": "m",
    "encoding": "n",
    "priority": "p",
    "dont_filter": "d",
    "flags": "f",
    "cb_kwargs": "a",
}
LONG: dict[str, str] = {short: name for name, short in SHORT.items()}
CLASS, XMETA, OTHER, REFERER = "C", "x", "o", "r"
#: Names an ``o`` entry may not take: the fields the format has a key for.
_RESERVED = frozenset(SHORT) | {"_class", "xmeta", "v"}

# Control characters JSON would escape as \uXXXX (6 bytes each): such bytes go as base64.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def bytes_out(data: bytes) -> str | dict[str, str]:
    """``data`` as a bytes value: its text, or ``{"b64": ...}``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(data).decode("ascii")}
    if _CONTROL.search(text):
        return {"b64": base64.b64encode(data).decode("ascii")}
    return text


def bytes_in(value: Any, what: str) -> bytes:
    """The bytes a bytes value holds; DecodeError naming ``what`` for anything else."""
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate escaped in the JSON: no bytes were that
            raise DecodeError(f"{what} is not valid text") from None
    if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
        try:
            return base64.b64decode(value["b64"].encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise DecodeError(f"{what} is not valid base64") from None
    raise DecodeError(f'{what} is neither text nor {{"b64": ...}}')


def origin_of(url: str) -> str | None:
    """The part of ``url`` before its path (``https://host:8080``); None without ``://``."""
    start = url.find("://")
    if start < 0:
        return None
    end = url.find("/", start + 3)
    return url if end < 0 else url[:end]


def headers_out(headers: Any, url: str) -> tuple[list[list[Any]], str | None]:
    """``request.headers`` as the ``h`` rows and the ``r`` value (None: no ``r``)."""
    if type(headers) is Headers:
        # Scrapy's Headers is a dict of normalized names to lists of bytes values: read it as
        # one (its items() normalizes each name again and looks it up, for every request stored)
        items = [(bytes(name), [bytes(v) for v in values]) for name, values in dict.items(headers)]
    else:
        items = [(bytes(name), [bytes(v) for v in values]) for name, values in headers.items()]
    referer = None
    if items and items[-1][0] == b"Referer" and len(items[-1][1]) == 1:
        referer = _referer_out(items[-1][1][0], url)
        if referer is not None:
            items.pop()
    return [[bytes_out(name), *(bytes_out(v) for v in values)] for name, values in items], referer


def _referer_out(value: bytes, url: str) -> str | None:
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if _CONTROL.search(text):
        return None
    origin = origin_of(url)
    if origin is not None and text.startswith(origin + "/"):
        return text[len(origin) :]
    return None if text.startswith("/") else text  # a value starting with "/" stays in h


def _headers_in(rows: Any, referer: Any, url: Any) -> list[list[Any]]:
    """``h`` and ``r`` as version 1's header rows (``[[name, [values]], ...]``), in bytes."""
    out: list[list[Any]] = []
    if rows is not None:
        if not isinstance(rows, list) or not all(isinstance(row, list) and row for row in rows):
            raise DecodeError("headers (h) is not a list of [name, value, ...] lists")
        out = [[bytes_in(row[0], "header name"), [bytes_in(v, "header value") for v in row[1:]]] for row in rows]
    if referer is not None:
        if not isinstance(referer, str):
            raise DecodeError("the Referer (r) is not text")
        if referer.startswith("/"):
            origin = origin_of(url) if isinstance(url, str) else None
            if origin is None:
                raise DecodeError(f"a relative Referer (r) needs a URL with an origin, not {url!r:.200}")
            referer = origin + referer
        out.append([b"Referer", [bytes_in(referer, "the Referer (r)")]])
    return out


def expand(d: dict[str, Any]) -> dict[str, Any]:
    """A compact payload in the long-key shape of versions 1 and 2, its body and header
    values already bytes (read them with :func:`raw_bytes`); unknown keys are a DecodeError."""
    out: dict[str, Any] = {"v": LONG_VERSIONS[0]}
    for key, value in d.items():
        name = LONG.get(key)
        if key in ("v", REFERER) or name == "headers":
            continue
        if name == "body":
            out["body"] = bytes_in(value, "body")
        elif name is not None:
            out[name] = value
        elif key == CLASS:
            out["_class"] = value
        elif key == XMETA:
            out["xmeta"], out["v"] = value, LONG_VERSIONS[1]
        elif key == OTHER:
            if not isinstance(value, dict) or any(k in _RESERVED or not isinstance(k, str) for k in value):
                raise DecodeError("the other attributes (o) are not an object of a subclass's own attributes")
            out.update(value)
        else:
            raise DecodeError(f"a version {COMPACT_VERSION} payload has no field {key!r:.40}")
    if "h" in d or REFERER in d:
        out["headers"] = _headers_in(d.get("h"), d.get(REFERER), d.get("u"))
    return out


def raw_bytes(value: Any, what: str) -> bytes:
    """Body and header values of an expanded payload: bytes already."""
    if type(value) is not bytes:
        raise DecodeError(f"{what} is not bytes")
    return value


def is_compact(d: Any) -> bool:
    return isinstance(d, dict) and type(d.get("v")) is int and d["v"] == COMPACT_VERSION


#: What :func:`describe` tells of a payload.
SUMMARY_FIELDS = ("url", "method", "priority", "callback", "errback", "dont_filter")


def describe(payload: bytes | str) -> dict[str, Any] | None:
    """The url, method, priority, callback, errback and dont_filter a JSON payload of any
    version names (those it holds: defaults are left out), by their long names, read
    without a spider and without building the request (what ``crawlplug peek`` and the
    dead letters show); None when it is not a crawlplug JSON request with a URL."""
    try:
        d = json.loads(payload)
    except (UnicodeDecodeError, ValueError, TypeError, RecursionError):
        return None
    if not isinstance(d, dict):
        return None
    if is_compact(d):
        out = {name: d[SHORT[name]] for name in SUMMARY_FIELDS if SHORT[name] in d}
    else:
        out = {name: d[name] for name in SUMMARY_FIELDS if name in d}
    return out if isinstance(out.get("url"), str) else None


def fields_of(url: str, cls: str | None, stored: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """A compact payload's fields: ``stored`` holds (attribute, value) of each attribute
    not at its default (the headers object and body bytes as they are), url first."""
    out: dict[str, Any] = {"v": COMPACT_VERSION, "u": url}
    if cls is not None:
        out[CLASS] = cls
    for key, value in stored:
        if key == "url":
            continue
        if key == "headers":
            rows, referer = headers_out(value, url)
            if rows:
                out["h"] = rows
            if referer is not None:
                out[REFERER] = referer
        elif key == "body":
            out["b"] = bytes_out(value)
        elif key in SHORT:
            out[SHORT[key]] = value
        else:  # an attribute of a Request subclass (JsonRequest's dumps_kwargs)
            out.setdefault(OTHER, {})[key] = value
    return out


#: One encoder per output (json.dumps with options builds one per call): UTF-8 as it is, and escaped.
_ENCODER_UTF8 = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False)
_ENCODER_ASCII = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def dump_json(out: dict[str, Any], *, compact: bool) -> bytes:
    """``out`` as JSON; compact: non-ASCII text as UTF-8 unless a string holds a lone surrogate."""
    if compact:
        try:  # UTF-8 as it is: non-ASCII text costs 2-3 bytes a character, not 6
            return _ENCODER_UTF8.encode(out).encode("utf-8")
        except UnicodeEncodeError:
            pass  # a lone surrogate in a string: escaped, as JSON can hold it
    return _ENCODER_ASCII.encode(out).encode("utf-8")


def _no_constant(name: str) -> Any:
    """NaN and Infinity, which Python's json reads: no node writes them (allow_nan=False), and a
    request read with one could not be stored again (a retry, a redirect)."""
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    """A JSON number as a float; 1e999 (infinite) is refused like Infinity."""
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"the number {text[:20]} is out of range")
    return value


#: One decoder for every payload (json.loads with hooks would build one per call).
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)


def load_json(data: bytes | bytearray | str) -> Any:
    """A payload's JSON, read as json.loads reads bytes (UTF-8, -16 or -32), what :func:`dump_json`
    writes; NaN, Infinity and numbers out of a float's range are a ValueError."""
    if isinstance(data, (bytes, bytearray)):
        data = data.decode(json.detect_encoding(data), "surrogatepass")
    return _DECODER.decode(data)


def payload_version(value: Any) -> int:
    """CRAWLPLUG_PAYLOAD_FORMAT as a version a node writes; :class:`ConfigError` if it is not one."""
    if type(value) is str and value.strip().isdigit():
        value = int(value)
    if type(value) is not int or value not in PAYLOAD_FORMATS:
        raise ConfigError(
            f"CRAWLPLUG_PAYLOAD_FORMAT must be {COMPACT_VERSION} (compact, the default) or "
            f"{LONG_VERSIONS[0]} (what crawlplug wrote before it), got {value!r}"
        )
    return value
