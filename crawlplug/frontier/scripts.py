"""The Lua scripts of crawlplug, kept as real ``.lua`` files beside this loader, and how
they are called.

On one Redis 7 or later the scripts run as the functions of one Functions library
(crawlplug.frontier.lualib: the shared pieces held once, 85 KB of text where the scripts
a crawl calls hold about 150 KB of script cache): ``FCALL``, the library loaded with
``FUNCTION LOAD`` when the server does not have it. Elsewhere, and for a user whose ACL
refuses FCALL or FUNCTION LOAD (logged once), each script is registered with redis-py's
``register_script`` and run by ``EVALSHA``, loaded if the server lost it: Redis 6 (the
embedded default) has no Functions, and a Redis Cluster keeps the scripts because
redis-py routes an FCALL by asking the cluster for its keys (COMMAND GETKEYS), a round
trip a call. Every key a script touches is passed in ``KEYS``; all of them share the
crawl's hash tag.

Its size: the three ways a call goes out (alone, a pipeline to one server, a fan-out to a
cluster's primaries), each with the load that goes ahead of it when the server lacks it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from ..errors import script_error
from .lualib import Library, library
from .luatext import ALLOW_OOM, PIECES, READ_ONLY, source
from .serverinfo import (
    already_loaded,
    functions_refused,
    mark_refused,
    mark_unloadable,
    not_found,
    server_major,
    was_refused,
)
from .store import is_cluster

if TYPE_CHECKING:
    from redis.commands.core import Script

    from .calls import Call, Reply

__all__ = ["ALLOW_OOM", "NAMES", "PIECES", "READ_ONLY", "Scripts", "source"]

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
    "stats",
)


class _Script:
    """One registered script, called like redis-py's ``Script``; a refusal of a
    corrupt crawl key is raised as :class:`crawlplug.errors.CorruptKey`.

    A server without this script (its first call, a restart, SCRIPT FLUSH, a failover) is
    given it then, as redis-py's ``Script`` does: a Redis holds the scripts its crawls
    call, not all of them (22 scripts and the pieces pasted in front of each are about
    390 KB of script cache, four times what a crawl's calls need). A pipeline sends the
    SCRIPT LOAD of the scripts its server was not seen to hold ahead of its calls
    (:meth:`Scripts._loads`). With the Functions library (module docstring), the same for
    the library: FCALL, FUNCTION LOAD when the server answers that it has no such function."""

    def __init__(self, name: str, script: Any, owner: Scripts) -> None:
        self.name = name
        self.script = script
        self.owner = owner

    @property
    def sha(self) -> str:
        return self.script.sha

    def __call__(self, keys: Any = (), args: Any = ()) -> Any:
        owner = self.owner
        client = owner.client
        try:
            if owner.functions is not None:
                result = self._fcall(keys, args)
                if result is not _FELL_BACK:
                    return result
            try:
                result = client.evalsha(self.script.sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                owner.load(client, [self.script])
                result = client.evalsha(self.script.sha, len(keys), *keys, *args)
        except (redis.exceptions.RedisError, *_cluster_errors()) as exc:
            raise script_error(exc) from None  # crawlplug's error for it, converted once here
        if not is_cluster(client):
            owner.held("", [self.script.sha])
        return result

    def _fcall(self, keys: Any, args: Any) -> Any:
        """The call as FCALL of the library's function, the library loaded if the server lacks
        it; :data:`_FELL_BACK` when the scripts must run it instead (FCALL or FUNCTION LOAD
        refused to this user, the library not loadable: :meth:`Scripts.load_library`)."""
        owner, client = self.owner, self.owner.client
        lib = owner.functions
        assert lib is not None
        function = lib.functions[self.name]
        try:
            try:
                result = client.fcall(function, len(keys), *keys, *args)
            except redis.ResponseError as exc:
                if not not_found(exc):
                    raise
                if not owner.load_library(client):
                    return _FELL_BACK
                result = client.fcall(function, len(keys), *keys, *args)
        except redis.exceptions.NoPermissionError as exc:
            if not functions_refused(exc):
                raise
            owner.refused(exc)
            return _FELL_BACK
        owner.held("", [lib.name])
        return result


#: what :meth:`_Script._fcall` answers when the call is to go out as EVALSHA instead
_FELL_BACK = object()


class Scripts:
    """The scripts registered on one client: ``scripts.admit(keys, args)``; on one Redis 7 or
    later, the functions of crawlplug's library (module docstring)."""

    def __init__(self, client: redis.Redis | RedisCluster, *, functions: bool | None = None) -> None:
        self.client = client
        major = server_major(client)
        self._scripts = {name: client.register_script(source(name, major >= 7)) for name in NAMES}
        if functions is None:
            functions = major >= 7 and not is_cluster(client) and not was_refused(client)
        #: the Functions library the calls run (FCALL), or None: the scripts, by EVALSHA
        self.functions: Library | None = library(NAMES) if functions else None
        #: what each server (a cluster node's name; "" for one Redis) was seen to hold, the
        #: scripts' SHAs or the library's name: a pipeline naming another is preceded by its
        #: SCRIPT LOAD or FUNCTION LOAD (:meth:`_loads`)
        self._held: dict[str, set[str]] = {}

    def held(self, server: str, units: Iterable[str]) -> None:
        """Note that ``server`` holds ``units`` (scripts' SHAs, the library's name)."""
        self._held.setdefault(server, set()).update(units)

    def refused(self, exc: BaseException) -> None:
        """The server refused FCALL or FUNCTION LOAD to this user (:func:`functions_refused`):
        the scripts run by EVALSHA from now on, on this client (said once per client)."""
        if self.functions is None:
            return
        self.functions = None
        if mark_refused(self.client):
            logger.warning(
                "crawlplug: Redis refused %s; the scripts run by EVALSHA instead, which holds their "
                "shared Lua once per script in Redis's memory (the ACL crawlplug needs: docs/security.md)",
                exc,
            )

    def unloadable(self, exc: BaseException) -> None:
        """The server could not load the library (over its maxmemory: FUNCTION LOAD is refused
        on a full Redis, where SCRIPT LOAD is not): the scripts run by EVALSHA from now on, for
        this object's life, so that lease renewal and the release of leases go on (said once
        per client and reason). A node made later tries the library again."""
        if self.functions is None:
            return
        self.functions = None
        if mark_unloadable(self.client, str(exc)):
            logger.warning(
                "crawlplug: Redis could not load crawlplug's Functions library (%s); the scripts "
                "run by EVALSHA instead until this process restarts (docs/faults.md)",
                exc,
            )

    def load_library(self, client: redis.Redis | RedisCluster) -> bool:
        """Load the library on the server behind ``client``; whether the calls may go out as
        FCALL (False: refused to this user, or not loadable, and the scripts run instead)."""
        if self.functions is None:
            return False
        try:
            client.function_load(self.functions.text)
        except redis.exceptions.NoPermissionError as exc:
            if not functions_refused(exc):
                raise
            self.refused(exc)
            return False
        except redis.ResponseError as exc:
            if not already_loaded(exc):
                self.unloadable(exc)
                return False
        return True

    def _after_loads(self, loaded: Sequence[object]) -> None:
        """What the replies of a pipeline's loads say: a FUNCTION LOAD refused to this user, or
        one the server could not make, turns this client to the scripts (:meth:`refused`,
        :meth:`unloadable`); the calls that then found no function are sent again as EVALSHA."""
        if self.functions is None:
            return
        for reply in loaded:
            if functions_refused(reply):
                self.refused(cast(BaseException, reply))
            elif isinstance(reply, redis.ResponseError) and not already_loaded(reply):
                self.unloadable(reply)

    def _unit(self, name: str) -> str:
        """What a server must hold for a call of ``name``: the library, or the script."""
        return self.functions.name if self.functions is not None else self._scripts[name].sha

    def _command(self, name: str, keys: Sequence[Any], args: Sequence[Any]) -> tuple[Any, ...]:
        """A call as the command sent: FCALL of the library's function, or EVALSHA of the script."""
        if self.functions is not None:
            return ("FCALL", self.functions.functions[name], len(keys), *keys, *args)
        return ("EVALSHA", self._scripts[name].sha, len(keys), *keys, *args)

    def _loads(self, server: str, calls: Sequence[Call], indexes: list[int]) -> list[tuple[str, str, str]]:
        """The loads (SCRIPT LOAD of each script, or FUNCTION LOAD of the library) that
        ``calls[indexes]`` need and ``server`` was not seen to hold, each once.

        A pipeline sends them ahead of its calls, in the same round trip, so its calls run in
        the order sent. Sending only EVALSHAs and loading the scripts the server answered
        NOSCRIPT for ran the others first: a history sample taken before the heartbeat ahead
        of it counted no live node (a sharded crawl's first beat on a cluster whose nodes
        held some scripts and not others), a pop ran before the admission sent ahead of it.
        After a restart or SCRIPT FLUSH (FUNCTION FLUSH) a server may still lose what it was
        seen to hold: then the calls it did not find are sent again, alone, with their loads."""
        held = self._held.get(server, set())
        lib = self.functions
        if lib is not None:
            return [] if not indexes or lib.name in held else [("FUNCTION", "LOAD", lib.text)]
        wanted = {self._scripts[calls[i][0]].sha: self._scripts[calls[i][0]] for i in indexes}
        # its text: the str source() made (redis-py types a Script's text wider)
        return [("SCRIPT", "LOAD", cast(str, script.script)) for sha, script in wanted.items() if sha not in held]

    def _ran(self, server: str, calls: Sequence[Call], indexes: list[int], out: list[Any]) -> None:
        """After a pipeline: what ``server`` holds, from each call's reply (not found: not that)."""
        held = self._held.setdefault(server, set())
        for i, value in zip(indexes, out):
            unit = self._unit(calls[i][0])
            if not_found(value):
                held.discard(unit)
            elif not isinstance(
                value,
                (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, redis.exceptions.NoPermissionError),
            ):
                held.add(unit)

    def load_all(self, client: redis.Redis | RedisCluster) -> None:
        """Load every script (or the library) on the server behind ``client`` (a benchmark's warm-up)."""
        self.load(client, list(self._scripts.values()))

    def load(self, client: redis.Redis | RedisCluster, scripts: list[Script]) -> None:
        """Load ``scripts`` (each once), or with Functions the library, on the server behind
        ``client``, in one round trip; a library the server holds already is left as it is."""
        if self.functions is not None and self.load_library(client):
            return
        scripts = list({id(s): s for s in scripts}.values())
        if is_cluster(client):
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
        every pipeline, a second round trip; here EVALSHA (FCALL) goes out directly, preceded
        by the loads the server was not seen to hold (:meth:`_loads`).
        """
        client, server = self.client, ""
        if calls and is_cluster(client):
            # Every key of a crawl shares one hash tag: the whole pipeline goes to the
            # node owning that slot (redis-py's cluster pipeline refuses EVALSHA).
            node = client.get_node_from_key(calls[0][1][0])
            client, server = client.get_redis_connection(node), node.name
        out: list[Any] = [None] * len(calls)
        self._pipeline(client, server, calls, list(range(len(calls))), out)
        return _converted(out)

    def _pipeline(self, client: Any, server: str, calls: Sequence[Call], indexes: list[int], out: list[Any]) -> None:
        """Run ``calls[indexes]`` on ``client`` (one server) in one pipeline, each reply (or
        the error it met, unraised) into ``out``: the loads of what the server was not seen
        to hold first (:meth:`_loads`), then the calls in call order."""
        todo, tries = indexes, 2
        while todo and tries:
            tries -= 1
            by_library = self.functions is not None
            loads = self._loads(server, calls, todo)
            pipe = client.pipeline(transaction=False)
            for load in loads:
                pipe.execute_command(*load)
            for i in todo:
                pipe.execute_command(*self._command(*calls[i]))
            try:
                replies = pipe.execute(raise_on_error=False)
            except (redis.exceptions.RedisError, *_cluster_errors()) as exc:
                replies = [exc] * (len(loads) + len(todo))
            loaded, replies = replies[: len(loads)], replies[len(loads) :]
            for i, value in zip(todo, replies):
                out[i] = value
            self._ran(server, calls, todo, replies)
            self._after_loads(loaded)  # a load refused or not made: the calls go again as EVALSHA
            refusal = next((x for x in replies if functions_refused(x)), None)
            if refusal is not None:
                self.refused(cast(BaseException, refusal))  # FCALL refused: sent again as EVALSHA
            # Only the calls the server did not find (it lost them since: a restart, SCRIPT
            # FLUSH) or refused as FCALL are sent again: the others ran, and an admission run
            # twice would answer for its second run (its requests "duplicates" of themselves,
            # its acks stale). Nothing is lost or done twice; a pop run so before the admission
            # sent ahead of it only misses the requests just admitted.
            todo = [i for i in todo if not_found(out[i]) or functions_refused(out[i])]
            if by_library and self.functions is None:
                tries = max(tries, 1)  # turned to the scripts: those calls go once more, as EVALSHA

    def read(self, calls: Sequence[Call]) -> list[Reply]:
        """Run read-only scripts (:data:`READ_ONLY`) as :meth:`run_many` does, but read-only
        (FCALL_RO of the library's ``no-writes`` functions; else EVALSHA_RO) on a Redis 7 or
        later that is not a cluster, so a user allowed only to read (docs/security.md's
        watcher) may run them; older servers and clusters take :meth:`run_many`'s EVALSHA.
        Returns each call's result or the exception it met."""
        unknown = [name for name, _, _ in calls if name not in READ_ONLY]
        if unknown:
            raise ValueError(f"not read-only scripts: {unknown}")
        if is_cluster(self.client) or server_major(self.client) < 7:
            return self.run_many(calls)
        results: list[Any] = []
        for name, keys, args in calls:
            lib = self.functions
            if lib is not None:
                try:
                    results.append(self.client.fcall_ro(lib.functions[name], len(keys), *keys, *args))
                    continue
                except redis.ResponseError as exc:
                    # not loaded yet, or FCALL_RO refused to this user: the script read instead
                    if not (not_found(exc) or functions_refused(exc)):
                        results.append(script_error(exc))
                        continue
                except redis.RedisError as exc:
                    results.append(script_error(exc))
                    continue
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
            except redis.RedisError as exc:
                results.append(script_error(exc))
        return results

    def run_many(self, calls: Sequence[Call]) -> list[Reply]:
        """Run scripts whose keys may live on different nodes (the shards of a crawl):
        one pipeline per node, in call order within a node, the nodes one after the other.

        Returns each call's result, or the exception it met, in call order: a failed
        call (a node down, out of memory) does not hide what the others did. One call goes
        out as one EVALSHA (FCALL), without a pipeline's cost on the node (an unsharded crawl's).
        """
        if len(calls) == 1:
            name, keys, args = calls[0]
            try:
                return [_Script(name, self._scripts[name], self)(keys=keys, args=args)]
            except (redis.exceptions.RedisError, *_cluster_errors()) as exc:
                return [script_error(exc)]
        groups: dict[str, tuple[Any, list[int]]] = {}
        cluster = is_cluster(self.client)
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
            retry = [i for i, v in enumerate(results) if not_found(v)]
            if not retry:
                return _converted(results)
            groups = {}
            for i in retry:
                # several nodes: a cluster
                node = self.client.get_node_from_key(calls[i][1][0])  # type: ignore[union-attr]
                groups.setdefault(node.name, (node, []))[1].append(i)
        for node, indexes in groups.values():
            # a node: a cluster's
            client = self.client if node is None else self.client.get_redis_connection(node)  # type: ignore[union-attr]
            self._pipeline(client, "" if node is None else node.name, calls, indexes, results)
        return _converted(results)

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
                                *loads,
                                *(self._command(*calls[i]) for i in indexes),
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
                            pass  # not loaded: its calls are not found, and are sent again
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
            return _Script(name, self._scripts[name], self)
        except KeyError:
            raise AttributeError(name) from None


def _converted(replies: list[Any]) -> list[Any]:
    """Each error among ``replies`` as crawlplug's error for it (:func:`crawlplug.errors.script_error`)."""
    return [script_error(x) if isinstance(x, BaseException) else x for x in replies]


def _cluster_errors() -> tuple[type[RedisClusterException]]:
    return (RedisClusterException,)
