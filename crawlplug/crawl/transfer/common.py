"""What export and import share: the format's name and version, byte strings in JSON, batches."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["BATCH", "FORMAT", "STRING_CHUNK", "VERSION"]

FORMAT = "crawlplug-export"
VERSION = 1
#: Commands per pipeline, members per SCAN call, fingerprints per line.
BATCH = 1000
#: Bytes of a Bloom string per line (before base64).
STRING_CHUNK = 1 << 20

#: Keys of a crawl that are not exported, on purpose (see the module docstring).
_NOT_EXPORTED = ("nodes", "producers", "seedlock", "series", "items", "statnodes", "graveyard")
#: Every key name export_crawl reads (the rest of the crawl's keys are reported as not exported).
_EXPORTED = (
    "queue",
    "requests",
    "seq",
    "leases",
    "leased",
    "deliveries",
    "seen",
    "seen_ttl",
    "dead",
    "stats",
    "start_urls",
    "lanes",
    "seeds",
    "seeds_due",
    "dq",
    "domains",
    "dstate",
    "dconf",
    "crawlstats",
    "bf",
    "run",
    "runs",
)
#: Keys that only mean something on the Redis they are on: the epoch (an import begins a new one),
#: the lead of the crawl's schedules and its fencing token (crawlplug.schedules.store).
_LOCAL = ("epoch", "leader", "fence")


# -- byte strings in JSON ----------------------------------------------------------------


def _enc(value: bytes) -> str | dict[str, str]:
    """Text when it is UTF-8, else {"b64": ...}."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(value).decode("ascii")}


def _dec(value: Any, what: str) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8", errors="surrogatepass")
    if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
        return _b64(value["b64"], what)
    raise ValueError(f'{what} must be a string or {{"b64": ...}}, got {_short(value)}')


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be base64 text, got {_short(value)}")  # noqa: TRY004
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what} is not valid base64") from None


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _batches(iterable: Iterable[Any], size: int = BATCH) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for x in iterable:
        batch.append(x)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
