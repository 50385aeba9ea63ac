"""crawlplug's scripts as one Redis Functions library (Redis 7): the shared pieces held once.

Each script sent with SCRIPT LOAD carries the pieces its ``-- uses:`` line names
(crawlplug.frontier.luatext), so a Redis holding a crawl's 14 scripts holds the guard 14
times: 128.9 KB of text for 37.6 KB of their own. :func:`library` builds the same scripts
as one library: the pieces once, cut to the definitions any of its scripts uses, each
script a function (``FCALL <library>_<script>``). Measured by bench/functions_memory.py:
109.5 KB allocated against 186.9 KB for the 14 scripts, Redis CPU a call the same.

What a call of a script does, a call of its function does:

* a piece's ``local function`` is defined once, when the library loads (it keeps no
  state between calls: every value it reads or fills is a call's);
* a piece's other top-level statements (``local GUARDED = {}``, ``local NARGV = #ARGV - 1``)
  are a call's values: declared once, made again by ``init()`` before each call, in order;
* ``KEYS`` and ``ARGV`` are the call's, set before ``init()``;
* a script's own text is the body of its function, whose ``return`` is the call's reply;
* the scripts of :data:`ALLOW_OOM` are registered ``allow-oom``, those of
  :data:`READ_ONLY` ``no-writes``. The others are refused at once by a Redis over its
  maxmemory, where a script without flags is refused at its first write (Redis 7's
  compatibility for scripts without a shebang): a read-only answer of a writing script
  (a pop that finds nothing) is refused too.

Library and function names carry the hash of the library's text, so two crawlplug
versions on one Redis load libraries of their own (a rolling upgrade: each runs its own).
A library stays in Redis (its snapshots and replicas too) until deleted: :func:`installed`
lists crawlplug's, :func:`prune` deletes those of other versions (``crawlplug functions``);
a node still running another version loads its own again at its next call, which did
nothing when it found none. crawlplug.frontier.scripts runs the calls.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import redis

from .luatext import ALLOW_OOM, PIECES, READ_ONLY, _only_what_is_used, _uses, _without_comments, lua_text

__all__ = ["PREFIX", "Installed", "Library", "installed", "library", "prune"]

#: what the name of every crawlplug library starts with
PREFIX = "crawlplug_"

#: a line that closes or continues the block above it, at the top level's indentation
_CONTINUES = re.compile(r"(end|else|elseif|until)\b|[}\])]")
_LOCAL_VALUE = re.compile(r"local\s+([A-Za-z_][\w\s,]*?)\s*=(.*)", re.DOTALL)


@dataclass(frozen=True)
class Library:
    """A Functions library of some of crawlplug's scripts."""

    name: str  #: ``crawlplug_<hash>``
    text: str  #: what FUNCTION LOAD is given
    functions: dict[str, str] = field(default_factory=dict)  #: script name -> function name


_lua = lua_text


def _blocks(text: str) -> list[list[str]]:
    """Top-level statements of ``text`` (the pieces indent every inner line), blank lines dropped."""
    blocks: list[list[str]] = []
    for line in text.split("\n"):
        if not line.strip():
            continue
        if not blocks or not (line[0].isspace() or _CONTINUES.match(line)):
            blocks.append([line])
        else:
            blocks[-1].append(line)
    return blocks


@cache
def library(names: Sequence[str]) -> Library:
    """The scripts ``names`` (in this order) as one library (module docstring)."""
    names = tuple(names)
    owns = {name: _without_comments(_lua(name)) for name in names}
    used = {piece for name in names for piece in _uses(name, _lua(name))}
    pieces = _without_comments("\n".join(_lua(p) for p in PIECES if p in used))
    pieces = _only_what_is_used(pieces, "\n".join(owns.values()))
    top: list[str] = []
    init: list[str] = []
    for block in _blocks(pieces):
        value = _LOCAL_VALUE.match(block[0])
        if block[0].startswith("local function "):
            top.extend(block)
        elif value is not None:  # a call's value: declared once, made again before each call
            top.append(f"local {value.group(1)}")
            init.extend([f"{value.group(1)} ={value.group(2)}", *block[1:]])
        elif block[0].startswith("local "):
            top.extend(block)  # a declaration alone (no value): nil at each call's start
            init.append(f"{block[0][len('local ') :]} = nil")
        else:
            init.extend(block)  # a statement: a call's
    body = ["local KEYS, ARGV", *top, "local function init()", *init, "end"]
    for name, own in owns.items():
        body += [f"local function script_{name}()", *[x for x in own.split("\n") if x.strip()], "end"]
    text = "\n".join(line.strip() for line in body)
    digest = hashlib.sha1(text.encode()).hexdigest()[:12]
    lib = f"{PREFIX}{digest}"
    functions = {name: f"{lib}_{name}" for name in names}
    registrations = []
    for name in names:
        flags = "'allow-oom'" if name in ALLOW_OOM else "'no-writes'" if name in READ_ONLY else ""
        registrations.append(
            f"redis.register_function{{function_name='{functions[name]}', callback=function(keys, args) "
            f"KEYS, ARGV = keys, args init() return script_{name}() end, flags={{{flags}}}}}"
        )
    return Library(lib, "\n".join([f"#!lua name={lib}", text, *registrations]), functions)


@dataclass(frozen=True)
class Installed:
    """One of crawlplug's libraries a Redis holds."""

    name: str
    functions: int  #: how many functions it registers
    code_bytes: int  #: the length of its text
    current: bool  #: this crawlplug's own (:func:`library` of the scripts it runs)


def installed(client: redis.Redis, current: str) -> list[Installed]:
    """crawlplug's libraries on ``client``'s server (FUNCTION LIST WITHCODE), ``current``
    (a library's name) marked, sorted by name. Raises redis-py's errors (a server before
    Redis 7 answers that it knows no FUNCTION command)."""
    found = []
    for entry in client.function_list(library=f"{PREFIX}*", withcode=True):
        fields = _pairs(entry)
        name = _text(fields.get(b"library_name", fields.get("library_name", b"")))
        code = fields.get(b"library_code", fields.get("library_code", b""))
        functions = fields.get(b"functions", fields.get("functions", []))
        if name.startswith(PREFIX):
            found.append(Installed(name, len(functions or []), len(code or b""), name == current))
    return sorted(found, key=lambda x: x.name)


def prune(client: redis.Redis, current: str) -> list[Installed]:
    """Delete crawlplug's libraries other than ``current`` from ``client``'s server; the ones
    deleted. A node of another crawlplug version that still runs loads its own again at its
    next call (the call that found no function did nothing)."""
    gone = []
    for lib in installed(client, current):
        if lib.current:
            continue
        try:
            client.function_delete(lib.name)
        except redis.ResponseError as exc:
            if "not exist" not in str(exc).lower():  # deleted meanwhile by another operator
                raise
            continue
        gone.append(lib)
    return gone


def _pairs(flat: Any) -> dict[Any, Any]:
    if isinstance(flat, dict):
        return flat
    return dict(zip(flat[::2], flat[1::2]))


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
