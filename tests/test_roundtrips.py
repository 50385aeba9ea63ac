"""Redis work per crawled page stays bounded (counted by the server, not timed)."""

from __future__ import annotations

import pytest
from scrapy import Request

from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.scripts import NAMES, Scripts
from crawlplug.serializers import JsonSerializer

# commands the scripts run inside Redis (counted by commandstats too, but no round trip)
SCRIPT_ONLY = {
    "sadd",
    "incr",
    "hset",
    "hget",
    "hdel",
    "zadd",
    "zrem",
    "zrange",
    "zrevrange",
    "hincrby",
    "zrangebyscore",
    "zremrangebyscore",
    "zcount",
    "time",
    "rpush",
    "pexpire",
    "pexpireat",
    "getbit",
    "setbit",
    "setrange",
    "zscore",
    "exists",
    "type",  # guard.lua names what a refused key holds, and checks kinds with no typed length
    "zcard",
    "hlen",
    "scard",
    "strlen",
    "incrby",  # guard.lua's cheap checks; admit.lua's block of ids
    "get",  # guard.lua's integer checks, and the epoch guard of every node script (lua/epoch.lua)
    "set",  # admit.lua keeps the node's last reply (its replay guard)
    "hmget",
    "hexists",  # guard.lua's counter checks, heartbeat.lua's switches
    "hsetnx",  # the compact exact store records a fingerprint in its bucket (dedup.lua)
    "hgetall",
    "llen",
    "hkeys",
}  # (join.lua, finish.lua, idle.lua)


def test_script_calls_per_page_on_the_demo_shop(crawl, shop, r, redis_url):
    r.script_flush()  # the suite's Redis keeps scripts across tests: count as on a new server
    _flush_libraries(r)
    r.config_resetstat()
    node = crawl(args={"base_url": shop.url}, settings={"REDIS_URL": redis_url, "CRAWLPLUG_IDLE_CLOSE": 1})
    assert node.wait(120) == 0, node.text()[-2000:]
    pages = sum(shop.hits.values())
    assert pages == len(shop.shop.paths())
    stats = {k.removeprefix("cmdstat_"): v["calls"] for k, v in r.info("commandstats").items()}
    evalsha = stats.get("evalsha", 0) + stats.get("fcall", 0)
    # an admit+pop pipeline is two EVALSHA (FCALL) in one round trip: they bound round trips from above.
    # INFO is a real round trip, and counted: each client asks the server's version once (whether
    # scripts may declare flags, crawlplug.frontier.scripts.server_major), and a node asks INFO memory at start
    # SCRIPT's calls: "script" on Redis 6.2, one entry per subcommand ("script|load") on 7
    script_calls = {
        name: n for name, n in stats.items() if name.startswith(("script", "function")) and name != "functions"
    }
    top_level = evalsha + sum(
        n for name, n in stats.items() if name not in SCRIPT_ONLY | {"evalsha", "fcall"} and name not in script_calls
    )
    assert stats.get("info", 0) <= 5, stats  # a few per node, whatever the number of pages
    # each script the crawl calls is loaded once, at its first call's NOSCRIPT (the server had
    # none; crawlplug.frontier.scripts.Scripts.load), or on Redis 7 the library once (a node's
    # first call finds no function; a pipeline sends it ahead: one or two loads), and the
    # stats collector's own (crawlplug/stats.py, which the add-on sets) at its first flush;
    # no SCRIPT EXISTS before every pipeline
    if Scripts(r).functions is not None:
        assert stats.get("evalsha", 0) <= 3 and stats.get("function|load", 0) <= 2, stats  # the stats script
        assert stats.get("fcall", 0) > pages / 10, stats
    assert sum(script_calls.values()) <= len(NAMES) + 1 + 1, stats
    assert not script_calls.get("script|exists"), stats
    print(
        f"\n{top_level} top-level commands for {pages} pages: {top_level / pages:.2f} (INFO {stats.get('info', 0)}); "
        f"{stats.get('type', 0)} TYPE checks inside the scripts"
    )
    assert top_level / pages <= 1.0, (top_level, pages, stats)


def _flush_libraries(r) -> None:
    for lib in r.function_list() if int(r.info("server")["redis_version"].split(".")[0]) >= 7 else []:
        name = dict(zip(lib[::2], lib[1::2]))[b"library_name"].decode()
        if name.startswith("crawlplug_"):
            r.function_delete(name)


def test_pipelined_functions_survive_a_function_flush(r):
    """The library lost (a Redis restarted from a snapshot taken before it was loaded, a
    FUNCTION FLUSH): the calls that found no function are sent again with the library ahead,
    and the call before the loss found it."""
    frontier = Frontier(r, CrawlKeys("fflush"))
    if frontier.scripts.functions is None:
        pytest.skip("Redis Functions need Redis 7 (this server is older)")
    payload = JsonSerializer().dumps(Request("http://example.com/"), None)
    frontier.admit([(b"a" * 20, 0.0, payload)])
    _flush_libraries(r)
    result, leased = frontier.admit_and_pop([(b"b" * 20, 0.0, payload)], [], 5)
    assert result.admitted == 1 and len(leased) == 2
    assert frontier.scripts.functions.name.encode() in str(r.function_list()).encode()
    _flush_libraries(r)
    assert frontier.idle_state().queued == 0  # one call (not pipelined) finds no function, loads it
    _flush_libraries(r)
    r.config_resetstat()
    calls = [frontier.base.admit_call([(b"c" * 20, 0.0, payload)], []), frontier.base.pop_call(5)]
    admitted, popped = frontier.scripts.pipelined(calls)
    assert not isinstance(admitted, Exception) and len(frontier.base.read_pop(popped, calls[1])) == 1
    stats = r.info("commandstats")
    # the pipeline found no function, was sent again with the library ahead: admitted once
    assert stats["cmdstat_function|load"]["calls"] == 1, stats


def test_pipelined_scripts_survive_a_script_flush(r):
    frontier = Frontier(r, CrawlKeys("flush"))
    frontier.scripts = Scripts(r, functions=False)
    payload = JsonSerializer().dumps(Request("http://example.com/"), None)
    frontier.admit([(b"a" * 20, 0.0, payload)])
    r.script_flush()  # e.g. a Redis restart without persistence of the script cache
    result, leased = frontier.admit_and_pop([(b"b" * 20, 0.0, payload)], [], 5)
    assert result.admitted == 1 and len(leased) == 2
    assert isinstance(frontier.scripts, Scripts)


def test_a_redis_holds_the_scripts_its_crawls_call_not_all_of_them(r):
    """Each script is loaded at its first call: a Redis is not given the script cache of all
    of crawlplug's scripts (about 390 KB) for the few a crawl calls."""
    r.script_flush()
    frontier = Frontier(r, CrawlKeys("lazy"))
    frontier.scripts = Scripts(r, functions=False)  # (on Redis 7 the library holds them all, once)
    payload = JsonSerializer().dumps(Request("http://example.com/"), None)
    frontier.admit([(b"a" * 20, 0.0, payload)])
    scripts = frontier.scripts._scripts
    loaded = dict(zip(scripts, r.script_exists(*[s.sha for s in scripts.values()])))
    assert loaded["admit"] and sum(loaded.values()) == 1, loaded
    r.script_flush()
    r.script_load(scripts["pop"].script)  # a server holding one script of a pipeline and not the other
    calls = [frontier.base.admit_call([(b"c" * 20, 0.0, payload)], []), frontier.base.pop_call(5)]
    admitted, popped = frontier.scripts.pipelined(calls)
    assert not isinstance(admitted, Exception) and not isinstance(popped, Exception), (admitted, popped)
    assert all(r.script_exists(scripts["admit"].sha, scripts["pop"].sha))


def test_a_pop_pipelined_after_an_admission_leases_it_on_a_server_holding_only_the_pop_script(r):
    """The SCRIPT LOAD of the scripts a server was not seen to hold goes ahead of the
    pipeline's EVALSHAs, in the same round trip: the admission runs first, so the pop
    after it leases what it admitted (sending the admission again after NOSCRIPT ran the
    pop first, which found nothing)."""
    r.script_flush()
    frontier = Frontier(r, CrawlKeys("order"))
    frontier.scripts = Scripts(r, functions=False)  # (the library is one unit: held whole or not)
    r.script_load(frontier.scripts._scripts["pop"].script)
    payload = JsonSerializer().dumps(Request("http://example.com/"), None)
    calls = [frontier.base.admit_call([(b"a" * 20, 0.0, payload)], []), frontier.base.pop_call(5)]
    admitted, popped = frontier.scripts.pipelined(calls)
    assert not isinstance(admitted, Exception) and not isinstance(popped, Exception), (admitted, popped)
    assert len(frontier.base.read_pop(popped, calls[1])) == 1, popped
