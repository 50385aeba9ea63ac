"""The text of crawlplug's Lua scripts as sent to Redis (crawlplug.frontier.luatext.source):
the shared pieces cut to what each script uses, comments and indentation gone, line
numbers kept."""

from __future__ import annotations

import re
from importlib.resources import files

import pytest

from crawlplug.frontier.luatext import PIECES, _only_what_is_used, _uses, _without_comments, source
from crawlplug.frontier.scripts import NAMES

LUA = files("crawlplug.frontier").joinpath("lua")


def _pasted(name: str) -> str:
    """The script as it was sent before: every piece it names, whole, then its own text."""
    text = LUA.joinpath(f"{name}.lua").read_text(encoding="utf-8")
    pieces = [LUA.joinpath(f"{p}.lua").read_text(encoding="utf-8") for p in _uses(name, text)]
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
        text = LUA.joinpath(f"{name}.lua").read_text(encoding="utf-8")
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
    assert kept == ["local LIMIT = 10", "local now = redis.call('TIME')", "local function helper(x)",
                    "  local inner = x + LIMIT", "  return inner", "end", "local function used(x)",
                    "  return helper(x) + now[1]", "end"]  # fmt: skip


def test_a_comment_after_code_goes_and_a_string_holding_two_dashes_stays():
    text = _without_comments('local a = 1 -- one\nlocal b = "x -- y" -- a string\n  -- only a comment\nlocal c = 3')
    assert text.split("\n") == ["local a = 1", 'local b = "x -- y"', "", "local c = 3"]


def test_every_script_is_cut_to_half_the_text_it_was_sent_with():
    """The script cache a Redis holds for a crawl's scripts (used_memory, issue 37)."""
    before = sum(len(_pasted(name)) for name in NAMES)
    after = sum(len(source(name)) for name in NAMES)
    assert after <= 0.6 * before, (after, before)
