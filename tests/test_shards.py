"""A crawl split into shards (CRAWLPLUG_SHARDS): crawlplug.frontier.sharded on real Redis servers.

* The sharded frontier on the suite's Redis and on a real three-primary Redis
  Cluster: routing by domain, dedup across nodes, acks that wait for children
  stored in other shards (a shard made to fail for real), leases lost and
  reaped per shard, start entries, the shard count fixed for a crawl's life.
* Real crawls: two ``scrapy crawl multisite`` nodes over eight loopback hosts
  with 4 shards, on one Redis and on the cluster (where the keys must spread
  over all three primaries), with DomainQueue and with the Bloom filter; and a
  node killed with SIGKILL mid-crawl.
"""

from __future__ import annotations

import json
import signal
import socket
import time
from collections import Counter
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from redis.crc import key_slot

from crawlplug.cli import main
from crawlplug.crawl import Crawl
from crawlplug.demo.shop import DemoShop, serve
from crawlplug.errors import AdmissionIncomplete, ConfigError, CorruptKey
from crawlplug.frontier.bloom import BloomSpec
from crawlplug.frontier.core import Frontier, open_frontier
from crawlplug.frontier.dedup import BloomDedup
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.layout import claim_shards, parts, shard_of
from crawlplug.queues import DomainQueue
from crawlplug.serializers import describe_payload

from .support.nodes import start_joined, stop_holding
from .support.scriptcalls import script_calls

K = CrawlKeys("sharded")
N = 4


def fp(n: object) -> bytes:
    return str(n).encode().ljust(20, b"_")[:20]


def hosts_per_shard(n: int = N) -> dict[int, str]:
    """One host name per shard."""
    out: dict[int, str] = {}
    i = 0
    while len(out) < n:
        out.setdefault(shard_of(f"site{i}.test", n), f"site{i}.test")
        i += 1
    return out


def item(host: str, n: object, score: float = 0.0) -> tuple[bytes, float, bytes, str, str]:
    return (fp(f"{host}/{n}"), score, json.dumps({"url": f"http://{host}/{n}"}).encode(), "", host)


def sharded(client: Any, node: str = "node-a", **kwargs: Any) -> Frontier:
    claim_shards(client, K, N)
    return Frontier(client, K, shards=N, node_id=node, **kwargs)


@pytest.fixture(params=["one-redis", pytest.param("cluster", marks=pytest.mark.integration)])
def client(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("r" if request.param == "one-redis" else "cluster_client")


def test_requests_go_to_their_domains_shard_and_duplicates_are_found_by_any_node(client):
    a, b = sharded(client, "a"), sharded(client, "b")
    hosts = [f"h{i}.example" for i in range(40)]
    items = [item(h, j) for h in hosts for j in range(3)]
    assert a.admit(items).admitted == 120
    # another node, another process: the same URLs are duplicates (same shard, same filter)
    assert b.admit(items[::7]).flags == "0" * len(items[::7])
    for i, part in enumerate(parts(client, K)[1:]):
        urls = [describe_payload(p)["url"] for p in client.hvals(part.requests)]
        assert urls and {u.split("/")[2] for u in urls} == {h for h in hosts if shard_of(h, N) == i}
    assert Crawl.of(a).status()["queued"] == 120 and len(a) == 120
    assert client.zcard(K.queue) == 0, "nothing in the crawl's own queue"


def _evalsha_calls(r: redis.Redis) -> int:
    return script_calls(r)


def test_pop_finds_the_shards_with_work_and_then_skips_the_dry_ones(r):
    a = sharded(r)
    only = hosts_per_shard()[2]
    a.admit([item(only, j) for j in range(40)])
    a.scripts.load_all(r)  # counted as on a server that holds them: a first call's NOSCRIPT (not found) is a call too
    before = _evalsha_calls(r)
    first = a.pop(8)  # the rotation starts at shard 0, then shard 1: both empty
    assert len(first) == 8 and all(x.id.startswith("2.") for x in first)
    assert _evalsha_calls(r) - before == 3
    second = a.pop(8)  # shard 3 was never asked: asked now, found dry
    before = _evalsha_calls(r)
    third = a.pop(8)  # every dry shard is left out for a moment: one call
    assert _evalsha_calls(r) - before == 1
    assert len({x.id for x in first + second + third if x.id.startswith("2.")}) == 24
    a.admit([item(hosts_per_shard()[0], j) for j in range(40)])  # this node's own admission revives shard 0
    big = a.pop(32)  # 32 = two shares of MIN_SHARE: two shards asked
    assert {x.id.split(".")[0] for x in big} == {"0", "2"} and len(big) == 32


@pytest.mark.parametrize("broken_key", ["seen", "queue", "requests"])
def test_an_ack_waits_until_every_shard_stored_its_children(client, broken_key):
    a = sharded(client)
    hosts = hosts_per_shard()
    a.admit([item(hosts[0], "parent")])
    (parent,) = a.pop(1)
    children = [item(hosts[0], "c0"), item(hosts[1], "c1")]
    broken = K.shard_keys(1, N).key(broken_key)
    client.set(broken, "not a set")  # shard 1 fails its admission for real (WRONGTYPE)
    with pytest.raises(AdmissionIncomplete) as failed:
        a.admit(children, [parent.id])
    # c0 is stored in shard 0, c1 is not (nor its fingerprint: the script checks every
    # key before writing anything), and the error says which is which
    assert failed.value.flags == "1-"
    assert isinstance(failed.value.cause, CorruptKey) and failed.value.cause.key == broken
    leased = client.hget(K.shard_keys(0, N).leased, parent.id.split(".", 1)[1])
    assert leased is not None, "the parent is still leased: its child in shard 1 is not stored"
    client.delete(broken)
    result = a.admit(children[1:], [parent.id])  # the node retries what is not done, and the ack
    assert (result.flags, result.acked) == ("1", 1)
    status = Crawl.of(a).status()
    assert (status["queued"], status["in_flight"]) == (2, 0)
    assert status["stats"].get("filtered", 0) == 0, "nothing counted as a duplicate of itself"


def test_an_ack_rides_with_children_of_its_own_shard(client):
    a = sharded(client)
    host = hosts_per_shard()[3]
    a.admit([item(host, "p")])
    (parent,) = a.pop(1)
    result, leased = a.admit_and_pop([item(host, "c")], [parent.id], 4)
    assert (result.flags, result.acked) == ("1", 1)
    assert [x.id.split(".")[0] for x in leased] == ["3"]


def test_leases_lost_by_a_stalled_node_are_reaped_in_every_shard(client):
    a = sharded(client, "a", lease_timeout=0.3, heartbeat=0.1)
    b = sharded(client, "b", lease_timeout=5)
    hosts = hosts_per_shard()
    a.admit([item(hosts[s], j) for s in range(N) for j in range(2)])
    held = a.pop(8)
    assert {x.id.split(".")[0] for x in held} == {"0", "1", "2", "3"}
    assert a.heartbeat([x.id for x in held]) == []
    time.sleep(0.5)
    assert b.reap() == (8, 0)
    lost = a.heartbeat([x.id for x in held])
    assert sorted(lost) == sorted(x.id for x in held), "a learns which of its leases are gone, shard by shard"
    again = b.pop(8)
    assert len(again) == 8 and all(x.deliveries == 2 for x in again)
    result = a.admit([], [x.id for x in held])  # the stalled node's late acks are stale
    assert (result.acked, result.stale) == (0, 8)
    assert b.admit([], [x.id for x in again]).acked == 8
    assert b.idle_state() == (0, 0, 0)


def test_the_heartbeat_and_the_reap_go_together_in_every_shard(client):
    """What the scheduler sends each heartbeat (one round trip, not two): the node's own
    leases renewed first, in every shard, so its reap never takes them; another node's
    expired ones reaped in every shard."""
    a = sharded(client, "a", lease_timeout=0.3, heartbeat=0.1)
    b = sharded(client, "b", lease_timeout=0.3, heartbeat=0.1)
    hosts = hosts_per_shard()
    a.admit([item(hosts[s], j) for s in range(N) for j in range(4)])
    held_a, held_b = a.pop(8), b.pop(8)
    assert {x.id.split(".")[0] for x in held_a + held_b} == {"0", "1", "2", "3"}
    time.sleep(0.5)  # both expired; a's renewal comes before its reap
    lost, reaped = a.heartbeat_and_reap([x.id for x in held_a])
    assert lost == [] and reaped == (8, 0), "b's 8 leases reaped, none of a's"
    assert sorted(b.heartbeat_and_reap([x.id for x in held_b])[0]) == sorted(x.id for x in held_b)
    assert sorted(x.id for x in b.pop(8)) == sorted(x.id for x in held_b)


def test_start_entries_and_their_acks_cross_shards(client):
    a = sharded(client)
    hosts = hosts_per_shard()
    Crawl.of(a).push_starts([f"http://{hosts[0]}/", f"http://{hosts[1]}/"])
    taken = a.take_starts(2)
    assert [e for _, e in taken] == [f"http://{hosts[0]}/".encode(), f"http://{hosts[1]}/".encode()]
    assert a.idle_state()[1] == 2, "start leases count as in flight"
    result = a.admit([item(hosts[0], "x"), item(hosts[1], "y")], [lease for lease, _ in taken])
    assert result.flags == "11"
    status = Crawl.of(a).status()
    assert (status["queued"], status["in_flight"], status["stats"].get("start_acked")) == (2, 0, 2)


def test_release_and_dead_letters_find_their_shard(client):
    a = sharded(client)
    hosts = hosts_per_shard()
    a.admit([item(hosts[s], 1) for s in range(N)])
    held = a.pop(4)
    assert a.dead_letter(held[0].id, "test reason")
    assert a.release([x.id for x in held[1:]], unstarted=True) == 3
    letters = Crawl.of(a).dead_letters()
    assert [x.header["reason"] for x in letters] == ["test reason"]
    assert letters[0].header["shard"] == int(held[0].id.split(".")[0])
    status = Crawl.of(a).status()
    assert (status["queued"], status["in_flight"], status["dead"]) == (3, 0, 1)


def test_each_shard_has_its_own_bloom_filter(client):
    spec = BloomSpec(1000, 0.001)
    a = sharded(client, "a", dedup_factory=lambda: BloomDedup(spec))
    b = sharded(client, "b", dedup_factory=lambda: BloomDedup(spec))
    hosts = [f"b{i}.example" for i in range(20)]
    items = [(BloomDedup(spec).argument(fp_), *rest) for fp_, *rest in (item(h, j) for h in hosts for j in range(5))]
    assert a.admit(items).admitted == 100
    assert b.admit(items).filtered == 100
    used = [p for p in parts(client, K)[1:] if client.exists(f"{p.tag}:bloom:meta")]
    assert len(used) == N and not client.exists(f"{K.tag}:bloom:meta")


def test_domain_queue_on_shards_keeps_each_domains_schedule_in_one_shard(client):
    a = sharded(client, queue=DomainQueue())
    hosts = hosts_per_shard()
    a.admit([(fp(f"{h}{j}"), 0.0, b"{}", h, h) for h in hosts.values() for j in range(3)])
    for i, part in enumerate(parts(client, K)[1:]):
        assert [m.decode() for m in client.zrange(part.domains, 0, -1)] == [hosts[i]]
    leased = a.pop(8)
    assert {x.id.split(".")[0] for x in leased} == {"0", "1", "2", "3"}


def test_the_frontier_routes_by_the_requests_url_as_a_dupefilter_on_its_own_does(r):
    """The frontier chooses each request's shard itself from the URL the Scheduler passes (or
    a DomainQueue's domain, or a host given as it is), the same shard crawlplug.queues.route
    gives a dupefilter used on its own, so both find a fingerprint in one shard; an
    unsharded frontier needs no route at all."""
    from scrapy import Request

    from crawlplug.queues import route

    f = Frontier(r, CrawlKeys("routing"), shards=4, node_id="n")
    urls = [f"http://shop{i}.test:80{i % 3}/p/{i}?q={i}" for i in range(40)] + ["https://[::1]:8443/x"]
    for url in urls:
        assert f.route((b"", 0.0, b"", "", url)) == shard_of(route(Request(url)), 4), url
        assert f.route((b"", 0.0, b"", "", url)) == f.route((b"", 0.0, b"", "", route(Request(url))))
    assert f.route((b"", 0.0, b"", "shop3.test", urls[0])) == shard_of("shop3.test", 4), "the domain first"
    assert len({f.route((b"", 0.0, b"", "", url)) for url in urls}) == 4, "spread over every shard"
    with pytest.raises(ValueError, match="route"):
        f.route((b"", 0.0, b""))
    one = Frontier(r, CrawlKeys("routing-one"))
    assert one.admit([(fp(1), 0.0, b"{}")]).flags == "1", "one part: no route needed"


def test_the_shard_count_is_fixed_for_a_crawls_life(r):
    claim_shards(r, K, 4)
    claim_shards(r, K, 4)
    with pytest.raises(ConfigError, match="split into 4 shards"):
        claim_shards(r, K, 2)
    with pytest.raises(ConfigError, match="split into 4 shards"):
        claim_shards(r, K, 1)
    other = CrawlKeys("unsharded")
    Frontier(r, other).admit([(fp(1), 0.0, b"{}")])
    with pytest.raises(ConfigError, match="already has requests"):
        claim_shards(r, other, 3)
    claim_shards(r, other, 1)
    assert open_frontier(r, K).sharded and not open_frontier(r, other).sharded
    assert len(open_frontier(r, K).parts()) == 5 and open_frontier(r, other).parts() == [other]


def test_purge_deletes_every_shard(r):
    a = sharded(r)
    a.admit([item(h, 1) for h in hosts_per_shard().values()])
    a.pop(2)
    assert open_frontier(r, K).purge() > 0
    assert not list(r.scan_iter(match=K.pattern())) and not list(r.scan_iter(match=K.shards_pattern()))


def test_shard_tags_land_on_every_primary_of_the_cluster(cluster_client, cluster_deployment):
    owners = {cluster_deployment.owner_of(K.shard_keys(i, N).queue).port for i in range(N)}
    assert len(owners) == 3, f"4 shards over {len(owners)} primaries"
    for n in (3, 6):
        assert len({cluster_deployment.owner_of(K.shard_keys(i, n).queue).port for i in range(n)}) == 3


# -- real crawls ---------------------------------------------------------------------------------

HOSTS = [f"127.0.0.{i}" for i in range(11, 19)]
FAST = {"CRAWLPLUG_IDLE_CLOSE": 2, "CRAWLPLUG_HEARTBEAT": 0.5, "CRAWLPLUG_LEASE_TIMEOUT": 4, "CRAWLPLUG_SHARDS": N}


@pytest.fixture
def sites():
    """Eight demo shops, one per loopback address: eight hosts for the shards to split."""
    try:
        servers = [serve(DemoShop(items=40, per_page=10, categories=3, seed=i), host=h) for i, h in enumerate(HOSTS)]
    except OSError as exc:  # pragma: no cover - a machine without 127/8 routed to lo
        pytest.skip(f"cannot bind loopback addresses 127.0.0.11-18: {exc}")
    yield servers
    for s in servers:
        s.stop()


def _start_urls(sites) -> str:
    return ",".join(f"http://{s.host}:{s.port}/" for s in sites)


def _check_every_page_once(sites, allowed_twice: int = 0) -> int:
    twice = 0
    for s in sites:
        hits = s.hits
        assert set(hits) == s.shop.paths(), f"every page of {s.host} was fetched"
        twice += sum(n - 1 for n in hits.values() if n > 1)
    assert twice <= allowed_twice, f"{twice} pages fetched again (allowed {allowed_twice})"
    return sum(len(s.shop.paths()) for s in sites)


def _finish(nodes, timeout: float = 120) -> None:
    for node in nodes:
        assert node.wait(timeout) == 0, node.text()[-3000:]
        text = node.text()
        assert "'finish_reason': 'finished'" in text, text[-3000:]
        assert "Traceback" not in text, text[-3000:]


VARIANTS = {
    "plain": {},
    "domainqueue": {"CRAWLPLUG_QUEUE_CLASS": "crawlplug.queues.DomainQueue", "CRAWLPLUG_DOMAIN_CONCURRENCY": 4},
    "bloom": {"DUPEFILTER_CLASS": "crawlplug.dupefilters.RedisBloomDupeFilter"},
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_two_nodes_crawl_eight_hosts_over_four_shards_on_one_redis(crawl, sites, redis_url, r, variant):
    settings = {"REDIS_URL": redis_url, **FAST, **VARIANTS[variant]}
    nodes = start_joined(
        lambda: crawl("multisite", args={"start_urls": _start_urls(sites)}, settings=settings), sites, 2
    )
    _finish(nodes)
    pages = _check_every_page_once(sites)
    status = Crawl(r, CrawlKeys("multisite")).status()
    assert (status["queued"], status["in_flight"], status["dead"]) == (0, 0, 0)
    assert status["stats"]["acked"] == pages
    per_shard = [int(r.hget(k.stats, "acked") or 0) for k in parts(r, CrawlKeys("multisite"))[1:]]
    assert sum(per_shard) == pages and all(per_shard), f"every shard crawled some hosts: {per_shard}"
    # the operator's view adds the shards up
    res = CliRunner().invoke(main, ["status", "--json", "--redis-url", redis_url, "--crawl", "multisite"])
    assert res.exit_code == 0, res.output
    snap = json.loads(res.output)
    assert (snap["done"], snap["queued"], snap["in_flight"]) == (pages, 0, 0)
    assert len(snap["shards"]) == N and not any(sh["queued"] or sh["in_flight"] for sh in snap["shards"])
    print(f"\n{variant}: {pages} pages of {len(sites)} hosts; acked per shard {per_shard}")


@pytest.mark.parametrize("variant", ["plain", "domainqueue"])
def test_two_nodes_crawl_over_four_shards_on_the_cluster(
    crawl, sites, cluster_url, cluster_client, cluster_deployment, variant
):
    settings = {"REDIS_URL": cluster_url, **FAST, **VARIANTS[variant]}
    nodes = start_joined(
        lambda: crawl("multisite", args={"start_urls": _start_urls(sites)}, settings=settings), sites, 2
    )
    _finish(nodes)
    pages = _check_every_page_once(sites)
    keys = CrawlKeys("multisite")
    status = Crawl.of(open_frontier(cluster_client, keys)).status()
    assert (status["queued"], status["in_flight"], status["dead"], status["stats"]["acked"]) == (0, 0, 0, pages)
    # where the crawl lives: its own tag and four shard tags, over all three primaries
    names = [k.decode() for k in cluster_client.scan_iter(match=keys.shards_pattern())]
    by_primary = Counter(cluster_deployment.owner_of(k).port for k in names)
    assert len(by_primary) == 3, f"shard keys per primary: {dict(by_primary)}"
    seen = {key_slot(k.encode()) for k in names if k.endswith((":seen", ":fph", ":dq"))}
    assert len(seen) == N
    print(
        f"\n{variant}: {pages} pages; shard keys per primary {dict(by_primary)}; "
        f"keys per primary {cluster_deployment.dbsizes()}"
    )


def _leases_of(client: redis.Redis, keys: CrawlKeys, pid: int) -> int:
    prefix = f"{socket.gethostname()}:{pid}:".encode()
    return sum(1 for part in parts(client, keys) for v in client.hvals(part.leased) if v.startswith(prefix))


def test_a_killed_node_loses_nothing_on_a_sharded_crawl(crawl, redis_url, r):
    servers = [
        serve(DemoShop(items=60, per_page=10, categories=3, seed=i, delay=0.02), host=h)
        for i, h in enumerate(HOSTS[:6])
    ]
    try:
        settings = {"REDIS_URL": redis_url, **FAST, "CONCURRENT_REQUESTS": 4}
        keys = CrawlKeys("multisite")
        victim, survivor = start_joined(
            lambda: crawl("multisite", args={"start_urls": _start_urls(servers)}, settings=settings), servers, 2
        )
        held = stop_holding(
            victim,
            ready=lambda: sum(sum(s.hits.values()) for s in servers) >= 60,
            holding=lambda: _leases_of(r, keys, victim.proc.pid),
        )
        victim.kill()
        _finish([survivor])
        _check_every_page_once(servers, allowed_twice=held)
        status = Crawl.of(open_frontier(r, keys)).status()
        assert (status["queued"], status["in_flight"], status["dead"]) == (0, 0, 0)
        assert status["stats"].get("reaped", 0) >= held > 0
        print(f"\nkilled a node holding {held} leases over {N} shards; reaped {status['stats'].get('reaped')}")
    finally:
        for s in servers:
            s.stop()


def test_a_node_with_another_shard_count_is_refused(crawl, redis_url, r, sites):
    claim_shards(r, CrawlKeys("multisite"), 4)
    node = crawl(
        "multisite",
        args={"start_urls": _start_urls(sites[:1])},
        settings={"REDIS_URL": redis_url, **FAST, "CRAWLPLUG_SHARDS": 2},
    )
    assert node.wait(60) != 0, "a node that cannot join exits non-zero"
    text = node.text()
    errors = [line for line in text.splitlines() if " ERROR: " in line]
    assert len(errors) == 1 and "is split into 4 shards" in errors[0] and "CRAWLPLUG_SHARDS=2" in errors[0], text[
        -2000:
    ]
    assert "Traceback" not in text
    assert "'finish_reason': 'config_error'" in text
    assert not any(s.hits for s in sites[:1])


# -- the operator's tools on a sharded crawl -------------------------------------------------------


def _cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("where", ["one-redis", pytest.param("cluster", marks=pytest.mark.integration)])
def test_cli_and_dashboard_add_the_shards_up(request, where):
    from starlette.testclient import TestClient

    from crawlplug.web import create_app

    client = request.getfixturevalue("r" if where == "one-redis" else "cluster_client")
    url = request.getfixturevalue("redis_url" if where == "one-redis" else "cluster_url")
    a = sharded(client, queue=DomainQueue())
    hosts = hosts_per_shard()
    a.admit(
        [
            (fp(f"{h}/{j}"), 0.0, json.dumps({"url": f"http://{h}/{j}"}).encode(), h, h)
            for h in hosts.values()
            for j in range(5)
        ]
    )
    held = a.pop(32)
    assert len(held) == 4, "one request per domain at a time (DomainQueue)"
    for x in held[:2]:
        a.dead_letter(x.id, "broken on purpose")
    a.release([x.id for x in held[2:]], unstarted=True)
    common = ["--redis-url", url, "--crawl", K.crawl]

    res = _cli("status", "--json", *common)
    assert res.exit_code == 0, res.output
    snap = json.loads(res.output)
    assert (snap["queued"], snap["in_flight"], snap["dead"], snap["domains"]) == (18, 0, 2, 4)
    assert sorted(sh["queued"] for sh in snap["shards"]) == sorted([5, 5, 4, 4])

    res = _cli("peek", "--json", "-n", "50", *common)
    rows = [json.loads(line) for line in res.output.splitlines() if '"id"' in line]
    assert len(rows) == 18 and {r["url"].split("/")[2] for r in rows} == set(hosts.values())

    res = _cli("domains", "list", "--json", *common)
    assert json.loads(res.output)["domains"] == 4
    res = _cli("domains", "set", hosts[1], "--delay", "2", *common)
    assert res.exit_code == 0, res.output
    row = next(
        r for r in json.loads(_cli("domains", "list", "--json", *common).output)["rows"] if r["domain"] == hosts[1]
    )
    assert row["delay"] == 2.0

    res = _cli("dead", "list", *common)
    assert res.output.startswith("2 dead letters") and res.output.count("broken on purpose") == 2
    res = _cli("dead", "requeue", "1", *common)
    assert res.exit_code == 0, res.output
    assert Crawl.of(a).status()["queued"] == 19 and Crawl.of(a).status()["dead"] == 1

    web = TestClient(create_app(client, K), base_url="http://127.0.0.1")
    status = web.get("/api/status").json()
    assert (status["queued"], status["dead"]) == (19, 1)
    assert web.get("/api/domains").json()["domains"] == 4
    assert web.get("/api/dead").json()["total"] == 1

    res = _cli("purge", "--yes", *common)
    assert res.exit_code == 0, res.output
    assert not list(client.scan_iter(match=K.shards_pattern()))


# -- export and import of a sharded crawl ----------------------------------------------------------


def test_a_sharded_crawl_stopped_on_one_redis_finishes_on_another(crawl, redis_url, r, fresh_redis, tmp_path):
    servers = [
        serve(DemoShop(items=60, per_page=10, categories=3, seed=i, delay=0.02), host=h)
        for i, h in enumerate(HOSTS[:6])
    ]
    try:
        keys = CrawlKeys("multisite")
        args = {"start_urls": _start_urls(servers)}
        settings = {
            **FAST,
            "CRAWLPLUG_QUEUE_CLASS": "crawlplug.queues.DomainQueue",
            "DUPEFILTER_CLASS": "crawlplug.dupefilters.RedisBloomDupeFilter",
        }
        first = crawl("multisite", args=args, settings={"REDIS_URL": redis_url, **settings})
        deadline = time.monotonic() + 60
        while sum(sum(s.hits.values()) for s in servers) < 80 and time.monotonic() < deadline:
            time.sleep(0.05)
        first.signal(signal.SIGTERM)
        assert first.wait(60) == 0, first.text()[-3000:]
        before = Crawl.of(open_frontier(r, keys)).status()
        assert before["queued"] > 0 and before["in_flight"] == 0

        path = tmp_path / "multisite.jsonl"
        res = _cli("export", "-o", str(path), "--redis-url", redis_url, "--crawl", "multisite")
        assert res.exit_code == 0, res.output
        header = json.loads(path.read_text().splitlines()[0])
        assert header["shards"] == N and header["queue"] == "domain" and header["dedup"] == "bloom"
        res = _cli("import", str(path), "--redis-url", fresh_redis.url)
        assert res.exit_code == 0, res.output
        target = redis.Redis.from_url(fresh_redis.url)
        after = Crawl.of(open_frontier(target, keys)).status()
        assert isinstance(open_frontier(target, keys), Frontier)
        assert [s["queued"] for s in after["shards"]] == [s["queued"] for s in before["shards"]]
        blooms = sorted(k for k in r.scan_iter(match=keys.shards_pattern()) if b":bloom:1:" in k)
        assert len({k.split(b"}")[0] for k in blooms}) >= 2, "the hosts went to several shards"
        for key in blooms:  # every shard's Bloom filter moved bit for bit
            assert r.get(key) == target.get(key)

        second = crawl("multisite", args=args, settings={"REDIS_URL": fresh_redis.url, **settings})
        _finish([second])
        _check_every_page_once(servers)
        status = Crawl.of(open_frontier(target, keys)).status()
        assert (status["queued"], status["in_flight"], status["dead"]) == (0, 0, 0)
        # the imported crawl keeps its shard count: a node configured otherwise is refused
        with pytest.raises(ConfigError, match=f"split into {N} shards"):
            claim_shards(target, keys, 2)
        target.close()
    finally:
        for s in servers:
            s.stop()


def test_a_sharded_export_keeps_leases_starts_and_dead_letters_in_their_parts(r, fresh_redis):
    import io

    from crawlplug.crawl.transfer import TransferError, export_crawl, import_crawl

    a = sharded(r)
    hosts = hosts_per_shard()
    a.admit([item(hosts[s], j) for s in range(N) for j in range(3)])
    held = a.pop(8)
    a.dead_letter(held[0].id, "kept for the operator")
    Crawl.of(a).push_starts(["http://start.example/"])
    out = io.StringIO()
    counts = export_crawl(r, K, out)
    assert (counts["requests"], counts["leased"], counts["dead"], counts["start_entries"]) == (11, 7, 1, 1)
    target = redis.Redis.from_url(fresh_redis.url)
    import_crawl(target, K, out.getvalue().splitlines())
    b = open_frontier(target, K)
    status = Crawl.of(b).status()
    assert (status["queued"], status["in_flight"], status["dead"], status["start_urls"]) == (11, 0, 1, 1)
    assert status["shards"] == [
        {"queued": 3 - (held[0].id.startswith(f"{i}.")), "in_flight": 0, "dead": int(held[0].id.startswith(f"{i}."))}
        for i in range(N)
    ]
    assert b.admit([item(hosts[s], j) for s in range(N) for j in range(3)]).filtered == 12, "dedup moved"
    # the layout must agree with the header
    lines = out.getvalue().splitlines()
    header = json.loads(lines[0])
    del header["shards"]
    with pytest.raises(TransferError, match="line 2: a 'part' record in the export of an unsharded crawl"):
        import_crawl(target, CrawlKeys("other"), [json.dumps(header), *lines[1:]])
    target.close()


def test_a_call_refused_in_a_corrupt_shard_changes_nothing_there(r):
    """An admit-and-pop whose items go to one shard and whose acks go to another, whose
    fingerprint set is corrupt: the acks are refused there, and the pop sent to that shard
    in the same call refuses with them, instead of leasing and then giving back (which
    wrote the corrupt shard's counters in a call reported as refused)."""
    import hashlib

    from crawlplug.errors import AdmissionIncomplete
    from crawlplug.frontier.core import open_frontier
    from crawlplug.frontier.dedup import SetDedup
    from crawlplug.frontier.keys import CrawlKeys
    from crawlplug.frontier.layout import shard_of

    f = open_frontier(
        r, CrawlKeys("cshard"), shards=2, dedup_factory=SetDedup, node_id="n1", lease_timeout=30.0, heartbeat=2.0
    )
    hosts = [f"h{i}.test" for i in range(8)]
    one = next(h for h in hosts if shard_of(h, 2) == 1)
    zero = [h for h in hosts if shard_of(h, 2) == 0]

    def item(url: str, host: str) -> tuple[bytes, float, bytes, str, str]:
        return (hashlib.sha1(url.encode()).digest(), 0.0, json.dumps({"url": url}).encode(), "", host)

    f.admit([item(f"http://{h}/{i}", h) for h in [*zero, one] for i in range(3)])
    _, leased = f.admit_and_pop([], [], 4)  # some of shard 0's requests stay queued
    acks = [x.id for x in leased if x.id.startswith("0.")]
    assert acks
    seen = next(k for k in r.keys("*seen") if b"#0~" in k)
    r.delete(seen)
    r.set(seen, "x")
    tag = seen.decode().rsplit("}:", 1)[0] + "}:"
    before = {k: r.dump(k) for k in r.keys(tag + "*")}
    with pytest.raises(AdmissionIncomplete, match="CORRUPT crawl key"):
        f.admit_and_pop([item(f"http://{one}/new", one)], acks, 6)
    after = {k: r.dump(k) for k in r.keys(tag + "*")}
    assert sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k)) == []
