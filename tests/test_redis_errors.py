"""redis-py's errors are converted once, where crawlplug calls Redis (issue 38): its clients
(crawlplug.server.clients) and its script runner (crawlplug.frontier.scripts) raise, and hold
as pipeline replies, each error as crawlplug's RedisFailure of its kind, still of its
redis-py class and with its message, so a decision made on either still holds."""

from __future__ import annotations

import pickle
import socket
import threading
from collections.abc import Iterator

import pytest
import redis

from crawlplug.errors import (
    REDIS_ERRORS,
    CorruptKey,
    RedisFailure,
    RedisForbidden,
    RedisFull,
    RedisRefused,
    ReplyLost,
    converted,
    failure_kind,
)
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.server.clients import client_from_url

from .support.servers import free_port

K = CrawlKeys("errs")


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server on loopback that accepts and never answers (a network that stops answering)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        listener.close()


def _assert_kind(exc: BaseException, kind: type[RedisFailure], redis_class: type[BaseException], words: str) -> None:
    assert isinstance(exc, kind) and isinstance(exc, redis_class), type(exc).__mro__
    assert isinstance(exc, REDIS_ERRORS) and words in str(exc), str(exc)


def test_a_command_a_pipeline_and_a_script_call_each_convert_a_refusal(redis_url, r):
    r.set(K.queue, "a string where a sorted set belongs")
    client = client_from_url(redis_url)
    with pytest.raises(RedisRefused) as raised:
        client.zadd(K.queue, {"x": 1})
    _assert_kind(raised.value, RedisRefused, redis.ResponseError, "WRONGTYPE")
    pipe = client.pipeline(transaction=False)
    pipe.ping()
    pipe.zadd(K.queue, {"x": 1})
    ok, refused = pipe.execute(raise_on_error=False)
    assert ok is True
    _assert_kind(refused, RedisRefused, redis.ResponseError, "WRONGTYPE")
    pipe = client.pipeline(transaction=False)
    pipe.zadd(K.queue, {"x": 1})
    with pytest.raises(RedisRefused):
        pipe.execute()
    # a script's refusal of the same key, through a client crawlplug did not make
    frontier = Frontier(r, K, node_id="a")
    with pytest.raises(CorruptKey) as corrupt:
        frontier.admit([(b"f" * 20, 0.0, b"payload")])
    _assert_kind(corrupt.value, RedisRefused, redis.ResponseError, K.queue)
    assert failure_kind(corrupt.value) is RedisRefused
    client.close()


def test_a_server_that_cannot_be_reached_or_stops_answering_is_a_lost_reply(silent_server):
    closed = client_from_url(f"redis://127.0.0.1:{free_port()}/0", {"socket_connect_timeout": 0.5})
    with pytest.raises(ReplyLost) as refused:
        closed.ping()
    _assert_kind(refused.value, ReplyLost, redis.ConnectionError, "onnect")
    silent = client_from_url(silent_server, {"socket_timeout": 0.3, "socket_connect_timeout": 0.5})
    with pytest.raises(ReplyLost) as timed_out:
        silent.get("x")
    _assert_kind(timed_out.value, ReplyLost, redis.TimeoutError, "imeout")
    # the script runner converts what a client it did not make raised (a test's, a project's)
    raw = redis.Redis.from_url(silent_server, socket_timeout=0.3, socket_connect_timeout=0.5)
    (reply,) = Frontier(raw, K, node_id="a").scripts.run_many([("idle", [K.queue], [])])
    assert failure_kind(reply) is ReplyLost and isinstance(reply, redis.TimeoutError), type(reply).__mro__
    for client in (closed, silent, raw):
        client.close()


def test_a_full_redis_and_a_user_refused_a_command_are_said_as_such(fresh_redis):
    admin = redis.Redis.from_url(fresh_redis.url)
    admin.acl_setuser("limited", enabled=True, passwords=["+pw"], keys=["*"], commands=["+get", "+ping"])
    limited = client_from_url(fresh_redis.url.replace("redis://", "redis://limited:pw@"))
    with pytest.raises(RedisForbidden) as forbidden:
        limited.set("k", "v")
    _assert_kind(forbidden.value, RedisForbidden, redis.exceptions.NoPermissionError, "permission")
    client = client_from_url(fresh_redis.url)
    admin.set("filler", "1" * 1_000_000)
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", int(admin.info("memory")["used_memory"]) // 2)
    try:
        with pytest.raises(RedisFull) as full:
            client.set("k", "v")
        _assert_kind(full.value, RedisFull, redis.exceptions.OutOfMemoryError, "maxmemory")
        assert client.get("filler") is not None, "reads still go through"
    finally:
        admin.config_set("maxmemory", 0)
    for c in (admin, limited, client):
        c.close()


def test_what_is_no_failure_stays_as_it_is_and_a_converted_error_pickles_as_itself():
    watch = redis.WatchError("Watched variable changed.")
    assert converted(watch) is watch and failure_kind(watch) is None
    value = ValueError("not redis")
    assert converted(value) is value
    lost = converted(redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused."))
    again = pickle.loads(pickle.dumps(lost))
    assert isinstance(again, ReplyLost) and isinstance(again, redis.ConnectionError) and str(again) == str(lost)
    assert converted(lost) is lost, "converted once"
    assert type(lost).__name__ == "ConnectionError", "a log line names it as before"
