"""Meta keys that name code or paths: refused in a stored request unless the spider opts in.

Most of a request's ``meta`` is data: a middleware reads a number or a flag from it. A
few keys are read by a plug-in as *code to run* or *a file to write*, and a stored
request is written by whoever can write to the crawl's Redis, often more people than may
run code on the crawling machines. scrapy-playwright reads four such keys (registered
here), and a project adds its own with :func:`register`:

=================================  ==========================================================
``playwright_page_init_callback``  imports a function by the path it names and calls it
                                   with the page
``playwright_page_event_handlers`` attaches spider attributes, by name, to page events
``playwright_context_kwargs``      the options of a new browser context: HAR files, videos, a
                                   persistent profile directory written where they say
``playwright_context``             which browser context the page opens in (a logged-in
                                   profile; a new context per new name)
``ftp_local_filename``             Scrapy's FTP download writes the body to this local file
=================================  ==========================================================

A registered key in a payload read from Redis is a DecodeError (the request goes to the
dead letters at once, with the reason) unless the node's spider opted in to it by name,
in its ``crawlplug_meta_keys`` attribute or the ``CRAWLPLUG_META_KEYS`` setting: a list
of keys (any value allowed), or a dict of key -> ``True`` or a list of the values
allowed::

    crawlplug_meta_keys = {
        "playwright_context": ["mobile"],                  # this context name only
        "playwright_page_event_handlers": ["on_dialog"],   # these spider methods only
        "playwright_page_init_callback": ["init_page"],    # a spider method (or a listed path)
    }

The two keys whose values are code take only the names listed, never "any": an event
handler must be a method of the spider listed there (``closed`` is not, unless listed),
and an init callback a listed spider method (stored by name, read back as the bound
method, so scrapy-playwright imports nothing) or an import path the node itself lists.
Nothing is imported by a path read from Redis that the node did not list. Both ends
check: a node refuses to *store* what it would refuse to read (SerializationError), so
a spider that forgot its opt-in hears of it at its first request, not from the dead
letters. Keys not registered stay data.

Values a plug-in writes itself are always allowed: scrapy-playwright puts
``playwright_context = "default"`` into the meta of every request it downloads, which a
retry or a redirect then carries back into the queue.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from scrapy import Spider

from ..errors import DecodeError, SerializationError

__all__ = [
    "ANY",
    "SETTING",
    "SPIDER_ATTRIBUTE",
    "CodeKey",
    "allowances",
    "read",
    "register",
    "registered",
    "store",
    "strip",
    "unregister",
]

#: The spider attribute naming the registered keys a spider allows (a list, or a dict of key -> values).
SPIDER_ATTRIBUTE = "crawlplug_meta_keys"
#: The setting doing the same for every spider of the project.
SETTING = "CRAWLPLUG_META_KEYS"

#: An allowance of every value of a key.
ANY: frozenset[str] = frozenset({"*"})


class Refused(ValueError):
    """Why a registered key's value may not be stored or read (the caller says which)."""


class BadOptIn(ValueError):
    """The spider's crawlplug_meta_keys or the CRAWLPLUG_META_KEYS setting cannot be read."""


#: (value, the values listed for the key or ANY, the spider) -> the value to keep; Refused says why not.
Check = Callable[[Any, frozenset[str], "Spider | None"], Any]


@dataclass(frozen=True)
class CodeKey:
    """A meta key whose value a plug-in takes for code to run or a path to write."""

    key: str
    #: what a stored value makes a node do, said in refusals and ``crawlplug`` docs
    does: str
    #: on store: the value to put in the payload (a spider method becomes its name)
    store: Check | None = None
    #: on read: the value the request gets (a spider method's name becomes the bound method)
    read: Check | None = None
    #: values allowed without an opt-in (what the plug-in writes itself)
    always: frozenset[Any] = frozenset()


_KEYS: dict[str, CodeKey] = {}


def register(
    key: str, does: str, *, store: Check | None = None, read: Check | None = None, always: Iterable[Any] = ()
) -> CodeKey:
    """Refuse meta ``key`` in stored requests unless the spider opts in (module docstring).

    ``does`` says what a stored value would make a node do ("imports the module it
    names"). Call it at import time of a module every node imports (the project's
    ``settings.py``), so that every node refuses the key. ``store``/``read`` check and
    convert a value once it is opted in (default: any value if the key is allowed
    whole, else a value among those listed); ``always``: values allowed without opt-in.
    Registering a key again replaces its entry.
    """
    if not isinstance(key, str) or not key:
        raise TypeError(f"a meta key to refuse must be a non-empty string, not {key!r}")
    entry = CodeKey(key, does, store, read, frozenset(always))
    _KEYS[key] = entry
    return entry


def unregister(key: str) -> None:
    """Let ``key`` be data again (tests)."""
    _KEYS.pop(key, None)


def registered() -> dict[str, CodeKey]:
    """The registered keys, by key."""
    return dict(_KEYS)


# -- the opt-in -------------------------------------------------------------------------


def _allowance_of(value: Any, where: str) -> dict[str, frozenset[str]]:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith(("{", "[")):  # -s CRAWLPLUG_META_KEYS='{"playwright_context": ["mobile"]}'
            try:
                value = json.loads(text)
            except ValueError as exc:
                raise BadOptIn(f"{where} is not JSON: {exc}") from None
        else:
            value = [k.strip() for k in text.split(",") if k.strip()]
    if isinstance(value, dict):
        out = {}
        for key, allowed in value.items():
            if allowed is True:
                out[str(key)] = ANY
            elif allowed in (False, None):
                continue
            elif isinstance(allowed, str):
                out[str(key)] = frozenset({allowed})
            elif isinstance(allowed, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in allowed):
                out[str(key)] = frozenset(allowed)
            else:
                raise BadOptIn(f"{where}[{key!r}] must be True or a list of the values allowed, not {allowed!r:.80}")
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        return {str(key): ANY for key in value}
    raise BadOptIn(f"{where} must be a list of meta keys or a dict of key -> values, not {type(value).__name__}")


def allowances(spider: Spider | None) -> dict[str, frozenset[str]]:
    """What ``spider`` opted in to: key -> the values listed (or :data:`ANY`), from its
    ``crawlplug_meta_keys`` and the CRAWLPLUG_META_KEYS setting together."""
    out: dict[str, frozenset[str]] = {}
    if spider is None:
        return out
    sources = [(getattr(spider, SPIDER_ATTRIBUTE, None), f"the spider's {SPIDER_ATTRIBUTE}")]
    settings = getattr(spider, "settings", None)
    if settings is not None:
        sources.append((settings.get(SETTING), SETTING))
    for value, where in sources:
        if not value:
            continue
        for key, allowed in _allowance_of(value, where).items():
            before = out.get(key, frozenset())
            out[key] = ANY if ANY in (before, allowed) else before | allowed
    return out


_OPT_IN = (
    f"list it in the spider's {SPIDER_ATTRIBUTE} attribute or the {SETTING} setting to allow it (docs/security.md)"
)


# -- the checks ---------------------------------------------------------------------------


def _listed_value(value: Any, allowed: frozenset[str], spider: Spider | None) -> Any:
    """The default check: any value when the key is allowed whole, else one of the values listed."""
    if allowed == ANY or (isinstance(value, str) and value in allowed):
        return value
    raise Refused(f"{value!r:.80} is not among the values listed for it ({', '.join(sorted(allowed))})")


def _method_name(value: Any, spider: Spider | None) -> str | None:
    """The name of ``value`` if it is a method bound to ``spider``, else None."""
    func = getattr(value, "__func__", None)
    if spider is None or func is None or getattr(value, "__self__", None) is not spider:
        return None
    name = func.__name__
    return name if getattr(getattr(spider, name, None), "__func__", None) is func else None


def _spider_method(name: Any, allowed: frozenset[str], spider: Spider | None) -> Any:
    """The bound method ``name`` of ``spider``, if the spider listed it."""
    if not isinstance(name, str) or name not in allowed or name == "*":
        listed = ", ".join(sorted(allowed - ANY))
        said = f"({listed})" if listed else "(none is: list them by name, {'<key>': ['<method>']})"
        raise Refused(f"{name!r:.80} is not one of the spider methods listed for it {said}")
    method = getattr(spider, name, None) if spider is not None else None
    if not callable(method) or getattr(method, "__self__", None) is not spider:
        raise Refused(f"{name!r} is not a method of this node's spider")
    return method


def _handlers(value: Any, allowed: frozenset[str], spider: Spider | None, *, stored: bool) -> Any:
    if not isinstance(value, dict) or not all(isinstance(event, str) for event in value):
        raise Refused("it must be a dict of page event -> spider method name")
    out = {}
    for event, handler in value.items():
        name = handler if isinstance(handler, str) else _method_name(handler, spider) if stored else None
        if name is None:
            raise Refused(
                f"the handler of event {event!r:.40} is not a spider method (a method of the spider, "
                "by name, is what a stored request may name)"
            )
        _spider_method(name, allowed, spider)
        out[event] = name  # scrapy-playwright looks a name up on the spider itself
    return out


def _store_handlers(value: Any, allowed: frozenset[str], spider: Spider | None) -> Any:
    return _handlers(value, allowed, spider, stored=True)


def _read_handlers(value: Any, allowed: frozenset[str], spider: Spider | None) -> Any:
    return _handlers(value, allowed, spider, stored=False)


def _store_init_callback(value: Any, allowed: frozenset[str], spider: Spider | None) -> Any:
    name = value if isinstance(value, str) else _method_name(value, spider)
    if name is None:
        raise Refused("it must be a method of the spider (stored by its name) or an import path the node lists")
    _read_init_callback(name, allowed, spider)  # what a node would read back
    return name


def _read_init_callback(value: Any, allowed: frozenset[str], spider: Spider | None) -> Any:
    if isinstance(value, str) and "." in value:
        # an import path: only one the node lists, which scrapy-playwright then imports
        if value in allowed and value != "*":
            return value
        raise Refused(
            f"{value!r:.80} is an import path this node does not list; nothing is imported by a path read from Redis"
        )
    return _spider_method(value, allowed, spider)


def _checked(
    entry: CodeKey, value: Any, allowed: frozenset[str] | None, spider: Spider | None, check: Check | None
) -> Any:
    """``value`` as the key's check makes it, or Refused."""
    try:
        if value in entry.always:
            return value
    except TypeError:  # an unhashable value is never one of them
        pass
    if allowed is None:
        raise Refused(f"it {entry.does}; {_OPT_IN}")
    return (check or _listed_value)(value, allowed, spider)


def _apply(meta: dict[str, Any], spider: Spider | None, *, reading: bool) -> dict[str, Any]:
    found = _KEYS.keys() & meta.keys()
    if not found:
        return meta
    try:
        opted = allowances(spider)
    except BadOptIn as exc:
        raise (DecodeError if reading else SerializationError)(f"the node's opt-in cannot be read: {exc}") from None
    out = dict(meta)
    for key in sorted(found):
        entry = _KEYS[key]
        try:
            out[key] = _checked(entry, meta[key], opted.get(key), spider, entry.read if reading else entry.store)
        except Refused as why:
            if reading:
                raise DecodeError(f"a stored request's meta[{key!r}] is refused: {why}") from None
            raise SerializationError(
                f"meta[{key!r}] cannot be stored (a node reading it back would refuse it): {why}"
            ) from None
    return out


def store(meta: dict[str, Any], spider: Spider | None) -> dict[str, Any]:
    """``meta`` as a payload may hold it: registered keys checked (SerializationError) and
    spider methods turned into their names. ``meta`` itself when it has no registered key."""
    return _apply(meta, spider, reading=False)


def read(meta: dict[str, Any], spider: Spider | None) -> dict[str, Any]:
    """``meta`` read from a payload, registered keys checked against what ``spider`` allows
    (DecodeError saying why) and made what the plug-in expects."""
    return _apply(meta, spider, reading=True)


def strip(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` without its registered keys (a request read only to be fingerprinted)."""
    found = _KEYS.keys() & meta.keys()
    return {k: v for k, v in meta.items() if k not in found} if found else meta


# -- scrapy-playwright's keys (0.0.48): registered whether or not it is installed here, so a
# node without it refuses them too instead of passing them on to a later version -------------

register(
    "playwright_page_init_callback",
    "imports a function by the path it names and calls it with the page (scrapy-playwright)",
    store=_store_init_callback,
    read=_read_init_callback,
)
register(
    "playwright_page_event_handlers",
    "attaches spider attributes named there to page events (scrapy-playwright)",
    store=_store_handlers,
    read=_read_handlers,
)
register(
    "playwright_context_kwargs",
    "sets the options of a new browser context: HAR files, videos or a "
    "persistent profile directory written where it says, a proxy (scrapy-playwright)",
)
# scrapy-playwright writes "default" into the meta of every request it downloads
register(
    "playwright_context",
    "chooses the browser context the page opens in: a configured one (a logged-in "
    "profile), or a new one per new name (scrapy-playwright)",
    always=("default",),
)
register("ftp_local_filename", "makes Scrapy's FTP download write the body to the local file it names")
