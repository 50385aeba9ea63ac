"""Import: an export file validated whole, then written (the format is described in crawlplug.crawl.transfer).

Its size: one reader of one format, a check per record type and a writer per key; split,
the checks would sit apart from the writes they guard.
"""

from __future__ import annotations

import base64
import json
import math
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, Any

import redis

from ...config import START_KEY
from ...errors import TransferError
from ...frontier.core import Frontier
from ...frontier.dedup import has_native_bloom
from ...frontier.domains import Domains
from ...frontier.fphash import STORE_FIELD, HashDedup, bind_hash_parts, parse_spec
from ...frontier.keys import CrawlKeys
from ...frontier.layout import claim_shards
from ...frontier.store import text
from .. import runs
from .common import BATCH, FORMAT, VERSION, _b64, _batches, _dec, _short

__all__ = ["import_crawl", "read_header"]

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
        if "lane" in record and (not isinstance(record["lane"], str) or not START_KEY.fullmatch(record["lane"])):
            raise ValueError(f"'lane' must name a start-entry list start_urls:<lane>, got {_short(record['lane'])}")
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
        if "hash_spec" in record:  # the compact store's (crawlplug.frontier.fphash)
            try:
                parse_spec(_need(record, "hash_spec", str))
            except ValueError:
                raise ValueError(
                    f"hash_spec {record['hash_spec']!r} is not split:fill:level or bits:fill:growth"
                ) from None
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
            return text(key)
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
) -> dict[str, object]:
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
        "requests": 0,
        "leased": 0,
        "start_entries": 0,
        "dead": 0,
        "seeds": 0,
        "dconf": 0,
        "domains": 0,
        "stats": 0,
        "fingerprints": 0,
        "bloom_keys": 0,
        "bloom_bytes": 0,
        "bf_chunks": 0,
    }
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
            lane = record.get("lane") or "start_urls"
            pipe.rpush(cur.key(lane), _dec(record["entry"], "entry"))
            if lane != "start_urls":
                pipe.sadd(cur.lanes, lane)
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
        elif kind == "seen" and record["hex"] and "hash_spec" in record:
            # the compact store: recorded as admission records them (seen.lua), and the crawl told to keep it
            store = Frontier(client, cur, dedup=HashDedup(parse_spec(record["hash_spec"])))
            bind_hash_parts(store, parse_spec(record["hash_spec"]))
            store.record_seen([(bytes.fromhex(x), "") for x in record["hex"]])
            client.hset(keys.base.meta, STORE_FIELD, "hash")
            counts["fingerprints"] += len(record["hex"])
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
    timed = {d: due for d in domains if (due := schedule.get(d)) is not None}
    for batch in _batches(sorted(timed)):
        client.zadd(keys.domains, {d: timed[d] for d in batch})
    rest = sorted(domains - set(timed))
    view = Domains(client, keys)
    for batch in _batches(rest):
        current = client.hmget(keys.dconf, [f"s:{d}" for d in batch])
        # rewriting a domain's own settings field (or deleting the absent one) reschedules it
        view.configure({f"s:{d}": text(v) if v is not None else "" for d, v in zip(batch, current)})
    return len(domains)


def read_header(line: str) -> dict[str, object]:
    """The header of an export (its first line), validated."""
    try:
        return _check_header(json.loads(line.lstrip("\ufeff")))
    except ValueError as exc:
        raise TransferError(f"line 1: {exc}") from None
