"""A restricted unpickler, for the one place crawlplug reads pickle: the migration
of a scrapy-redis crawl (``crawlplug migrate from-scrapy-redis``).

scrapy-redis stores each queued request as ``pickle.dumps(request.to_dict(
spider=spider), protocol=-1)``: a dict of strings, bytes, numbers, lists and
dicts. Unpickling runs whatever callable a pickle names, so
:func:`restricted_loads` lets a pickle name only the globals in
:data:`ALLOWED_GLOBALS` (Python's "restricting globals" recipe): the containers
pickle builds by calling them and Scrapy's request classes. Any other global
(``os.system``, ``builtins.eval``, ``subprocess.Popen``, a class of the
project...) raises :class:`RefusedGlobal` before it is even imported, so nothing
of that pickle runs. crawlplug reads pickle only here: in the migration command, and
in the opt-in pickle serializer (CRAWLPLUG_SERIALIZER = "pickle"), after its HMAC
signature was checked.
"""

from __future__ import annotations

import _compat_pickle
import codecs
import io
import pickle
from typing import Any

from .jsoncodec import DEFAULT_REQUEST_CLASSES

__all__ = ["ALLOWED_GLOBALS", "RefusedGlobal", "restricted_loads"]

#: (module, name) a pickle may name: the containers that protocols before 4 build by
#: calling them (set, frozenset; dict, list, tuple for good measure), what protocol 2
#: builds bytes with (``bytes``, ``bytearray``, ``_codecs.encode``; guarded, see
#: :data:`_GUARDED`), and Scrapy's request classes (a Request pickled whole rather
#: than as its to_dict()). Python 2 names (``__builtin__.set``) are read as Python 3's.
ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {("builtins", name) for name in ("dict", "list", "tuple", "set", "frozenset", "bytes", "bytearray")}
    | {("_codecs", "encode")}
    | {(path.rsplit(".", 1)[0], path.rsplit(".", 1)[1]) for path in DEFAULT_REQUEST_CLASSES}
    | {("scrapy.http", name) for name in ("Request", "FormRequest", "JsonRequest", "XmlRpcRequest")}
    | {("scrapy", name) for name in ("Request", "FormRequest")}
)


def _sized(cls: type) -> Any:
    def build(*args: Any) -> Any:
        if args and isinstance(args[0], int):  # bytes(10**12): a size, not data
            raise pickle.UnpicklingError(f"{cls.__name__}(<int>) is not allowed")
        return cls(*args)

    return build


def _latin1(text: Any, encoding: str = "utf-8", *rest: Any) -> bytes:
    # protocol 2 pickles bytes as _codecs.encode(<str>, "latin1"); no other codec is looked up
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise pickle.UnpicklingError(f"_codecs.encode with {encoding!r} is not allowed")
    return codecs.encode(text, "latin1")


#: Allowed globals that are handed out guarded, not as themselves.
_GUARDED: dict[tuple[str, str], Any] = {
    ("builtins", "bytes"): _sized(bytes),
    ("builtins", "bytearray"): _sized(bytearray),
    ("_codecs", "encode"): _latin1,
}


class RefusedGlobal(pickle.UnpicklingError):
    """A pickle named a global outside :data:`ALLOWED_GLOBALS`; nothing of it ran."""

    def __init__(self, path: str) -> None:
        super().__init__(f"refused global {path}")
        self.path = path


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _compat_pickle.NAME_MAPPING:  # Python 2 names, as pickle maps them
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        if (module, name) not in ALLOWED_GLOBALS:
            raise RefusedGlobal(f"{module}.{name}")
        guarded = _GUARDED.get((module, name))
        return guarded if guarded is not None else super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent ids are not allowed")


def restricted_loads(data: bytes) -> Any:
    """Unpickle ``data`` building only dicts, lists, tuples, sets, strings, bytes,
    numbers, booleans, None and Scrapy request objects; :class:`RefusedGlobal`
    for anything else."""
    return _RestrictedUnpickler(io.BytesIO(data)).load()
