"""An item as one line of compact JSON: :func:`item_json`.

Every item (a dict, a scrapy ``Item``, a dataclass, an attrs class: whatever
itemadapter knows) becomes one compact JSON object. Values JSON has no type for are converted:

* ``datetime``, ``date``, ``time``: ISO 8601 (``isoformat()``, time zone kept);
* ``Decimal``: a string, exactly (``"19.90"``), as Scrapy's JSON feed exports do;
* ``bytes``: text when valid UTF-8, else ``{"$base64": "..."}``;
* ``set``, ``frozenset``, ``tuple``: lists (sets sorted when their members allow);
* nested items (an ``Item`` inside an item): objects;
* ``UUID``, ``Path``: strings; an ``Enum``: its value; ``timedelta``: seconds;
* ``float`` NaN and infinities: ``null``.

Anything else (an arbitrary object) makes the item fail with :class:`ItemError`,
which Scrapy logs as an item error: an item is never stored half-converted,
and never dropped silently.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import math
import uuid
from datetime import date, datetime, timedelta
from datetime import time as dtime
from decimal import Decimal
from pathlib import PurePath
from typing import Any

from itemadapter import ItemAdapter

from ..errors import ItemError

__all__ = ["item_json"]


def item_json(item: Any) -> str:
    """``item`` as one line of compact JSON (see the module docstring for conversions)."""
    if not ItemAdapter.is_item(item):
        raise ItemError(f"cannot store {type(item).__name__} {item!r:.200}: not an item itemadapter knows")
    try:
        data = ItemAdapter(item).asdict()
        try:
            return _dumps(data)
        except ValueError as exc:  # NaN or infinity (allow_nan=False): store them as null
            if "Out of range float" not in str(exc):
                raise
            return _dumps(_finite(data))
    except (ItemError, ValueError, TypeError, RecursionError) as exc:
        raise ItemError(f"cannot store {type(item).__name__} {_describe(item)}: {exc}") from None


def _dumps(data: Any) -> str:
    return json.dumps(data, default=_default, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _default(value: Any) -> Any:
    if ItemAdapter.is_item(value):
        return ItemAdapter(value).asdict()
    if isinstance(value, (datetime, date, dtime)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return {"$base64": base64.b64encode(raw).decode("ascii")}
    if isinstance(value, (set, frozenset)):
        try:
            return sorted(value)
        except TypeError:
            return list(value)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (uuid.UUID, PurePath)):
        return str(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise ItemError(
        f"a value of type {type(value).__module__}.{type(value).__qualname__} ({value!r:.100}) has no JSON form"
    )


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities replaced by None (in lists and dicts)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _describe(item: Any) -> str:
    adapter = ItemAdapter(item)
    url = adapter.get("url")
    return f"(url {url})" if isinstance(url, str) else f"with fields {sorted(map(str, adapter.field_names()))[:10]}"
