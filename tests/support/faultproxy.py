"""A TCP proxy on loopback between crawl nodes and Redis, with faults the test turns on.

toxiproxy's server is a Go binary; this is the little of it the network-fault tests
need, in asyncio, run in a thread of the test process. Nodes connect to
``proxy.url`` instead of Redis's; the test switches what the proxy does:

- :meth:`FaultProxy.blackhole`: stop forwarding in both directions and close
  nothing (a cable pulled between two switches, a NAT that dropped its entry): a
  client waits for a reply that never comes; new connections are accepted and go
  nowhere either;
- :meth:`FaultProxy.reset_reply`: the next time a client sends a command holding
  ``match``, let Redis run it, forward ``after`` bytes of the reply, then reset the
  client's connection (RST): the commands ran, the reply never arrived;
- :meth:`FaultProxy.latency`: hold every reply ``seconds`` before forwarding it
  (toxiproxy's latency toxic, downstream), order kept, pipelined;
- :meth:`FaultProxy.cut`: reset every open connection and refuse new ones until
  :meth:`FaultProxy.restore`;
- :meth:`FaultProxy.restore`: back to passing everything through.

Counters (``connections``, ``resets``, ``refused``, ``blackholed_bytes``, ``sent``) say
what was done, so a test can check its fault really happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .patience import patient

CHUNK = 1 << 16


@dataclass(eq=False)  # one per connection, hashed by identity
class _Pair:
    """One client connection and its upstream connection to Redis."""

    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    #: armed by a client chunk matching a reset_reply: reset after this many more reply bytes
    reset_in: int | None = None


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close ``writer``'s socket with an RST (SO_LINGER 0), not a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """Proxy ``127.0.0.1:<port>`` to ``target`` (host, port); :meth:`start` runs it in a thread."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.mode = "pass"
        self._latency = 0.0
        self._reset_match: bytes | None = None
        self._reset_after = 0
        self._reset_times = 0
        self._pairs: set[_Pair] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self.port = 0
        self.connections = 0
        self.resets = 0
        self.blackholed_bytes = 0
        self.refused = 0
        #: client chunks forwarded to Redis: about one per round trip of a synchronous client
        self.sent = 0

    @classmethod
    def for_url(cls, redis_url: str) -> FaultProxy:
        host, port = redis_url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)
        return cls(host, int(port))

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    # -- control, from the test's thread --------------------------------------------------
    def start(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._run, name="faultproxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fault proxy did not start")
        return self

    def stop(self) -> None:
        """Reset every connection, stop listening, end the thread."""
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def restore(self) -> None:
        """Pass everything through again (a cut's listener accepts again)."""
        self._latency = 0.0
        self._reset_times = 0
        self.mode = "pass"

    def blackhole(self) -> None:
        """Forward nothing, close nothing: clients wait for replies that never come."""
        self.mode = "blackhole"

    def latency(self, seconds: float) -> None:
        """Hold every reply ``seconds`` before forwarding it."""
        self._latency = seconds
        self.mode = "pass"

    def reset_reply(self, match: bytes, after: int = 0, times: int = 1) -> None:
        """The next ``times`` commands holding ``match`` run in Redis; their client is reset
        once ``after`` bytes of the reply have been forwarded."""
        self._reset_match, self._reset_after = match, after
        self._reset_times = times

    def cut(self) -> None:
        """Reset every open connection; refuse (reset) new ones until :meth:`restore`."""
        self.mode = "cut"
        assert self._loop is not None
        done = threading.Event()

        def cut_all() -> None:
            for pair in list(self._pairs):
                self._drop(pair)
            done.set()

        self._loop.call_soon_threadsafe(cut_all)
        done.wait(10)

    def wait_resets(self, n: int, timeout: float) -> bool:
        """Until ``n`` resets were made (True), or ``timeout`` seconds passed (False)."""
        deadline = time.monotonic() + patient(timeout)
        while self.resets < n:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    # -- the proxy, in its thread ----------------------------------------------------------------
    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        self._server = loop.run_until_complete(asyncio.start_server(self._accept, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _shutdown(self) -> None:
        tasks = [task for pair in self._pairs for task in pair.tasks]
        for pair in list(self._pairs):
            self._drop(pair)
        assert self._server is not None
        self._server.close()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _drop(self, pair: _Pair) -> None:
        self._pairs.discard(pair)
        self.resets += 1
        _reset(pair.client)
        pair.server.transport.abort()
        for task in pair.tasks:
            if task is not asyncio.current_task():
                task.cancel()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "cut":
            self.refused += 1
            _reset(writer)
            return
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(writer)
            return
        pair = _Pair(writer, up_writer)
        self._pairs.add(pair)
        replies: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        pair.tasks = [
            asyncio.create_task(self._upstream(reader, pair)),
            asyncio.create_task(self._downstream(up_reader, pair, replies)),
            asyncio.create_task(self._deliver(pair, replies)),
        ]

    async def _upstream(self, reader: asyncio.StreamReader, pair: _Pair) -> None:
        """Client -> Redis; arms a reset when a chunk holds the reset's match."""
        try:
            while data := await reader.read(CHUNK):
                if self.mode == "blackhole":
                    self.blackholed_bytes += len(data)
                    continue
                if self._reset_times > 0 and self._reset_match is not None and self._reset_match in data:
                    self._reset_times -= 1
                    pair.reset_in = self._reset_after
                self.sent += 1
                pair.server.write(data)
                await pair.server.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._close(pair)

    async def _downstream(
        self, reader: asyncio.StreamReader, pair: _Pair, replies: asyncio.Queue[tuple[float, bytes]]
    ) -> None:
        """Redis -> the delivery queue, stamped with when it may be forwarded."""
        try:
            while data := await reader.read(CHUNK):
                if self.mode == "blackhole":
                    self.blackholed_bytes += len(data)
                    continue
                await replies.put((time.monotonic() + self._latency, data))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            await replies.put((0.0, b""))

    async def _deliver(self, pair: _Pair, replies: asyncio.Queue[tuple[float, bytes]]) -> None:
        """The delivery queue -> the client, each chunk at its time; resets when armed."""
        try:
            while True:
                due, data = await replies.get()
                if not data:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if pair.reset_in is not None:
                    if len(data) > pair.reset_in:
                        pair.client.write(data[: pair.reset_in])
                        await pair.client.drain()
                        self._drop(pair)
                        return
                    pair.reset_in -= len(data)
                pair.client.write(data)
                await pair.client.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._close(pair)

    def _close(self, pair: _Pair) -> None:
        if pair in self._pairs:
            self._pairs.discard(pair)
            pair.client.close()
            pair.server.close()
            for task in pair.tasks:
                if task is not asyncio.current_task():
                    task.cancel()
