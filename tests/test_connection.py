"""crawlplug.server.clients and crawlplug.server.embedded against real redis-server processes."""

from __future__ import annotations

import multiprocessing
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

import psutil
import pytest
import redis

from crawlplug.errors import ConfigError, RedisUnavailable
from crawlplug.server import embedded
from crawlplug.server.clients import (
    Connection,
    check,
    client_from_url,
    from_settings,
    mask_url,
    validate_url,
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- URLs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://:hunter2@example.com:6379/0", "redis://:***@example.com:6379/0"),
        ("redis://alice:hunter2@example.com:6379/2", "redis://alice:***@example.com:6379/2"),
        ("rediss://alice:hunter2@example.com/0", "rediss://alice:***@example.com/0"),
        ("redis://alice:p%40ss%3Aw0rd@example.com:1/0", "redis://alice:***@example.com:1/0"),
        ("unix://:hunter2@/var/run/redis.sock?db=1", "unix://:***@/var/run/redis.sock?db=1"),
        ("redis://example.com:6379/0", "redis://example.com:6379/0"),
        ("redis://alice@example.com:6379/0", "redis://alice@example.com:6379/0"),
    ],
)
def test_mask_url_hides_passwords(url, masked):
    assert mask_url(url) == masked
    assert "hunter2" not in mask_url(url) and "p%40ss" not in mask_url(url)


def test_mask_url_hides_password_in_query_string():
    assert "hunter2" not in mask_url("redis://example.com:6379/0?password=hunter2")


def test_mask_url_keeps_ipv6_brackets():
    assert mask_url("redis://:hunter2@[::1]:6379/0") == "redis://:***@[::1]:6379/0"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://x", "scheme"),
        ("redis://", "no host"),
        ("redis://host:notaport", "malformed"),
        ("redis://host:99999", "malformed"),
        ("unix://", "socket path"),
        ("", "non-empty"),
        ("   ", "non-empty"),
        (None, "non-empty"),
        (6379, "non-empty"),
    ],
)
def test_validate_url_rejects(url, problem):
    with pytest.raises(ConfigError, match=problem) as info:
        validate_url(url)
    assert "REDIS_URL" in str(info.value)


def test_validate_url_error_does_not_leak_password():
    with pytest.raises(ConfigError) as info:
        validate_url("http://:hunter2@example.com")
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize(
    "url",
    [
        "redis://localhost:6379/0",
        "redis://:pw@10.0.0.1",
        "rediss://user:pw@example.com:6380/1",
        "unix:///tmp/redis.sock",
        "unix:///tmp/redis.sock?db=3",
    ],
)
def test_validate_url_accepts(url):
    assert validate_url(url) == url


def test_client_from_url_does_no_io_and_check_names_url_and_cause():
    port = free_port()  # nothing listens there
    url = f"redis://:hunter2@127.0.0.1:{port}/0"
    client = client_from_url(url, {"socket_connect_timeout": 2})
    try:
        with pytest.raises(RedisUnavailable) as info:
            check(Connection(client, url, embedded=False))
    finally:
        client.close()
    message = str(info.value)
    assert f"redis://:***@127.0.0.1:{port}/0" in message
    assert "hunter2" not in message
    assert "refused" in message.lower()
    assert isinstance(info.value, ConnectionError)


def test_check_on_a_stopped_server(fresh_redis):
    conn = Connection(client_from_url(fresh_redis.url), fresh_redis.url, embedded=False)
    try:
        check(conn)  # up: no error
        fresh_redis.stop()
        with pytest.raises(RedisUnavailable, match=f"127.0.0.1:{fresh_redis.port}"):
            check(conn)
    finally:
        conn.client.close()


def test_check_reports_refused_credentials(fresh_redis):
    admin = redis.Redis.from_url(fresh_redis.url)
    admin.config_set("requirepass", "right-password")
    admin.close()
    url = fresh_redis.url.replace("redis://", "redis://:wrong-password@")
    conn = Connection(client_from_url(url), url, embedded=False)
    try:
        with pytest.raises(RedisUnavailable, match="credentials") as info:
            check(conn)
    finally:
        conn.client.close()
    assert "wrong-password" not in str(info.value)
    assert "***" in str(info.value)


def test_from_settings_uses_redis_url(redis_url, monkeypatch):
    monkeypatch.delenv("REDIS_URL", raising=False)
    conn = from_settings({"REDIS_URL": redis_url, "REDIS_PARAMS": {"socket_timeout": 7}})
    try:
        assert conn.embedded is False and conn.url == redis_url
        assert conn.client.connection_pool.connection_kwargs["socket_timeout"] == 7
        check(conn)
    finally:
        conn.client.close()


def test_a_node_gives_up_on_a_silent_connection_in_seconds(redis_url, monkeypatch):
    """CRAWLPLUG_REDIS_TIMEOUT (5 s) is a node's socket timeout, REDIS_PARAMS' own wins; a
    command-line client keeps 30 s. A timeout is not retried (a silent server would make
    the node wait twice); a dropped connection is, once. The blackhole of
    tests/test_network_faults.py shows it on a real node."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    for settings, timeout in (
        ({}, 5.0),
        ({"CRAWLPLUG_REDIS_TIMEOUT": "1.5"}, 1.5),
        ({"CRAWLPLUG_REDIS_TIMEOUT": 1, "REDIS_PARAMS": {"socket_timeout": 9}}, 9),
    ):
        conn = from_settings({"REDIS_URL": redis_url, **settings})
        kwargs = conn.client.connection_pool.connection_kwargs
        assert kwargs["socket_timeout"] == timeout, settings
        retry = kwargs["retry"]
        assert retry.get_retries() == 1
        assert redis.ConnectionError in retry._supported_errors and redis.TimeoutError not in retry._supported_errors
        conn.client.close()
    assert client_from_url(redis_url).connection_pool.connection_kwargs["socket_timeout"] == 30
    for bad in ("0", "-1", "soon", "nan"):
        with pytest.raises(ConfigError, match="CRAWLPLUG_REDIS_TIMEOUT"):
            from_settings({"REDIS_URL": redis_url, "CRAWLPLUG_REDIS_TIMEOUT": bad})


def test_from_settings_rejects_bad_url(monkeypatch):
    monkeypatch.delenv("REDIS_URL", raising=False)
    with pytest.raises(ConfigError):
        from_settings({"REDIS_URL": "http://example.com"})


# -- embedded Redis ----------------------------------------------------------------------------


def servers_in(data_dir: Path, *, below: bool = False) -> list[psutil.Process]:
    """redis-server processes whose working directory is ``data_dir`` (redis chdirs to --dir),
    or any directory below it with ``below=True``."""
    root = data_dir.resolve()
    found = []
    for proc in psutil.process_iter(["name"]):
        try:
            if "redis" not in (proc.info["name"] or ""):
                continue
            cwd = Path(proc.cwd().removesuffix(" (deleted)"))
            if cwd == root or (below and cwd.is_relative_to(root)):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.fixture
def data_dir():
    """A short directory under the temp dir; its embedded server is always stopped."""
    path = Path(tempfile.mkdtemp(prefix="cpemb-"))
    try:
        yield path
    finally:
        try:
            embedded.stop(path)
        finally:
            for proc in servers_in(path, below=True):  # only servers started in this test's dir
                proc.kill()
            shutil.rmtree(path, ignore_errors=True)


def ping(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        return bool(client.ping())
    finally:
        client.close()


@pytest.mark.integration  # starts processes of its own
def test_ensure_starts_a_server_once(data_dir, monkeypatch):
    url = embedded.ensure(data_dir)
    assert url == f"unix://{data_dir.resolve() / 'redis.sock'}"
    assert ping(url)
    (server,) = servers_in(data_dir)
    pid = int((data_dir / "redis.pid").read_text())
    assert server.pid == pid
    assert embedded.ensure(data_dir) == url
    assert embedded.ensure(str(data_dir)) == url
    # a node configured through settings (no REDIS_URL) joins the same server
    monkeypatch.delenv("REDIS_URL", raising=False)
    conn = from_settings({"CRAWLPLUG_EMBEDDED_DIR": str(data_dir)})
    try:
        assert conn.embedded is True and conn.url == url
        check(conn)
    finally:
        conn.client.close()
    assert [p.pid for p in servers_in(data_dir)] == [pid]
    assert int((data_dir / "redis.pid").read_text()) == pid

    # kill -9 leaves a stale socket file behind: the next ensure() starts a new server
    server.kill()
    server.wait(10)
    assert (data_dir / "redis.sock").exists()
    assert embedded.ensure(data_dir) == url
    assert ping(url)
    (restarted,) = servers_in(data_dir)
    assert restarted.pid != pid


@pytest.mark.integration  # starts processes of its own
def test_data_survives_stop_and_restart(data_dir):
    url = embedded.ensure(data_dir)
    client = redis.Redis.from_url(url)
    client.set("crawlplug:{t}:key", b"\x00value\xff")
    client.rpush("crawlplug:{t}:list", "a", "b")
    client.close()
    first_pid = int((data_dir / "redis.pid").read_text())
    assert embedded.stop(data_dir) is True
    assert servers_in(data_dir) == []
    assert embedded.stop(data_dir) is False, "nothing left to stop"
    # Redis < 7 writes appendonly.aof; Redis 7 a base and increments under appendonlydir/
    assert (data_dir / "appendonly.aof").exists() or any((data_dir / "appendonlydir").glob("appendonly.aof*"))
    url2 = embedded.ensure(data_dir)
    assert url2 == url
    assert int((data_dir / "redis.pid").read_text()) != first_pid
    client = redis.Redis.from_url(url2)
    try:
        assert client.get("crawlplug:{t}:key") == b"\x00value\xff"
        assert client.lrange("crawlplug:{t}:list", 0, -1) == [b"a", b"b"]
    finally:
        client.close()


def _ensure_in_process(data_dir: str, barrier, out) -> None:
    """Two threads of this process call ensure() at the same instant as the other process's two."""

    def run() -> None:
        barrier.wait()
        try:
            out.put(embedded.ensure(data_dir))
        except BaseException as exc:  # noqa: BLE001 - reported by the parent
            out.put(f"error: {exc!r}")

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)


@pytest.mark.integration  # starts processes of its own
def test_concurrent_ensure_starts_one_server(data_dir):
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_ensure_in_process, args=(str(data_dir), barrier, out)) for _ in range(2)]
    for p in procs:
        p.start()
    urls = [out.get(timeout=60) for _ in range(4)]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert len(set(urls)) == 1, urls
    assert urls[0].startswith("unix://") and ping(urls[0])
    assert len(servers_in(data_dir)) == 1
    log = (data_dir / "redis.log").read_text()
    assert log.count("Redis is starting") == 1


@pytest.mark.integration  # starts processes of its own
def test_long_data_dir_puts_the_socket_in_tmp(data_dir):
    deep = data_dir / ("d" * 60) / ("e" * 60)
    assert len(str(deep / "redis.sock")) > 100
    try:
        url = embedded.ensure(deep)
        sock = Path(url.removeprefix("unix://"))
        assert sock.parent == Path(tempfile.gettempdir())
        assert len(str(sock)) <= 100
        assert sock == embedded.socket_path(deep.resolve())
        assert ping(url)
        client = redis.Redis.from_url(url)
        assert client.config_get("dir")["dir"] == str(deep.resolve())
        client.close()
        assert embedded.ensure(deep) == url
        assert len(servers_in(deep)) == 1
    finally:
        embedded.stop(deep)
        for proc in servers_in(deep):
            proc.kill()
    assert servers_in(deep) == []


def git_untracked(repo: Path) -> list[str]:
    """What `git status` lists as untracked in ``repo``, every file named (not folded into dirs)."""
    out = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout
    return sorted(line[3:] for line in out.splitlines() if line.startswith("?? "))


@pytest.fixture
def git_project(data_dir):
    """A `git init` project (short path, under the data_dir fixture's cleanup) with one file of its own."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    subprocess.run(["git", "init", "-q", str(data_dir)], check=True)
    (data_dir / "settings.py").write_text('ADDONS = {"crawlplug.Addon": 0}\n')
    return data_dir


@pytest.mark.integration  # starts processes of its own
def test_embedded_dir_never_shows_up_untracked_in_git(git_project):
    data = git_project / ".crawlplug"
    try:
        url = embedded.ensure(data)
        assert ping(url)
        # the server wrote its files (pid, log, append-only file) next to the socket and lock
        assert {"lock", "redis.pid", "redis.log"} <= {p.name for p in data.iterdir()}
        assert (data / ".gitignore").read_text() == embedded.GITIGNORE
    finally:
        embedded.stop(data)
    assert (data / "redis.log").exists(), "stop keeps the data"
    # git sees the project's own file, and nothing of .crawlplug/ (not even the .gitignore)
    assert git_untracked(git_project) == ["settings.py"]


@pytest.mark.integration  # starts processes of its own
def test_gitignore_added_to_an_existing_crawlplug_dir_and_a_users_own_kept(git_project):
    old = git_project / ".crawlplug"  # made by a crawlplug release that wrote no .gitignore
    old.mkdir()
    (old / "redis.log").write_text("old log\n")
    assert git_untracked(git_project) == [".crawlplug/redis.log", "settings.py"]
    try:
        embedded.ensure(old)
    finally:
        embedded.stop(old)
    assert git_untracked(git_project) == ["settings.py"]

    mine = git_project / ".crawlplug" / ".gitignore"
    mine.write_text("redis.log\n")  # the user's own rule is never replaced
    try:
        embedded.ensure(old)
    finally:
        embedded.stop(old)
    assert mine.read_text() == "redis.log\n"


@pytest.mark.integration  # starts processes of its own
def test_no_gitignore_in_a_users_own_existing_dir(git_project):
    """CRAWLPLUG_EMBEDDED_DIR naming a directory of the user's: '*' there would hide their files."""
    own = git_project / "state"
    own.mkdir()
    (own / "notes.txt").write_text("mine\n")
    try:
        embedded.ensure(own)
    finally:
        embedded.stop(own)
    assert not (own / ".gitignore").exists()
    assert "state/notes.txt" in git_untracked(git_project)


def test_socket_paths_of_different_long_dirs_differ(tmp_path):
    a = tmp_path / ("a" * 110)
    b = tmp_path / ("b" * 110)
    assert embedded.socket_path(a) != embedded.socket_path(b)
    assert embedded.socket_path(tmp_path / "x") == tmp_path / "x" / "redis.sock"


def test_explicit_server_binary_must_be_executable(data_dir):
    with pytest.raises(ConfigError, match="CRAWLPLUG_REDIS_SERVER"):
        embedded.ensure(data_dir, server=str(data_dir / "no-such-redis-server"))
    assert servers_in(data_dir) == []


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("unix:///tmp/x.sock", "unix:///tmp/x.sock"),
        ("unix:///tmp/x.sock?password=hunter2", "unix:///tmp/x.sock?password=***"),
    ],
)
def test_mask_url_keeps_unix_urls_usable(url, shown):
    assert mask_url(url) == shown


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("rediss://alice:hunter2@example.com:6380/0?ssl_password=keypass&ssl_ca_certs=/etc/ca.crt", "keypass"),
        ("rediss://example.com:6380/0?ssl_ca_certs=/etc/ca.crt&PASSWORD=hunter2", "hunter2"),
        ("redis://example.com/0?token=t0k3n&db=1", "t0k3n"),
        ("unix:///run/redis.sock?password=hunter2&db=2", "hunter2"),
    ],
)
def test_mask_url_hides_every_secret_query_argument(url, secret):
    """redis-py passes URL query arguments to its connection: ``ssl_password`` (the client
    key's passphrase) is a secret as much as ``password``."""
    masked = mask_url(url)
    assert secret not in masked and "=***" in masked
    assert masked.split("?", 1)[0] == mask_url(url.split("?", 1)[0]).split("?", 1)[0]
    if "ssl_ca_certs" in url:
        assert "ssl_ca_certs=%2Fetc%2Fca.crt" in masked  # what is not secret stays readable
