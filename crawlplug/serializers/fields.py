"""Which attributes of a request a JSON payload stores, and how each is read.

:class:`~.jsoncodec.JsonSerializer` leaves out every attribute at its ``Request.__init__``
default (:data:`DEFAULTS`) and stores or reads the rest by kind (:func:`plan`), worked out
once per request class: the per-request loops then do no name tests.
"""

from __future__ import annotations

from typing import Any

from scrapy import Request

__all__ = ["DEFAULTS", "KEEP", "MAPPING", "META", "NAME", "PLAIN", "RAW", "SUBCLASS_DEFAULTS", "plain_kwargs", "plan"]

#: Request.__init__ defaults: left out of payloads to keep them small.
DEFAULTS: dict[str, Any] = {
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
SUBCLASS_DEFAULTS = frozenset({"method", "dont_filter"})

#: How an attribute is stored: a callback's name, bytes stored when not empty (the headers
#: object, the body), meta, another mapping of str keys (cb_kwargs), any other value.
NAME, RAW, META, MAPPING, PLAIN = range(5)
#: The default of an attribute stored whatever its value.
KEEP: Any = object()
_KINDS = {"callback": NAME, "errback": NAME, "headers": RAW, "body": RAW, "meta": META, "cb_kwargs": MAPPING}
#: What a payload's reader makes of the values before passing them (callbacks resolved, bytes read).
_BUILT = frozenset({"callback", "errback", "headers", "body"})
_PLANS: dict[type, tuple[tuple[str, int, Any], ...]] = {}
_PLAIN_KWARGS: dict[type, frozenset[str]] = {}


def plan(cls: type[Request]) -> tuple[tuple[str, int, Any], ...]:
    """(attribute, its kind, the default it is left out at or :data:`KEEP`) for each of
    ``cls.attributes``, in their order."""
    found = _PLANS.get(cls)
    if found is None:
        subclass = cls is not Request
        found = _PLANS[cls] = tuple(
            (
                key,
                _KINDS.get(key, PLAIN),
                DEFAULTS[key] if key in DEFAULTS and not (subclass and key in SUBCLASS_DEFAULTS) else KEEP,
            )
            for key in cls.attributes
        )
    return found


def plain_kwargs(cls: type[Request]) -> frozenset[str]:
    """The attributes of ``cls`` a payload's values are passed to as they are read."""
    found = _PLAIN_KWARGS.get(cls)
    if found is None:
        found = _PLAIN_KWARGS[cls] = frozenset(cls.attributes) - _BUILT
    return found
