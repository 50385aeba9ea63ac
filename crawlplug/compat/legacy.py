"""scrapy-redis's fingerprints, consulted while a migrated crawl finishes.

scrapy-redis records the fingerprint of every request it schedules in a Redis
set (``<spider>:dupefilter``): 40 hex digits of a SHA-1 computed by its own
function, which is not Scrapy's ``REQUEST_FINGERPRINTER_CLASS`` fingerprint
that crawlplug records. A hash cannot be turned into another hash, so the
pages scrapy-redis already fetched cannot be put into crawlplug's ``seen``
set. Instead:

* ``crawlplug migrate from-scrapy-redis`` copies the old set into the crawl's
  own key ``crawlplug:{<crawl>}:seen:scrapy_redis``, packed: the first 8 bytes
  of each digest, sorted, 8 bytes per fingerprint (a hash
  ``...:seen:scrapy_redis:meta`` says which function made them and how many);
* :class:`ScrapyRedisDupeFilter` (or :class:`ScrapyRedisBloomDupeFilter`)
  loads that string once when a node opens (one read, no per-request round
  trip) and checks each request about to be admitted against it, in memory,
  by binary search. A request scrapy-redis had seen is filtered as a
  duplicate; every other request goes through crawlplug's own atomic
  admission, as with :class:`~crawlplug.dupefilters.RedisSetDupeFilter`.

A filtered request must be filtered *by the admission script* (so that it is
logged and counted as filtered and the scheduler's fingerprint cache learns
it): its dedup argument is replaced by the one of :data:`SENTINEL`, a marker
fingerprint recorded in the crawl's dedup state when the node opens. No Lua,
no change to the scheduler.

Matching 64-bit prefixes instead of whole digests makes a new request taken
for an old one with probability n / 2**64 per request (n old fingerprints:
about 5e-13 for ten million), which the docs call practically exact.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.utils.python import to_bytes, to_unicode
from w3lib.url import canonicalize_url

from ..dupefilters import RedisBloomDupeFilter, RedisSetDupeFilter
from ..errors import ConfigError
from ..frontier.store import text

if TYPE_CHECKING:
    import redis

    from ..frontier.interface import CrawlFrontier
    from ..frontier.keys import CrawlKeys

__all__ = [
    "FINGERPRINT_FUNCTIONS",
    "SENTINEL",
    "ScrapyRedisBloomDupeFilter",
    "ScrapyRedisDupeFilter",
    "ScrapyRedisFingerprints",
    "ScrapyRedisSeen",
    "load",
    "merge",
    "store",
]

logger = logging.getLogger(__name__)

#: The fingerprint recorded in the crawl's dedup state whose dedup argument stands
#: for "scrapy-redis had seen this request" (a SHA-1, 20 raw bytes like every other).
SENTINEL = hashlib.sha1(b"crawlplug: a request scrapy-redis had already scheduled").digest()
#: Bytes of a digest kept per fingerprint.
PREFIX_BYTES = 8
#: Bytes per GETRANGE / APPEND when the packed set is read or written.
CHUNK = 8 << 20
#: Stats key of the requests filtered because scrapy-redis had seen them.
STAT = "crawlplug/scrapy_redis_seen"


def scrapy_redis_fingerprint(request: Request) -> str:
    """scrapy-redis >= 0.8's ``RFPDupeFilter.request_fingerprint``: method, canonical
    URL and body hex as sorted JSON, SHA-1, hex (headers never count)."""
    data = {
        "method": to_unicode(request.method),
        "url": canonicalize_url(request.url),
        "body": (request.body or b"").hex(),
    }
    return hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()


def scrapy_request_fingerprint(request: Request) -> str:
    """scrapy-redis <= 0.7's fingerprint: Scrapy's old ``request_fingerprint()``
    (removed from Scrapy), SHA-1 of method, canonical URL and body, hex."""
    fp = hashlib.sha1()
    fp.update(to_bytes(request.method))
    fp.update(to_bytes(canonicalize_url(request.url)))
    fp.update(request.body or b"")
    return fp.hexdigest()


#: The functions scrapy-redis versions fingerprinted with, by the name the meta hash keeps.
FINGERPRINT_FUNCTIONS: dict[str, Callable[[Request], str]] = {
    "json": scrapy_redis_fingerprint,
    "concat": scrapy_request_fingerprint,
}


def prefix(hex_fingerprint: str | bytes) -> int:
    """The first 8 bytes of a hex digest as an integer; ValueError unless 40 hex digits."""
    text = hex_fingerprint.decode("ascii") if isinstance(hex_fingerprint, bytes) else hex_fingerprint
    if len(text) != 40:
        raise ValueError(f"not a 40-digit hex SHA-1: {text[:60]!r}")
    int(text, 16)  # the whole digest must be hex, not only its head
    return int(text[: PREFIX_BYTES * 2], 16)


def pack(values: Iterable[int]) -> bytes:
    """Sorted, distinct 64-bit values as big-endian bytes (8 per value).

    Sorted by top byte first, so that no list of Python ints larger than a
    256th of the whole is ever built.
    """
    buckets = [array("Q") for _ in range(256)]
    for value in values:
        buckets[value >> 56].append(value)
    out = array("Q")
    for bucket in buckets:
        if bucket:
            out.extend(sorted(set(bucket)))
    if sys.byteorder == "little":
        out.byteswap()
    return out.tobytes()


def unpack(data: bytes) -> array:
    if len(data) % PREFIX_BYTES:
        raise ValueError(f"packed fingerprints must be a multiple of {PREFIX_BYTES} bytes, got {len(data)}")
    values = array("Q")
    values.frombytes(data)
    if sys.byteorder == "little":
        values.byteswap()
    return values


@dataclass
class ScrapyRedisFingerprints:
    """scrapy-redis's fingerprint set, in memory: sorted 64-bit prefixes."""

    values: array
    function: str = "json"

    def __post_init__(self) -> None:
        if self.function not in FINGERPRINT_FUNCTIONS:
            raise ConfigError(
                f"unknown scrapy-redis fingerprint function {self.function!r}; "
                f"one of {', '.join(FINGERPRINT_FUNCTIONS)}"
            )
        self._fingerprint = FINGERPRINT_FUNCTIONS[self.function]

    def __len__(self) -> int:
        return len(self.values)

    def __contains__(self, hex_fingerprint: str | bytes) -> bool:
        return self._has(prefix(hex_fingerprint))

    def _has(self, value: int) -> bool:
        values = self.values
        i = bisect_left(values, value)
        return i < len(values) and values[i] == value

    def seen(self, request: Request) -> bool:
        """Whether scrapy-redis had scheduled ``request`` (by its own fingerprint)."""
        return self._has(int(self._fingerprint(request)[: PREFIX_BYTES * 2], 16))


# -- the packed copy in the crawl's Redis ------------------------------------------------


def packed_key(keys: CrawlKeys) -> str:
    """The string of packed fingerprints (under ``seen``: purged and flushed with the crawl)."""
    return keys.key("seen:scrapy_redis")


def meta_key(keys: CrawlKeys) -> str:
    """The hash describing the packed string: function, count, source, migrated_at."""
    return keys.key("seen:scrapy_redis:meta")


def read_packed(client: redis.Redis, keys: CrawlKeys) -> bytes:
    """The packed string (b"" if absent), read in chunks."""
    key = packed_key(keys)
    size = int(client.strlen(key))
    parts = []
    for start in range(0, size, CHUNK):
        parts.append(client.getrange(key, start, min(start + CHUNK, size) - 1))
    return b"".join(parts)


def read_meta(client: redis.Redis, keys: CrawlKeys) -> dict[str, str]:
    return {text(k): text(v) for k, v in client.hgetall(meta_key(keys)).items()}


def load(client: redis.Redis, keys: CrawlKeys) -> ScrapyRedisFingerprints | None:
    """The crawl's migrated scrapy-redis fingerprints, or None when it has none."""
    meta = read_meta(client, keys)
    if not meta:
        return None
    data = read_packed(client, keys)
    try:
        values = unpack(data)
    except ValueError as exc:
        raise ConfigError(f"{packed_key(keys)} is damaged ({exc}); run the migration again") from None
    expected = meta.get("count")
    if expected is not None and expected.isdigit() and int(expected) != len(values):
        raise ConfigError(
            f"{packed_key(keys)} holds {len(values)} fingerprints, its meta says {expected}; run the migration again"
        )
    return ScrapyRedisFingerprints(values, meta.get("function", "json"))


#: KEYS: the packed string written aside, its place, its meta; ARGV: "1" if there is one, the meta's fields
_STORE = """
if ARGV[1] == "1" then redis.call("RENAME", KEYS[1], KEYS[2]) else redis.call("DEL", KEYS[2]) end
redis.call("DEL", KEYS[3])
redis.call("HSET", KEYS[3], unpack(ARGV, 2))
return 1
"""


def store(client: redis.Redis, keys: CrawlKeys, packed: bytes, meta: dict[str, Any]) -> None:
    """Replace the packed string (written beside it, then renamed: never half there) and its meta."""
    key, tmp = packed_key(keys), keys.key("seen:scrapy_redis:tmp")
    client.delete(tmp)
    for start in range(0, len(packed), CHUNK):
        client.append(tmp, packed[start : start + CHUNK])
    # one script, not a MULTI: a Redis Cluster pipeline refuses RENAME (the keys share the crawl's slot)
    fields = [str(x) for pair in {**meta, "count": len(packed) // PREFIX_BYTES}.items() for x in pair]
    client.register_script(_STORE)(keys=[tmp, key, meta_key(keys)], args=["1" if packed else "0", *fields])


def merge(client: redis.Redis, keys: CrawlKeys, values: Iterable[int], function: str, source: str) -> int:
    """Add fingerprint prefixes made by ``function`` (read from ``source``) to the crawl's
    packed set; returns how many it holds. Refuses to mix two fingerprint functions."""
    meta = read_meta(client, keys)
    if meta and meta.get("function", "json") != function:
        raise ConfigError(
            f"crawl {keys.crawl!r} already holds scrapy-redis fingerprints made by the "
            f"{meta.get('function')!r} function, these are {function!r}: they cannot be mixed"
        )
    merged = array("Q", values)
    if meta:
        merged.extend(unpack(read_packed(client, keys)))
    if not merged and not meta:
        return 0
    packed = pack(merged)
    sources = [x for x in meta.get("source", "").split(", ") if x]
    if source not in sources:
        sources.append(source)
    store(
        client,
        keys,
        packed,
        {
            "function": function,
            "source": ", ".join(sources),
            "migrated_at": int(time.time()),
        },
    )
    return len(packed) // PREFIX_BYTES


# -- the dupefilters ------------------------------------------------------------------------


class ScrapyRedisSeen:
    """Mixin: filter requests scrapy-redis had scheduled, then crawlplug's own dedup."""

    legacy: ScrapyRedisFingerprints | None = None
    _sentinel_arg: bytes = b""

    def bind(self, frontier: CrawlFrontier) -> None:
        super().bind(frontier)  # type: ignore[misc]
        self.legacy = load(frontier.client, frontier.keys)
        if self.legacy is None:
            logger.info(
                "crawlplug: crawl %r has no fingerprints migrated from scrapy-redis; %s "
                "deduplicates with crawlplug's own state only",
                frontier.keys.crawl,
                type(self).__name__,
            )
            return
        self._sentinel_arg = self.strategy.argument(SENTINEL)  # type: ignore[attr-defined]
        # the marker must be in the dedup state before any request maps to it: in
        # every shard's, for a sharded crawl (crawlplug.frontier.core), as any shard may get it
        for part in frontier.dedup_parts():
            part.admit([(part.dedup.argument(SENTINEL), 0.0, b"")])
        logger.info(
            "crawlplug: %d fingerprints of scrapy-redis (%s function) are consulted before "
            "admission (%.1f MB in memory)",
            len(self.legacy),
            self.legacy.function,
            len(self.legacy) * PREFIX_BYTES / 1e6,
        )

    def bind_plain(self, frontier: CrawlFrontier) -> None:
        """Bind as the plain crawlplug dupefilter, without the migrated fingerprints
        (what the migration itself admits with)."""
        super().bind(frontier)  # type: ignore[misc]

    def argument(self, request: Request) -> bytes:
        legacy = self.legacy
        if legacy is not None and legacy.seen(request):
            crawler = self.crawler  # type: ignore[attr-defined]
            if crawler is not None and crawler.stats is not None:
                crawler.stats.inc_value(STAT)
            return self._sentinel_arg
        return super().argument(request)  # type: ignore[misc]

    def request_seen(self, request: Request) -> bool:
        if self.legacy is not None and self.legacy.seen(request):
            return True
        return super().request_seen(request)  # type: ignore[misc]


class ScrapyRedisDupeFilter(ScrapyRedisSeen, RedisSetDupeFilter):
    """:class:`~crawlplug.dupefilters.RedisSetDupeFilter` that also filters what
    scrapy-redis had scheduled before the crawl was migrated."""


class ScrapyRedisBloomDupeFilter(ScrapyRedisSeen, RedisBloomDupeFilter):
    """:class:`~crawlplug.dupefilters.RedisBloomDupeFilter` that also filters what
    scrapy-redis had scheduled before the crawl was migrated."""
