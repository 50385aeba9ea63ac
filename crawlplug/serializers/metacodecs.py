"""Meta values that JSON cannot hold, stored through a codec registered for their type.

A JSON payload's ``meta`` is plain JSON, read back as it is. A meta value holding
objects of a *registered* type (scrapy-playwright's ``PageMethod``, registered by
:mod:`.pagemethods` when scrapy-playwright is installed) goes, whole, into the
payload's ``xmeta`` field instead, each such object written as::

    {"$crawlplug": "<codec name>", "data": <what the codec made of it, JSON>}

inside the lists and dicts that hold it. Reading it back, only a codec registered
under that name may build an object from ``data``, and it checks what it reads:
nothing is imported by a name found in Redis, nothing is called but the codec's own
``decode``. A name no codec has here, or data a codec refuses, is a DecodeError (the
request goes to the dead letters, with the reason), never a guess.

A codec is a small object with a ``name`` (stored in payloads: never reuse one for
another meaning), the exact ``type`` it stores (not subclasses), and
``encode(value, spider)`` / ``decode(data, spider)``; :func:`register` adds one::

    from crawlplug.serializers.metacodecs import register
    register(MyCodec())   # at import time of a module every node imports (settings.py)
"""

from __future__ import annotations

from typing import Any, Protocol

from scrapy import Spider

from ..errors import DecodeError, SerializationError

#: The key marking an object stored by a codec (a plain dict of a stored value may not have it).
MARK = "$crawlplug"

_JSON_SCALARS = (str, int, float, bool, type(None))


class MetaCodec(Protocol):
    """Stores objects of one type as JSON and builds them back, checked."""

    name: str
    type: type

    def encode(self, value: Any, spider: Spider | None) -> Any:
        """JSON data for ``value``; SerializationError (saying why) for one it refuses to store."""

    def decode(self, data: Any, spider: Spider | None) -> Any:
        """The object ``data`` describes; DecodeError (saying why) for data it refuses."""


_BY_NAME: dict[str, MetaCodec] = {}
_BY_TYPE: dict[type, MetaCodec] = {}


def register(codec: MetaCodec) -> None:
    """Store objects of ``codec.type`` in meta through ``codec``. Registering the same codec
    again is harmless; another codec under a name or type already taken is refused."""
    name, kind = getattr(codec, "name", None), getattr(codec, "type", None)
    if not isinstance(name, str) or not name or not isinstance(kind, type):
        raise TypeError(f"a meta codec needs a name (str) and a type: {codec!r}")
    for taken in (_BY_NAME.get(name), _BY_TYPE.get(kind)):
        if taken is not None and taken is not codec and type(taken) is not type(codec):
            raise ValueError(f"meta codec {name!r} for {kind.__qualname__}: {taken.name!r} is registered already")
    _BY_NAME[name] = _BY_TYPE[kind] = codec


def unregister(codec: MetaCodec) -> None:
    """Take ``codec`` out of the registry (tests)."""
    if _BY_NAME.get(codec.name) is codec:
        del _BY_NAME[codec.name]
    if _BY_TYPE.get(codec.type) is codec:
        del _BY_TYPE[codec.type]


def registered() -> dict[str, MetaCodec]:
    """The codecs registered in this process, by name."""
    return dict(_BY_NAME)


def needs_codec(value: Any) -> bool:
    """Whether ``value`` holds, anywhere in its lists, tuples and dicts, an object of a registered type."""
    if type(value) in _BY_TYPE:
        return True
    if isinstance(value, (list, tuple)):
        return any(needs_codec(v) for v in value)
    if isinstance(value, dict):
        return any(needs_codec(v) for v in value.values())
    return False


def encode(value: Any, spider: Spider | None, where: str) -> Any:
    """``value`` as JSON data, each object of a registered type through its codec; anything
    else JSON cannot hold is a SerializationError naming ``where`` it is."""
    codec = _BY_TYPE.get(type(value))
    if codec is not None:
        return {MARK: codec.name, "data": codec.encode(value, spider)}
    if isinstance(value, _JSON_SCALARS):
        return value
    if isinstance(value, (list, tuple)):
        return [encode(v, spider, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        if MARK in value:
            raise SerializationError(f"{where} is a dict with the key {MARK!r}, which crawlplug's payloads reserve")
        out = {}
        for key, v in value.items():
            if not isinstance(key, str):
                raise SerializationError(f"{where} has the key {key!r}, not a string; JSON cannot store it")
            out[key] = encode(v, spider, f"{where}[{key!r}]")
        return out
    raise SerializationError(
        f"{where} cannot be stored as JSON ({type(value).__name__}) and no meta codec is registered for its type"
    )


def decode(data: Any, spider: Spider | None, where: str) -> Any:
    """The value :func:`encode` made ``data`` of, each marked object built by its codec."""
    if isinstance(data, list):
        return [decode(v, spider, f"{where}[{i}]") for i, v in enumerate(data)]
    if isinstance(data, dict):
        if MARK in data:
            name = data[MARK]
            codec = _BY_NAME.get(name) if isinstance(name, str) else None
            if codec is None:
                raise DecodeError(
                    f"{where}: no meta codec {name!r:.80} on this node (is the package that "
                    "provides it installed here?)"
                )
            if set(data) != {MARK, "data"}:
                raise DecodeError(f"{where}: a {name} value has other fields than 'data'")
            return codec.decode(data["data"], spider)
        return {k: decode(v, spider, f"{where}[{k!r}]") for k, v in data.items()}
    return data
