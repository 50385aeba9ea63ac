"""Which part of crawlplug writes which Redis key: the table in docs/architecture.md
("Who writes which key"), held by every test that runs crawlplug code in the test's process.

:func:`install` wraps redis-py's ``execute_command`` (a client's, a cluster's) and the
pipelines' ``pipeline_execute_command``: each write command (and each script call,
EVAL/EVALSHA/FCALL, with its KEYS: a script may write any key it is given) on a key of
crawlplug's default prefix is recorded with its key's kind (the name after the crawl's
hash tag, digits as ``#``: ``queue``, ``node:#:stats``) and the package of crawlplug's code
that made it (the nearest frame in a ``crawlplug.*`` module other than the plumbing every
part calls through: the script runner, the client factory). A test whose code wrote a
kind of key the table does not give that package fails at its teardown, naming both
(tests/conftest.py). The scrapy nodes the end-to-end tests start run in their own
processes and are not seen: their writes are the frontier's scripts, which the unit
and integration tiers run in this process.

``CRAWLPLUG_KEY_AUDIT_LOG=DIR`` also writes every (kind, package) seen to a file in DIR
per process (how the table was first drawn: ``python -m tests.support.keyaudit DIR``).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import redis
import redis.client
import redis.cluster

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "crawlplug:"
#: modules every part writes through: the write is the calling part's
PLUMBING = (
    "crawlplug.frontier.scripts",
    "crawlplug.server.clients",
    "crawlplug.server.converting",
    "crawlplug.frontier.calls",
)
#: commands that write the key(s) they name, and where their keys are in the arguments
#: ("first": the first argument; "all": every argument; "pairs": every other one)
WRITES: dict[str, str] = {
    **dict.fromkeys(
        [
            "SET",
            "SETNX",
            "SETEX",
            "PSETEX",
            "GETSET",
            "GETDEL",
            "INCR",
            "INCRBY",
            "INCRBYFLOAT",
            "DECR",
            "DECRBY",
            "APPEND",
            "SETRANGE",
            "SETBIT",
            "HSET",
            "HSETNX",
            "HMSET",
            "HDEL",
            "HINCRBY",
            "HINCRBYFLOAT",
            "LPUSH",
            "RPUSH",
            "LPUSHX",
            "RPUSHX",
            "LPOP",
            "RPOP",
            "LREM",
            "LSET",
            "LTRIM",
            "LINSERT",
            "SADD",
            "SREM",
            "SPOP",
            "ZADD",
            "ZREM",
            "ZINCRBY",
            "ZREMRANGEBYSCORE",
            "ZREMRANGEBYRANK",
            "ZREMRANGEBYLEX",
            "ZPOPMIN",
            "ZPOPMAX",
            "XADD",
            "XTRIM",
            "XDEL",
            "EXPIRE",
            "PEXPIRE",
            "EXPIREAT",
            "PEXPIREAT",
            "PERSIST",
            "RESTORE",
            "PFADD",
            "BF.ADD",
            "BF.MADD",
            "BF.RESERVE",
            "BF.INSERT",
        ],
        "first",
    ),
    **dict.fromkeys(["DEL", "UNLINK", "RENAME", "RENAMENX", "COPY"], "all"),
    "MSET": "pairs",
}
SCRIPTS = {"EVAL", "EVALSHA", "FCALL"}  # the _RO forms write nothing

_seen: set[tuple[str, str]] = set()
_violations: list[str] = []
_table: dict[str, set[str]] | None = None


def kind_of(key: str) -> str | None:
    """A crawlplug key's kind: its name after the crawl's hash tag (or the prefix, for a
    key of no crawl), each run of digits as ``#``; None for another prefix's key."""
    if not key.startswith(PREFIX):
        return None
    name = key.split("}:", 1)[1] if "}:" in key else key[len(PREFIX) :]
    return re.sub(r"\d+", "#", name)


def _keys(args: tuple[Any, ...]) -> list[str]:
    if not args:
        return []
    name = str(args[0]).upper()
    rest = args[1:]
    if " " in name:  # redis-py sends "SCRIPT LOAD" and the like as one word
        return []
    if name in SCRIPTS:
        try:
            return [_str(k) for k in rest[2 : 2 + int(rest[1])]]
        except (IndexError, ValueError):
            return []
    where = WRITES.get(name)
    if where == "first":
        return [_str(rest[0])] if rest else []
    if where == "all":
        return [_str(k) for k in rest if isinstance(k, (str, bytes))]
    if where == "pairs":
        return [_str(k) for k in rest[::2]]
    return []


def _str(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def caller_package() -> str | None:
    """The package of the nearest crawlplug code up the stack, plumbing skipped
    ("ops" for crawlplug.alerts.rules, "stats" for crawlplug.stats); None if none."""
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("crawlplug.") and not module.startswith(PLUMBING):
            return module.split(".")[1]
        frame = frame.f_back
    return None


def _record(args: tuple[Any, ...]) -> None:
    keys = _keys(args)
    if not keys:
        return
    kinds = {k for k in (kind_of(key) for key in keys) if k is not None}
    if not kinds:
        return
    package = caller_package()
    if package is None:
        return  # the test's own writes (a fixture, a corrupt key made on purpose)
    table = None if os.environ.get("CRAWLPLUG_KEY_AUDIT_LOG") else owners()
    for kind in kinds:
        if (kind, package) not in _seen:
            _seen.add((kind, package))
            _log(kind, package)
        if table is not None and not allowed(table, kind, package):
            _violations.append(f"{package} wrote {kind!r} ({str(args[0]).upper()})")


def _log(kind: str, package: str) -> None:
    """With CRAWLPLUG_KEY_AUDIT_LOG=DIR: a pair seen first, appended at once (a pytest-xdist
    worker may end without running atexit handlers)."""
    log = os.environ.get("CRAWLPLUG_KEY_AUDIT_LOG")
    if log:
        Path(log).mkdir(parents=True, exist_ok=True)
        with open(Path(log) / f"seen-{os.getpid()}.txt", "a", encoding="utf-8") as out:
            out.write(f"{kind}\t{package}\n")


def allowed(table: dict[str, set[str]], kind: str, package: str) -> bool:
    for pattern, packages in table.items():
        if re.fullmatch(pattern, kind):
            return package in packages
    return False


def owners(path: Path = ROOT / "docs" / "architecture.md") -> dict[str, set[str]]:
    """The table: key kind (a regular expression over kinds) -> the packages that may write it."""
    global _table
    if _table is None:
        text = path.read_text(encoding="utf-8")
        block = text.split("<!-- key-owners -->", 2)[1]
        table: dict[str, set[str]] = {}
        for line in block.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 2 or not cells[0].startswith("`"):
                continue
            for key in re.findall(r"`([^`]+)`", cells[0]):
                table[_pattern(key)] = set(re.findall(r"`([^`]+)`", cells[1]))
        _table = table
    return _table


def _pattern(key: str) -> str:
    """A kind as the table writes it (``node:#:stats``, ``alert:*``) as a regular expression."""
    return "".join(".*" if ch == "*" else re.escape(ch) for ch in key)


def take_violations() -> list[str]:
    out = sorted(set(_violations))
    _violations.clear()
    return out


def install() -> None:
    """Wrap redis-py's command paths in this process (once)."""
    if getattr(redis.Redis.execute_command, "_keyaudit", False):
        return

    def wrap(method: Any) -> Any:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            _record(args)
            return method(self, *args, **kwargs)

        wrapper._keyaudit = True  # type: ignore[attr-defined]
        return wrapper

    redis.Redis.execute_command = wrap(redis.Redis.execute_command)  # type: ignore[method-assign]
    redis.client.Pipeline.pipeline_execute_command = wrap(  # type: ignore[method-assign]
        redis.client.Pipeline.pipeline_execute_command
    )
    redis.cluster.RedisCluster.execute_command = wrap(  # type: ignore[method-assign]
        redis.cluster.RedisCluster.execute_command
    )
    redis.cluster.ClusterPipeline.execute_command = wrap(  # type: ignore[method-assign]
        redis.cluster.ClusterPipeline.execute_command
    )


def _merge(paths: Iterable[Path]) -> dict[str, set[str]]:
    merged: dict[str, set[str]] = {}
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            kind, package = line.split("\t")
            merged.setdefault(kind, set()).add(package)
    return merged


if __name__ == "__main__":  # python -m tests.support.keyaudit DIR: what was seen, as table rows
    for kind, packages in sorted(_merge(Path(sys.argv[1]).glob("seen-*.txt")).items()):
        print(f"| `{kind}` | {', '.join(f'`{p}`' for p in sorted(packages))} |")
