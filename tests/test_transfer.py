"""`crawlplug export` / `crawlplug import` (crawlplug.crawl.transfer): a crawl moved between two real Redis servers.

Server A is the suite's Redis, server B a private one (``fresh_redis``). Each
crawl state is built with the real components (Frontier admission, pops,
dead letters, start entries, seeds, DomainQueue, the Bloom dupefilter),
exported from A, imported into B under the same crawl name, and B is checked
to behave as A would: the same requests queued once each (leases queued
again), the same dedup answers, the same pop order, ids continuing above the
imported ones. The last test moves a real `scrapy crawl` half way through.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import time
from collections import Counter, defaultdict

import pytest
import redis
import scrapy
from click.testing import CliRunner
from scrapy.utils.request import fingerprint
from scrapy.utils.test import get_crawler

from crawlplug.cli import main
from crawlplug.crawl import Crawl
from crawlplug.crawl.transfer import TransferError, export_crawl, import_crawl
from crawlplug.dupefilters import ExpiringDupeFilter, RedisBloomDupeFilter
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.domains import Domains
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.store import rank_of
from crawlplug.queues import DomainQueue
from crawlplug.serializers import JsonSerializer, describe_payload
from crawlplug.starts.seeds import Seeds, make_seed
from tests.support.nodes import wait_for_fetches

from .support.servers import RedisServer, free_port, redisbloom_module

K = CrawlKeys("moving")


@pytest.fixture
def a(r: redis.Redis) -> redis.Redis:
    return r


@pytest.fixture
def b(fresh_redis: RedisServer):
    client = redis.Redis.from_url(fresh_redis.url)
    yield client
    client.close()


def req(url: str, priority: int = 0) -> tuple[bytes, float, bytes]:
    request = scrapy.Request(url, priority=priority)
    return fingerprint(request), float(-priority), JsonSerializer().dumps(request, None)


def move(src: redis.Redis, dst: redis.Redis, keys: CrawlKeys = K, **kwargs) -> tuple[dict, dict, str]:
    out = io.StringIO()
    exported = export_crawl(src, keys, out)
    text = out.getvalue()
    imported = import_crawl(dst, keys, io.StringIO(text), **kwargs)
    return exported, imported, text


def crawl_keys(client: redis.Redis, keys: CrawlKeys = K) -> list[str]:
    return sorted(k.decode() for k in client.scan_iter(match=keys.pattern()))


def drain(frontier: Frontier) -> list[tuple[str, bytes, int]]:
    out = []
    while batch := frontier.pop(7):
        out += [(x.id, x.payload, x.deliveries) for x in batch]
    return out


# -- a plain (priority) queue with set dedup -------------------------------------------------


def build_plain(client: redis.Redis):
    f = Frontier(client, K, node_id="node-a", lease_timeout=60)
    items = [req(f"http://example.com/p{i}", priority=i % 3) for i in range(30)]
    items.append((hashlib.sha1(b"binary").digest(), 0.0, b"\xff\x00 not UTF-8"))  # base64 in the file
    assert f.admit(items).admitted == 31
    assert f.admit(items[:5]).filtered == 5
    leased = f.pop(4)
    assert f.dead_letter(leased[0].id, "undecodable", detail="a test")
    assert f.release([leased[1].id], unstarted=False) == 1  # queued again, delivered once
    Crawl.of(f).push_starts(
        ["http://example.com/s1", '{"url":"http://example.com/s2","priority":5}', "http://example.com/s3"]
    )
    started = f.take_starts(1)  # a start entry in flight
    Seeds(client, K).add(make_seed("http://example.com/daily", every="1d"))
    return f, items, leased, started


def test_plain_crawl_moves_with_leases_queued_dedup_order_and_ids(a, b):
    f_a, items, leased, started = build_plain(a)
    in_flight = {x.id for x in leased[2:]}
    queued_ids = {m.decode() for m in a.zrange(K.queue, 0, -1)}
    stats_a, seq_a = a.hgetall(K.stats), int(a.get(K.seq))
    dead_a, starts_a = a.lrange(K.dead, 0, -1), a.lrange(K.start_urls, 0, -1)

    exported, imported, text = move(a, b)

    assert exported["requests"] == imported["requests"] == 30  # 31 admitted, 1 dead
    assert exported["leased"] == imported["leased"] == 2
    assert exported["start_entries"] == imported["start_entries"] == 3
    assert exported["fingerprints"] == imported["fingerprints"] == 31
    assert '"b64"' in text  # the binary payload
    header = json.loads(text.splitlines()[0])
    assert header["type"] == "crawlplug-export" and header["version"] == 1 and header["crawl"] == "moving"
    assert header["queue"] == "plain" and header["dedup"] == "set"
    # every request is queued on B, once, with its id; nothing is in flight there
    assert b.zcard(K.leases) == 0 and b.hlen(K.leased) == 0
    ids_b = {m.decode() for m in b.zrange(K.queue, 0, -1)}
    assert ids_b == queued_ids | in_flight
    requests_b = {k.decode(): v for k, v in b.hgetall(K.requests).items()}
    assert set(requests_b) == ids_b
    assert Counter(requests_b.values()) == Counter(p for _, _, p in items if p != leased[0].payload)
    # deliveries carried over: the released one, and the two that were in flight
    assert {k.decode(): int(v) for k, v in b.hgetall(K.deliveries).items()} == {
        leased[1].id: 1,
        **{i: 1 for i in in_flight},
    }
    # the start entry in flight is first in line again; the rest as they were
    assert b.lrange(K.start_urls, 0, -1) == [started[0][1], *starts_a]
    assert b.lrange(K.dead, 0, -1) == dead_a
    assert b.hgetall(K.seeds) == a.hgetall(K.seeds)
    assert b.zrange(K.seeds_due, 0, -1, withscores=True) == a.zrange(K.seeds_due, 0, -1, withscores=True)
    assert b.hgetall(K.stats) == stats_a
    assert b.smembers(K.seen) == a.smembers(K.seen)
    assert int(b.get(K.seq)) == seq_a

    # B pops in A's order: give A's leases back as a closing node would, then drain both
    f_a.release(sorted(in_flight), unstarted=False)
    f_b = Frontier(b, K, node_id="node-b")
    order_a, order_b = drain(f_a), drain(f_b)
    assert order_b == order_a and len(order_b) == 30

    # dedup answers the same: every known fingerprint is a duplicate on B, a new one is new
    known = [(fp, 0.0, b"x") for fp, _, _ in items]
    assert f_b.admit(known).flags == "0" * len(known)
    fresh = req("http://example.com/never-seen")
    assert f_b.admit([fresh]).flags == "1"
    # ids continue above every imported one, where A's would (from seq, or Redis's clock in ms
    # times 1000 if that is higher: lua/leases.lua's id_floor)
    new_id = max(b.hkeys(K.requests)).decode()
    assert int(new_id) >= seq_a + 1 and int(new_id) > max(int(i) for i in ids_b)


def test_expiring_dedup_keeps_its_expiry_times(a, b):
    df = ExpiringDupeFilter.from_crawler(get_crawler(settings_dict={"CRAWLPLUG_DEDUP_TTL": 3600}))
    f = Frontier(a, K, dedup=df.strategy)
    df.bind(f)
    requests = [scrapy.Request(f"http://example.com/t{i}") for i in range(20)]
    f.admit([(df.argument(x), 0.0, JsonSerializer().dumps(x, None)) for x in requests])
    _, imported, _ = move(a, b)
    assert imported["fingerprints"] == 20
    ttl_key = K.key("seen_ttl")
    assert b.zrange(ttl_key, 0, -1, withscores=True) == a.zrange(ttl_key, 0, -1, withscores=True)
    df_b = ExpiringDupeFilter.from_crawler(get_crawler(settings_dict={"CRAWLPLUG_DEDUP_TTL": 3600}))
    f_b = Frontier(b, K, dedup=df_b.strategy)
    df_b.bind(f_b)
    assert f_b.admit([(df_b.argument(x), 0.0, b"p") for x in requests]).flags == "0" * 20


# -- the per-domain queue -----------------------------------------------------------------------


KD = CrawlKeys("polite")


def pop_sent(frontier: Frontier, n: int) -> list:
    leased = frontier.pop(n)
    sent = [(x.id, "s") for x in leased if "s" in x.report]
    if sent:
        frontier.admit([], events=sent)
    return leased


def test_domain_queue_moves_with_schedule_limits_and_per_domain_order(a, b):
    f_a = Frontier(a, KD, queue=DomainQueue(), node_id="node-a", lease_timeout=60)
    view_a = Domains(a, KD)
    view_a.configure({"s:*": "0 2", "o:slow.test": "60000 1", "o:delay.test": "30000 0", "key": "host"})
    items = []
    domains = (("a.test", 6), ("b.test", 5), ("c.test", 2), ("delay.test", 3), ("slow.test", 3), ("zz.test", 2))
    for domain, n in domains:
        for i in range(n):
            fp, score, payload = req(f"http://{domain}/{i}", priority=i % 2)
            items.append((fp, score, payload, domain))
    assert f_a.admit(items).admitted == len(items)
    time.sleep(0.01)  # the domains served below are due later than those left waiting since now
    # a new domain's first request goes alone: a, b and c first (ties go by name), then the
    # two that waited longest, delay and slow; zz.test is still waiting since its admission
    leased = pop_sent(f_a, 3) + pop_sent(f_a, 2)
    assert sorted(describe_payload(x.payload)["url"].split("/")[2] for x in leased) == [
        "a.test",
        "b.test",
        "c.test",
        "delay.test",
        "slow.test",
    ]
    leased_info = {k.decode(): v.decode() for k, v in a.hgetall(KD.leased).items()}
    dq_a = {m.decode() for m in a.zrange(KD.dq, 0, -1)}
    expected_dq = dq_a | {
        f"{info.split('|')[3]}\t{rank_of(float(info.split('|')[1]))}{rid}" for rid, info in leased_info.items()
    }
    schedule_a = {d.decode(): s for d, s in a.zrange(KD.domains, 0, -1, withscores=True)}

    exported, imported, text = move(a, b, KD)

    assert json.loads(text.splitlines()[0])["queue"] == "domain"
    assert exported["leased"] == imported["leased"] == len(leased)
    assert imported["requests"] == len(items)
    assert {m.decode() for m in b.zrange(KD.dq, 0, -1)} == expected_dq
    assert b.hgetall(KD.dconf) == a.hgetall(KD.dconf)
    assert b.hgetall(KD.dstate) == {k: v for k, v in a.hgetall(KD.dstate).items() if k.startswith(b"l:")}
    assert b.zcard(KD.leases) == 0
    # every domain with queued requests is on B's schedule; those due at a time keep it
    schedule_b = {d.decode(): s for d, s in b.zrange(KD.domains, 0, -1, withscores=True)}
    assert set(schedule_b) == {m.split("\t")[0] for m in expected_dq}
    finite = {d: s for d, s in schedule_a.items() if s != float("inf")}
    assert {"a.test", "b.test", "delay.test", "zz.test"} <= set(finite)
    assert {d: schedule_b[d] for d in finite} == finite
    now = time.time() * 1000
    assert schedule_b["zz.test"] < now and schedule_b["delay.test"] > now + 20_000
    # slow.test was parked at its concurrency (1, in flight): rescheduled after its 60 s delay
    assert schedule_a["slow.test"] == float("inf") and schedule_b["slow.test"] > now + 50_000

    # each domain pops in the same order on A (its leases given back) and on B
    f_a.release(sorted(leased_info), unstarted=False)
    f_b = Frontier(b, KD, queue=DomainQueue(), node_id="node-b")
    per_domain: list[dict[str, list]] = []
    for frontier, view in ((f_a, view_a), (f_b, Domains(b, KD))):
        view.configure({"o:*": "0 0", "o:slow.test": "", "o:delay.test": ""})  # no waiting in the test
        seen: dict[str, list] = defaultdict(list)
        deadline = time.monotonic() + 30
        while sum(map(len, seen.values())) < len(items):
            assert time.monotonic() < deadline
            for x in pop_sent(frontier, 5):
                domain = describe_payload(x.payload)["url"].split("/")[2]
                seen[domain].append((x.id, x.payload, x.deliveries))
                frontier.admit([], acks=[x.id])
        per_domain.append(dict(seen))
    assert per_domain[1] == per_domain[0]
    assert Counter(p for d in per_domain[1].values() for _, p, _ in d) == Counter(p for _, _, p, _ in items)


# -- Bloom filter dedup -------------------------------------------------------------------------


KB = CrawlKeys("bloomy")


def bloom_node(client: redis.Redis, **settings) -> tuple[RedisBloomDupeFilter, Frontier]:
    crawler = get_crawler(
        settings_dict={"CRAWLPLUG_BLOOM_CAPACITY": 50, "CRAWLPLUG_BLOOM_ERROR_RATE": 0.01, **settings}
    )
    df = RedisBloomDupeFilter.from_crawler(crawler)
    frontier = Frontier(client, KB, dedup=df.strategy)
    df.bind(frontier)
    return df, frontier


def fps(n: int, salt: str) -> list[bytes]:
    return [hashlib.sha1(f"{salt}{i}".encode()).digest() for i in range(n)]


@pytest.mark.parametrize(
    "settings", [{}, {"CRAWLPLUG_BLOOM_GENERATIONS": 2, "CRAWLPLUG_DEDUP_TTL": 3600}], ids=["scalable", "generations"]
)
def test_bloom_dedup_moves_bit_for_bit_and_answers_the_same(a, b, settings):
    df_a, f_a = bloom_node(a, **settings)
    known = fps(300, "known")
    flags = ""
    for i in range(0, 300, 50):  # several calls: the filter grows layer by layer
        flags += f_a.admit([(df_a.strategy.argument(fp), 0.0, b"payload %d" % i) for fp in known[i : i + 50]]).flags
    bloom_keys = [k for k in crawl_keys(a, KB) if ":bloom" in k]
    assert len(bloom_keys) > 4

    exported, imported, _ = move(a, b, KB)

    assert imported["bloom_keys"] == exported["bloom_keys"] == len(bloom_keys)
    assert [k for k in crawl_keys(b, KB) if ":bloom" in k] == bloom_keys
    for key in bloom_keys:
        kind = a.type(key)
        assert b.type(key) == kind
        assert (b.get(key) if kind == b"string" else b.hgetall(key)) == (
            a.get(key) if kind == b"string" else a.hgetall(key)
        ), key
        ttl_a, ttl_b = a.pttl(key), b.pttl(key)
        assert (ttl_a < 0 and ttl_b < 0) or abs(ttl_a - ttl_b) < 5000, key
    df_b, f_b = bloom_node(b, **settings)
    admitted = [fp for fp, flag in zip(known, flags) if flag == "1"]
    assert f_b.admit([(df_b.strategy.argument(fp), 0.0, b"") for fp in admitted]).flags == "0" * len(admitted)
    fresh = fps(200, "fresh")
    on_b = f_b.admit([(df_b.strategy.argument(fp), 0.0, b"") for fp in fresh]).flags
    on_a = f_a.admit([(df_a.strategy.argument(fp), 0.0, b"") for fp in fresh]).flags
    assert on_b == on_a and on_b.count("1") >= 190


def test_native_bloom_filter_moves_through_scandump(bloom_redis, tmp_path):
    module = redisbloom_module()
    other = RedisServer(free_port(), tmp_path / "b", args=["--loadmodule", module])
    (tmp_path / "b").mkdir()
    other.start()
    try:
        src, dst = redis.Redis.from_url(bloom_redis.url), redis.Redis.from_url(other.url)
        _, f_a = bloom_node(src, CRAWLPLUG_BLOOM_NATIVE=True)
        assert f_a.dedup.mode == "bf"
        known = fps(500, "known")
        flags = f_a.admit([(fp, 0.0, b"p") for fp in known]).flags
        exported, imported, _ = move(src, dst, KB)
        assert exported["bf_chunks"] == imported["bf_chunks"] > 0
        _, f_b = bloom_node(dst, CRAWLPLUG_BLOOM_NATIVE=True)
        assert f_b.dedup.mode == "bf"
        admitted = [fp for fp, flag in zip(known, flags) if flag == "1"]
        assert f_b.admit([(fp, 0.0, b"") for fp in admitted]).flags == "0" * len(admitted)
        fresh = fps(300, "fresh")
        assert f_b.admit([(fp, 0.0, b"") for fp in fresh]).flags == f_a.admit([(fp, 0.0, b"") for fp in fresh]).flags
    finally:
        other.stop()


def test_native_bloom_export_is_refused_by_a_redis_without_the_module(bloom_redis, b):
    src = redis.Redis.from_url(bloom_redis.url)
    _, f_a = bloom_node(src, CRAWLPLUG_BLOOM_NATIVE=True)
    f_a.admit([(fp, 0.0, b"p") for fp in fps(10, "x")])
    out = io.StringIO()
    export_crawl(src, KB, out)
    with pytest.raises(TransferError, match="native Bloom filter"):
        import_crawl(b, KB, io.StringIO(out.getvalue()))
    assert crawl_keys(b, KB) == []


# -- refusals and bad input ------------------------------------------------------------------------


def exported_text(a: redis.Redis) -> str:
    build_plain(a)
    out = io.StringIO()
    export_crawl(a, K, out)
    return out.getvalue()


def test_import_refuses_a_crawl_that_has_keys_unless_replace(a, b):
    text = exported_text(a)
    b.set(K.key("stats"), "whatever")  # any key of the crawl, even of the wrong type
    b.set("crawlplug:{other}:queue", "another crawl: untouched")
    with pytest.raises(TransferError, match=r"already has keys .*--replace"):
        import_crawl(b, K, io.StringIO(text))
    assert b.get(K.key("stats")) == b"whatever"
    damaged = text.replace('"type":"seen","hex":[', '"type":"seen","hex":"not a list","ignored":[', 1)
    with pytest.raises(TransferError, match=r"line \d+: 'hex' has the wrong type"):
        import_crawl(b, K, io.StringIO(damaged), replace=True)
    assert b.get(K.key("stats")) == b"whatever", "a bad file replaces nothing"
    counts = import_crawl(b, K, io.StringIO(text), replace=True)
    assert counts["requests"] == 30
    assert b.hgetall(K.stats) == a.hgetall(K.stats)
    assert b.get("crawlplug:{other}:queue") == b"another crawl: untouched"


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda lines: lines.__setitem__(5, lines[5][:-3]), r"line 6: not valid JSON"),
        (lambda lines: lines.__setitem__(-2, '{"type":"seen","hex":["zz"]}'), r"line {n_1}: fingerprint 0 is not hex"),
        (
            lambda lines: lines.__setitem__(3, '{"type":"request","id":"12","score":0,"payload":{"b64":"@@"}}'),
            r"line 4: payload is not valid base64",
        ),
        (lambda lines: lines.__setitem__(2, '{"type":"mystery"}'), r"line 3: unknown record type"),
        (lambda lines: lines.pop(), r"line {n_1}: the file ends without its end record: truncated\?"),
        (lambda lines: lines.pop(4), r"the end record counts \d+ records, the file has \d+"),
        (
            lambda lines: lines.__setitem__(0, '{"type":"crawlplug-export","version":2,"crawl":"x","queue":"plain"}'),
            r"line 1: export format version 2",
        ),
        (lambda lines: lines.__setitem__(0, '{"hello": 1}'), r"line 1: not a crawlplug export"),
    ],
    ids=["json", "hex", "base64", "type", "truncated", "line-lost", "version", "header"],
)
def test_a_bad_line_is_named_and_nothing_is_written(a, b, damage, message):
    lines = exported_text(a).splitlines()
    n = len(lines)
    damage(lines)
    with pytest.raises(TransferError, match=message.format(n_1=n - 1)):
        import_crawl(b, K, lines)
    assert crawl_keys(b) == []


# -- the command line ------------------------------------------------------------------------------


def cli(url: str, *args: str, input: str | None = None, crawl: str | None = K.crawl):
    base = ["--redis-url", url] + (["--crawl", crawl] if crawl else [])
    return CliRunner().invoke(main, [*base, *args], input=input, env={"REDIS_URL": None, "CRAWLPLUG_CRAWL": None})


def test_cli_round_trip_file_and_stdin(a, b, fresh_redis, redis_url, tmp_path):
    build_plain(a)
    path = tmp_path / "crawl.jsonl"
    res = cli(redis_url, "export", "--output", str(path))
    assert res.exit_code == 0, res.output
    assert res.stdout == ""
    assert "exported crawl 'moving'" in res.stderr and "30 requests (2 in flight" in res.stderr, res.stderr
    assert not (tmp_path / "crawl.jsonl.part").exists()
    # the crawl name comes from the file
    res = cli(fresh_redis.url, "import", str(path), crawl=None)
    assert res.exit_code == 0, res.output
    assert "into crawl 'moving'" in res.stdout and "30 requests" in res.stdout
    assert b.zcard(K.queue) == 30
    # again: refused, then replaced after confirmation
    res = cli(fresh_redis.url, "import", str(path))
    assert res.exit_code == 1 and "already has keys" in res.stderr and "--replace" in res.stderr, res.output
    assert "Traceback" not in res.output
    res = cli(fresh_redis.url, "import", str(path), "--replace", input="n\n")
    assert res.exit_code == 1 and "Nothing imported" in res.stderr
    res = cli(fresh_redis.url, "import", str(path), "--replace", input="y\n")
    assert res.exit_code == 0, res.output
    # stdout to stdin, under another name
    res = cli(redis_url, "export")
    assert res.exit_code == 0 and res.stdout.startswith('{"type":"crawlplug-export"')
    res = cli(fresh_redis.url, "import", "-", input=res.stdout, crawl="renamed")
    assert res.exit_code == 0, res.output
    assert "into crawl 'renamed' (exported as 'moving')" in res.stdout
    renamed = CrawlKeys("renamed")
    assert b.zrange(renamed.queue, 0, -1, withscores=True) == b.zrange(K.queue, 0, -1, withscores=True)
    res = cli(fresh_redis.url, "import", "-", "--replace", input=path.read_text(), crawl="renamed")
    assert res.exit_code == 1 and "needs --yes" in res.stderr
    res = cli(fresh_redis.url, "import", "-", "--replace", "--yes", input=path.read_text(), crawl="renamed")
    assert res.exit_code == 0, res.output


def test_cli_import_of_a_damaged_file_fails_cleanly(a, fresh_redis, b, redis_url, tmp_path):
    build_plain(a)
    path = tmp_path / "crawl.jsonl"
    assert cli(redis_url, "export", "-o", str(path)).exit_code == 0
    lines = path.read_text().splitlines()
    assert lines[7].startswith('{"type":"request"')
    lines[7] = lines[7][:-1] + ',"deliveries":-1}'
    path.write_text("\n".join(lines) + "\n")
    res = cli(fresh_redis.url, "import", str(path))
    assert res.exit_code == 1
    assert res.stderr.strip() == "crawlplug: error: line 8: 'deliveries' must be a non-negative integer, got -1"
    assert crawl_keys(b) == []
    res = cli(fresh_redis.url, "import", "-", input="")
    assert res.exit_code == 1 and "line 1" in res.stderr
    path.write_bytes(path.read_bytes().replace(b'"type":"dead"', b'"type":"dead\xff"'))
    res = cli(fresh_redis.url, "import", str(path))
    assert res.exit_code == 1 and "is not UTF-8 text" in res.stderr and "Traceback" not in res.output
    assert crawl_keys(b) == []


@pytest.mark.integration  # starts processes of its own
def test_cli_export_warns_about_live_nodes_and_what_it_leaves_out(a, redis_url, tmp_path):
    f, *_ = build_plain(a)
    f.heartbeat([])  # a live node
    a.rpush(K.items, "{}")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # not a regular file: written to as it is, never replaced
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    res = cli(redis_url, "export", "-o", str(fifo))
    text = reader.communicate(timeout=30)[0].decode()
    assert fifo.is_fifo() and text.startswith('{"type":"crawlplug-export"') and '"type":"end"' in text
    assert res.exit_code == 0, res.output
    assert "1 node(s) of crawl 'moving' are live" in res.stderr
    assert "not exported: items, node:*, nodes" in res.stderr and "crawlplug items export" in res.stderr


# -- a real crawl moved half way -------------------------------------------------------------------

FAST = {"CRAWLPLUG_IDLE_CLOSE": 2, "CRAWLPLUG_HEARTBEAT": 1, "CRAWLPLUG_LEASE_TIMEOUT": 10, "CONCURRENT_REQUESTS": 4}


def test_a_crawl_stopped_on_one_redis_finishes_on_another(crawl, make_shop, redis_url, fresh_redis, tmp_path):
    shop = make_shop(items=600, delay=0.02)
    first = crawl(args={"base_url": shop.url}, settings={"REDIS_URL": redis_url, **FAST})
    wait_for_fetches(shop, first, 150)
    first.signal(signal.SIGTERM)
    assert first.wait(60) == 0, first.text()[-3000:]
    assert sum(shop.hits.values()) < len(shop.shop.paths())

    path = tmp_path / "shop.jsonl"
    shop_keys = CrawlKeys("shop")
    res = cli(redis_url, "export", "-o", str(path), crawl="shop")
    assert res.exit_code == 0, res.output
    res = cli(fresh_redis.url, "import", str(path), crawl=None)
    assert res.exit_code == 0, res.output
    status = Crawl(redis.Redis.from_url(fresh_redis.url), shop_keys).status()
    assert status["queued"] > 0 and status["in_flight"] == 0
    assert status["seen"] == Crawl(redis.Redis.from_url(redis_url), shop_keys).status()["seen"]

    second = crawl(args={"base_url": shop.url}, settings={"REDIS_URL": fresh_redis.url, **FAST})
    assert second.wait(180) == 0, second.text()[-3000:]
    assert "'finish_reason': 'finished'" in second.text()
    assert set(shop.hits) == shop.shop.paths(), "every page of the shop was fetched"
    twice = {p: n for p, n in shop.hits.items() if n > 1}
    assert not twice, f"a graceful stop leaves nothing in flight, yet these were fetched twice: {twice}"
    items = [json.loads(line) for node in (first, second) for line in node.item_lines()]
    assert sorted(i["url"].split(shop.url, 1)[1] for i in items) == sorted(shop.shop.item_paths())
    assert second.item_lines(), "the second server did real work"


def test_export_of_a_crawl_with_nothing_stored_is_valid_and_empty(a, b):
    out = io.StringIO()
    counts = export_crawl(a, CrawlKeys("nothing"), out)
    assert counts["requests"] == 0 and len(out.getvalue().splitlines()) == 2
    assert import_crawl(b, CrawlKeys("nothing"), out.getvalue().splitlines())["requests"] == 0
    assert crawl_keys(b, CrawlKeys("nothing")) == []


def test_payload_kinds_round_trip_exactly(a, b):
    f = Frontier(a, K)
    payloads = [b'{"url":"http://example.com/\xc3\xa9t\xc3\xa9"}', b"\x80\x81\x82", b'line\nbreak\ttab \\ "']
    f.admit([(b"", float(i), p) for i, p in enumerate(payloads)])
    move(a, b)
    assert sorted(b.hvals(K.requests)) == sorted(payloads)


def test_lanes_move_with_their_entries_and_a_leased_one_goes_back_to_its_lane(a, b):
    keys = CrawlKeys("laned")
    f = Frontier(a, keys, node_id="node-a", lease_timeout=60)
    Crawl.of(f).push_starts(["http://example.com/h1", "http://example.com/h2"], "start_urls:high")
    Crawl.of(f).push_starts(["http://example.com/s1"])
    taken = f.take_starts(1, lanes=("start_urls:high", "start_urls"))  # h1, in flight
    assert [e for _, e in taken] == [b"http://example.com/h1"]

    exported, imported, text = move(a, b, keys)
    assert exported["start_entries"] == imported["start_entries"] == 3
    assert "start_urls:high" not in exported["not_exported"] and "lanes" not in exported["not_exported"]
    assert '"lane":"start_urls:high"' in text.replace(" ", "")
    # the lane's entry in flight is first in its lane again, not moved to start_urls
    assert b.lrange(keys.key("start_urls:high"), 0, -1) == [b"http://example.com/h1", b"http://example.com/h2"]
    assert b.lrange(keys.start_urls, 0, -1) == [b"http://example.com/s1"]
    assert b.smembers(keys.lanes) == {b"start_urls:high"}


def test_an_import_refuses_a_start_entry_whose_lane_names_another_key(b):
    header = {
        "type": "crawlplug-export",
        "version": 1,
        "crawl": "laned",
        "exported_at": "x",
        "exported_at_ms": 0,
        "queue": "plain",
        "dedup": "none",
        "seq": 0,
    }
    records = [
        header,
        {"type": "start", "entry": "http://example.com/", "lane": "queue"},
        {"type": "end", "records": 1, "counts": {}},
    ]
    with pytest.raises(TransferError, match="lane"):
        import_crawl(b, CrawlKeys("laned"), io.StringIO("".join(json.dumps(r) + "\n" for r in records)))
    assert crawl_keys(b, CrawlKeys("laned")) == []
