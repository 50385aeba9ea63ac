"""``crawlplug.embedded``: the path scripts (bench/ among them) reach the embedded Redis by.
The code lives in :mod:`crawlplug.server.embedded`."""

from __future__ import annotations

from .server.embedded import ensure, find_redis_server, running, socket_path, stop

__all__ = ["ensure", "find_redis_server", "running", "socket_path", "stop"]
