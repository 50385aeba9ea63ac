"""The Lua scripts of crawlplug, kept as real ``.lua`` files beside this loader.

Each script is read once and registered once per client with redis-py's
``register_script`` (EVALSHA, reloaded if the server lost it). Every key a
script touches is passed in ``KEYS``; all of them share the crawl's hash tag.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import Any

import redis

NAMES = ("admit", "pop", "heartbeat", "reap", "release", "dead", "idle", "domainconf", "starts")

#: Scripts that move requests in or out of the queue get the per-domain queue's
#: functions (domains.lua) in front of their own text.
WITH_DOMAINS = frozenset({"admit", "pop", "reap", "release", "dead", "domainconf"})


@cache
def source(name: str) -> str:
    """The text of ``<name>.lua`` as sent to Redis."""
    text = files(__package__).joinpath(f"{name}.lua").read_text(encoding="utf-8")
    if name in WITH_DOMAINS:
        prelude = files(__package__).joinpath("domains.lua").read_text(encoding="utf-8")
        text = f"{prelude}\n-- ---- {name}.lua ----\n{text}"
    return text


class Scripts:
    """The scripts registered on one client: ``scripts.admit(keys, args)``."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._scripts = {name: client.register_script(source(name)) for name in NAMES}

    def pipelined(self, calls: list[tuple[str, list[Any], list[Any]]]) -> list[Any]:
        """Run several scripts in one round trip: [(name, keys, args), ...].

        redis-py's own pipelined scripts ask the server ``SCRIPT EXISTS`` before
        every pipeline, a second round trip; here EVALSHA goes out directly and
        the scripts are loaded only if the server says it lost them.
        """
        client = self.client
        if calls and _is_cluster(client):
            # Every key of a crawl shares one hash tag: the whole pipeline goes to the
            # node owning that slot (redis-py's cluster pipeline refuses EVALSHA).
            client = client.get_redis_connection(client.get_node_from_key(calls[0][1][0]))
        for attempt in (1, 2):
            pipe = client.pipeline(transaction=False)
            for name, keys, args in calls:
                pipe.evalsha(self._scripts[name].sha, len(keys), *keys, *args)
            try:
                return pipe.execute()
            except redis.exceptions.NoScriptError:
                if attempt == 2:
                    raise
                for script in self._scripts.values():
                    script.sha = client.script_load(script.script)
        raise AssertionError("unreachable")

    def __getattr__(self, name: str) -> Any:
        try:
            return self._scripts[name]
        except KeyError:
            raise AttributeError(name) from None


def _is_cluster(client: Any) -> bool:
    from redis.cluster import RedisCluster  # noqa: PLC0415

    return isinstance(client, RedisCluster)
