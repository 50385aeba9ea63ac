"""The key-ownership check (tests/support/keyaudit.py) sees what it must: each write's key
kind and the crawlplug package that made it, against docs/architecture.md's table."""

from __future__ import annotations

from typing import Any

from .support import keyaudit


def _as_module(module: str, code: str, **names: Any) -> None:
    """Run ``code`` as if it were in crawlplug module ``module`` (its frames say so)."""
    exec(compile(code, f"<{module}>", "exec"), {"__name__": module, **names})  # noqa: S102 - the test's own text


def test_kinds_and_keys_of_commands():
    assert keyaudit.kind_of("crawlplug:{shop}:queue") == "queue"
    assert keyaudit.kind_of("crawlplug:{shop#1~23}:requests") == "requests"
    assert keyaudit.kind_of("crawlplug:{shop}:node:vm:123:stats") == "node:vm:#:stats"
    assert keyaudit.kind_of("crawlplug:sites") == "sites"
    assert keyaudit.kind_of("shop:requests") is None  # scrapy-redis's own: not crawlplug's
    assert keyaudit._keys(("EVALSHA", "abc", 2, "k1", "k2", "arg")) == ["k1", "k2"]
    assert keyaudit._keys(("HSET", "k", "f", "v")) == ["k"]
    assert keyaudit._keys(("DEL", "a", "b")) == ["a", "b"]
    assert keyaudit._keys(("MSET", "a", 1, "b", 2)) == ["a", "b"]
    assert keyaudit._keys(("GET", "a")) == [] and keyaudit._keys(("EVALSHA_RO", "abc", 1, "k")) == []


def test_a_write_by_a_package_the_table_does_not_name_is_caught(r):
    keyaudit.take_violations()
    key = "crawlplug:{keyaudit}:queue"
    try:
        _as_module("crawlplug.frontier.fake", "r.zadd(key, {'x': 1})", r=r, key=key)
        assert keyaudit.take_violations() == [], "the frontier owns the queue"
        _as_module("crawlplug.web.fake", "r.zadd(key, {'y': 1})", r=r, key=key)
        _as_module(
            "crawlplug.cli.fake",
            "p = r.pipeline(); p.hset(key2, 'f', 1); p.execute()",
            r=r,
            key2="crawlplug:{keyaudit}:run",
        )
        assert keyaudit.take_violations() == ["cli wrote 'run' (HSET)", "web wrote 'queue' (ZADD)"]
        r.zadd(key, {"z": 1})  # the test's own write (a fixture, a corrupt key made on purpose): not counted
        _as_module("crawlplug.web.fake", "r.zrange(key, 0, -1)", r=r, key=key)  # a read
        assert keyaudit.take_violations() == []
    finally:
        r.delete(key, "crawlplug:{keyaudit}:run")
