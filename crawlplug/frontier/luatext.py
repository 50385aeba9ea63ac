"""The text of a crawlplug Lua script as Redis is given it (:func:`source`): the shared
pieces its ``-- uses:`` line names, cut to the definitions it uses, then its own text;
comments and indentation gone, each line where it was (a Lua error's line number points
into the files). Read once per process."""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

__all__ = ["ALLOW_OOM", "HOMES", "PIECES", "READ_ONLY", "lua_text", "source"]

#: The shared pieces a script may name in its ``-- uses:`` header line, in the order they
#: are put in front of it (a piece may use those before it): the all-or-nothing checks,
#: the epoch guard, a node's call record with the rollback guard, lease records and Redis
#: time, the per-domain queue, the Bloom filter, one dedup mode's check-and-record
#: (admit.lua and seen.lua), leasing requests to a node (pop.lua, and admit.lua's pop after
#: an admission).
PIECES = ("guard", "epoch", "record", "leases", "domains", "bloom", "dedup", "popping")

#: Scripts whose writes must go through on a full Redis: lease renewal, and giving leases
#: back (the reaper, a node's release), which frees more than it adds. On Redis 7 and later
#: they declare ``allow-oom`` (a script's shebang flag, the library's function flag: a
#: function without it is refused before it runs by a Redis over its maxmemory); older
#: servers know no flags, and let them through because their first write frees memory
#: (guard.lua; the reaper's first write is its ZREMRANGEBYSCORE of the node registry).
ALLOW_OOM = frozenset({"heartbeat", "renew", "reap", "release"})

#: Scripts that only read: on Redis 7 and later they declare ``flags=no-writes`` and are
#: run with EVALSHA_RO (:meth:`Scripts.read`), which a read-only ACL user may be given
#: (``+evalsha_ro +eval_ro``: Redis refuses any write inside, and still checks each
#: command against the user's rules) without the right to run the crawl's writing scripts.
READ_ONLY = frozenset({"domaintable"})

#: Scripts kept by the feature that owns their keys, as the folder under ``crawlplug/``
#: holding ``lua/<name>.lua``; every other script and every piece is the frontier's
#: (``crawlplug/frontier/lua/``). Found by path, without importing the feature: the one
#: script runner (crawlplug.frontier.scripts) runs them all, and knows no feature's code.
HOMES = {"alert": "alerts", "firing": "schedules", "history": "history"}


def lua_text(name: str) -> str:
    """The text of ``<name>.lua`` (a script or a piece) as its file holds it."""
    folder = files("crawlplug").joinpath(HOMES.get(name, "frontier")).joinpath("lua")
    return folder.joinpath(f"{name}.lua").read_text(encoding="utf-8")


def _uses(name: str, text: str) -> list[str]:
    """The pieces ``<name>.lua`` names on its ``-- uses:`` line, checked."""
    for line in text.splitlines():
        if line.startswith("-- uses:"):
            used = line[len("-- uses:") :].split("(", 1)[0].split()
            unknown = [u for u in used if u not in PIECES]
            if unknown:
                raise ValueError(f"{name}.lua uses unknown pieces {unknown} (known: {PIECES})")
            return [p for p in PIECES if p in used]
    raise ValueError(f"{name}.lua has no '-- uses:' line")


@cache
def source(name: str, flags: bool = False) -> str:
    """The text of ``<name>.lua`` as sent to Redis: the pieces its ``-- uses:`` line names,
    then its own text (``flags``: with the shebang line of Redis 7's script flags, for the
    scripts in :data:`ALLOW_OOM` and :data:`READ_ONLY`)."""
    text = lua_text(name)
    pieces = [lua_text(piece) for piece in _uses(name, text)]
    own = _without_comments(f"-- ---- {name}.lua ----\n{text}")
    text = "\n".join([_only_what_is_used(_without_comments("\n".join(pieces)), own), own])
    text = "\n".join(line.strip() for line in text.split("\n"))  # Lua needs no indentation
    if flags and name in ALLOW_OOM:
        text = f"#!lua flags=allow-oom\n{text}"
    elif flags and name in READ_ONLY:
        text = f"#!lua flags=no-writes\n{text}"
    return text


def _without_comments(text: str) -> str:
    """``text`` without its comments, each line kept (emptied if it held
    only a comment) so a Lua error's line number still points into the text: the pieces
    are pasted in front of every script, and their comments were most of what Redis
    compiled and kept in its script cache. A comment after code goes when the code before
    its ``--`` holds no open string. (The scripts hold no long strings or long comments,
    whose lines could start with ``--``: tests/test_scripts.py checks it.)"""
    lines = []
    for line in text.split("\n"):
        line = line.rstrip()
        if line.lstrip().startswith("--"):
            lines.append("")
            continue
        cut = line.find("--")
        while cut >= 0:
            before = line[:cut]
            if "\\" in before:
                break  # an escaped quote may be in a string: kept as it is
            if before.count('"') % 2 == 0 and before.count("'") % 2 == 0:
                line = before.rstrip()
                break
            cut = line.find("--", cut + 2)  # inside a string: the next one
        lines.append(line)
    return "\n".join(lines)


_WORD = re.compile(r"[A-Za-z_]\w*")
_DEFINES = re.compile(r"local\s+(?:function\s+([A-Za-z_]\w*)|([A-Za-z_][\w\s,]*?)\s*=)")


def _only_what_is_used(pieces: str, own: str) -> str:
    """``pieces`` (the shared definitions put in front of a script) with only the
    definitions the script ``own`` uses, and those they use: a definition not used is left
    as empty lines (line numbers stay). Each call runs the whole text again, so a function
    defined and never called cost Redis CPU at every call, and its text script cache: the
    guard piece alone was 15 KB in front of each of 22 scripts.

    A top-level block starts at a line ``local ...``; it may go only if it is a ``local
    function`` or a ``local NAME = ...`` with no call in it (no side effect: a table, a
    number, a string). Every other top-level statement stays and counts as using the names
    it mentions. A name counts as used wherever it appears as a word (a comment, a string
    or a field of that name too): more is kept than needed, never less."""
    blocks: list[list[str]] = []
    for line in pieces.split("\n"):
        if not blocks or line.startswith("local "):  # top level: the pieces indent every inner line
            blocks.append([line])
        else:
            blocks[-1].append(line)
    defined: list[set[str]] = []
    for block in blocks:
        match = _DEFINES.match(block[0])
        if match is None or (match.group(1) is None and "(" in "\n".join(block)):
            defined.append(set())  # a statement, or a value with a call: always kept
        else:
            defined.append({match.group(1)} if match.group(1) else {n.strip() for n in match.group(2).split(",")})
    used = set(_WORD.findall(own))
    kept = [not names for names in defined]
    for block, keep in zip(blocks, kept):
        if keep:
            used.update(_WORD.findall("\n".join(block)))
    grew = True
    while grew:
        grew = False
        for i, names in enumerate(defined):
            if not kept[i] and names & used:
                kept[i] = grew = True
                used.update(_WORD.findall("\n".join(blocks[i])))
    return "\n".join(line if keep else "" for block, keep in zip(blocks, kept) for line in block)
