"""Recurring seeds (crawlplug.starts.seeds): the timer with a fake clock, its lock, and one real run.

``Seeds.fire_due(now_ms=...)`` takes the time from the test, so schedules are
checked to the millisecond without waiting; Redis is the real test server.
The last test runs a real `scrapy crawl shop` worker and a real
``crawlplug seeds add URL --every 2s``: the site sees the seed fetched again
and again although the crawl had seen it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from crawlplug.errors import ConfigError
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.starts.seeds import Seed, Seeds, make_seed, parse_every

KEYS = CrawlKeys("seedtest")
MIN = 60_000
#: a fixed "now" for the fake clock: 2024-03-05 12:00:00 UTC
T0 = int(datetime(2024, 3, 5, 12, 0, tzinfo=UTC).timestamp() * 1000)
CRAWLPLUG = str(Path(sys.executable).with_name("crawlplug"))


def ms(*args: int) -> int:
    return int(datetime(*args, tzinfo=UTC).timestamp() * 1000)


def utc(ms_: int) -> datetime:
    return datetime.fromtimestamp(ms_ / 1000, UTC)


def start_urls(client: redis.Redis, keys: CrawlKeys = KEYS) -> list[str]:
    return [x.decode() for x in client.lrange(keys.start_urls, 0, -1)]


# -- schedules --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("90s", 90),
        ("15m", 900),
        ("6h", 21600),
        ("1d", 86400),
        ("2w", 1209600),
        ("1h30m", 5400),
        ("45", 45),
        (" 2S ", 2),
    ],
)
def test_parse_every(text, seconds):
    assert parse_every(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "0s", "abc", "5 parsecs", "1x", "-5s", "1.5h"])
def test_parse_every_refuses(text):
    with pytest.raises(ConfigError):
        parse_every(text)


def test_make_seed_validates_and_bypasses_dedup():
    seed = make_seed('{"url": "http://example.com/", "dont_filter": false, "priority": 3}', every="1d")
    assert json.loads(seed.entry) == {"url": "http://example.com/", "priority": 3}, "dont_filter forced to true"
    assert seed.every == 86400 and seed.cron is None
    assert make_seed("http://example.com/a", cron="10 1 * * *").entry == "http://example.com/a"
    with pytest.raises(ConfigError, match="no scheme"):
        make_seed("example.com", every="1d")
    with pytest.raises(ConfigError, match="exactly one schedule"):
        make_seed("http://example.com/", every="1d", cron="10 1 * * *")
    with pytest.raises(ConfigError, match="exactly one schedule"):
        make_seed("http://example.com/")
    with pytest.raises(ConfigError, match="not a valid cron"):
        make_seed("http://example.com/", cron="61 25 * * *")
    with pytest.raises(ConfigError, match="unknown time zone"):
        make_seed("http://example.com/", cron="10 1 * * *", tz="Mars/Olympus")


def test_every_next_run_stays_on_the_grid():
    seed = Seed(entry="http://e.com/", every=60)
    assert seed.next_after(T0, T0) == T0 + MIN
    assert seed.next_after(T0 + 1, T0) == T0 + MIN
    assert seed.next_after(T0 + MIN, T0) == T0 + 2 * MIN
    assert seed.next_after(T0 + 10 * MIN + 5000, T0) == T0 + 11 * MIN
    assert seed.next_after(T0 - 5, T0) == T0, "not yet due: stays"


def test_cron_next_run_is_0110_utc():
    seed = make_seed("http://example.com/", cron="10 1 * * *")
    assert utc(seed.next_after(T0)) == datetime(2024, 3, 6, 1, 10, tzinfo=UTC)  # noon: tomorrow
    assert utc(seed.next_after(ms(2024, 3, 5, 0, 30))) == datetime(2024, 3, 5, 1, 10, tzinfo=UTC)
    assert utc(seed.next_after(ms(2024, 3, 5, 1, 10))) == datetime(2024, 3, 6, 1, 10, tzinfo=UTC)
    assert utc(seed.next_after(ms(2024, 12, 31, 23, 59))) == datetime(2025, 1, 1, 1, 10, tzinfo=UTC)


def test_cron_in_a_time_zone():
    seed = make_seed("http://example.com/", cron="10 1 * * *", tz="Europe/Berlin")
    # 01:10 in Berlin is 00:10 UTC in winter and 23:10 UTC the day before in summer
    assert utc(seed.next_after(T0)) == datetime(2024, 3, 6, 0, 10, tzinfo=UTC)
    assert utc(seed.next_after(ms(2024, 7, 1, 12, 0))) == datetime(2024, 7, 1, 23, 10, tzinfo=UTC)


# -- fire_due with a fake clock ---------------------------------------------------------------


def test_every_60s_fires_at_due_not_before(r):
    book = Seeds(r, KEYS)
    seed = book.add(make_seed("http://example.com/", every="60s"), first_run_ms=T0)
    assert book.fire_due(now_ms=T0 - 1) == 0
    assert start_urls(r) == []
    assert book.fire_due(now_ms=T0) == 1
    assert start_urls(r) == ["http://example.com/"]
    assert book.due_times() == {seed.id: T0 + MIN}
    assert book.all()[seed.id].last == T0
    # not again before the next run, once at it
    assert book.fire_due(now_ms=T0 + 1) == 0
    assert book.fire_due(now_ms=T0 + MIN - 1) == 0
    assert book.fire_due(now_ms=T0 + MIN) == 1
    assert book.due_times() == {seed.id: T0 + 2 * MIN}
    assert start_urls(r) == ["http://example.com/"] * 2
    assert int(r.hget(KEYS.stats, "seeds_fired")) == 2


def test_long_outage_fires_once_then_on_the_grid(r):
    book = Seeds(r, KEYS)
    seed = book.add(make_seed("http://example.com/", every="60s"), first_run_ms=T0)
    now = T0 + 10 * MIN  # ten periods missed (everything was down)
    assert book.fire_due(now_ms=now) == 1, "missed runs are caught up once, not ten times"
    assert start_urls(r) == ["http://example.com/"]
    nxt = book.due_times()[seed.id]
    assert nxt > now and nxt == T0 + 11 * MIN, "the next run is on the grid, after now"
    for t in (now, now + 1, now + MIN - 1):
        assert book.fire_due(now_ms=t) == 0
    assert len(start_urls(r)) == 1
    # the same, between grid points
    now = nxt + 10 * MIN + 25_000
    assert book.fire_due(now_ms=now) == 1
    assert book.due_times()[seed.id] == nxt + 11 * MIN
    assert len(start_urls(r)) == 2


def test_cron_seed_fires_at_0110_and_catches_up_once(r):
    book = Seeds(r, KEYS)
    seed = make_seed("http://example.com/daily", cron="10 1 * * *")
    first = seed.next_after(T0)
    assert first == ms(2024, 3, 6, 1, 10)
    book.add(seed, first_run_ms=first)
    assert book.fire_due(now_ms=first - 1) == 0
    assert book.fire_due(now_ms=first) == 1
    assert book.due_times()[seed.id] == ms(2024, 3, 7, 1, 10)
    # down from the 7th to the 10th at 03:00: one run, the next at 01:10 on the 11th
    assert book.fire_due(now_ms=ms(2024, 3, 10, 3, 0)) == 1
    assert book.due_times()[seed.id] == ms(2024, 3, 11, 1, 10)
    assert start_urls(r) == ["http://example.com/daily"] * 2


def test_only_due_seeds_fire(r):
    book = Seeds(r, KEYS)
    due = book.add(make_seed("http://example.com/due", every="1h"), first_run_ms=T0 - 1000)
    later = book.add(make_seed("http://example.com/later", every="1h"), first_run_ms=T0 + 1000)
    assert book.fire_due(now_ms=T0) == 1
    assert start_urls(r) == ["http://example.com/due"]
    assert book.due_times() == {due.id: T0 - 1000 + 3600_000, later.id: T0 + 1000}


def test_removed_seed_does_not_fire(r):
    book = Seeds(r, KEYS)
    seed = book.add(make_seed("http://example.com/gone", every="60s"), first_run_ms=T0)
    kept = book.add(make_seed('{"url": "http://example.com/kept", "priority": 1}', every="60s"), first_run_ms=T0)
    assert book.remove("http://example.com/gone")  # by URL
    assert not book.remove("http://example.com/gone")
    assert book.fire_due(now_ms=T0) == 1
    assert start_urls(r) == [kept.entry]
    assert book.remove(kept.id)  # by id
    assert book.all() == {} and book.due_times() == {}
    assert seed.id not in book.all()


def test_adding_a_seed_again_replaces_its_schedule(r):
    book = Seeds(r, KEYS)
    a = book.add(make_seed("http://example.com/", every="60s"), first_run_ms=T0)
    b = book.add(make_seed("http://example.com/", every="1d"), first_run_ms=T0 + 5)
    assert a.id == b.id and len(book.all()) == 1
    assert book.all()[a.id].every == 86400 and book.due_times() == {a.id: T0 + 5}


def test_an_unreadable_seed_is_skipped_and_dropped(r):
    book = Seeds(r, KEYS)
    good = book.add(make_seed("http://example.com/good", every="60s"), first_run_ms=T0)
    r.hset(KEYS.seeds, "broken", "{not json")
    r.zadd(KEYS.seeds_due, {"broken": T0 - 1})
    assert book.fire_due(now_ms=T0) == 1
    assert start_urls(r) == ["http://example.com/good"]
    assert "broken" not in book.due_times() and good.id in book.due_times()


def test_two_timers_racing_fire_each_due_seed_once(redis_url):
    """Many Seeds objects (one client each, as on separate nodes) call fire_due at the
    same moment over and over: the lock lets each due seed fire exactly once."""
    n_seeds, n_timers, rounds = 20, 8, 25
    clients = [redis.Redis.from_url(redis_url) for _ in range(n_timers)]
    books = [Seeds(c, KEYS) for c in clients]
    for i in range(n_seeds):
        books[0].add(make_seed(f"http://example.com/{i}", every="60s"), first_run_ms=T0)
    barrier = threading.Barrier(n_timers)
    fired = [0] * n_timers
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            for _ in range(rounds):
                barrier.wait(10)
                fired[k] += books[k].fire_due(now_ms=T0 + 1)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n_timers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    urls = start_urls(clients[0])
    assert sum(fired) == n_seeds, fired
    assert sorted(urls) == sorted(f"http://example.com/{i}" for i in range(n_seeds)), "each seed injected once"
    assert set(books[0].due_times().values()) == {T0 + MIN}
    for c in clients:
        c.close()


def test_a_held_lock_blocks_firing_until_it_expires(r):
    """A timer that died holding the lock stops the others only until the lock expires."""
    book = Seeds(r, KEYS)
    book.add(make_seed("http://example.com/", every="60s"), first_run_ms=T0)
    other = r.lock(KEYS.seedlock, timeout=0.5)
    assert other.acquire(blocking=False)
    assert book.fire_due(now_ms=T0) == 0, "another node is firing"
    time.sleep(0.6)  # the holder died: its lock expires
    assert book.fire_due(now_ms=T0) == 1
    assert start_urls(r) == ["http://example.com/"]


def test_fire_due_defaults_to_the_redis_clock(r):
    book = Seeds(r, KEYS)
    book.add(make_seed("http://example.com/now", every="1h"))  # first run: now (Redis time)
    book.add(make_seed("http://example.com/later", every="1h"), first_run_ms=T0 * 10)
    assert book.fire_due() == 1
    assert start_urls(r) == ["http://example.com/now"]


# -- one real interval, end to end ----------------------------------------------------------


def test_seed_every_2s_recrawls_a_seen_url(crawl, make_shop, redis_url):
    """A `shop` worker crawls the site, then `crawlplug seeds add URL --every 2s`: the seed's
    URL, seen by the crawl long before, is fetched again at least twice within ~10 s."""
    shop = make_shop(items=30)
    target = "/item/5/"
    node = crawl(
        "shop",
        args={"base_url": shop.url},
        settings={
            "REDIS_URL": redis_url,
            "CRAWLPLUG_IDLE_CLOSE": 0,
            "CRAWLPLUG_HEARTBEAT": 1,
            "CRAWLPLUG_LEASE_TIMEOUT": 5,
        },
    )
    pages = shop.shop.paths()
    deadline = time.monotonic() + 30
    while set(shop.hits) != pages:
        assert node.proc.poll() is None, node.text()[-3000:]
        assert time.monotonic() < deadline, "the first crawl did not finish"
        time.sleep(0.05)
    time.sleep(0.5)
    assert shop.hits[target] == 1, "seen once by the normal crawl"
    entry = json.dumps({"url": shop.url + target, "callback": "parse_item"})
    added = time.monotonic()
    cmd = [CRAWLPLUG, "--redis-url", redis_url, "--crawl", "shop", "seeds", "add", entry, "--every", "2s"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    assert "every 2s" in out.stdout and "first run now" in out.stdout, out.stdout
    while shop.hits[target] < 3:
        assert node.proc.poll() is None, node.text()[-3000:]
        assert time.monotonic() - added < 12, f"{shop.hits[target] - 1} seed fetches in 12 s"
        time.sleep(0.05)
    times = [t - added for t, path in shop.hit_log if path == target and t >= added]
    print(f"\n[seeds] seed fetched at {', '.join(f'{t:.2f}' for t in times)} s after `seeds add`")
    assert times[1] - times[0] >= 1.5, "not faster than the schedule"
    # only the seed was fetched again: its links were all seen
    again = {p: n for p, n in shop.hits.items() if n > 1}
    assert set(again) == {target}, again
    node.signal(15)
    assert node.wait(30) == 0, node.text()[-3000:]
    assert "crawlplug/seeds_fired" in node.text(), "the node fired the seed (its stats say so)"
