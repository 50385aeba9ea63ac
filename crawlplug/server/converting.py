"""redis-py's clients, converting its errors once into crawlplug's: each command and each
pipeline's ``execute`` (replies held as values included) raise or hold the same error,
which is also a :class:`~crawlplug.errors.RedisFailure` of its kind
(:func:`crawlplug.errors.converted`). crawlplug.server.clients makes every client from them.
"""

from __future__ import annotations

import functools
from typing import Any

import redis

from ..errors import converted

__all__ = ["Redis", "cluster_class"]


def _converting(execute: Any) -> Any:
    """``execute`` (a pipeline's) with its errors, raised or held as replies, converted."""

    def run(self: Any, raise_on_error: bool = True) -> Any:
        try:
            replies = execute(self, raise_on_error)
        except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:
            raise converted(exc) from None
        if raise_on_error:
            return replies
        return [converted(r) if isinstance(r, BaseException) else r for r in replies]

    return run


class _Pipeline(redis.client.Pipeline):
    execute = _converting(redis.client.Pipeline.execute)


class Redis(redis.Redis):
    """redis-py's client, its errors converted into crawlplug's (module docstring)."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute_command(*args, **options)
        except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:
            raise converted(exc) from None

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        pipe.__class__ = _Pipeline  # the same object; only its execute converts
        return pipe


@functools.cache
def cluster_class() -> Any:
    """The cluster client and its pipeline, converting (imported when a cluster is used)."""
    from redis.cluster import ClusterPipeline, RedisCluster  # noqa: PLC0415

    class _ClusterPipeline(ClusterPipeline):
        execute = _converting(ClusterPipeline.execute)

    class Cluster(RedisCluster):
        def execute_command(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return super().execute_command(*args, **kwargs)
            except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:
                raise converted(exc) from None

        def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
            pipe = super().pipeline(transaction, shard_hint)
            pipe.__class__ = _ClusterPipeline
            return pipe

    Cluster.__name__ = Cluster.__qualname__ = "RedisCluster"  # named as redis-py's, as the errors are
    return Cluster
