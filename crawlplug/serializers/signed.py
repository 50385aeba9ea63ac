"""Signed pickle payloads (``CRAWLPLUG_SERIALIZER = "pickle"``), opt-in.

They pickle the same fields as the JSON format (callbacks still by name, the
class still by allow-listed path) for ``meta`` values JSON cannot hold (bytes,
tuples, sets). Every payload carries an HMAC-SHA256 signature with
``CRAWLPLUG_SECRET``; one whose signature does not verify is never unpickled,
and one that does is read through :mod:`crawlplug.serializers.safepickle`'s
restricted unpickler all the same.
"""

from __future__ import annotations

import hashlib
import hmac
import pickle
from collections.abc import Callable, Iterable
from typing import Any

from scrapy import Request, Spider

from ..errors import ConfigError, DecodeError, SerializationError
from . import metakeys, safepickle
from .fields import DEFAULTS as _DEFAULTS
from .fields import SUBCLASS_DEFAULTS as _SUBCLASS_DEFAULTS
from .jsoncodec import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    FORMAT_VERSION,
    PICKLE_MAGIC,
    PRIVATE_META_PREFIX,
    JsonSerializer,
)

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
    :func:`crawlplug.serializers.safepickle.restricted_loads`, which builds containers,
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
                value = metakeys.store(value, spider)  # keys naming code: only what the spider allows
            else:
                value = getattr(request, key)
            if (
                key in _DEFAULTS
                and type(value) is type(_DEFAULTS[key])
                and value == _DEFAULTS[key]
                and (cls is None or key not in _SUBCLASS_DEFAULTS)
            ):
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
