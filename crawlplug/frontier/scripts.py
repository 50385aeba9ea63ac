"""The Lua scripts of crawlplug, kept as real ``.lua`` files beside this loader.

Each script is read once and registered once per client with redis-py's
``register_script`` (EVALSHA, reloaded if the server lost it). Every key a
script touches is passed in ``KEYS``; all of them share the crawl's hash tag.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from ..errors import script_error
from .luatext import ALLOW_OOM, PIECES, READ_ONLY, source

if TYPE_CHECKING:
    from redis.commands.core import Script

    from .calls import Call, Reply

__all__ = ["ALLOW_OOM", "NAMES", "PIECES", "READ_ONLY", "Scripts", "server_major", "source"]

logger = logging.getLogger(__name__)

NAMES = (
    "admit",
    "pop",
    "heartbeat",
    "renew",
    "reap",
    "release",
    "dead",
    "idle",
    "domainconf",
    "starts",
    "join",
    "runstart",
    "runclear",
    "finish",
    "domaintable",
    "leader",
    "firing",
    "alert",
    "seen",
    "forget",
    "history",
    "runctl",
)

_versions: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def server_major(client: redis.Redis | RedisCluster) -> int:
    """The major version of the Redis server behind ``client`` (the lowest of a
    cluster's nodes; 0 if it cannot be told), asked once per client."""
    try:
        return _versions[client]
    except (KeyError, TypeError):
        pass
    major = 0
    try:
        info = client.info("server")
        found = [info] if "redis_version" in info else [v for v in info.values() if isinstance(v, dict)]
        majors = [int(str(x["redis_version"]).split(".")[0]) for x in found if "redis_version" in x]
        major = min(majors) if majors else 0
    except (redis.RedisError, ValueError, AttributeError) as exc:
        logger.debug("crawlplug: could not tell the Redis version (%s); scripts without flags", exc)
        return 0
    try:
        _versions[client] = major
    except TypeError:
        pass
    return major


class _Script:
    """One registered script, called like redis-py's ``Script``; a refusal of a
    corrupt crawl key is raised as :class:`crawlplug.errors.CorruptKey`.

    A server without this script (its first call, a restart, SCRIPT FLUSH, a failover) is
    given it then, as redis-py's ``Script`` does: a Redis holds the scripts its crawls
    call, not all of them (22 scripts and the pieces pasted in front of each are about
    390 KB of script cache, four times what a crawl's calls need). A pipeline sends the
    SCRIPT LOAD of the scripts its server was not seen to hold ahead of its calls
    (:meth:`Scripts._loads`)."""

    def __init__(self, script: Any, owner: Scripts) -> None:
        self.script = script
        self.owner = owner

    @property
    def sha(self) -> str:
        return self.script.sha

    def __call__(self, keys: Any = (), args: Any = ()) -> Any:
        client = self.owner.client
        try:
            try:
                result = client.evalsha(self.script.sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                self.owner.load(client, [self.script])
                result = client.evalsha(self.script.sha, len(keys), *keys, *args)
        except redis.ResponseError as exc:
            raise script_error(exc) from None
        if not _is_cluster(client):
            self.owner.held("", [self.script.sha])
        return result


class Scripts:
    """The scripts registered on one client: ``scripts.admit(keys, args)``."""

    def __init__(self, client: redis.Redis | RedisCluster) -> None:
        self.client = client
        flags = server_major(client) >= 7
        self._scripts = {name: client.register_script(source(name, flags)) for name in NAMES}
        #: the scripts each server (a cluster node's name; "" for one Redis) was seen to
        #: hold: a pipeline naming another is preceded by its SCRIPT LOAD (:meth:`_loads`)
        self._held: dict[str, set[str]] = {}

    def held(self, server: str, shas: Iterable[str]) -> None:
        """Note that ``server`` holds the scripts ``shas`` (loaded, or run there)."""
        self._held.setdefault(server, set()).update(shas)

    def _loads(self, server: str, calls: Sequence[Call], indexes: list[int]) -> list[Any]:
        """The scripts of ``calls[indexes]`` that ``server`` was not seen to hold, each once.

        A pipeline sends their SCRIPT LOAD ahead of its EVALSHAs, in the same round trip, so
        its calls run in the order sent. Sending only EVALSHAs and loading the scripts the
        server answered NOSCRIPT for ran the others first: a history sample taken before
        the heartbeat ahead of it counted no live node (a sharded crawl's first beat on a
        cluster whose nodes held some scripts and not others), a pop ran before the
        admission sent ahead of it. After a restart or SCRIPT FLUSH a server may still lose
        scripts it was seen to hold: then the NOSCRIPT calls are sent again, alone."""
        held = self._held.get(server, set())
        wanted = {self._scripts[calls[i][0]].sha: self._scripts[calls[i][0]] for i in indexes}
        return [script for sha, script in wanted.items() if sha not in held]

    def _ran(self, server: str, calls: Sequence[Call], indexes: list[int], out: list[Any]) -> None:
        """After a pipeline: what ``server`` holds, from each call's reply (NOSCRIPT: not that)."""
        held = self._held.setdefault(server, set())
        for i, value in zip(indexes, out):
            sha = self._scripts[calls[i][0]].sha
            if isinstance(value, redis.exceptions.NoScriptError):
                held.discard(sha)
            elif not isinstance(value, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)):
                held.add(sha)

    def load_all(self, client: redis.Redis | RedisCluster) -> None:
        """Load every script on the server behind ``client`` (a benchmark's warm-up)."""
        self.load(client, list(self._scripts.values()))

    def load(self, client: redis.Redis | RedisCluster, scripts: list[Script]) -> None:
        """Load ``scripts`` (each once) on the server behind ``client``, in one round trip."""
        scripts = list({id(s): s for s in scripts}.values())
        if _is_cluster(client):
            for script in scripts:  # sent to every primary
                script.sha = client.script_load(script.script)
            return
        pipe = client.pipeline(transaction=False)
        for script in scripts:
            pipe.script_load(script.script)
        for script, sha in zip(scripts, pipe.execute()):
            script.sha = sha

    def _missing(self, calls: Sequence[Call], indexes: list[int]) -> list[Script]:
        return [self._scripts[calls[i][0]] for i in indexes]

    def pipelined(self, calls: Sequence[Call]) -> list[Reply]:
        """Run several scripts in one round trip: [(name, keys, args), ...].

        Returns each call's result, or the error it met (an exception instance, not
        raised): the caller decides what the others' results mean then.

        redis-py's own pipelined scripts ask the server ``SCRIPT EXISTS`` before
        every pipeline, a second round trip; here EVALSHA goes out directly and
        the scripts are loaded only if the server says it lost them.
        """
        client, server = self.client, ""
        if calls and _is_cluster(client):
            # Every key of a crawl shares one hash tag: the whole pipeline goes to the
            # node owning that slot (redis-py's cluster pipeline refuses EVALSHA).
            node = client.get_node_from_key(calls[0][1][0])
            client, server = client.get_redis_connection(node), node.name
        out: list[Any] = [None] * len(calls)
        self._pipeline(client, server, calls, list(range(len(calls))), out)
        return [script_error(x) if isinstance(x, redis.ResponseError) else x for x in out]

    def _pipeline(self, client: Any, server: str, calls: Sequence[Call], indexes: list[int], out: list[Any]) -> None:
        """Run ``calls[indexes]`` on ``client`` (one server) in one pipeline, each reply (or
        the error it met, unraised) into ``out``: the SCRIPT LOAD of any script the server
        was not seen to hold first (:meth:`_loads`), then the EVALSHAs in call order."""
        todo = indexes
        for attempt in (1, 2):
            loads = self._loads(server, calls, todo) if attempt == 1 else []
            pipe = client.pipeline(transaction=False)
            for script in loads:
                pipe.script_load(script.script)
            for i in todo:
                name, keys, args = calls[i]
                pipe.evalsha(self._scripts[name].sha, len(keys), *keys, *args)
            try:
                replies = pipe.execute(raise_on_error=False)[len(loads) :]
            except (redis.exceptions.RedisError, *_cluster_errors()) as exc:
                replies = [exc] * len(todo)
            for i, value in zip(todo, replies):
                out[i] = value
            self._ran(server, calls, todo, replies)
            # Only the calls the server had no script for (it lost them since: a restart,
            # SCRIPT FLUSH) are sent again: the others ran, and an admission run twice would
            # answer for its second run (its requests "duplicates" of themselves, its acks
            # stale). Nothing is lost or done twice; a pop run so before the admission sent
            # ahead of it only misses the requests just admitted.
            todo = [i for i in todo if isinstance(out[i], redis.exceptions.NoScriptError)]
            if not todo or attempt == 2:
                break
            self.load(client, self._missing(calls, todo))

    def read(self, calls: Sequence[Call]) -> list[Reply]:
        """Run read-only scripts (:data:`READ_ONLY`) as :meth:`run_many` does, but with
        EVALSHA_RO on a Redis 7 or later that is not a cluster, so a user allowed only to
        read (docs/security.md's watcher) may run them; older servers and clusters take
        :meth:`run_many`'s EVALSHA. Returns each call's result or the exception it met."""
        unknown = [name for name, _, _ in calls if name not in READ_ONLY]
        if unknown:
            raise ValueError(f"not read-only scripts: {unknown}")
        if _is_cluster(self.client) or server_major(self.client) < 7:
            return self.run_many(calls)
        results: list[Any] = []
        for name, keys, args in calls:
            script = self._scripts[name]
            try:
                try:
                    results.append(self.client.evalsha_ro(script.sha, len(keys), *keys, *args))
                except redis.exceptions.NoScriptError:  # not loaded yet: EVAL_RO sends the text
                    # its text: the str source() made (redis-py types a Script's text wider)
                    results.append(self.client.eval_ro(script.script, len(keys), *keys, *args))  # type: ignore[arg-type]
            except redis.exceptions.NoPermissionError:
                # a user given EVALSHA but not EVALSHA_RO (docs/security.md's crawler rule)
                return self.run_many(calls)
            except redis.ResponseError as exc:
                results.append(script_error(exc))
            except redis.RedisError as exc:
                results.append(exc)
        return results

    def run_many(self, calls: Sequence[Call]) -> list[Reply]:
        """Run scripts whose keys may live on different nodes (the shards of a crawl):
        one pipeline per node, in call order within a node, the nodes one after the other.

        Returns each call's result, or the exception it met, in call order: a failed
        call (a node down, out of memory) does not hide what the others did. One call goes
        out as one EVALSHA, without a pipeline's cost on the node (an unsharded crawl's).
        """
        if len(calls) == 1:
            name, keys, args = calls[0]
            try:
                return [_Script(self._scripts[name], self)(keys=keys, args=args)]
            except (redis.exceptions.RedisError, *_cluster_errors()) as exc:
                return [exc]
        groups: dict[str, tuple[Any, list[int]]] = {}
        cluster = _is_cluster(self.client)
        for i, (_, keys, _) in enumerate(calls):
            if cluster:
                node = self.client.get_node_from_key(keys[0])  # type: ignore[union-attr]  # a cluster's
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
                # several nodes: a cluster
                node = self.client.get_node_from_key(calls[i][1][0])  # type: ignore[union-attr]
                groups.setdefault(node.name, (node, []))[1].append(i)
        for node, indexes in groups.values():
            # a node: a cluster's
            client = self.client if node is None else self.client.get_redis_connection(node)  # type: ignore[union-attr]
            self._pipeline(client, "" if node is None else node.name, calls, indexes, results)
            for i in indexes:
                if isinstance(results[i], redis.ResponseError):
                    results[i] = script_error(results[i])
        return results

    def _fan_out(self, calls: Sequence[Call], groups: list[tuple[Any, list[int]]], results: list[Any]) -> None:
        """EVALSHA ``calls`` on several nodes at once: send to all, then read from each."""
        sent: list[tuple[Any, Any, list[int], str, int]] = []
        try:
            for node, indexes in groups:
                # the nodes of a cluster
                pool = self.client.get_redis_connection(node).connection_pool  # type: ignore[union-attr]
                conn = pool.get_connection()
                loads = self._loads(node.name, calls, indexes)  # ahead of the calls: run in order
                sent.append((pool, conn, indexes, node.name, len(loads)))
                try:
                    conn.send_packed_command(
                        conn.pack_commands(
                            [
                                *(("SCRIPT", "LOAD", script.script) for script in loads),
                                *(
                                    (
                                        "EVALSHA",
                                        self._scripts[calls[i][0]].sha,
                                        len(calls[i][1]),
                                        *calls[i][1],
                                        *calls[i][2],
                                    )
                                    for i in indexes
                                ),
                            ]
                        )
                    )
                except redis.exceptions.RedisError as exc:
                    conn.disconnect()
                    for i in indexes:
                        results[i] = exc
                    sent[-1] = (pool, None, indexes, node.name, 0)
                    pool.release(conn)
            for _, conn, indexes, server, loaded in sent:
                if conn is None:
                    continue
                try:
                    for _ in range(loaded):
                        try:
                            conn.read_response()
                        except redis.exceptions.ResponseError:
                            pass  # not loaded: its calls meet NOSCRIPT and are sent again
                except redis.exceptions.RedisError as exc:
                    conn.disconnect()
                    for j in indexes:
                        results[j] = exc
                    continue
                for n, i in enumerate(indexes):
                    try:
                        results[i] = conn.read_response()
                    except redis.exceptions.ResponseError as exc:  # this call failed; the next replies follow
                        results[i] = script_error(exc)
                    except redis.exceptions.RedisError as exc:  # the connection broke: no more replies
                        conn.disconnect()
                        for j in indexes[n:]:
                            results[j] = exc
                        break
                self._ran(server, calls, indexes, [results[i] for i in indexes])
        finally:
            for pool, conn, *_ in sent:
                if conn is not None:
                    pool.release(conn)

    def __getattr__(self, name: str) -> _Script:
        try:
            return _Script(self._scripts[name], self)
        except KeyError:
            raise AttributeError(name) from None


def _cluster_errors() -> tuple[type[RedisClusterException]]:
    return (RedisClusterException,)


def _is_cluster(client: object) -> TypeGuard[RedisCluster]:
    return isinstance(client, RedisCluster)
