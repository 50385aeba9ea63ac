"""A TCP proxy that delays every byte by a fixed time each way: Redis as if on another machine.

    python bench/delayproxy.py --target-port 6379 --delay-ms 1 --port-file FILE

Listens on a free loopback port (written to ``--port-file``) and forwards each connection
to 127.0.0.1:``--target-port``; what is read from either side is written to the other
``--delay-ms`` later, in order, without limiting throughput (a pipeline's replies arrive
together, one round trip later), as a network link of that one-way latency does. Run as a
process of its own, so that its CPU counts neither against the node nor against Redis.
bench/redis_cpu.py's ``--remote-delay-ms`` crawls through it (:class:`DelayProxyProc`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay`` seconds after it was read."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                writer.close()
                return
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(send())
    try:
        while True:
            data = await reader.read(1 << 16)
            queue.put_nowait((loop.time() + delay, data))
            if not data:
                break
        await sender
    except (ConnectionError, OSError):
        sender.cancel()
        writer.close()


async def _serve(target_port: int, delay: float, port_file: Path) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pump(client_r, server_w, delay), _pump(server_r, client_w, delay))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(str(port))
    tmp.replace(port_file)
    async with server:
        await server.serve_forever()


class DelayProxyProc:
    """The proxy as a child process of the bench (killed with the rest by bench.common.kill_all)."""

    def __init__(self, workdir: Path, target_port: int, delay_ms: float) -> None:
        from bench.common import spawn

        self.port_file = Path(tempfile.mktemp(prefix="delayproxy-port-", dir=workdir))
        self.proc = spawn(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--target-port",
                str(target_port),
                "--delay-ms",
                str(delay_ms),
                "--port-file",
                str(self.port_file),
            ],
            "delayproxy",
            output=Path(str(self.port_file) + ".log"),
        )
        deadline = time.monotonic() + 30
        while not self.port_file.exists():
            if time.monotonic() > deadline or not self.proc.alive:
                raise RuntimeError(f"the delay proxy did not start (log: {self.port_file}.log)")
            time.sleep(0.02)
        self.port = int(self.port_file.read_text().strip())
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.delay_ms = delay_ms

    def ping_ms(self, n: int = 20) -> float:
        """A PING's round trip through the proxy, ms (the median of ``n``): what the delay
        costs a call here, the proxy's own scheduling included."""
        import redis

        client = redis.Redis.from_url(self.url, socket_timeout=10)
        client.ping()
        times = []
        for _ in range(n):
            began = time.monotonic()
            client.ping()
            times.append((time.monotonic() - began) * 1000)
        client.close()
        return sorted(times)[n // 2]

    def stop(self) -> None:
        self.proc.stop(grace=2.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target-port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, default=1.0, help="one-way delay, milliseconds")
    parser.add_argument("--port-file", type=Path, required=True)
    args = parser.parse_args()
    asyncio.run(_serve(args.target_port, args.delay_ms / 1000.0, args.port_file))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
