"""The one live-node rule: a node is live while its heartbeat deadline is later than now,
written once in Lua (lua/leases.lua's live_count and is_live) and once in Python
(crawlplug.crawl.nodes), and used by every reader."""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path

from crawlplug.crawl.nodes import is_live, live_nodes, live_of
from crawlplug.frontier.keys import CrawlKeys

ROOT = Path(__file__).resolve().parent.parent
NOW = 1_700_000_000_000
DEADLINES = {"past": NOW - 1, "now": NOW, "soon": NOW + 1, "later": NOW + 60_000}


def _lua(r, zset: str, members: list[str], now: int) -> list[int]:
    """The Lua side of the rule, run on Redis as the scripts run it (the piece in front)."""
    piece = files("crawlplug.frontier").joinpath("lua", "leases.lua").read_text(encoding="utf-8")
    body = (
        "local out = {live_count(KEYS[1], tonumber(ARGV[1]))}\n"
        "for i = 2, #ARGV do out[#out + 1] = is_live(KEYS[1], ARGV[i], tonumber(ARGV[1])) and 1 or 0 end\n"
        "return out"
    )
    return r.eval(piece + "\n" + body, 1, zset, now, *members)


def test_python_and_lua_agree_on_which_nodes_are_live(r):
    keys = CrawlKeys("livenodes")
    r.delete(keys.nodes)
    r.zadd(keys.nodes, DEADLINES)
    # a deadline of exactly now is dead on both sides (reap.lua takes deadlines <= now out)
    assert sorted(live_of(DEADLINES, NOW)) == ["later", "soon"]
    assert live_nodes(r, keys, NOW) == 2
    assert [is_live(d, NOW) for d in DEADLINES.values()] == [False, False, True, True]
    assert not is_live(None, NOW)
    count, *flags = _lua(r, keys.nodes, [*DEADLINES, "absent"], NOW)
    assert count == 2
    assert flags == [0, 0, 1, 1, 0]
    r.delete(keys.nodes)


def test_the_rule_is_written_once_on_each_side():
    """No reader counts live nodes by hand: ZCOUNT of a deadline zset up to +inf stands in
    lua/leases.lua and crawlplug/crawl/nodes.py only."""
    pattern = re.compile(r"zcount\([^)]*\+inf|ZCOUNT\"?,[^)]*\+inf", re.IGNORECASE)
    allowed = {Path("crawlplug/frontier/lua/leases.lua"), Path("crawlplug/crawl/nodes.py")}
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "crawlplug").rglob("*"))
        if path.suffix in (".py", ".lua") and path.relative_to(ROOT) not in allowed
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, f"the live-node rule written again: {found}"
