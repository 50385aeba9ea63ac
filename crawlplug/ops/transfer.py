"""Export a crawl's Redis state as JSON lines, and import it into another Redis.

``crawlplug export`` / ``crawlplug import`` are thin layers over
:func:`export_crawl` and :func:`import_crawl`: a backup of a crawl, or a move
of a crawl from one Redis server to another (or to another crawl name).

The file is UTF-8 JSON lines, pure ASCII in practice (``\\u`` escapes). Every
byte string is a JSON string when it is valid UTF-8, else ``{"b64": "..."}``.
Line 1 is the header, the last line the end record (an import refuses a file
without it: a truncated file is never taken for a whole one)::

    {"type": "crawlplug-export", "version": 1, "crawl": "shop", "exported_at": "2025-...Z",
     "exported_at_ms": 1748779200000, "queue": "plain" | "domain", "dedup": "set" | ..., "seq": 1234}
    {"type": "request", "id": "0000000000000012", "score": -10.0, "payload": "{...}"}
    {"type": "request", "id": "...", "domain": "example.com", "rank": "1125899906842614", "payload": ...}
        (+ "deliveries": n when the request was delivered before, "leased": true when it was in flight)
    {"type": "start", "entry": "https://example.com/"}          start_urls, in list order
    {"type": "dead", "letter": "<JSON header>\\n<payload>"}
    {"type": "seed", "id": "...", "spec": "{...}", "due": 1748779200000 | null}
    {"type": "dconf" | "dstate" | "stats" | "crawlstats" | "run" | "runs", "fields": [[field, value], ...]}
    {"type": "domain", "domain": "example.com", "next": <ms> | null}   the per-domain schedule
    {"type": "seen", "hex": ["<40 hex digits>", ...]}             set dedup, up to 1000 per line
    {"type": "seen_ttl", "entries": [["<hex>", <expiry ms>], ...]}  expiring dedup
    {"type": "bloom", "key": "bloom:1:0", "kind": "string", "size": <bytes>, "expire_at": <ms> | null}
    {"type": "bloom_chunk", "key": "bloom:1:0", "offset": <bytes>, "data": "<base64>"}
    {"type": "bloom", "key": "bloom:meta", "kind": "hash", "fields": [...], "expire_at": null}
    {"type": "bf", "iter": <n>, "data": "<base64>"}                 native BF.* filter (BF.SCANDUMP)
    {"type": "end", "records": <records between header and end>, "counts": {...}}

What becomes of what:

* queued requests keep their id and their place (score, or domain and rank);
* leased (in-flight) requests are exported as queued ones: on import the work
  goes back to the queue, its delivery count kept (as when a lease is reaped);
  a leased start entry goes back to the head of ``start_urls``;
* ``seq`` becomes the larger of the exported ``seq`` and the largest id, so
  new ids continue above every imported one;
* the per-domain schedule (``domains``) is restored for domains that were
  waiting on a time; domains parked at their concurrency limit (their leases
  are queued again now) are rescheduled by ``lua/domainconf.lua``; of
  ``dstate`` only the time each domain's last request was sent (``l:``) is
  kept: nothing is in flight on the target;
* Bloom filter keys are copied byte for byte (all-zero stretches of a layer
  are not written out), with their expiry time.

Not exported: live nodes, their metrics, Scrapy stats and last admission
replies (``nodes``, ``producers``, ``node:*``, ``statnodes``, ``reply:*``), the nodes
found dead in the last hour (``graveyard``), the seed timer's lock, the rate series
(``series``) and scraped items (``items``: ``crawlplug items export``).
:func:`export_crawl` lists which of these the crawl has in ``counts["not_exported"]``.

An export reads with SCAN-family commands, a batch at a time: memory stays
bounded by the batch, not the crawl. It is a consistent snapshot only of a
crawl no node is working on (stop the nodes first; a graceful stop hands their
leases back). An import reads the whole file once to validate it (spooled to
a temporary file when it is a stream) and writes nothing unless every line is
valid; then it writes in pipelines of about 1000 commands.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import IO, Any, TextIO

import redis

from ..errors import CrawlplugError
from ..frontier import runs
from ..frontier.dedup import has_native_bloom
from ..frontier.keys import CrawlKeys
from ..frontier.sharded import claim_shards, parts
from ..frontier.single import Domains
from ..frontier.store import rank_of

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
    "queue", "requests", "seq", "leases", "leased", "deliveries", "seen", "seen_ttl", "dead", "stats",
    "start_urls", "seeds", "seeds_due", "dq", "domains", "dstate", "dconf", "crawlstats", "bf", "run", "runs",
)  # fmt: skip
#: Keys that only mean something on the Redis they are on: the epoch (an import begins a new one).
_LOCAL = ("epoch",)


class TransferError(CrawlplugError):
    """An export file that cannot be imported, or a target that must not be written."""


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
    raise ValueError(f"{what} must be a string or {{\"b64\": ...}}, got {_short(value)}")


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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _now_ms(client: redis.Redis) -> int:
    sec, usec = client.time()
    return int(sec) * 1000 + int(usec) // 1000


def _batches(iterable: Iterable[Any], size: int = BATCH) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for x in iterable:
        batch.append(x)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


# -- export -----------------------------------------------------------------------------


class _Out:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.records = 0

    def write(self, record: dict[str, Any], *, count: bool = True) -> None:
        self.out.write(json.dumps(record, separators=(",", ":")) + "\n")
        if count:
            self.records += 1


def _crawl_key_names(client: redis.Redis, keys: CrawlKeys) -> list[str]:
    """The names (after ``<prefix>:{<crawl>}:``) of every key the crawl has."""
    cut = len(keys.tag) + 1
    return sorted({_text(k)[cut:] for k in client.scan_iter(match=keys.pattern(), count=BATCH)})


def _not_exported(names: list[str]) -> list[str]:
    out = set()
    for name in names:
        if name in _EXPORTED or name in _LOCAL or name == "bloom" or name.startswith("bloom:"):
            continue
        out.add(f"{name.split(':', 1)[0]}:*" if name.startswith(("node:", "reply:")) else name)
    return sorted(out)


def _dedup_mode(client: redis.Redis, keys: CrawlKeys) -> str:
    if client.exists(keys.key("bf")):
        return "bf"
    if client.exists(keys.key("bloom")):
        fmt = client.hget(keys.key("bloom"), "format")
        return "bf" if fmt == b"native" else "bloom"
    if client.exists(keys.key("seen_ttl")):
        return "ttl"
    if client.exists(keys.seen):
        return "set"
    return "none"


def export_crawl(client: redis.Redis, keys: CrawlKeys, out: TextIO) -> dict[str, Any]:
    """Write crawl ``keys``'s state to ``out`` as JSON lines; returns what was written, counted.

    Safe to run beside a live crawl (it only reads), but then it is no snapshot:
    stop the crawl's nodes first (``counts["live_nodes"]`` says how many were live).
    A sharded crawl (CRAWLPLUG_SHARDS) is written part by part: the crawl's own keys,
    then each shard's, each after a ``part`` record; the header says how many shards.
    """
    w = _Out(out)
    counts: dict[str, Any] = {
        "requests": 0, "leased": 0, "start_entries": 0, "dead": 0, "seeds": 0, "dconf": 0, "domains": 0,
        "stats": 0, "fingerprints": 0, "bloom_keys": 0, "bloom_bytes": 0, "bf_chunks": 0, "orphans": 0,
    }  # fmt: skip
    now = _now_ms(client)
    all_parts = parts(client, keys)
    shards = len(all_parts) - 1
    names = {p.tag: _crawl_key_names(client, p) for p in all_parts}
    counts["not_exported"] = sorted({n for part_names in names.values() for n in _not_exported(part_names)})
    counts["live_nodes"] = int(client.zcount(keys.nodes, now + 1, "+inf"))
    domain_mode = any(n in part_names for part_names in names.values() for n in ("dq", "domains", "dconf"))
    header = {
        "type": FORMAT, "version": VERSION, "crawl": keys.crawl,
        "exported_at": datetime.fromtimestamp(now / 1000, timezone.utc).isoformat(timespec="milliseconds"),
        "exported_at_ms": now, "queue": "domain" if domain_mode else "plain",
        "dedup": _dedup_mode(client, all_parts[-1]), "seq": int(client.get(keys.seq) or 0),
    }  # fmt: skip
    if shards:
        header["shards"] = shards
    w.write(header, count=False)
    for part in all_parts:
        if shards:
            w.write({"type": "part", "shard": part.shard, "seq": int(client.get(part.seq) or 0)})
        _export_part(client, part, w, counts, now, names[part.tag])
    w.write({"type": "end", "records": w.records, "counts": counts}, count=False)
    out.flush()
    return counts


def _export_part(client: redis.Redis, keys: CrawlKeys, w: _Out, counts: dict[str, Any], now: int,
                 names: list[str]) -> None:  # fmt: skip
    """Every record of one key set (a crawl's, or one shard's)."""

    def payloads(ids: list[str]) -> tuple[list[Any], list[Any]]:
        pipe = client.pipeline(transaction=False)
        pipe.hmget(keys.requests, ids)
        pipe.hmget(keys.deliveries, ids)
        found, deliveries = pipe.execute()
        return found, deliveries

    def emit(record: dict[str, Any], payload: bytes | None, deliveries: int) -> None:
        if payload is None:  # an id without a payload: pop.lua would drop it too
            counts["orphans"] += 1
            return
        record["payload"] = _enc(payload)
        if deliveries > 0:
            record["deliveries"] = deliveries
        w.write(record)
        counts["requests"] += 1

    # the plain queue
    for batch in _batches(client.zscan_iter(keys.queue, count=BATCH)):
        ids = [_text(m) for m, _ in batch]
        found, deliveries = payloads(ids)
        for (rid, (_, score)), payload, d in zip(zip(ids, batch), found, deliveries):
            emit({"type": "request", "id": rid, "score": score}, payload, int(d or 0))

    # the per-domain queue: members "<domain>\t<rank><id>"
    for batch in _batches(client.zscan_iter(keys.dq, count=BATCH)):
        parsed = []
        for member, _ in batch:
            domain, tab, rest = member.partition(b"\t")
            if not tab or len(rest) <= 16 or not rest[:16].isdigit():
                counts["orphans"] += 1
                continue
            parsed.append((_text(domain), rest[:16].decode(), rest[16:].decode()))
        found, deliveries = payloads([rid for _, _, rid in parsed]) if parsed else ([], [])
        for (domain, rank, rid), payload, d in zip(parsed, found, deliveries):
            emit({"type": "request", "id": rid, "domain": domain, "rank": rank}, payload, int(d or 0))

    # leases: in-flight work goes back to the queue on import
    start_leases: list[tuple[str, bytes]] = []
    for batch in _batches(client.hscan_iter(keys.leased, count=BATCH)):
        ids = [_text(rid) for rid, _ in batch]
        found = client.hmget(keys.requests, ids)
        for rid, (_, info), payload in zip(ids, batch, found):
            parts = _text(info).split("|")
            if len(parts) < 3:
                counts["orphans"] += 1
                continue
            score, d = parts[1], int(parts[2]) if parts[2].isdigit() else 1
            if score == "start":  # a start entry taken by a node: back to the head of start_urls
                if payload is not None:
                    start_leases.append((rid, payload))
                continue
            domain = parts[3] if len(parts) > 3 and parts[3] not in ("", "f") else ""
            try:
                value = float(score)
            except ValueError:
                value = 0.0
            record: dict[str, Any] = {"type": "request", "id": rid}
            if domain:
                record.update(domain=domain, rank=rank_of(value))
            else:
                record["score"] = value
            record["leased"] = True
            before = counts["requests"]
            emit(record, payload, d)
            counts["leased"] += counts["requests"] - before

    # start entries: leased ones first (reap.lua puts them back at the head), then the list
    for _, entry in sorted(start_leases):
        w.write({"type": "start", "entry": _enc(entry), "leased": True})
        counts["start_entries"] += 1
    for key, kind, counter in ((keys.start_urls, "start", "start_entries"), (keys.dead, "dead", "dead")):
        start = 0
        while True:
            chunk = client.lrange(key, start, start + BATCH - 1)
            for value in chunk:
                w.write({"type": kind, ("entry" if kind == "start" else "letter"): _enc(value)})
                counts[counter] += 1
            if len(chunk) < BATCH:
                break
            start += BATCH

    # recurring seeds and their next run
    for batch in _batches(client.hscan_iter(keys.seeds, count=BATCH)):
        pipe = client.pipeline(transaction=False)
        for sid, _ in batch:
            pipe.zscore(keys.seeds_due, sid)
        for (sid, spec), due in zip(batch, pipe.execute()):
            w.write({"type": "seed", "id": _enc(sid), "spec": _enc(spec), "due": None if due is None else int(due)})
            counts["seeds"] += 1

    # small hashes, field by field
    def fields(kind: str, key: str, keep: Any = None) -> int:
        n = 0
        for batch in _batches(client.hscan_iter(key, count=BATCH)):
            pairs = [[_enc(f), _enc(v)] for f, v in batch if keep is None or keep(f)]
            if pairs:
                w.write({"type": kind, "fields": pairs})
                n += len(pairs)
        return n

    counts["dconf"] += fields("dconf", keys.dconf)
    fields("dstate", keys.dstate, lambda f: f.startswith(b"l:"))  # when each domain last sent
    for batch in _batches(client.zscan_iter(keys.domains, count=BATCH)):
        for domain, score in batch:
            w.write({"type": "domain", "domain": _text(domain), "next": score if math.isfinite(score) else None})
            counts["domains"] += 1
    counts["stats"] += fields("stats", keys.stats)
    fields("crawlstats", keys.crawlstats)
    if keys.shard is None:  # the crawl's runs (crawlplug.frontier.runs): the current one and the history
        fields("run", keys.run, lambda f: f != b"epoch")
        fields("runs", keys.runs)

    # dedup state
    for batch in _batches(client.sscan_iter(keys.seen, count=BATCH)):
        w.write({"type": "seen", "hex": [fp.hex() for fp in batch]})
        counts["fingerprints"] += len(batch)
    for batch in _batches(client.zscan_iter(keys.key("seen_ttl"), count=BATCH)):
        live = [[fp.hex(), int(expiry)] for fp, expiry in batch if expiry > now]  # expired ones are forgotten
        if live:
            w.write({"type": "seen_ttl", "entries": live})
            counts["fingerprints"] += len(live)
    for name in names:
        if name == "bloom" or name.startswith("bloom:"):
            counts["bloom_bytes"] += _export_bloom_key(client, keys, name, now, w)
            counts["bloom_keys"] += 1
    if "bf" in names:
        it = 0
        while True:
            it, data = client.execute_command("BF.SCANDUMP", keys.key("bf"), it)
            if int(it) == 0:
                break
            w.write({"type": "bf", "iter": int(it), "data": base64.b64encode(data).decode("ascii")})
            counts["bf_chunks"] += 1
            counts["bloom_bytes"] += len(data)


def _export_bloom_key(client: redis.Redis, keys: CrawlKeys, name: str, now: int, w: _Out) -> int:
    """One key of the Lua Bloom filter: a hash (spec, layer counts) or a string of bits."""
    key = keys.key(name)
    kind = _text(client.type(key))
    pttl = int(client.pttl(key))
    expire_at = now + pttl if pttl > 0 else None
    if kind == "hash":
        first = True
        for batch in _batches(client.hscan_iter(key, count=BATCH)):
            w.write({"type": "bloom", "key": name, "kind": "hash", "fields": [[_enc(f), _enc(v)] for f, v in batch],
                     "expire_at": expire_at if first else None})  # fmt: skip
            first = False
        return 0
    if kind != "string":
        return 0
    size = int(client.strlen(key))
    w.write({"type": "bloom", "key": name, "kind": "string", "size": size, "expire_at": expire_at})
    for offset in range(0, size, STRING_CHUNK):
        data = client.getrange(key, offset, offset + STRING_CHUNK - 1)
        if data.count(0) == len(data):
            continue  # the import allocates the string zeroed
        w.write({"type": "bloom_chunk", "key": name, "offset": offset, "data": base64.b64encode(data).decode("ascii")})
    return size


# -- import: validation ------------------------------------------------------------------

_ID = re.compile(r"^[0-9]{1,20}$")
_RANK = re.compile(r"^[0-9]{16}$")
_BLOOM_NAME = re.compile(r"^bloom(:[A-Za-z0-9:_-]+)?$")


@dataclass
class _Plan:
    """What the validation pass learnt, for the writing pass."""

    header: dict[str, Any] = field(default_factory=dict)
    #: the part the next records belong to: None (the crawl's own keys) or a shard
    part: int | None = None
    max_id: dict[int | None, int] = field(default_factory=dict)
    records: int = 0
    dq_domains: dict[int | None, set[str]] = field(default_factory=dict)
    bloom_strings: dict[tuple[int | None, str], int] = field(default_factory=dict)
    seqs: dict[int | None, int] = field(default_factory=dict)
    has_bf: bool = False
    ended: bool = False


def _need(record: dict[str, Any], name: str, kinds: Any, what: str | None = None) -> Any:
    if name not in record:
        raise ValueError(f"missing {name!r}")
    value = record[name]
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in _as_tuple(kinds)):
        raise ValueError(f"{what or repr(name)} has the wrong type: {_short(value)}")
    return value


def _as_tuple(kinds: Any) -> tuple[Any, ...]:
    return kinds if isinstance(kinds, tuple) else (kinds,)


def _number(value: Any, what: str, *, finite: bool = False, nullable: bool = False) -> float | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{what} must be a number, got {_short(value)}")
    if finite and not math.isfinite(value):
        raise ValueError(f"{what} must be finite, got {_short(value)}")
    return value


def _pairs(record: dict[str, Any], what: str) -> list[tuple[bytes, bytes]]:
    raw = _need(record, "fields", list)
    out = []
    for i, pair in enumerate(raw):
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError(f"{what} field {i} must be a [field, value] pair")
        out.append((_dec(pair[0], f"{what} field {i}"), _dec(pair[1], f"{what} value {i}")))
    return out


def _check_header(record: Any) -> dict[str, Any]:
    if not isinstance(record, dict) or record.get("type") != FORMAT:
        raise ValueError(f"not a crawlplug export: the first line must be the {FORMAT!r} header")
    if record.get("version") != VERSION:
        raise ValueError(f"export format version {record.get('version')!r}; this crawlplug reads version {VERSION}")
    _need(record, "crawl", str)
    if record.get("queue") not in ("plain", "domain"):
        raise ValueError(f"'queue' must be 'plain' or 'domain', got {_short(record.get('queue'))}")
    seq = record.get("seq", 0)
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        raise ValueError(f"'seq' must be a non-negative integer, got {_short(seq)}")
    shards = record.get("shards", 1)
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ValueError(f"'shards' must be a positive integer, got {_short(shards)}")
    return record


def _check(record: Any, plan: _Plan) -> None:
    """Validate one record (raise ValueError saying why) and note what the writing pass needs."""
    if not isinstance(record, dict):
        raise ValueError("a record must be a JSON object")  # noqa: TRY004
    kind = record.get("type")
    if plan.ended:
        raise ValueError("a record after the end record")
    if kind == "request":
        rid = _need(record, "id", str)
        if not _ID.match(rid):
            raise ValueError(f"request id {rid!r} is not a number")
        plan.max_id[plan.part] = max(plan.max_id.get(plan.part, 0), int(rid))
        _dec(record.get("payload"), "payload")
        if "domain" in record:
            domain = _need(record, "domain", str)
            if not domain or "\t" in domain or "|" in domain:
                raise ValueError(f"invalid domain {domain!r}")
            rank = _need(record, "rank", str)
            if not _RANK.match(rank):
                raise ValueError(f"rank {rank!r} must be 16 digits")
            if "score" in record:
                raise ValueError("a request has a score (plain queue) or a domain and rank, not both")
            plan.dq_domains.setdefault(plan.part, set()).add(domain)
        else:
            _number(record.get("score"), "score")
        d = record.get("deliveries", 0)
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            raise ValueError(f"'deliveries' must be a non-negative integer, got {_short(d)}")
    elif kind == "start":
        _dec(record.get("entry"), "entry")
    elif kind == "dead":
        _dec(record.get("letter"), "letter")
    elif kind == "seed":
        _dec(record.get("id"), "seed id")
        _dec(record.get("spec"), "seed spec")
        _number(record.get("due"), "due", finite=True, nullable=True)
    elif kind in ("dconf", "stats", "crawlstats", "run", "runs"):
        _pairs(record, kind)
    elif kind == "dstate":
        for f, _ in _pairs(record, kind):
            if not f.startswith(b"l:"):
                raise ValueError(f"dstate field {f!r}: only 'l:<domain>' fields are imported")
    elif kind == "domain":
        domain = _need(record, "domain", str)
        if not domain or "\t" in domain:
            raise ValueError(f"invalid domain {domain!r}")
        _number(record.get("next"), "next", finite=True, nullable=True)
    elif kind == "seen":
        for i, fp in enumerate(_need(record, "hex", list)):
            _hex(fp, f"fingerprint {i}")
    elif kind == "seen_ttl":
        for i, entry in enumerate(_need(record, "entries", list)):
            if not isinstance(entry, list) or len(entry) != 2:
                raise ValueError(f"entry {i} must be a [fingerprint, expiry] pair")
            _hex(entry[0], f"fingerprint {i}")
            _number(entry[1], f"expiry {i}", finite=True)
    elif kind == "bloom":
        name = _bloom_name(record)
        _number(record.get("expire_at"), "expire_at", finite=True, nullable=True)
        if record.get("kind") == "string":
            size = _need(record, "size", int)
            if size < 0 or size > 512 << 20:
                raise ValueError(f"size {size} out of range")
            plan.bloom_strings[plan.part, name] = size
        elif record.get("kind") == "hash":
            _pairs(record, "bloom hash")
        else:
            raise ValueError(f"bloom 'kind' must be 'string' or 'hash', got {_short(record.get('kind'))}")
    elif kind == "bloom_chunk":
        name = _bloom_name(record)
        if (plan.part, name) not in plan.bloom_strings:
            raise ValueError(f"chunk of {name!r} before its 'bloom' record")
        offset = _need(record, "offset", int)
        data = _b64(record.get("data"), "data")
        if offset < 0 or offset + len(data) > plan.bloom_strings[plan.part, name]:
            raise ValueError(f"chunk at {offset} (+{len(data)} bytes) beyond the size of {name!r}")
    elif kind == "bf":
        it = _need(record, "iter", int)
        if it <= 0:
            raise ValueError(f"'iter' must be positive, got {it}")
        _b64(record.get("data"), "data")
        plan.has_bf = True
    elif kind == "part":
        shards = plan.header.get("shards", 1)
        shard = record.get("shard")
        if shards < 2:
            raise ValueError("a 'part' record in the export of an unsharded crawl")
        if shard is not None and (isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard < shards):
            raise ValueError(f"'shard' must be null or 0..{shards - 1}, got {_short(shard)}")
        seq = record.get("seq", 0)
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise ValueError(f"'seq' must be a non-negative integer, got {_short(seq)}")
        plan.part = shard
        plan.seqs[shard] = seq
    elif kind == "end":
        n = record.get("records")
        if n != plan.records:
            raise ValueError(f"the end record counts {_short(n)} records, the file has {plan.records}: damaged file?")
        plan.ended = True
        return
    else:
        raise ValueError(f"unknown record type {_short(kind)}")
    plan.records += 1


def _hex(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be hex text, got {_short(value)}")  # noqa: TRY004
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise ValueError(f"{what} is not hex: {_short(value)}") from None
    if not raw:
        raise ValueError(f"{what} is empty")
    return raw


def _bloom_name(record: dict[str, Any]) -> str:
    name = _need(record, "key", str)
    if not _BLOOM_NAME.match(name):
        raise ValueError(f"{name!r} is not a Bloom filter key name")
    return name


def _parse(line: str, number: int) -> Any:
    try:
        return json.loads(line)
    except ValueError as exc:
        raise TransferError(f"line {number}: not valid JSON ({exc})") from None


# -- import: writing ---------------------------------------------------------------------


class _Pipe:
    """A non-transactional pipeline flushed every BATCH commands."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.pipe = client.pipeline(transaction=False)
        self.pending = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.pipe, name)

        def call(*args: Any, **kwargs: Any) -> None:
            method(*args, **kwargs)
            self.pending += 1
            if self.pending >= BATCH:
                self.flush()

        return call

    def flush(self) -> None:
        if self.pending:
            self.pipe.execute()
            self.pending = 0


def _existing(client: redis.Redis, keys: CrawlKeys) -> str | None:
    for pattern in (keys.pattern(), keys.shards_pattern()):
        for key in client.scan_iter(match=pattern, count=BATCH):
            return _text(key)
    return None


def _purge(client: redis.Redis, keys: CrawlKeys) -> int:
    return runs.purge(client, keys)


def _refuse_non_empty(client: redis.Redis, keys: CrawlKeys) -> None:
    key = _existing(client, keys)
    if key is not None:
        raise TransferError(
            f"crawl {keys.crawl!r} already has keys on this Redis (e.g. {key}): import writes only into "
            "an empty crawl; use --replace to delete it first, or import under another --crawl"
        )


def import_crawl(
    client: redis.Redis, keys: CrawlKeys, lines: Iterable[str], *, replace: bool = False
) -> dict[str, Any]:
    """Load an export (lines of :func:`export_crawl`) into crawl ``keys``; returns counts.

    The target crawl must have no key at all, unless ``replace`` is true: then
    every key it has is deleted first (after the file was found valid). The
    whole input is validated before anything is written; an invalid line raises
    :class:`TransferError` naming its line number, and nothing is written.
    """
    if not replace:
        _refuse_non_empty(client, keys)
    plan = _Plan()
    with tempfile.TemporaryFile("w+", encoding="utf-8") as spool:
        number = 0
        for number, line in enumerate(lines, start=1):
            stripped = line.strip().lstrip("\ufeff")
            if not stripped:
                continue
            record = _parse(stripped, number)
            try:
                if not plan.header:
                    plan.header = _check_header(record)
                else:
                    _check(record, plan)
            except ValueError as exc:
                raise TransferError(f"line {number}: {exc}") from None
            spool.write(stripped + "\n")
        if not plan.header:
            raise TransferError(f"line {max(number, 1)}: empty input: not a crawlplug export")
        if not plan.ended:
            raise TransferError(f"line {number}: the file ends without its end record: truncated?")
        if plan.has_bf and not has_native_bloom(client):
            raise TransferError("the export holds a native Bloom filter (BF.*), which this Redis does not have")
        if replace:
            _purge(client, keys)
        else:
            _refuse_non_empty(client, keys)  # nobody wrote meanwhile
        spool.seek(0)
        return _write(client, keys, plan, spool)


def _write(client: redis.Redis, keys: CrawlKeys, plan: _Plan, spool: IO[str]) -> dict[str, Any]:
    counts: dict[str, int] = {
        "requests": 0, "leased": 0, "start_entries": 0, "dead": 0, "seeds": 0, "dconf": 0, "domains": 0,
        "stats": 0, "fingerprints": 0, "bloom_keys": 0, "bloom_bytes": 0, "bf_chunks": 0,
    }  # fmt: skip
    shards = plan.header.get("shards", 1)
    if shards > 1:
        claim_shards(client, keys, shards)  # before any request: nodes must see the layout first

    def part_keys(part: int | None) -> CrawlKeys:
        return keys if part is None else keys.shard_keys(part, shards)

    seqs = dict(plan.seqs)
    seqs[None] = max(seqs.get(None, 0), int(plan.header.get("seq", 0)))
    for part in {*seqs, *plan.max_id}:
        seq = max(seqs.get(part, 0), plan.max_id.get(part, 0))
        if seq:  # first: a node started meanwhile could not reuse an imported id
            client.set(part_keys(part).seq, seq)
    pipe = _Pipe(client)
    cur, part = keys, None
    schedule: dict[int | None, dict[str, float | None]] = {}
    expiries: dict[str, int] = {}
    bloom_keys: set[str] = set()
    spool.readline()  # the header
    for line in spool:
        record = json.loads(line)
        kind = record["type"]
        if kind == "part":
            part = record["shard"]
            cur = part_keys(part)
        elif kind == "request":
            rid = record["id"]
            pipe.hset(cur.requests, rid, _dec(record["payload"], "payload"))
            if "domain" in record:
                pipe.zadd(cur.dq, {f"{record['domain']}\t{record['rank']}{rid}".encode(): 0})
            else:
                pipe.zadd(cur.queue, {rid: record["score"]})
            if record.get("deliveries"):
                pipe.hset(cur.deliveries, rid, record["deliveries"])
            counts["requests"] += 1
            counts["leased"] += bool(record.get("leased"))
        elif kind == "start":
            pipe.rpush(cur.start_urls, _dec(record["entry"], "entry"))
            counts["start_entries"] += 1
        elif kind == "dead":
            pipe.rpush(cur.dead, _dec(record["letter"], "letter"))
            counts["dead"] += 1
        elif kind == "seed":
            sid = _dec(record["id"], "seed id")
            pipe.hset(cur.seeds, sid, _dec(record["spec"], "seed spec"))
            if record.get("due") is not None:
                pipe.zadd(cur.seeds_due, {sid: int(record["due"])})
            counts["seeds"] += 1
        elif kind in ("dconf", "dstate", "stats", "crawlstats", "run", "runs"):
            pairs = _pairs(record, kind)
            if pairs:
                pipe.hset(cur.key(kind), mapping=dict(pairs))
            if kind in ("dconf", "stats"):
                counts[kind] += len(pairs)
        elif kind == "domain":
            schedule.setdefault(part, {})[record["domain"]] = record.get("next")
        elif kind == "seen" and record["hex"]:
            pipe.sadd(cur.seen, *[bytes.fromhex(x) for x in record["hex"]])
            counts["fingerprints"] += len(record["hex"])
        elif kind == "seen_ttl" and record["entries"]:
            pipe.zadd(cur.key("seen_ttl"), {bytes.fromhex(fp): int(ms) for fp, ms in record["entries"]})
            counts["fingerprints"] += len(record["entries"])
        elif kind == "bloom":
            key = cur.key(record["key"])
            if record["kind"] == "string":
                size = record["size"]
                if size:
                    pipe.setrange(key, size - 1, b"\0")  # one allocation, zeroed, as admit.lua makes it
                else:
                    pipe.set(key, b"")
                counts["bloom_bytes"] += size
            else:
                pairs = _pairs(record, "bloom hash")
                if pairs:
                    pipe.hset(key, mapping=dict(pairs))
            bloom_keys.add(key)
            if record.get("expire_at") is not None:
                expiries[key] = int(record["expire_at"])
        elif kind == "bloom_chunk":
            pipe.setrange(cur.key(record["key"]), record["offset"], base64.b64decode(record["data"]))
        elif kind == "bf":
            pipe.execute_command("BF.LOADCHUNK", cur.key("bf"), record["iter"], base64.b64decode(record["data"]))
            counts["bf_chunks"] += 1
    for key, at in expiries.items():
        pipe.pexpireat(key, at)
    pipe.flush()
    counts["bloom_keys"] = len(bloom_keys)
    for part, domains in plan.dq_domains.items():
        counts["domains"] += _schedule(client, part_keys(part), domains, schedule.get(part, {}))
    # No new epoch is needed: the crawl was empty (no epoch, so no node on it), or --replace
    # purged it (its epoch deleted: a node of the old state is refused at its next call)
    return counts


def _schedule(client: redis.Redis, keys: CrawlKeys, domains: set[str], schedule: dict[str, float | None]) -> int:
    """Put every domain with queued requests on the schedule: at the time it was due
    on the source, or, if it had none (parked at its concurrency limit by leases that
    are queued requests now), when lua/domainconf.lua says (dq_wake: its delay after
    its last request was sent, never before now)."""
    timed = {d: schedule[d] for d in domains if schedule.get(d) is not None}
    for batch in _batches(sorted(timed)):
        client.zadd(keys.domains, {d: timed[d] for d in batch})
    rest = sorted(domains - set(timed))
    view = Domains(client, keys)
    for batch in _batches(rest):
        current = client.hmget(keys.dconf, [f"s:{d}" for d in batch])
        # rewriting a domain's own settings field (or deleting the absent one) reschedules it
        view.configure({f"s:{d}": _text(v) if v is not None else "" for d, v in zip(batch, current)})
    return len(domains)


def read_header(line: str) -> dict[str, Any]:
    """The header of an export (its first line), validated."""
    try:
        return _check_header(json.loads(line.lstrip("\ufeff")))
    except ValueError as exc:
        raise TransferError(f"line 1: {exc}") from None


__all__ = ["TransferError", "export_crawl", "import_crawl", "rank_of", "read_header"]
