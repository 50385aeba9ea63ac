"""crawlplug on a real Redis Cluster of three primaries (tests/support/clusters.py).

* The Redis-touching tests of test_frontier, test_domainqueue and test_bloom run
  again, unchanged, with ``r`` a redis-py RedisCluster client of the cluster and
  ``redis_url`` its ``redis+cluster://`` URL.
* One scripted sequence of Frontier operations (admit with duplicates, start
  entries, pop, admit_and_pop, heartbeat, reap, release, dead letters,
  idle_state, status, drain) runs on the single test Redis and on the cluster:
  for set dedup, the scalable Bloom filter and DomainQueue, the two traces
  must be equal, and on the cluster every key sits in the crawl's one slot.
* The operator CLI (status, push, peek, dead list, domains list, export,
  import) answers the same on both; pause, resume and purge work on the cluster.
* Real two-node crawls of the demo shop through ``REDIS_URL=redis+cluster://``:
  plain, DomainQueue, and Redis stats + items.

An unsharded crawl's keys all live on the primary that owns its hash tag's
slot; sharding one crawl over the primaries (CRAWLPLUG_SHARDS) is tested in
test_shards.py.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import time
from typing import Any

import pytest
import redis
import scrapy
from click.testing import CliRunner
from redis.crc import key_slot

from crawlplug.access import users
from crawlplug.alerts import store as alert_store
from crawlplug.cli import main
from crawlplug.compat import legacy
from crawlplug.crawl import Crawl
from crawlplug.dupefilters import bloom_info
from crawlplug.frontier.bloom import BloomSpec
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.dedup import BloomDedup
from crawlplug.frontier.domains import Domains
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.pipelines import count_items
from crawlplug.queues import DomainQueue, PriorityQueue
from crawlplug.schedules import store as schedule_store
from crawlplug.serializers import JsonSerializer
from crawlplug.server.clients import client_from_url
from crawlplug.starts.seeds import Seeds, make_seed
from crawlplug.stats import crawl_stats, node_stats

from . import test_bloom, test_domainqueue, test_frontier
from .support.nodes import start_joined

# -- the existing suites, on the cluster ---------------------------------------------------------

#: fixtures through which a test reaches Redis: a test asking for none of them is not re-run
_REDIS_FIXTURES = {"r", "redis_url", "frontier", "domains"}


def _on_cluster(module: Any, name: str) -> type:
    """A test class holding every Redis-touching test of ``module``, with ``r`` / ``redis_url``
    (and the module's own fixtures, built on them) pointing at the cluster."""

    def r(self, cluster_client):
        assert type(cluster_client).__name__ == "RedisCluster"
        return cluster_client

    def redis_url(self, cluster_url, monkeypatch):
        # the tests open their own clients with redis.Redis.from_url(redis_url) (also in forked
        # workers): hand them a cluster client for the cluster URL
        original = redis.Redis.from_url

        def from_url(url, **kwargs):
            return client_from_url(url, kwargs) if "+cluster://" in url else original(url, **kwargs)

        monkeypatch.setattr(redis.Redis, "from_url", staticmethod(from_url))
        return cluster_url

    attrs: dict[str, Any] = {"r": pytest.fixture(r), "redis_url": pytest.fixture(redis_url)}
    if module is test_frontier:
        attrs["frontier"] = pytest.fixture(_method(lambda r: Frontier(r, test_frontier.K, node_id="node-a")))
    if module is test_domainqueue:
        k = test_domainqueue.K
        attrs["frontier"] = pytest.fixture(
            _method(lambda r: Frontier(r, k, queue=DomainQueue(), node_id="node-a", lease_timeout=30))
        )
        attrs["domains"] = pytest.fixture(_method(lambda r: Domains(r, k)))
    for test_name, func in vars(module).items():
        if not test_name.startswith("test_") or not inspect.isfunction(func):
            continue
        if _REDIS_FIXTURES & set(inspect.signature(func).parameters):
            attrs[test_name] = staticmethod(func)
    return type(name, (), attrs)


def _method(build):
    def fixture(self, r):
        return build(r)

    return fixture


TestFrontierSuiteOnCluster = _on_cluster(test_frontier, "TestFrontierSuiteOnCluster")
TestDomainQueueSuiteOnCluster = _on_cluster(test_domainqueue, "TestDomainQueueSuiteOnCluster")
TestBloomSuiteOnCluster = _on_cluster(test_bloom, "TestBloomSuiteOnCluster")


# -- the same operations on one Redis and on the cluster -----------------------------------------

PARITY = CrawlKeys("parity")
DOMAINS = ("a.test", "b.test", "c.test", "d.test")


def fp(n: object) -> bytes:
    return hashlib.sha1(str(n).encode()).digest()


def _dedup(flavor: str) -> Any:
    # a small Bloom filter: the batches below make it add layers (scaling) on the way
    return BloomDedup(BloomSpec(40, 0.001)) if flavor == "bloom" else "set"


class Ticking:
    """A Frontier whose operations each run in a millisecond of their own (Redis clock).

    The per-domain queue schedules domains by the millisecond they became ready,
    ties broken by name: two domains woken by two calls in the same millisecond
    would come out by name on one server and by call order on the other.
    """

    OPS = frozenset(
        {
            "admit",
            "pop",
            "admit_and_pop",
            "take_starts",
            "heartbeat",
            "reap",
            "release",
            "dead_letter",
            "push_starts",
            "idle_state",
        }
    )

    def __init__(self, frontier: Frontier) -> None:
        self.frontier = frontier

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.frontier, name)
        if name not in self.OPS:
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            time.sleep(0.003)
            return attr(*args, **kwargs)

        return call

    def __len__(self) -> int:
        return len(self.frontier)


def _frontier(client: Any, flavor: str, node: str, **kwargs: Any) -> Any:
    queue = DomainQueue() if flavor == "domain" else PriorityQueue
    return Ticking(Frontier(client, PARITY, queue=queue, dedup=_dedup(flavor), node_id=node, **kwargs))


def _items(f: Frontier, names: list[object], flavor: str) -> list[tuple]:
    out = []
    for n in names:
        digest = int(hashlib.md5(str(n).encode()).hexdigest(), 16)
        domain = DOMAINS[digest % len(DOMAINS)] if flavor == "domain" else ""
        payload = f"{domain or 'x.test'}/{n}".encode()
        score = -(digest // 7 % 5)  # a few priorities
        item = (f.dedup.argument(fp(n)), float(score), payload)
        out.append((*item, domain) if domain else item)
    return out


def _leases(leased: list) -> list[tuple]:
    return [(x.id, x.payload.decode(), x.deliveries, x.report) for x in leased]


def _sent(f: Frontier, leased: list) -> list[tuple]:
    """What a node reports after sending its requests (the per-domain queue asks for it)."""
    return [(x.id, "s") for x in leased if "s" in x.report]


def _status(f: Frontier) -> dict:
    st = Crawl.of(f).status()
    st["nodes"] = sorted(st["nodes"])  # deadlines are on the Redis clock
    return st


def _letters(f: Frontier) -> list[tuple]:
    return [({k: v for k, v in d.header.items() if k != "at"}, d.payload) for d in Crawl.of(f).dead_letters()]


ID = re.compile(r"\b\d{16}\b")


def _ordinals(value: Any) -> Any:
    """``value`` (a trace of JSON-able values) with each request id replaced by its rank among
    the ids it names: ids start from Redis's clock (lua/leases.lua's id_floor), so two servers
    give different ids to the same requests, in the same order."""
    text = json.dumps(value, default=repr)
    rank = {x: f"<id {i}>" for i, x in enumerate(sorted(set(ID.findall(text))))}
    return json.loads(ID.sub(lambda m: rank[m.group()], text))


def scenario(client: Any, flavor: str) -> list[tuple[str, Any]]:
    """A fixed sequence of Frontier operations on ``client``; what each returned (clock-free)."""
    trace: list[tuple[str, Any]] = []
    a = _frontier(client, flavor, "node-a", lease_timeout=30, heartbeat=1)
    b = _frontier(client, flavor, "node-b", lease_timeout=0.25, heartbeat=0.05, max_deliveries=2)
    if flavor == "domain":
        Domains(client, PARITY).configure({"s:*": "0 0"})  # no delay, no concurrency limit

    def pop(f: Frontier, n: int) -> list:
        got = f.pop(n)
        if _sent(f, got):
            f.admit([], events=_sent(f, got))
        return got

    # start entries, leased and acked with the admission of what they produced
    trace.append(
        ("push_starts", Crawl.of(a).push_starts(["http://start.test/1", json.dumps({"url": "http://start.test/2"})]))
    )
    starts = a.take_starts(5)
    trace.append(("take_starts", [(lease, raw) for lease, raw in starts]))
    res = a.admit(_items(a, list(range(30)), flavor), acks=[lease for lease, _ in starts])
    trace.append(("admit+ack starts", (res.flags, res.acked, res.stale)))
    # duplicates across and inside batches (the Bloom filter scales through these)
    for batch in (list(range(20, 90)), [*range(85, 130), 100, 101, "x", "x"], list(range(0, 130, 7))):
        res = a.admit(_items(a, batch, flavor))
        trace.append(("admit", (res.flags, res.acked, res.stale)))
    trace.append(("len", len(a)))
    first = pop(a, 12)
    trace.append(("pop", _leases(first)))
    res, more = a.admit_and_pop(
        _items(a, ["child1", "child2", 3], flavor), [x.id for x in first[:3]], 6, events=_sent(a, first[3:5])
    )
    trace.append(("admit_and_pop", ((res.flags, res.acked, res.stale), _leases(more))))
    if _sent(a, more):
        a.admit([], events=_sent(a, more))
    held = [x.id for x in first[3:] + more]
    lost = a.heartbeat([*held, "999999"], producing=True, metrics={"rps": 2.5, "pid": 1})
    trace.append(("heartbeat", lost))
    trace.append(("idle_state", a.idle_state()))
    # node b: short leases, never acked, reaped back twice, then dead-lettered
    taken = pop(b, 3)
    trace.append(("pop b", _leases(taken)))
    b.heartbeat([x.id for x in taken])
    time.sleep(0.4)
    trace.append(("reap", b.reap()))
    again = pop(b, 3)
    trace.append(("pop b again", _leases(again)))
    time.sleep(0.4)
    trace.append(("reap again", b.reap()))
    trace.append(("reap idle", a.reap()))
    # release (started and not), dead letter, stale ack
    trace.append(("release unstarted", a.release(held[:2], unstarted=True)))
    trace.append(("release started", a.release(held[2:4], unstarted=False)))
    trace.append(("release foreign", b.release(held[4:6], unstarted=True)))
    trace.append(("dead_letter", a.dead_letter(held[4], "DecodeError: test", error="boom")))
    trace.append(("dead_letter twice", a.dead_letter(held[4], "again")))
    res = b.admit([], acks=[held[5]])
    trace.append(("foreign ack", (res.acked, res.stale)))
    trace.append(("status", _status(a)))
    trace.append(("dead letters", _letters(a)))
    # drain: every remaining request exactly once
    drained = []
    acks: list[str] = []
    for _ in range(200):
        _, got = a.admit_and_pop([], acks, 7, events=[])
        acks = [x.id for x in got]
        if got and _sent(a, got):
            a.admit([], events=_sent(a, got))
        if not got:
            if a.idle_state()[:2] == (0, 0):
                break
            continue
        drained.append(_leases(got))
    trace.append(("drained", drained))
    a.heartbeat([], producing=False)
    trace.append(("idle_state end", a.idle_state()))
    trace.append(("status end", _status(a)))
    if flavor == "bloom":
        trace.append(
            ("bloom layers", [(x["capacity"], x["added"]) for x in bloom_info(a.frontier, a.dedup.spec)["layers"]])
        )
    if flavor == "domain":
        trace.append(("domains", Domains(client, PARITY).table()))
    Crawl.of(a).leave(a.node_id)
    trace.append(
        ("keys", sorted((k.decode(), client.type(k).decode()) for k in client.scan_iter(match=PARITY.pattern())))
    )
    return trace


@pytest.fixture
def single(redis_url: str) -> Any:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.mark.parametrize("flavor", ["set", "bloom", "domain"])
def test_frontier_operations_answer_the_same_on_one_redis_and_on_the_cluster(
    single, cluster_client, cluster_deployment, flavor
):
    expected = _ordinals(scenario(single, flavor))
    got = _ordinals(scenario(cluster_client, flavor))
    for (op, want), (op2, have) in zip(expected, got):
        assert (op2, have) == (op, want), f"{flavor}: {op} differs"
    assert len(got) == len(expected)
    # the sequence did real work: leases, reaping, dead letters, a scaled Bloom filter
    ops = dict(got)
    assert ops["reap"][0] > 0 and ops["reap again"][1] > 0
    assert ops["status"]["dead"] >= 2
    assert sum(len(x) for x in ops["drained"]) > 50
    if flavor == "bloom":
        assert len(ops["bloom layers"]) >= 2, ops["bloom layers"]
    # on the cluster: one slot, one primary holds them all (no sharding yet)
    keys = [k for k, _ in ops["keys"]]
    assert len(keys) >= 10
    assert {key_slot(k.encode()) for k in keys} == {key_slot(b"{parity}")}
    owner = cluster_deployment.owner_of(PARITY.queue)
    sizes = cluster_deployment.dbsizes()
    assert sizes[owner.port] == len(keys) and sum(sizes.values()) == len(keys), sizes
    print(
        f"\n{flavor}: {len(keys)} keys, slot {key_slot(b'{parity}')} on primary 127.0.0.1:{owner.port}; "
        f"keys per primary {sizes}"
    )


# -- the operator CLI ----------------------------------------------------------------------------

CLI = CrawlKeys("clitest")


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input, env={"REDIS_URL": None, "CRAWLPLUG_CRAWL": None})


def _request(url: str) -> bytes:
    return JsonSerializer().dumps(scrapy.Request(url), None)


def _cli_state(client: Any, url: str) -> None:
    """The same crawl state on ``client``: queued requests on two domains, a lease, dead letters,
    start entries (through `crawlplug push`), domain limits, a live node."""
    f = Frontier(client, CLI, queue=DomainQueue(), node_id="node-cli")
    Domains(client, CLI).configure({"s:*": "0 0", "o:b.test": "2000 2"})
    urls = [f"http://{d}/page{i}" for d in ("a.test", "b.test") for i in range(6)]
    res = f.admit([(fp(u), 0.0, _request(u), u.split("/")[2]) for u in urls])
    assert res.admitted == len(urls)
    first = f.pop(2)
    f.admit([], events=[(x.id, "s") for x in first if "s" in x.report])
    assert f.dead_letter(first[0].id, "unknown callback 'parse_x'")
    client.rpush(CLI.dead, b"not a dead letter at all")
    f.heartbeat([x.id for x in first[1:]], metrics={"pid": 4242})
    res = run(
        "push",
        "--redis-url",
        url,
        "--crawl",
        CLI.crawl,
        "http://start.test/",
        "-f",
        "-",
        input='{"url": "http://start.test/j", "priority": 5}\nnot a url\n',
    )
    assert res.exit_code == 1, res.output  # one entry was skipped
    assert "stdin:2: skipped" in res.output and "pushed 2 start entries" in res.output


def _cli_outputs(url: str, tmp_path, tag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    res = run("status", "--redis-url", url, "--crawl", CLI.crawl, "--json")
    assert res.exit_code == 0, res.output
    status = json.loads(res.output)
    for volatile in (
        "redis",
        "history",
        "pages_per_min",
        "pages_last_min",
        "net_drain_per_min",
        "eta_seconds",
        "eta_text",
        "rate",
        "redis_memory",
    ):
        status.pop(volatile)
    for node in status["nodes"]:
        for moment in (
            "heartbeat_age",
            "uptime",
            "expires_in",
            "last_seen_ms",
            "silent_for",
            "leases_back_in",
            "state_text",
        ):
            node.pop(moment, None)
    out["status --json"] = status
    res = run("status", "--redis-url", url, "--crawl", CLI.crawl)
    assert res.exit_code == 0, res.output
    out["status"] = [
        line.replace(url, "<URL>")
        for line in res.output.splitlines()[1:]
        if "heartbeat" not in line and "rate" not in line
    ]
    for name, args in {
        "peek": ["peek", "-n", "20"],
        "peek --json": ["peek", "-n", "20", "--json"],
        "dead list": ["dead", "list"],
        "domains list --json": ["domains", "list", "--json"],
    }.items():
        res = run(*args, "--redis-url", url, "--crawl", CLI.crawl)
        assert res.exit_code == 0, f"{name}: {res.output}"
        out[name] = res.output.replace(url, "<URL>")
    domains = json.loads(out["domains list --json"])
    for row in domains["rows"]:
        row.pop("ready_in")  # milliseconds from now
    out["domains list --json"] = domains
    # dead-letter times are wall-clock: keep the rest of each line
    out["dead list"] = [line.split("  ", 2)[-1] for line in out["dead list"].splitlines()]
    dump = tmp_path / f"export-{tag}.jsonl"
    res = run("export", "--redis-url", url, "--crawl", CLI.crawl, "-o", str(dump))
    assert res.exit_code == 0, res.output
    out["export"] = _export_records(dump)
    out["export file"] = dump
    return out


def _export_records(path) -> list[str]:
    """The export's records with wall-clock times (ms since 1970) masked, set members sorted."""
    out = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        record.pop("exported_at", None)
        if isinstance(record.get("hex"), list):
            record["hex"] = sorted(record["hex"])
        out.append(re.sub(r"\b1[6-9]\d{11}(\.\d+)?\b", "<ms>", json.dumps(record, sort_keys=True)))
    return out


def test_cli_answers_the_same_on_one_redis_and_on_the_cluster(single, redis_url, cluster_client, cluster_url, tmp_path):
    _cli_state(single, redis_url)
    _cli_state(cluster_client, cluster_url)
    want = _cli_outputs(redis_url, tmp_path, "single")
    got = _cli_outputs(cluster_url, tmp_path, "cluster")
    compared = [_ordinals({name: value for name, value in out.items() if name != "export file"}) for out in (want, got)]
    for name in compared[0]:
        assert compared[1][name] == compared[0][name], name
    assert got["status --json"]["queued"] == 10 and got["status --json"]["dead"] == 2
    assert got["status --json"]["start_urls"] == 2 and got["status --json"]["live_nodes"] == 1
    assert any("http://a.test/page" in line for line in got["dead list"])
    assert len(got["export"]) > 10
    # the single Redis's export imported into each (emptied) of them exports back the same
    reexports = []
    for client, url in ((single, redis_url), (cluster_client, cluster_url)):
        client.flushall()
        res = run("import", "--redis-url", url, "--crawl", CLI.crawl, str(want["export file"]))
        assert res.exit_code == 0, res.output
        again = tmp_path / f"reexport-{len(reexports)}.jsonl"
        res = run("export", "--redis-url", url, "--crawl", CLI.crawl, "-o", str(again))
        assert res.exit_code == 0, res.output
        reexports.append(_export_records(again))
    assert reexports[1] == reexports[0]
    assert len(reexports[1]) == len(got["export"])
    # pause / resume / purge on the cluster
    common = ["--redis-url", cluster_url, "--crawl", CLI.crawl]
    assert run("pause", *common).exit_code == 0
    assert "PAUSED" in run("status", *common).output
    assert run("resume", *common).exit_code == 0
    assert "PAUSED" not in run("status", *common).output
    res = run("purge", "--yes", *common)
    assert res.exit_code == 0, res.output
    assert list(cluster_client.scan_iter(match=CLI.pattern())) == []


def test_a_due_seed_fires_on_the_cluster(cluster_client):
    """The seed timer reads Redis's clock and the first due time in one round trip; a cluster
    pipeline refuses TIME, and every node's timer once failed there with one ERROR line and
    fired nothing."""
    keys = CrawlKeys("seeded")
    book = Seeds(cluster_client, keys)
    try:
        seed = book.add(make_seed("http://127.0.0.1:9/every-minute", every="60s"))
        first = book.due_times()[seed.id]
        assert book.fire_due() == 1
        assert cluster_client.lrange(keys.start_urls, 0, -1) == [b"http://127.0.0.1:9/every-minute"]
        assert book.fire_due() == 0, "not again before its next run"
        assert book.due_times() == {seed.id: first + 60_000}, "the next run, on its grid"
    finally:
        for key in cluster_client.scan_iter(match=keys.pattern()):
            cluster_client.delete(key)


def test_scrapy_redis_fingerprints_migrate_onto_the_cluster(cluster_client):
    """`crawlplug migrate` packs a scrapy-redis crawl's fingerprints beside its keys, written
    aside and renamed into place; a cluster pipeline refuses RENAME."""
    keys = CrawlKeys("migrated")
    try:
        assert legacy.merge(cluster_client, keys, [3, 1, 2], "json", "old:dupefilter") == 3
        assert legacy.merge(cluster_client, keys, [2, 5], "json", "old2:dupefilter") == 4
        held = legacy.load(cluster_client, keys)
        assert held is not None and legacy.read_meta(cluster_client, keys)["source"] == (
            "old:dupefilter, old2:dupefilter"
        )
        assert sorted(legacy.unpack(legacy.read_packed(cluster_client, keys))) == [1, 2, 3, 5]
        assert not cluster_client.exists(keys.key("seen:scrapy_redis:tmp")), "nothing left aside"
    finally:
        for key in cluster_client.scan_iter(match=keys.pattern()):
            cluster_client.delete(key)


def test_users_alerts_and_schedules_are_stored_on_the_cluster(cluster_url, cluster_client):
    """Each of these writes a crawl's key (or the users) and a Redis-wide index (or the tokens)
    together: keys of two slots, in a MULTI that a cluster refuses ("All keys involved in a
    cluster transaction must map to the same slot"). Stored there, each is found again."""
    common = ["--redis-url", cluster_url]
    try:
        res = run("users", "add", "ann", "--role", "viewer", *common)
        assert res.exit_code == 0, res.output
        token = res.stdout.strip()  # the token alone on standard output, the rest on standard error
        user = users.authenticate(cluster_client, token)
        assert user is not None and (user.name, user.role) == ("ann", "viewer")
        again = run("users", "add", "ann", "--role", "operator", *common)
        assert again.exit_code == 0, again.output
        assert users.authenticate(cluster_client, token) is None, "the old token stopped working"
        assert run("users", "revoke", "ann", *common).exit_code == 0
        assert users.users(cluster_client) == []

        res = run(
            "alerts",
            "add",
            "plat",
            "--create",
            "--name",
            "x",
            "--when",
            "run_end",
            "--notify",
            "json://127.0.0.1:9/",
            *common,
        )
        assert res.exit_code == 0, res.output
        assert alert_store.alerting_crawls(cluster_client) == ["plat"]
        assert "x" in run("alerts", "list", *common).output

        res = run("schedule", "add", "plat", "--cron", "0 3 * * *", "--scrapyd", "http://127.0.0.1:9", *common)
        assert res.exit_code == 0, res.output
        assert schedule_store.scheduled_crawls(cluster_client) == ["plat"]
        assert run("schedule", "delete", "plat", *common).exit_code == 0
        assert schedule_store.scheduled_crawls(cluster_client) == []
    finally:
        mine = [*cluster_client.scan_iter(match=CrawlKeys("plat").pattern())]
        mine += [users.users_key(), alert_store.index_key(), schedule_store.index_key()]
        for key in mine:
            cluster_client.delete(key)


# -- real crawls ---------------------------------------------------------------------------------

FAST = {"CRAWLPLUG_IDLE_CLOSE": 2, "CRAWLPLUG_HEARTBEAT": 1, "CRAWLPLUG_LEASE_TIMEOUT": 10}
VARIANTS = {
    "plain": {},
    "domainqueue": {"CRAWLPLUG_QUEUE_CLASS": "crawlplug.queues.DomainQueue", "CRAWLPLUG_DOMAIN_CONCURRENCY": 8},
    "redis-stats-and-items": {
        "STATS_CLASS": "crawlplug.stats.RedisStatsCollector",
        "CRAWLPLUG_STATS_INTERVAL": 0.5,
        "ITEM_PIPELINES": json.dumps({"crawlplug.pipelines.RedisItemPipeline": 300}),
    },
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_two_node_crawl_on_the_cluster_fetches_every_page_once(
    crawl, make_shop, cluster_client, cluster_url, cluster_deployment, variant
):
    shop = make_shop(items=300)
    keys = CrawlKeys("shop")
    settings = {"REDIS_URL": cluster_url, **FAST, **VARIANTS[variant]}
    started = time.monotonic()
    # the shop answers once both nodes have joined: started together, the node that came up first
    # (nodes are faster since the freeze of issue 37) once crawled all 300 items alone
    nodes = start_joined(lambda: crawl(args={"base_url": shop.url}, settings=settings), shop)
    for node in nodes:
        assert node.wait(80) == 0, node.text()[-3000:]
    elapsed = time.monotonic() - started
    for node in nodes:
        text = node.text()
        assert "'finish_reason': 'finished'" in text, text[-3000:]
        assert "Traceback" not in text and " ERROR: " not in text, text[-3000:]
    pages = shop.shop.paths()
    hits = shop.hits
    assert set(hits) == pages, "every page of the site was fetched"
    assert not {p: n for p, n in hits.items() if n > 1}, "no page was fetched twice"
    split = [len(node.item_lines()) for node in nodes]
    if variant != "domainqueue":
        # DomainQueue: one domain's concurrency is crawl-wide, and a node acking a request takes
        # the freed slot back in the same round trip: a node joining late may get none of it
        assert all(split), f"both nodes crawled: items per node {split}"
    items = [json.loads(line) for node in nodes for line in node.item_lines()]
    assert len(items) == len(shop.shop.item_paths())
    status = Crawl.of(Frontier(cluster_client, keys)).status()
    assert (status["queued"], status["in_flight"], status["dead"]) == (0, 0, 0)
    assert status["stats"]["acked"] == len(pages)
    if variant == "plain":
        assert status["seen"] == len(pages)
    if variant == "domainqueue":
        assert status["domains"] == 0
        busy = cluster_client.hgetall(keys.dstate)
        assert not [f for f in busy if f.startswith(b"b:")], busy
    if variant == "redis-stats-and-items":
        total = crawl_stats(cluster_client, keys)
        assert total["response_received_count"] == len(pages)
        per_node = node_stats(cluster_client, keys)
        assert len(per_node) == 2 and all(s["response_received_count"] > 0 for s in per_node.values())
        assert count_items(cluster_client, keys.items) == ("list", len(shop.shop.item_paths()))
        res = run("items", "export", "--redis-url", cluster_url, "--crawl", "shop", "-o", "-")
        assert res.exit_code == 0, res.output
        exported = [line for line in res.output.splitlines() if line.startswith("{")]
        assert len(exported) == len(shop.shop.item_paths())
    # where an unsharded crawl lives: one slot, one primary (test_shards.py spreads one)
    owner = cluster_deployment.owner_of(keys.queue)
    crawl_keys = [k.decode() for k in cluster_client.scan_iter(match=keys.pattern())]
    assert {key_slot(k.encode()) for k in crawl_keys} == {key_slot(b"{shop}")}
    print(
        f"\n{variant}: {len(pages)} pages in {elapsed:.1f}s, items per node {split}; crawl 'shop' = slot {key_slot(b'{shop}')} on primary "
        f"127.0.0.1:{owner.port}; keys per primary {cluster_deployment.dbsizes()}"
    )
