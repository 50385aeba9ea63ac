"""Request <-> bytes.

The default format is JSON built on ``Request.to_dict``: body and header
bytes base64-encoded, callbacks stored by name and resolved against the
spider when decoding (only names :mod:`crawlplug.serializers.callbacks` accepts as
callbacks), the request class checked against an allow-list.
Nothing read from Redis is ever imported or executed beyond looking up a
method *name* on the running spider.

``CRAWLPLUG_SERIALIZER = "pickle"`` (opt-in, :class:`PickleSerializer`) pickles
the same fields (callbacks still by name, the class still by allow-listed
path) for ``meta`` values JSON cannot hold (bytes, tuples, sets). It needs
``CRAWLPLUG_SECRET``: every payload carries an HMAC-SHA256 signature, a payload
whose signature does not verify is never unpickled, and one that does is read
through :mod:`crawlplug.serializers.safepickle`'s restricted unpickler all the same.

Both refuse a payload larger than ``CRAWLPLUG_MAX_PAYLOAD_BYTES``: on encode
(:class:`SerializationError`: a node never stores one) and on decode
(:class:`DecodeError`: the scheduler moves it to the dead letters).

JSON payloads are written in the compact format (version 3, :mod:`.compact`) unless
``CRAWLPLUG_PAYLOAD_FORMAT = 1`` asks for the long-key one older crawlplug versions
read; both are read, whichever wrote them.

The formats live in :mod:`.jsoncodec`, :mod:`.compact` and :mod:`.signed`; this module
chooses one from the settings.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from scrapy.utils.misc import load_object

from ..config import setting
from ..errors import ConfigError
from .compact import describe as describe_payload
from .jsoncodec import (
    COMPACT_VERSION,
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_REQUEST_CLASSES,
    FORMAT_VERSION,
    PAYLOAD_FORMATS,
    PICKLE_MAGIC,
    PRIVATE_META_PREFIX,
    SECRET_ENV,
    URL_SCHEME,
    URL_SCHEMES,
    JsonSerializer,
    payload_limit,
)
from .signed import MIN_SECRET_BYTES, PICKLE_PROTOCOL, PickleSerializer

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

__all__ = [
    "COMPACT_VERSION",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "DEFAULT_REQUEST_CLASSES",
    "FORMAT_VERSION",
    "MIN_SECRET_BYTES",
    "PAYLOAD_FORMATS",
    "PICKLE_MAGIC",
    "PICKLE_PROTOCOL",
    "PRIVATE_META_PREFIX",
    "SECRET_ENV",
    "URL_SCHEME",
    "URL_SCHEMES",
    "JsonSerializer",
    "PickleSerializer",
    "describe_payload",
    "get_serializer",
    "payload_limit",
    "serializer_from_settings",
]


def get_serializer(
    name: str,
    extra_classes: Iterable[str] = (),
    *,
    secret: str | bytes | None = None,
    max_payload_bytes: Any = DEFAULT_MAX_PAYLOAD_BYTES,
    payload_format: Any = COMPACT_VERSION,
) -> JsonSerializer:
    """The serializer named by CRAWLPLUG_SERIALIZER ("json", "pickle" or a class path).

    ``secret`` is the pickle key (None: the CRAWLPLUG_SECRET environment variable);
    ``payload_format`` the JSON version written (CRAWLPLUG_PAYLOAD_FORMAT).
    """
    if name == "json":
        return JsonSerializer(extra_classes, max_payload_bytes=max_payload_bytes, payload_format=payload_format)
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
        return cls(extra_classes, max_payload_bytes=max_payload_bytes, payload_format=payload_format)
    return cls(extra_classes)


def serializer_from_settings(settings: BaseSettings) -> JsonSerializer:
    """The serializer a node's settings ask for: CRAWLPLUG_SERIALIZER, CRAWLPLUG_REQUEST_CLASSES,
    CRAWLPLUG_SECRET (else the environment variable), CRAWLPLUG_MAX_PAYLOAD_BYTES,
    CRAWLPLUG_PAYLOAD_FORMAT."""
    return get_serializer(
        setting(settings, "CRAWLPLUG_SERIALIZER"),
        setting(settings, "CRAWLPLUG_REQUEST_CLASSES", "getlist"),
        secret=settings.get("CRAWLPLUG_SECRET"),
        max_payload_bytes=setting(settings, "CRAWLPLUG_MAX_PAYLOAD_BYTES"),
        payload_format=setting(settings, "CRAWLPLUG_PAYLOAD_FORMAT"),
    )
