"""The guard's typed checks left to a read (guard.lua's header): where a key's first access
on every path of a script is a read made before its first write, that read is the key's
check, sent with redis.pcall, and the guard sends no typed length (HLEN, ZCARD) for it.
Each such key, corrupt, still refuses the whole call with the guard's own CorruptKey naming
it, having written nothing; a key whose first access is a write keeps its typed check.
Real scripts on the session Redis; what scripts send is read off MONITOR."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest
import redis

from crawlplug.errors import CorruptKey
from crawlplug.frontier.bloom import BloomSpec
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.dedup import BloomDedup
from crawlplug.frontier.fphash import HashDedup, HashSpec, SplitSpec
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.queues import FifoQueue

from .support.monitor import monitored

K = CrawlKeys("guardreads")


def fp(n: int | str) -> bytes:
    return hashlib.sha1(str(n).encode()).digest()


def payload(n: int | str) -> bytes:
    return json.dumps({"url": f"http://example.com/{n}"}).encode()


def item(f: Frontier, n: int | str) -> tuple[bytes, float, bytes]:
    """A request to admit: its dedup argument (the frontier's mode), score, payload."""
    return (f.dedup.argument(fp(n)), 0.0, payload(n))


def script_commands(r: redis.Redis, action: Callable[[], Any]) -> list[tuple[str, str]]:
    """(command, first argument) of every command scripts sent while ``action`` ran (MONITOR)."""
    return [(words[0].upper(), words[1] if len(words) > 1 else "") for lua, words in monitored(r, action) if lua]


WRITES = frozenset(
    {
        "SET",
        "INCR",
        "HSET",
        "HSETNX",
        "HDEL",
        "HINCRBY",
        "ZADD",
        "ZREM",
        "ZREMRANGEBYSCORE",
        "RPUSH",
        "LPUSH",
        "DEL",
        "PEXPIRE",
        "SETBIT",
        "SETRANGE",
        "SADD",
    }
)


def typed_checks(sent: list[tuple[str, str]], key: str) -> list[str]:
    """The typed-length checks (guard.lua's CHEAP_CHECK) sent on ``key`` before the first write
    (after it, a typed length is a read the script needs: reap.lua's gauges)."""
    first_write = next((i for i, (cmd, _) in enumerate(sent) if cmd in WRITES), len(sent))
    return [cmd for cmd, k in sent[:first_write] if k == key and cmd in ("HLEN", "ZCARD", "SCARD", "STRLEN", "LLEN")]


def snapshot(r: redis.Redis) -> dict[bytes, bytes | None]:
    return {k: r.dump(k) for k in r.scan_iter(match=K.pattern())}


def frontier(r: redis.Redis, store: str = "hash") -> Frontier:
    dedup = {
        "bloom": lambda: BloomDedup(BloomSpec(50, 0.01)),
        "hashgen": lambda: HashDedup(HashSpec(bits=1)),
        "hash": lambda: HashDedup(SplitSpec()),
    }[store]()
    return Frontier(r, K, node_id="node-a", dedup=dedup, queue=FifoQueue)


@pytest.fixture
def crawl(r: redis.Redis) -> Frontier:
    """A crawl with a request leased to node-a and one queued."""
    for key in r.scan_iter(match=K.pattern()):
        r.delete(key)
    f = frontier(r)
    f.admit([item(f, 1), item(f, 2)])
    f.heartbeat([])
    return f


def renew(f: Frontier, ids: list[str]) -> Any:
    (out,) = f.scripts.run_many([f.base.renew_call(ids)])
    if isinstance(out, Exception):
        raise out
    return out


# per script, the keys a read made first checks: (the call, the key, the read that checks it)
def _admit(f: Frontier, held: list[str]) -> Any:
    return f.admit_and_pop([item(f, "new")], held, 2)


CASES: dict[str, tuple[Callable[[Frontier, list[str]], Any], Callable[[CrawlKeys], str], str]] = {
    "admit-and-pop: the compact store": (_admit, lambda k: k.fph, "HMGET"),
    "reap: nodes": (lambda f, held: f.reap(), lambda k: k.nodes, "ZRANGEBYSCORE"),
    "reap: leases": (lambda f, held: f.reap(), lambda k: k.leases, "ZRANGEBYSCORE"),
    "heartbeat: the run": (lambda f, held: f.heartbeat(held), lambda k: k.run, "HMGET"),
    "heartbeat: leased": (lambda f, held: f.heartbeat(held), lambda k: k.leased, "HMGET"),
    "heartbeat: counted": (lambda f, held: f.heartbeat(held, totals={"items": 3}), lambda k: k.counted, "HMGET"),
    "renew: leased": (lambda f, held: renew(f, held), lambda k: k.leased, "HMGET"),
    "release: leased": (lambda f, held: f.release(held, unstarted=False), lambda k: k.leased, "HMGET"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_read_before_the_first_write_is_the_check_of_its_key(r, crawl, case):
    call, key_of, read = CASES[case]
    held = [lease.id for lease in crawl.pop(1)]
    key = key_of(K)
    sent = script_commands(r, lambda: call(crawl, held))
    assert typed_checks(sent, key) == [], f"{case}: the guard still sent a typed check of {key}: {sent}"
    first = next((cmd for cmd, k in sent if k == key), None)
    assert first == read, f"{case}: {key} first met {first}, not its read {read}: {sent}"


@pytest.mark.parametrize("case", list(CASES))
def test_a_key_checked_by_its_read_still_refuses_the_whole_call_naming_it(r, crawl, case):
    call, key_of, _ = CASES[case]
    held = [lease.id for lease in crawl.pop(1)]
    key = key_of(K)
    r.delete(key)
    r.rpush(key, "by hand")
    before = snapshot(r)
    with pytest.raises(CorruptKey) as refused:
        call(crawl, held)
    assert refused.value.key == key
    assert f"CORRUPT crawl key {key} holds a list, not a " in str(refused.value)
    assert "nothing was done (repair or delete the key" in str(refused.value)
    assert snapshot(r) == before, f"{case}: the refused call wrote"


@pytest.mark.parametrize("store, expected", [("hash", ["HMGET", "HINCRBY"]), ("hashgen", ["HMGET", "HGET", "HINCRBY"])])
def test_the_compact_stores_state_is_read_once_a_call(r, store, expected):
    """The store's state (splitting: level, next and count in one HMGET; by generations, the
    generation count, then the newest one's count): read by the guard's check, used again by
    dedup.lua (not read twice), then its count written."""
    for key in r.scan_iter(match=K.pattern()):
        r.delete(key)
    f = frontier(r, store)
    f.admit([item(f, 1), item(f, 2)])
    (held,) = [lease.id for lease in f.pop(1)]
    sent = script_commands(r, lambda: _admit(f, [held]))
    assert [cmd for cmd, k in sent if k == K.fph] == expected


def test_a_bloom_filters_layer_count_is_its_check_and_read_once(r):
    for key in r.scan_iter(match=K.pattern()):
        r.delete(key)
    f = frontier(r, "bloom")
    f.admit([item(f, 1)])
    metas = {k for cmd, k in script_commands(r, lambda: f.admit([item(f, 2)])) if cmd == "HGET" and ":bloom" in k}
    assert metas, "the filter's hash of layer counts was read"
    sent = script_commands(r, lambda: f.admit([item(f, 3)]))
    for meta in metas:
        on_it = [cmd for cmd, k in sent if k == meta]
        assert typed_checks(sent, meta) == [] and on_it[:2] == ["HGET", "HGET"] and on_it.count("HGET") == 2, on_it
    meta = min(metas)
    r.delete(meta)
    r.set(meta, "by hand")
    before = snapshot(r)
    with pytest.raises(CorruptKey) as refused:
        f.admit([item(f, 4)])
    assert refused.value.key == meta and "holds a string, not a hash" in str(refused.value)
    assert snapshot(r) == before


def test_a_key_written_first_keeps_its_typed_check(r, crawl):
    """leases in a heartbeat: first met by its renewal's ZADD, after the node's writes."""
    held = [lease.id for lease in crawl.pop(1)]
    sent = script_commands(r, lambda: crawl.heartbeat(held))
    assert typed_checks(sent, K.leases) == ["ZCARD"]
