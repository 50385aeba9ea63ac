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

from ..errors import StaleEpoch

NAMES = (
    "admit", "pop", "heartbeat", "renew", "reap", "release", "dead", "idle", "domainconf", "starts",
    "join", "runstart", "finish",
)  # fmt: skip

#: Scripts that move requests in or out of the queue get the per-domain queue's
#: functions (domains.lua) in front of their own text.
WITH_DOMAINS = frozenset({"admit", "pop", "reap", "release", "dead", "domainconf"})

#: Scripts a node sends on its own behalf start with the epoch guard (epoch.lua):
#: their last key is the part's epoch key, their last argument the node's epoch.
WITH_EPOCH = frozenset({"admit", "pop", "heartbeat", "renew", "release", "dead", "starts", "finish"})


@cache
def source(name: str) -> str:
    """The text of ``<name>.lua`` as sent to Redis."""
    text = files(__package__).joinpath(f"{name}.lua").read_text(encoding="utf-8")
    for prelude, users in (("domains", WITH_DOMAINS), ("epoch", WITH_EPOCH)):
        if name in users:
            piece = files(__package__).joinpath(f"{prelude}.lua").read_text(encoding="utf-8")
            text = f"{piece}\n-- ---- {name}.lua ----\n{text}"
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
            except redis.exceptions.ResponseError as exc:
                raise StaleEpoch.check(exc) from None
        raise AssertionError("unreachable")

    def run_many(self, calls: list[tuple[str, list[Any], list[Any]]]) -> list[Any]:
        """Run scripts whose keys may live on different nodes (the shards of a crawl):
        one pipeline per node, in call order within a node, the nodes one after the other.

        Returns each call's result, or the exception it met, in call order: a failed
        call (a node down, out of memory) does not hide what the others did.
        """
        groups: dict[str, tuple[Any, list[int]]] = {}
        cluster = _is_cluster(self.client)
        for i, (_, keys, _) in enumerate(calls):
            if cluster:
                node = self.client.get_node_from_key(keys[0])
                groups.setdefault(node.name, (node, []))[1].append(i)
            else:
                groups.setdefault("", (None, []))[1].append(i)
        results: list[Any] = [None] * len(calls)
        if len(groups) > 1:
            # several primaries: write every node's batch, then read the replies,
            # so a sharded call waits about one round trip, not one per primary
            self._fan_out(calls, list(groups.values()), results)
            retry = [i for i, v in enumerate(results) if isinstance(v, redis.exceptions.NoScriptError)]
            if not retry:
                return results
            groups = {}
            for i in retry:
                node = self.client.get_node_from_key(calls[i][1][0])
                groups.setdefault(node.name, (node, []))[1].append(i)
        for node, indexes in groups.values():
            client = self.client if node is None else self.client.get_redis_connection(node)
            todo = indexes
            for attempt in (1, 2):
                pipe = client.pipeline(transaction=False)
                for i in todo:
                    name, keys, args = calls[i]
                    pipe.evalsha(self._scripts[name].sha, len(keys), *keys, *args)
                try:
                    out = pipe.execute(raise_on_error=False)
                except (redis.exceptions.RedisError, *_cluster_errors()) as exc:
                    out = [exc] * len(todo)
                for i, value in zip(todo, out):
                    results[i] = StaleEpoch.check(value) if isinstance(value, Exception) else value
                missing = [i for i, v in zip(todo, out) if isinstance(v, redis.exceptions.NoScriptError)]
                if not missing or attempt == 2:
                    break
                for script in self._scripts.values():  # the server lost them (restart, SCRIPT FLUSH)
                    script.sha = client.script_load(script.script)
                todo = missing
        return results

    def _fan_out(self, calls: list[tuple[str, list[Any], list[Any]]], groups: list[tuple[Any, list[int]]],
                 results: list[Any]) -> None:  # fmt: skip
        """EVALSHA ``calls`` on several nodes at once: send to all, then read from each."""
        sent: list[tuple[Any, Any, list[int]]] = []
        try:
            for node, indexes in groups:
                pool = self.client.get_redis_connection(node).connection_pool
                conn = pool.get_connection()
                sent.append((pool, conn, indexes))
                try:
                    conn.send_packed_command(conn.pack_commands([
                        ("EVALSHA", self._scripts[calls[i][0]].sha, len(calls[i][1]), *calls[i][1], *calls[i][2])
                        for i in indexes
                    ]))  # fmt: skip
                except redis.exceptions.RedisError as exc:
                    conn.disconnect()
                    for i in indexes:
                        results[i] = exc
                    sent[-1] = (pool, None, indexes)
                    pool.release(conn)
            for _, conn, indexes in sent:
                if conn is None:
                    continue
                for n, i in enumerate(indexes):
                    try:
                        results[i] = conn.read_response()
                    except redis.exceptions.ResponseError as exc:  # this call failed; the next replies follow
                        results[i] = StaleEpoch.check(exc)
                    except redis.exceptions.RedisError as exc:  # the connection broke: no more replies
                        conn.disconnect()
                        for j in indexes[n:]:
                            results[j] = exc
                        break
        finally:
            for pool, conn, _ in sent:
                if conn is not None:
                    pool.release(conn)

    def __getattr__(self, name: str) -> Any:
        try:
            script = self._scripts[name]
        except KeyError:
            raise AttributeError(name) from None

        def call(keys: list[Any], args: list[Any]) -> Any:
            try:
                return script(keys=keys, args=args)
            except redis.exceptions.ResponseError as exc:
                raise StaleEpoch.check(exc) from None

        return call


def _cluster_errors() -> tuple[type[Exception], ...]:
    from redis.exceptions import RedisClusterException

    return (RedisClusterException,)


def _is_cluster(client: Any) -> bool:
    from redis.cluster import RedisCluster  # noqa: PLC0415

    return isinstance(client, RedisCluster)
