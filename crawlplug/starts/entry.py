"""Start entries: what operators push into a crawl's ``start_urls`` key.

An entry is one line of text, either a plain URL or a JSON object::

    https://example.com/
    {"url": "https://example.com/search", "method": "POST", "body": "q=1",
     "headers": {"Content-Type": "application/x-www-form-urlencoded"},
     "meta": {"job": 7}, "priority": 5, "callback": "parse_search",
     "cb_kwargs": {"page": 1}, "dont_filter": false}

scrapy-redis's JSON format is accepted as well: keys other than the ones
above are form fields (``FormRequest(formdata=...)``), as scrapy-redis does;
but not ``_class``, a queue payload's key: an entry names no request class,
and not a near miss of a known key (``callbak``, ``prority``, ``dont_filtr``):
that one is refused with the key meant, since as a form field it would only
add ``?callbak=parse_item`` to the URL while the default callback runs.
``strict=True`` (``crawlplug push --strict``) refuses every unknown key.
A start entry is crawled even if its URL was seen before (``dont_filter``
defaults to true, as for Scrapy's own start URLs), unless it says otherwise.

:func:`parse` validates an entry without a spider (``crawlplug push`` uses
it); :func:`build` turns it into requests for a spider. Both raise
:class:`~crawlplug.errors.DecodeError` with the reason, and nothing else.
Nothing in an entry is imported or executed: a callback is a method *name*
looked up on the running spider.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from scrapy import FormRequest, Request, Spider
from w3lib.url import safe_url_string

from ..errors import DecodeError
from ..serializers import URL_SCHEME, URL_SCHEMES, callbacks, metakeys

#: Longest entry accepted (a URL, or a JSON request with a small body).
MAX_ENTRY_BYTES = 1 << 20

KNOWN_KEYS = frozenset(
    {
        "url",
        "method",
        "headers",
        "body",
        "meta",
        "priority",
        "callback",
        "errback",
        "cb_kwargs",
        "dont_filter",
        "formdata",
        "encoding",
    }
)

#: How close (difflib ratio, lower-cased) an unknown key must be to a known one to be
#: refused as its misspelling: "callbak", "prority", "dont_filtr", "cb_kwarg", "header"
#: are; real form fields such as "q", "page", "query", "name", "email", "format" are not.
NEAR_MISS_CUTOFF = 0.88


def near_miss(key: str) -> str | None:
    """The known key that ``key`` probably misspells (None: it is not close to any)."""
    if key in KNOWN_KEYS:
        return None
    close = difflib.get_close_matches(key.lower().replace("-", "_"), sorted(KNOWN_KEYS), 1, NEAR_MISS_CUTOFF)
    return close[0] if close else None


def _check_keys(obj: dict[str, Any], strict: bool) -> None:
    for key in obj:
        if key in KNOWN_KEYS:
            continue
        meant = near_miss(key)
        if meant is not None:
            raise DecodeError(
                f"unknown key {key!r:.60}: did you mean {meant!r}? (an entry's other keys are form fields, "
                'scrapy-redis\'s format; put a field of that name under "formdata")'
            )
        if strict:
            raise DecodeError(
                f"unknown key {key!r:.60} (strict: only {', '.join(sorted(KNOWN_KEYS))}; form fields go "
                'under "formdata")'
            )


@dataclass
class StartEntry:
    url: str
    method: str = "GET"
    headers: dict[str, list[str]] = field(default_factory=dict)
    body: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    callback: str | None = None
    errback: str | None = None
    cb_kwargs: dict[str, Any] = field(default_factory=dict)
    dont_filter: bool = True
    formdata: dict[str, Any] | None = None
    encoding: str = "utf-8"


def _check_url(url: Any) -> str:
    if not isinstance(url, str) or not url.strip():
        raise DecodeError(f"url must be a non-empty string, got {url!r:.200}")
    url = url.strip()
    if any(c in url for c in "\r\n\t ") and not url.startswith(("http://", "https://")):
        raise DecodeError(f"not a URL: {url!r:.200}")
    if URL_SCHEME.match(url) is None:  # "example.com/x", "127.0.0.1:8000/x"
        raise DecodeError(f"URL has no scheme (http:// or https://): {url!r:.200}")
    scheme, _, rest = url.partition(":")
    if scheme.lower() not in URL_SCHEMES:
        raise DecodeError(f"URL scheme {scheme!r:.40} is not crawlable (http or https only): {url!r:.200}")
    if not rest.startswith("//") or rest[2:3] in ("", "/", "?", "#"):
        # "http:///path" has an empty host: w3lib 2.6 makes it "http://path/" (WHATWG's reading),
        # 2.5 kept it; refused here whatever the URL library installed reads into it
        raise DecodeError(f"URL has no host: {url!r:.200}")
    try:
        # w3lib's normalisation is not always idempotent ("HTTP://\U0001d400" -> "http://A" ->
        # "http://a"): take its fixed point, so the stored line parses back to the same URL
        safe = safe_url_string(url)
        for _ in range(3):
            again = safe_url_string(safe)
            if again == safe:
                break
            safe = again
        else:
            raise ValueError("its normal form does not settle")
        parts = urlsplit(safe)  # checked after normalisation: what a node will crawl
        host = parts.hostname
    except (ValueError, UnicodeError) as exc:
        raise DecodeError(f"malformed URL {url!r:.200}: {exc}") from None
    if not host or not host.strip(".") or any(c.isspace() for c in host):
        # "http:// #": a blank host would be stored as "http:// ", read back as "http://"
        raise DecodeError(f"URL has no host: {url!r:.200}")
    if any(c.isspace() for c in parts.netloc):  # U+00A0 becomes a space; the stored line would lose it
        raise DecodeError(f"URL host holds whitespace: {url!r:.200}")
    return safe


def _check_name(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.isidentifier() or value.startswith("__"):
        raise DecodeError(f"{what} must be a spider method name, got {value!r:.100}")
    return value


def _check_json_dict(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DecodeError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _no_constant(name: str) -> Any:
    raise DecodeError(f"{name} is not a number a request can store (JSON has no {name})")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (math.inf, -math.inf):
        raise DecodeError(f"number {text[:40]} is out of range (a request stores finite numbers only)")
    return value


def parse(data: bytes | str, *, strict: bool = False) -> StartEntry:
    """Validate one entry (plain URL or JSON object); :class:`DecodeError` says what is wrong.

    ``strict``: refuse every key that is not one of :data:`KNOWN_KEYS` (else, as
    scrapy-redis, they are form fields, unless they are a near miss of a known key).
    """
    if isinstance(data, bytes):
        if len(data) > MAX_ENTRY_BYTES:
            raise DecodeError(f"entry of {len(data)} bytes is larger than {MAX_ENTRY_BYTES}")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise DecodeError("entry is not UTF-8 text") from None
    elif isinstance(data, str):
        text = data
        if len(text) > MAX_ENTRY_BYTES:
            raise DecodeError(f"entry of {len(text)} characters is larger than {MAX_ENTRY_BYTES}")
    else:
        raise DecodeError(f"entry must be text, got {type(data).__name__}")
    text = text.strip()
    if not text:
        raise DecodeError("empty entry")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise DecodeError("entry is not valid Unicode text (a lone surrogate?)") from None
    if not text.startswith(("{", "[", '"')):
        if "\n" in text:
            raise DecodeError("a plain entry must be one URL on one line")
        return StartEntry(url=_check_url(text))
    try:
        obj = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as exc:
        raise DecodeError(f"not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(obj, dict):
        raise DecodeError(f"a JSON entry must be an object, not {type(obj).__name__}")
    if "_class" in obj:  # a queue payload's key; as a start entry's form field it would only mislead
        raise DecodeError(
            f"request class {obj['_class']!r:.100} is not in the allow-list of start entries: they make "
            "a Request, or a FormRequest from form fields, and name no class"
        )
    _check_keys(obj, strict)
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, RecursionError, ValueError):
        raise DecodeError("entry holds text that is not valid Unicode (a lone surrogate?) or nests too deep") from None
    entry = StartEntry(url=_check_url(obj.get("url")))
    method = obj.get("method", "GET")
    if not isinstance(method, str) or not method.isalpha() or len(method) > 20:
        raise DecodeError(f"method must be an HTTP method name, got {method!r:.40}")
    entry.method = method.upper()
    headers = _check_json_dict(obj.get("headers"), "headers")
    for name, value in headers.items():
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str) for v in values):
            raise DecodeError(f"header {name!r:.60} must be a string or a list of strings")
        entry.headers[name] = values
    body = obj.get("body")
    if body is not None and not isinstance(body, str):
        raise DecodeError("body must be a string")
    entry.body = body
    entry.meta = _check_json_dict(obj.get("meta"), "meta")
    priority = obj.get("priority", 0)
    if type(priority) is not int:
        raise DecodeError(f"priority must be an integer, got {priority!r:.40}")
    entry.priority = priority
    entry.callback = _check_name(obj.get("callback"), "callback")
    entry.errback = _check_name(obj.get("errback"), "errback")
    entry.cb_kwargs = _check_json_dict(obj.get("cb_kwargs"), "cb_kwargs")
    dont_filter = obj.get("dont_filter", True)
    if not isinstance(dont_filter, bool):
        raise DecodeError("dont_filter must be true or false")
    entry.dont_filter = dont_filter
    encoding = obj.get("encoding", "utf-8")
    if not isinstance(encoding, str):
        raise DecodeError("encoding must be a string")
    entry.encoding = encoding
    formdata = _check_json_dict(obj.get("formdata"), "formdata")
    # scrapy-redis: every other key is a form field
    formdata.update({k: v for k, v in obj.items() if k not in KNOWN_KEYS})
    if formdata:
        for name, value in formdata.items():
            if not isinstance(value, (str, int, float)) and not (
                isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value)
            ):
                raise DecodeError(f"form field {name!r:.60} must be text, a number or a list of them")
        entry.formdata = formdata
    return entry


def build(entry: StartEntry, spider: Spider | None) -> Request:
    """The request an entry asks for, callbacks resolved on ``spider``."""
    kwargs: dict[str, Any] = {
        "method": entry.method,
        "headers": entry.headers or None,
        "meta": metakeys.read(dict(entry.meta), spider),  # keys naming code: only what the spider allows
        "priority": entry.priority,
        "dont_filter": entry.dont_filter,
        "cb_kwargs": dict(entry.cb_kwargs),
        "encoding": entry.encoding,
    }
    for key in ("callback", "errback"):
        name = getattr(entry, key)
        if name is not None:
            kwargs[key] = callbacks.resolve(spider, name, key)
    try:
        if entry.formdata is not None:
            if entry.body is not None:
                raise DecodeError("an entry cannot have both a body and form fields")
            formdata = {
                name: [str(v) for v in value] if isinstance(value, list) else str(value)
                for name, value in entry.formdata.items()
            }
            return FormRequest(entry.url, formdata=formdata, **kwargs)
        if entry.body is not None:
            kwargs["body"] = entry.body
        return Request(entry.url, **kwargs)
    except (TypeError, ValueError, LookupError) as exc:
        raise DecodeError(f"entry does not make a valid request: {exc}") from None


def to_line(entry: StartEntry) -> str:
    """The canonical one-line form stored in Redis (a plain URL when that says it all)."""
    plain = StartEntry(url=entry.url)
    if entry == plain:
        return entry.url
    out: dict[str, Any] = {"url": entry.url}
    defaults = StartEntry(url=entry.url)
    for key in (
        "method",
        "headers",
        "body",
        "meta",
        "priority",
        "callback",
        "errback",
        "cb_kwargs",
        "dont_filter",
        "formdata",
        "encoding",
    ):
        value = getattr(entry, key)
        if value != getattr(defaults, key):
            out[key] = value
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False)


def checked_lines(
    entries: Iterable[tuple[str, str]], *, strict: bool = False
) -> tuple[list[str], list[tuple[str, str]]]:
    """Each ``(where, text)`` entry parsed and written back in the stored form: (the valid
    ones, as pushed; (where, why) of each malformed one, which is left out). The one rule of
    ``crawlplug push`` and the console's push."""
    valid: list[str] = []
    bad: list[tuple[str, str]] = []
    for where, text in entries:
        try:
            valid.append(to_line(parse(text, strict=strict)))
        except DecodeError as exc:
            bad.append((where, str(exc)))
    return valid, bad
