"""What Redis was sent while an action ran, as MONITOR saw it: the tests that count a call's
commands (what a client sent, what its scripts sent) read it from here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis


def monitored(r: redis.Redis, action: Callable[[], Any]) -> list[tuple[bool, list[str]]]:
    """(sent by a Lua script, the command's words) of every command Redis got while
    ``action`` ran, in order; ``r``'s own MONITOR and a marker connection left out."""
    marker = redis.Redis(connection_pool=redis.ConnectionPool(**r.connection_pool.connection_kwargs))
    marker.ping()  # connected before: its handshake is not counted
    with r.monitor() as monitor:
        action()
        marker.echo("crawlplug-test-end")
        sent: list[tuple[bool, list[str]]] = []
        for line in monitor.listen():
            if line["command"].startswith("ECHO") and "crawlplug-test-end" in line["command"]:
                return sent
            sent.append((line.get("client_type") == "lua", line["command"].split()))
    return sent
