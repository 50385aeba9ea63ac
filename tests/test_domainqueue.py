"""DomainQueue's Redis side (lua/domains.lua and the scripts using it) on a real Redis."""

from __future__ import annotations

import hashlib
import time

import pytest
import redis
from redis.crc import key_slot
from scrapy import Request
from scrapy.settings import Settings

from crawlplug.crawl import Crawl
from crawlplug.errors import ConfigError
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.domains import Domains
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.queues import DomainQueue, domain_limits, registered_domain

from .support.nodes import start_joined

K = CrawlKeys("dq")


def fp(n: object) -> bytes:
    return hashlib.sha1(str(n).encode()).digest()


@pytest.fixture
def frontier(r: redis.Redis) -> Frontier:
    return Frontier(r, K, queue=DomainQueue(), node_id="node-a", lease_timeout=30)


@pytest.fixture
def domains(r: redis.Redis) -> Domains:
    return Domains(r, K)


def admit(frontier: Frontier, domain: str, names: list[str], priority: int = 0) -> None:
    result = frontier.admit([(fp(f"{domain}/{n}"), -priority, f"{domain}/{n}".encode(), domain) for n in names])
    assert result.admitted == len(names)


def payloads(leased: list) -> list[str]:
    return [x.payload.decode() for x in leased]


def pop_sent(frontier: Frontier, n: int) -> list:
    """Pop, and report at once that every request that must say so was sent (a node
    whose requests leave immediately)."""
    leased = frontier.pop(n)
    sent = [(x.id, "s") for x in leased if "s" in x.report]
    if sent:
        frontier.admit([], events=sent)
    return leased


def test_priority_order_then_oldest_first_inside_a_domain(frontier, domains):
    domains.configure({"s:*": "0 0"})
    admit(frontier, "a.test", ["low1", "low2"], priority=0)
    admit(frontier, "a.test", ["high"], priority=10)
    admit(frontier, "a.test", ["neg"], priority=-5)
    admit(frontier, "a.test", ["low3"], priority=0)
    assert payloads(pop_sent(frontier, 10)) == ["a.test/high"]  # a new domain's first request goes alone
    assert payloads(pop_sent(frontier, 10)) == ["a.test/low1", "a.test/low2", "a.test/low3", "a.test/neg"]


def test_a_new_domain_waits_for_its_first_request_to_be_sent(frontier, domains):
    """robots.txt is fetched before a domain's first request leaves: its Crawl-delay
    must be known before a second request of the domain is handed out."""
    domains.configure({"s:*": "0 0"})
    admit(frontier, "new.test", ["1", "2", "3"])
    first = frontier.pop(10)
    assert payloads(first) == ["new.test/1"]
    assert first[0].report == "s"
    assert frontier.pop(10) == []
    domains.configure({"r:new.test": "60000 -"})  # what robots.txt said meanwhile
    frontier.admit([], events=[(first[0].id, "s")])
    none = frontier.pop(10)
    assert none == [] and none.next_ready_ms > 50_000


def test_a_domain_waits_its_delay_between_two_requests_whichever_node_asks(r, frontier, domains):
    domains.configure({"s:*": "1500 0"})
    admit(frontier, "slow.test", ["1", "2", "3"])
    other = Frontier(r, K, queue=DomainQueue(), node_id="node-b")
    first = frontier.pop(10)
    assert payloads(first) == ["slow.test/1"]  # one request per delay, however many asked
    assert first[0].report == "sr"  # the node must say when it is sent and when it is done
    none = other.pop(10)
    assert none == []  # another node is held back as well
    assert none.next_ready_ms == -1  # until the first request is sent, the delay has not started
    time.sleep(0.3)  # e.g. robots.txt is fetched first: the wait does not eat into the delay
    assert other.pop(10) == []
    frontier.admit([], events=[(first[0].id, "s")])
    none = other.pop(10)
    assert none == []
    assert 1000 < none.next_ready_ms <= 1500
    time.sleep(none.next_ready_ms / 1000 + 0.05)
    assert payloads(other.pop(10)) == ["slow.test/2"]


def test_a_request_leased_but_never_sent_does_not_hold_its_domain(frontier, domains):
    domains.configure({"s:*": "60000 0"})
    admit(frontier, "x.test", ["1", "2"])
    first = frontier.pop(5)
    assert frontier.pop(5) == []
    frontier.admit([], acks=[first[0].id])  # dropped before download (robots.txt, a middleware)
    assert payloads(frontier.pop(5)) == ["x.test/2"]


def test_a_finished_download_frees_its_concurrency_slot_before_the_callback_ends(frontier, domains, r):
    domains.configure({"s:*": "0 1"})
    admit(frontier, "f.test", ["1", "2", "3"])
    first = frontier.pop(5)
    assert [x.report for x in first] == ["sr"]
    frontier.admit([], events=[(first[0].id, "s")])
    assert frontier.pop(5) == []
    frontier.admit([], events=[(first[0].id, "r")])  # downloaded; its callback still runs
    second = frontier.pop(5)
    assert payloads(second) == ["f.test/2"]
    assert second[0].report == "r"
    frontier.admit([], events=[(first[0].id, "r")])  # a repeated report changes nothing
    assert frontier.pop(5) == []
    frontier.admit([], acks=[first[0].id])  # the ack of a freed lease frees nothing more
    assert frontier.pop(5) == []
    assert r.hget(K.dstate, "b:f.test") == b"1"


def test_concurrency_counts_leases_until_acked_released_or_dead(frontier, domains, r):
    domains.configure({"s:*": "0 2"})
    admit(frontier, "c.test", [str(i) for i in range(6)])
    first = pop_sent(frontier, 10) + pop_sent(frontier, 10)
    assert len(first) == 2
    none = frontier.pop(10)
    assert none == []
    assert r.zscore(K.domains, "c.test") == float("inf")  # parked, not polled
    assert none.next_ready_ms == -1

    frontier.admit([], acks=[first[0].id])
    again = frontier.pop(10)
    assert len(again) == 1  # one slot came free
    frontier.release([first[1].id], unstarted=True)
    assert len(frontier.pop(10)) == 1
    assert frontier.pop(10) == []
    assert frontier.dead_letter(again[0].id, "test")
    assert len(frontier.pop(10)) == 1
    assert int(r.hget(K.dstate, "b:c.test")) == 2


def test_an_expired_lease_goes_back_to_its_domain_and_frees_its_slot(r, domains):
    short = Frontier(r, K, queue=DomainQueue(), node_id="dies", lease_timeout=0.05, heartbeat=0.01)
    domains.configure({"s:*": "0 1"})
    admit(short, "k.test", ["a", "b"], priority=3)
    taken = short.pop(5)
    assert payloads(taken) == ["k.test/a"]
    assert short.pop(5) == []
    time.sleep(0.1)
    reaper = Frontier(r, K, queue=DomainQueue(), node_id="reaper")
    assert reaper.reap() == (1, 0)
    # back at its own priority, ahead of b, and the domain's slot is free again
    again = reaper.pop(5)
    assert payloads(again) == ["k.test/a"]
    assert again[0].deliveries == 2
    assert r.hget(K.dstate, "b:k.test") == b"1"


def test_a_dead_node_frees_its_domains_slots_before_its_leases_expire(r, domains):
    """Declared dead after 3 missed heartbeats, a node's leases stop counting against their
    domains at once, while the leases wait for their timeout: in that order in Redis, whose
    state is read after each step (no time is asserted)."""
    dying = Frontier(r, K, queue=DomainQueue(), node_id="dies", lease_timeout=1.0, heartbeat=0.02)
    domains.configure({"s:*": "0 1"})
    admit(dying, "k.test", ["a", "b", "c"], priority=3)
    dying.heartbeat([])
    [held] = pop_sent(dying, 5)
    dying.heartbeat([held.id])
    reaper = Frontier(r, K, queue=DomainQueue(), node_id="reaper", lease_timeout=30)
    assert reaper.pop(5) == [], "the domain's one slot is the dying node's"
    events = []

    def step() -> None:
        reaper.heartbeat([])
        reaper.reap()
        state = (
            "dies" in {m.decode() for m in r.zrange(K.nodes, 0, -1)},
            r.zscore(K.leases, held.id) is not None,
            r.hget(K.dstate, "b:k.test"),
        )
        if not events or events[-1] != state:
            events.append(state)
        time.sleep(0.005)

    while r.zscore(K.nodes, "dies") is not None:  # its heartbeat stopped: 3 beats of 20 ms
        step()
    step()
    mine = reaper.pop(5)
    assert payloads(mine) == ["k.test/b"], "the slot is free: a live node crawls the domain"
    assert r.zscore(K.leases, held.id) is not None and r.hget(K.leased, held.id).endswith(b"|f")
    assert int(r.hget(K.stats, "slots_freed")) == 1
    while r.zscore(K.leases, held.id) is not None:  # its lease expires later, and is reaped then
        step()
    assert events[0] == (True, True, b"1") and events[1] == (False, True, None) and events[-1][1] is False, events
    assert r.hget(K.dstate, "b:k.test") == b"1", "the reaped lease freed no slot twice: only mine counts"
    reaper.admit([], acks=[mine[0].id])
    assert payloads(reaper.pop(5)) == ["k.test/a"], "the dead node's request, back in the queue"


def test_a_big_domain_does_not_starve_small_ones(frontier, domains):
    domains.configure({"s:*": "0 0"})
    admit(frontier, "big.test", [str(i) for i in range(200)])
    small = [f"s{i}.test" for i in range(9)]
    for d in small:
        admit(frontier, d, [str(i) for i in range(5)])
    taken: list[str] = []
    for _ in range(6):
        taken += payloads(pop_sent(frontier, 10))
    assert len(taken) == 60
    for d in small:
        assert sum(1 for p in taken if p.startswith(d + "/")) == 5, (d, taken)


def test_one_domain_alone_fills_a_whole_batch(frontier, domains):
    domains.configure({"s:*": "0 0"})
    admit(frontier, "only.test", [str(i) for i in range(50)])
    assert len(pop_sent(frontier, 32)) == 1  # its first request, alone
    assert len(frontier.pop(32)) == 32


def test_operator_overrides_take_effect_at_once_and_win_over_settings(frontier, domains):
    domains.configure({"s:*": "60000 0"})
    admit(frontier, "o.test", ["1", "2", "3"])
    sent = frontier.pop(5)
    assert len(sent) == 1
    frontier.admit([], events=[(sent[0].id, "s")])
    none = frontier.pop(5)
    assert none == [] and none.next_ready_ms > 50_000
    domains.configure({"o:o.test": "0 -"})  # the operator: no delay for o.test
    assert len(frontier.pop(5)) == 2
    # and back: the settings' 60 s rule again
    domains.configure({"o:o.test": ""})
    admit(frontier, "o.test", ["4"])
    assert frontier.pop(5) == []


def effective_limits(frontier: Frontier, domains: Domains, domain: str) -> tuple[float, int]:
    """(delay ms, concurrency) in force for ``domain``, as the operators' table shows them:
    read by lua/domaintable.lua with lua/domains.lua's own rule (no copy of it in Python)."""
    admit(frontier, domain, [f"limits-{domain}"])
    row = next(row for row in domains.table(100) if row["domain"] == domain)
    return round(row["delay"] * 1000), row["concurrency"]


def test_limit_precedence_shown_is_the_rule_the_queue_applies(r, frontier, domains):
    domains.configure({"s:*": "100 4", "r:a": "2000 -", "s:b": "0 -", "o:c": "- 1", "o:*": "300 -"})
    assert effective_limits(frontier, domains, "a") == (2000, 4)  # robots lengthens the default delay
    assert effective_limits(frontier, domains, "b") == (0, 4)  # an explicit per-domain setting wins over robots
    assert effective_limits(frontier, domains, "c") == (300, 1)
    assert effective_limits(frontier, domains, "z") == (300, 4)
    keys = CrawlKeys("limits-unset")
    assert effective_limits(Frontier(r, keys, queue=DomainQueue()), Domains(r, keys), "z") == (0, 0)


def test_robots_crawl_delay_lengthens_the_default_on_redis(frontier, domains):
    domains.configure({"s:*": "0 0", "r:r.test": "1500 -"})
    admit(frontier, "r.test", ["1", "2"])
    admit(frontier, "free.test", ["1", "2"])
    assert sorted(payloads(pop_sent(frontier, 10))) == ["free.test/1", "r.test/1"]
    assert payloads(pop_sent(frontier, 10)) == ["free.test/2"]
    none = frontier.pop(10)
    assert none == [] and 1000 < none.next_ready_ms <= 1500


def test_ten_thousand_domains_pop_from_distinct_domains(frontier, domains, r):
    domains.configure({"s:*": "1000 1"})
    items = [(fp(i), 0, f"d{i}.test/x".encode(), f"d{i}.test") for i in range(10_000)]
    for start in range(0, len(items), 1000):
        frontier.admit(items[start : start + 1000])
    assert r.zcard(K.domains) == 10_000
    got = frontier.pop(32)
    assert len({x.payload.split(b"/")[0] for x in got}) == 32
    assert frontier.idle_state()[0] == 10_000 - 32


def test_every_domain_key_shares_the_crawl_hash_tag(r, frontier, domains):
    domains.configure({"s:*": "10 1"})
    admit(frontier, "t.test", ["1", "2"])
    frontier.pop(1)
    names = {k.decode() for k in r.scan_iter(match="*")}
    assert set(K.domain_keys()) <= names
    assert {key_slot(n.encode()) for n in names} == {key_slot(K.queue.encode())}


def test_request_domain_by_host_or_registered_domain():
    req = Request("https://Shop.Example.co.uk:8443/a?b=c")
    assert DomainQueue("host").domain(req) == "shop.example.co.uk"
    assert DomainQueue("domain").domain(req) == "example.co.uk"
    assert registered_domain("127.0.0.2") == "127.0.0.2"
    assert registered_domain("localhost") == "localhost"
    with pytest.raises(ConfigError):
        DomainQueue("ip")


def test_settings_become_limits_and_bad_ones_are_refused():
    s = Settings(
        {"DOWNLOAD_DELAY": 0.25, "CONCURRENT_REQUESTS_PER_DOMAIN": 3, "CRAWLPLUG_DOMAINS": {"a.test": {"delay": 2}}}
    )
    assert domain_limits(s) == {"s:*": "250 3", "s:a.test": "2000 -"}
    s = Settings({"CRAWLPLUG_DOMAIN_DELAY": "0.5", "CRAWLPLUG_DOMAIN_CONCURRENCY": "0"})
    assert domain_limits(s)["s:*"] == "500 0"
    for bad in (
        {"CRAWLPLUG_DOMAIN_DELAY": -1},
        {"CRAWLPLUG_DOMAINS": {"a": {"speed": 1}}},
        {"CRAWLPLUG_DOMAINS": {"a": {"delay": "fast"}}},
    ):
        with pytest.raises(ConfigError):
            domain_limits(Settings(bad))


# -- real crawls ---------------------------------------------------------------------

FAST = {"CRAWLPLUG_IDLE_CLOSE": 2, "CRAWLPLUG_HEARTBEAT": 1, "CRAWLPLUG_LEASE_TIMEOUT": 10}
DOMAIN = {"CRAWLPLUG_QUEUE_CLASS": "crawlplug.queues.DomainQueue"}


@pytest.mark.parametrize(
    "dupefilter", ["crawlplug.dupefilters.RedisSetDupeFilter", "crawlplug.dupefilters.RedisBloomDupeFilter"]
)
def test_two_nodes_crawl_the_shop_through_the_domain_queue_exactly_once(crawl, make_shop, redis_url, dupefilter):
    shop = make_shop(items=300)
    settings = {
        "REDIS_URL": redis_url,
        "DUPEFILTER_CLASS": dupefilter,
        "CRAWLPLUG_DOMAIN_CONCURRENCY": 4,
        **DOMAIN,
        **FAST,
    }
    nodes = start_joined(lambda: crawl(args={"base_url": shop.url}, settings=settings), shop, 2)
    for node in nodes:
        assert node.wait(180) == 0, node.text()[-3000:]
        assert "'finish_reason': 'finished'" in node.text()
    hits = shop.hits
    assert set(hits) == shop.shop.paths()
    assert not {p: n for p, n in hits.items() if n > 1}
    client = redis.Redis.from_url(redis_url)
    status = Crawl(client, CrawlKeys("shop")).status()
    assert (status["queued"], status["in_flight"], status["domains"]) == (0, 0, 0)
    busy = client.hgetall(CrawlKeys("shop").dstate)
    assert not [f for f in busy if f.startswith(b"b:")], busy  # every lease gave its slot back


def test_a_crawl_queued_by_another_queue_kind_is_refused_with_a_clear_message(crawl, shop, redis_url):
    client = redis.Redis.from_url(redis_url)
    Frontier(client, CrawlKeys("shop")).admit([(fp("x"), 0, b'{"v":1,"url":"http://127.0.0.1:1/"}')])
    node = crawl(args={"base_url": shop.url}, settings={"REDIS_URL": redis_url, **DOMAIN, **FAST})
    assert node.wait(60) == 1
    text = node.text()
    assert "has 1 requests queued by a plain queue" in text
    assert "CRAWLPLUG_QUEUE_CLASS" in text
    assert sum(shop.hits.values()) == 0


def test_the_domain_table_counts_requests_leased_per_domain(frontier, domains):
    domains.configure({"s:*": "0 0"})
    admit(frontier, "rate.test", [str(i) for i in range(5)])
    pop_sent(frontier, 10)  # the first request, alone
    pop_sent(frontier, 2)
    [row] = domains.table()
    assert (row["domain"], row["queued"], row["in_flight"], row["leased_total"]) == ("rate.test", 2, 3, 3)
