"""Carry a scrapy-redis crawl over to crawlplug: its queue, fingerprints and start URLs.

``crawlplug migrate from-scrapy-redis SPIDER`` is a thin layer over
:class:`ScrapyRedisMigration`. What it does, in this order:

1. **Freezes the source**: each scrapy-redis key it moves (the queue,
   ``<spider>:requests``, and the start URLs, ``<spider>:start_urls``) is
   renamed to ``<key>:migrated`` (``:migrated:2``... if taken) in one atomic
   step, then read from there: a scrapy-redis node still running cannot slip
   a request in between the read and the end, a scrapy-redis node started by
   mistake finds nothing, RedisSpider does not read the start URLs a second
   time, and the backup stays for as long as anyone wants it.
2. **Requests**: each queue entry (a member of the sorted set, or an item of
   the list, as ``scrapy_redis.queue`` writes them: ``pickle.dumps(
   request.to_dict(spider=spider), protocol=-1)``) is read by
   :func:`restricted_loads`, which builds nothing but dicts, lists, tuples,
   sets, strings, numbers and Scrapy's request classes: a pickle naming any
   other global is refused, counted and reported, and never executed. The
   request is rebuilt (its class checked against the serializer's allow-list,
   its callbacks against the spider), fingerprinted again with the project's
   ``REQUEST_FINGERPRINTER_CLASS``, serialized with crawlplug's JSON
   serializer and admitted with :meth:`Frontier.admit <crawlplug.frontier.Frontier.admit>`,
   in the order scrapy-redis would have popped them.
3. **Fingerprints**: scrapy-redis's set (``<spider>:dupefilter``) is copied,
   packed, into ``crawlplug:{<crawl>}:seen:scrapy_redis`` (:mod:`crawlplug.compat.legacy`),
   merged with what an earlier migration copied; which of scrapy-redis's two
   fingerprint functions made them is found from the queued requests, whose
   fingerprints are in the set.
4. **Start URLs**: entries not yet taken are appended, as they are, to the
   crawl's ``start_urls`` (:meth:`Frontier.push_starts <crawlplug.frontier.Frontier.push_starts>`).

An entry that cannot be carried over is skipped and counted with its reason;
it stays in the backup key. A dry run reads and checks everything (unpickling
included) and writes nothing. Running the migration twice admits nothing
twice (requests are deduplicated by their new fingerprint), except requests
with ``dont_filter``.

Its size: one migration, read from scrapy-redis's keys and written through the frontier
in batches, with the inventory and report that say what was carried over; each piece is
used only here.
"""

from __future__ import annotations

import logging
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis
from scrapy import Request, Spider
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import load_object

from ..crawl import Crawl
from ..errors import (
    ConfigError,
    DecodeError,
    MigrationError,
    SerializationError,
)
from ..frontier.core import Frontier
from ..queues import BaseQueue
from ..serializers import JsonSerializer, callbacks
from ..serializers.safepickle import RefusedGlobal, restricted_loads
from . import legacy

__all__ = ["MigrationError", "Report", "ScrapyRedisMigration", "SourceKeys"]

logger = logging.getLogger(__name__)

#: Requests admitted per script call.
BATCH = 500
#: Queue entries read per call, fingerprints per SSCAN call.
READ_BATCH = 1000
#: Queued requests checked against the old fingerprint set to tell its function.
DETECT_SAMPLE = 200


@dataclass(frozen=True)
class SourceKeys:
    """scrapy-redis's keys of one spider (templates filled in)."""

    queue: str
    dupefilter: str
    start_urls: str

    @classmethod
    def from_templates(cls, spider: str, queue: str, dupefilter: str, start_urls: str) -> SourceKeys:
        """Templates with ``%(spider)s`` (or ``%(name)s``) as scrapy-redis's settings hold them."""
        out = []
        for what, template in (("queue", queue), ("dupefilter", dupefilter), ("start URLs", start_urls)):
            try:
                key = template % {"spider": spider, "name": spider}
            except (KeyError, ValueError, TypeError) as exc:
                raise ConfigError(
                    f"{what} key template {template!r}: only %(spider)s / %(name)s may be filled in ({exc})"
                ) from None
            if not key:
                raise ConfigError(f"the {what} key template {template!r} gives an empty key")
            out.append(key)
        return cls(*out)


@dataclass
class Inventory:
    """What the source holds (read without unpickling anything)."""

    queue_type: str
    queued: int
    fingerprints: int
    start_type: str
    start_entries: int


@dataclass
class Report:
    """What a migration did (or, dry, would do)."""

    dry_run: bool = False
    requests_read: int = 0
    admitted: int = 0
    already_seen: int = 0  #: already in the crawlplug crawl (same new fingerprint)
    skipped: Counter[str] = field(default_factory=Counter)  #: reason -> entries
    refused_globals: Counter[str] = field(default_factory=Counter)  #: "module.name" -> entries
    fingerprints_copied: int = 0
    fingerprints_invalid: int = 0
    fingerprints_total: int = 0  #: in the packed set after the merge
    function: str = ""
    function_evidence: str = ""
    start_entries: int = 0
    backups: dict[str, str] = field(default_factory=dict)  #: source key -> its backup
    late_writes: dict[str, int] = field(default_factory=dict)  #: source key -> entries written meanwhile

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())


class _Stub(Spider):
    """Stands for the spider when payloads are built: its callbacks are names only."""

    name = "crawlplug-migration"


class ScrapyRedisMigration:
    """Move one scrapy-redis crawl (``source`` keys on ``source_client``) into ``frontier``'s crawl.

    ``fingerprinter`` is the project's (``crawler.request_fingerprinter``),
    ``serializer`` crawlplug's JSON serializer, ``queue`` the crawl's queue
    class; ``spidercls``, when known, is checked for every callback name;
    ``lifo`` says a list queue was scrapy-redis's LifoQueue (else FifoQueue).
    ``function`` is scrapy-redis's fingerprint function ("json", "concat") or
    "auto" to find it from the queued requests.
    """

    def __init__(
        self,
        source_client: redis.Redis,
        source: SourceKeys,
        frontier: Frontier,
        *,
        spider_name: str,
        fingerprinter: Any,
        serializer: JsonSerializer,
        queue: BaseQueue,
        spidercls: type[Spider] | None = None,
        lifo: bool = False,
        function: str = "auto",
    ) -> None:
        if function != "auto" and function not in legacy.FINGERPRINT_FUNCTIONS:
            raise ConfigError(
                f"unknown fingerprint function {function!r}: auto, {', '.join(legacy.FINGERPRINT_FUNCTIONS)}"
            )
        self.source_client = source_client
        self.source = source
        self.frontier = frontier
        self.spider_name = spider_name
        self.fingerprinter = fingerprinter
        self.serializer = serializer
        self.queue = queue
        self.spidercls = spidercls
        self.lifo = lifo
        self.function = function
        self._stub_cls = type("MigratedSpider", (_Stub,), {"name": spider_name})
        self._stub = self._stub_cls()
        self._defined: set[str] = set()

    # -- before asking -------------------------------------------------------------
    def inventory(self) -> Inventory:
        c, k = self.source_client, self.source
        queue_type, start_type = _type(c, k.queue), _type(c, k.start_urls)
        return Inventory(
            queue_type,
            _size(c, k.queue, queue_type),
            int(c.scard(k.dupefilter)) if _type(c, k.dupefilter) == "set" else 0,
            start_type,
            _size(c, k.start_urls, start_type),
        )

    def check(self) -> Inventory:
        """The inventory, or :class:`MigrationError` when a key is not what scrapy-redis writes."""
        inv = self.inventory()
        k = self.source
        if inv.queue_type not in ("zset", "list", "none"):
            raise MigrationError(
                f"{k.queue} is a Redis {inv.queue_type}, not a scrapy-redis queue (sorted set or list)"
            )
        kind = _type(self.source_client, k.dupefilter)
        if kind not in ("set", "none"):
            raise MigrationError(f"{k.dupefilter} is a Redis {kind}, not a scrapy-redis fingerprint set")
        if inv.start_type not in ("list", "set", "zset", "none"):
            raise MigrationError(f"{k.start_urls} is a Redis {inv.start_type}, not scrapy-redis start URLs")
        crawl_queue, crawl_dq = self.frontier.keys.queue, self.frontier.keys.dq
        other = crawl_queue if self.queue.order == "domain" else crawl_dq
        if int(self.frontier.client.zcard(other)):
            raise MigrationError(
                f"crawl {self.frontier.keys.crawl!r} already holds requests of another queue kind than "
                f"{type(self.queue).__name__} (CRAWLPLUG_QUEUE_CLASS); migrate with the queue class it uses"
            )
        return inv

    # -- the migration -----------------------------------------------------------------
    def run(self, *, dry_run: bool = False) -> Report:
        report = Report(dry_run=dry_run)
        queue_key, start_key = self.source.queue, self.source.start_urls
        if not dry_run:
            queue_key = self._freeze(self.source.queue, report)
            start_key = self._freeze(self.source.start_urls, report)
        function = self._choose_function(queue_key, report)
        report.function = function
        self._move_requests(queue_key, report, dry_run)
        self._copy_fingerprints(function, report, dry_run)
        self._move_starts(start_key, report, dry_run)
        if not dry_run:
            for key in (self.source.queue, self.source.start_urls):
                if key in report.backups and _type(self.source_client, key) != "none":
                    report.late_writes[key] = _size(self.source_client, key, _type(self.source_client, key))
            logger.info(
                "crawlplug: migrated scrapy-redis's %s into crawl %r: %d requests admitted, %d skipped, "
                "%d fingerprints, %d start entries",
                self.source.queue,
                self.frontier.keys.crawl,
                report.admitted,
                report.skipped_total,
                report.fingerprints_copied,
                report.start_entries,
            )
        return report

    def _freeze(self, key: str, report: Report) -> str:
        """Rename ``key`` to a free ``<key>:migrated[:n]``; the key to read from."""
        client = self.source_client
        if _type(client, key) == "none":
            return key
        for n in range(1, 1000):
            backup = f"{key}:migrated" if n == 1 else f"{key}:migrated:{n}"
            try:
                if client.renamenx(key, backup):
                    report.backups[key] = backup
                    return backup
            except redis.ResponseError as exc:  # e.g. two slots of a cluster
                raise MigrationError(f"cannot rename {key} to {backup} on the source Redis: {exc}") from None
        raise MigrationError(f"{key}:migrated ... {key}:migrated:999 all exist; delete old backups first")

    # -- requests ------------------------------------------------------------------------
    def _entries(self, key: str) -> Iterator[bytes]:
        """Queue entries in the order crawlplug's queue should admit them (see run())."""
        client = self.source_client
        kind = _type(client, key)
        if kind == "none":
            return
        total = _size(client, key, kind)
        # scrapy-redis pops: a sorted set from the lowest score (ZRANGE 0 0), FifoQueue
        # from the tail of its list (LPUSH/RPOP), LifoQueue from the head (LPUSH/LPOP)
        ascending = kind == "zset" or self.lifo
        if self.queue.order == "max":  # crawlplug's LifoQueue pops the newest first
            ascending = not ascending
        read = client.zrange if kind == "zset" else client.lrange
        starts = range(0, total, READ_BATCH)
        for start in starts if ascending else reversed(starts):
            chunk = read(key, start, min(start + READ_BATCH, total) - 1)
            yield from chunk if ascending else reversed(chunk)

    def _request(self, raw: bytes, report: Report) -> Request | None:
        """The request of one queue entry, or None (counted in ``report``)."""
        try:
            obj = restricted_loads(raw)
        except RefusedGlobal as exc:
            report.refused_globals[exc.path] += 1
            report.skipped[f"refused global {exc.path}"] += 1
            return None
        except Exception as exc:  # noqa: BLE001 - any garbage: counted, never fatal
            report.skipped[f"not a pickle crawlplug can read ({type(exc).__name__})"] += 1
            return None
        try:
            return self._build(obj)
        except (DecodeError, ConfigError) as exc:
            report.skipped[str(exc)] += 1
            return None

    def _build(self, obj: Any) -> Request:
        if isinstance(obj, Request):
            try:
                obj = obj.to_dict()
            except Exception as exc:  # noqa: BLE001 - a half-built object from a crafted pickle
                raise DecodeError(f"a pickled Request that cannot be read ({type(exc).__name__})") from None
        if not isinstance(obj, dict):
            raise DecodeError(f"entry is a {type(obj).__name__}, not a request dict")
        url = obj.get("url")
        if not isinstance(url, str):
            raise DecodeError("entry has no url")
        cls_path = obj.get("_class", "scrapy.http.request.Request")
        if not isinstance(cls_path, str) or cls_path not in self.serializer.allowed_classes:
            raise DecodeError(f"request class {cls_path!r} is not allowed (CRAWLPLUG_REQUEST_CLASSES)")
        try:
            cls = load_object(cls_path)
        except (ImportError, NameError, AttributeError, ValueError) as exc:
            raise DecodeError(f"request class {cls_path!r} cannot be loaded: {exc}") from None
        kwargs = {k: v for k, v in obj.items() if k in cls.attributes and k not in ("callback", "errback")}
        if "_encoding" in obj and "encoding" not in kwargs:  # scrapy.utils.reqser, before Scrapy 2.6
            kwargs["encoding"] = obj["_encoding"]
        for key in ("callback", "errback"):
            name = obj.get(key)
            if name is not None:
                kwargs[key] = self._method(name, key)
        try:
            return cls(**kwargs)
        except (TypeError, ValueError, AttributeError, LookupError) as exc:
            raise DecodeError(f"entry does not make a valid request: {exc}") from None

    def _method(self, name: Any, what: str) -> Any:
        """A method of the stub named ``name``, if the crawl's nodes may accept it as a callback:
        judged on the spider class when it is known, else on what no spider accepts."""
        if self.spidercls is not None:
            reason = callbacks.refusal(self.spidercls, name, what)
        else:
            reason = callbacks.refusal_for_any_spider(name, what)
        if reason is not None:
            raise DecodeError(reason)
        if name not in self._defined:
            setattr(self._stub_cls, name, _named_noop(name))
            self._defined.add(name)
            self._stub_cls.crawlplug_callbacks = frozenset(self._defined)  # judged above
        return callbacks.resolve(self._stub, name, what)

    def _move_requests(self, key: str, report: Report, dry_run: bool) -> None:
        batch: list[tuple[Any, ...]] = []
        for raw in self._entries(key):
            report.requests_read += 1
            request = self._request(raw, report)
            if request is None:
                continue
            try:
                payload = self.serializer.dumps(request, self._stub)
            except SerializationError as exc:
                report.skipped[f"cannot be stored as JSON: {exc}"] += 1
                continue
            arg = b""
            if not request.dont_filter and self.frontier.dedup.mode != "none":
                arg = self.frontier.dedup.argument(self.fingerprinter.fingerprint(request))
            domain = self.queue.domain(request)
            # the 5th field routes it to its shard in a sharded crawl (crawlplug.frontier.core), as the scheduler does
            route = domain or urlparse_cached(request).hostname or request.url
            batch.append((arg, self.queue.score(request), payload, domain, route))
            if len(batch) >= BATCH:
                self._admit(batch, report, dry_run)
                batch = []
        self._admit(batch, report, dry_run)

    def _admit(self, batch: list[tuple[Any, ...]], report: Report, dry_run: bool) -> None:
        if not batch:
            return
        if dry_run:
            report.admitted += len(batch)
            return
        result = self.frontier.admit(batch)
        report.admitted += result.admitted
        report.already_seen += result.filtered

    # -- fingerprints ---------------------------------------------------------------------
    def _choose_function(self, queue_key: str, report: Report) -> str:
        """The fingerprint function that made the old set, from queued requests it holds."""
        if self.function != "auto":
            report.function_evidence = "given"
            return self.function
        hexes: dict[str, list[str]] = {name: [] for name in legacy.FINGERPRINT_FUNCTIONS}
        scratch = Report()
        for raw in self._entries(queue_key):
            request = self._request(raw, scratch)
            if request is None or request.dont_filter:
                continue
            for name, func in legacy.FINGERPRINT_FUNCTIONS.items():
                hexes[name].append(func(request))
            if len(hexes["json"]) >= DETECT_SAMPLE:
                break
        sample = len(hexes["json"])
        if not sample or _type(self.source_client, self.source.dupefilter) != "set":
            report.function_evidence = "no queued request to tell by: scrapy-redis >= 0.8's assumed"
            return "json"
        found = {
            name: sum(map(bool, self.source_client.smismember(self.source.dupefilter, values)))
            for name, values in hexes.items()
        }
        best = max(found, key=lambda name: found[name])
        if not found[best]:
            report.function_evidence = (
                f"none of {sample} queued requests is in {self.source.dupefilter}: scrapy-redis >= 0.8's assumed"
            )
            return "json"
        report.function_evidence = f"{found[best]} of {sample} queued requests found in {self.source.dupefilter}"
        return best

    def _copy_fingerprints(self, function: str, report: Report, dry_run: bool) -> None:
        client, key = self.source_client, self.source.dupefilter
        values = array("Q")  # 8 bytes per fingerprint, not a Python int each
        if _type(client, key) == "set":
            for member in client.sscan_iter(key, count=READ_BATCH):
                try:
                    values.append(legacy.prefix(member))
                except (ValueError, UnicodeDecodeError):
                    report.fingerprints_invalid += 1
        report.fingerprints_copied = len(values)
        if dry_run:
            report.fingerprints_total = len(legacy.pack(values)) // legacy.PREFIX_BYTES
            return
        try:
            report.fingerprints_total = legacy.merge(
                self.frontier.client, self.frontier.keys, values, function, self.source.dupefilter
            )
        except ConfigError as exc:
            raise MigrationError(str(exc)) from None

    # -- start URLs -------------------------------------------------------------------------
    def _move_starts(self, key: str, report: Report, dry_run: bool) -> None:
        client = self.source_client
        kind = _type(client, key)
        if kind == "list":
            total = int(client.llen(key))
            chunks: Iterator[list[bytes]] = (
                client.lrange(key, start, start + READ_BATCH - 1) for start in range(0, total, READ_BATCH)
            )
        elif kind == "zset":  # RedisSpider pops the highest score first
            total = int(client.zcard(key))
            chunks = (client.zrevrange(key, start, start + READ_BATCH - 1) for start in range(0, total, READ_BATCH))
        elif kind == "set":
            chunks = iter([list(client.sscan_iter(key, count=READ_BATCH))])
        else:
            return
        for chunk in chunks:
            report.start_entries += len(chunk)
            if not dry_run:
                Crawl.of(self.frontier).push_starts(chunk)


def _named_noop(name: str) -> Any:
    def callback(self: Any, *args: Any, **kwargs: Any) -> None:
        return None

    callback.__name__ = callback.__qualname__ = name
    return callback


def _type(client: redis.Redis, key: str) -> str:
    kind = client.type(key)
    return kind.decode() if isinstance(kind, bytes) else str(kind)


def _size(client: redis.Redis, key: str, kind: str) -> int:
    return int({"zset": client.zcard, "list": client.llen, "set": client.scard}.get(kind, lambda _k: 0)(key))
