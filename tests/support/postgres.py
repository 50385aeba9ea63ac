"""A throwaway PostgreSQL server for the tests that store items in SQL.

The binaries are Debian's (``/usr/lib/postgresql/<version>/bin``, the newest version; not
on PATH there), else ``initdb`` and ``pg_ctl`` on PATH; .ci/run installs Debian's
``postgresql`` package. The cluster lives in a ``tempfile.mkdtemp()`` directory (not pytest's
tmp_path: under root that is mode 0700 and the ``postgres`` user could not enter it). The
server refuses to run as root, so under root every binary runs as ``postgres`` through
``runuser``; as any other user, as that user. It listens on 127.0.0.1 only, on a free port,
trusts every local connection (no password), and skips fsync: it holds nothing worth keeping.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .patience import patient
from .servers import free_port

DEBIAN_BINDIRS = "/usr/lib/postgresql/*/bin"
USER = "postgres"
"""The database superuser, and under root the system user the server runs as."""


def _version_key(bindir: str) -> tuple[int, ...]:
    version = Path(bindir).parent.name  # /usr/lib/postgresql/<version>/bin
    return tuple(int(part) if part.isdigit() else -1 for part in version.split("."))


def find_bindir() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``: Debian's newest
    version, else the one on PATH; None when there is none."""
    debian = [d for d in glob.glob(DEBIAN_BINDIRS) if os.access(os.path.join(d, "initdb"), os.X_OK)]
    if debian:
        return Path(max(debian, key=_version_key))
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl", path=os.path.dirname(initdb)):
        return Path(initdb).parent
    return None


def _is_root() -> bool:
    return os.geteuid() == 0


def _runuser() -> str | None:
    """util-linux's runuser (in /usr/sbin, which a PATH may leave out)."""
    return shutil.which("runuser") or shutil.which("runuser", path="/usr/sbin:/sbin")


def skip_reason() -> str | None:
    """Why no PostgreSQL server can be started here, or None when one can."""
    if importlib.util.find_spec("psycopg") is None or importlib.util.find_spec("sqlalchemy") is None:
        return "no psycopg (v3) or SQLAlchemy in this environment: pip install 'SQLAlchemy>=2' 'psycopg[binary]>=3.1'"
    bindir = find_bindir()
    if bindir is None:
        return (
            f"no PostgreSQL server binaries (initdb, pg_ctl) in {DEBIAN_BINDIRS} or on PATH: "
            "install Debian's postgresql package (.ci/run does, as root)"
        )
    missing = [name for name in ("initdb", "pg_ctl", "postgres") if not (bindir / name).exists()]
    if missing:
        return f"PostgreSQL binaries {', '.join(missing)} missing from {bindir}"
    if _is_root():
        try:
            pwd.getpwnam(USER)
        except KeyError:
            return f"running as root (the server refuses root) and there is no {USER!r} user to run it as"
        if _runuser() is None:
            return f"running as root (the server refuses root) and there is no runuser to run it as {USER!r}"
    return None


@dataclass
class PostgresServer:
    """A PostgreSQL server started for the tests: ``start()``, then ``.url`` (SQLAlchemy's,
    database ``postgres``), ``create_database(name)``, and ``stop()``, which removes its
    directory."""

    port: int = field(default_factory=free_port)
    #: where initdb, pg_ctl and postgres are (default: find_bindir())
    bindir: Path | None = None
    #: the temporary directory: data/ (the cluster), the socket, postgres.log
    directory: Path | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return self.database_url("postgres")

    def database_url(self, name: str) -> str:
        """SQLAlchemy URL of database ``name`` of this server (psycopg 3 driver)."""
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{name}"

    @property
    def log(self) -> str:
        """The server's log so far (for a failure's message)."""
        if self.directory is None:
            return ""
        try:
            return (self.directory / "postgres.log").read_text(errors="replace")
        except OSError:
            return ""

    def _run(self, *args: str, timeout: float = 120) -> None:
        """Run a PostgreSQL binary, as ``postgres`` under root; raise with its output on failure."""
        assert self.bindir is not None and self.directory is not None
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if _is_root():
            cmd = [_runuser() or "runuser", "-u", USER, "--", *cmd]
        done = subprocess.run(
            cmd,
            cwd=self.directory,  # the postgres user may not enter the caller's working directory
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=patient(timeout),
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(cmd)} exited with {done.returncode}:\n{done.stdout}{done.stderr}\n{self.log[-4000:]}"
            )

    def start(self) -> PostgresServer:
        """initdb a fresh cluster and start the server; returns once it accepts connections."""
        reason = skip_reason()
        if reason is not None:
            raise RuntimeError(reason)
        self.bindir = self.bindir or find_bindir()
        self.directory = Path(tempfile.mkdtemp(prefix="crawlplug-pg-"))
        try:
            if _is_root():
                account = pwd.getpwnam(USER)
                os.chown(self.directory, account.pw_uid, account.pw_gid)
            data = self.directory / "data"
            self._run(
                "initdb",
                "-D",
                str(data),
                "-U",
                USER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            )
            # appended as root: the file keeps its owner (postgres)
            with open(data / "postgresql.conf", "a", encoding="utf-8") as conf:
                conf.write(
                    "\n# crawlplug tests (tests/support/postgres.py)\n"
                    f"port = {self.port}\n"
                    "listen_addresses = '127.0.0.1'\n"
                    f"unix_socket_directories = '{self.directory}'\n"
                    "fsync = off\n"
                    "synchronous_commit = off\n"
                    "full_page_writes = off\n"
                )
            with open(data / "pg_hba.conf", "w", encoding="utf-8") as hba:
                hba.write("local all all trust\nhost all all 127.0.0.1/32 trust\n")
            self._run(
                "pg_ctl",
                "start",
                "-D",
                str(data),
                "-l",
                str(self.directory / "postgres.log"),
                "-w",
                "-t",
                str(int(patient(60))),
            )
        except BaseException:
            self.stop()
            raise
        return self

    def create_database(self, name: str) -> str:
        """Create database ``name`` (empty) and return its SQLAlchemy URL."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=USER, dbname="postgres", autocommit=True, connect_timeout=10
        ) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.database_url(name)

    def stop(self) -> None:
        """Stop the server (fast: open sessions are cut off) and remove its directory. Safe
        to call twice, and after a start that failed."""
        directory, self.directory = self.directory, None
        if directory is None:
            return
        try:
            if (directory / "data" / "postmaster.pid").exists():
                self.directory = directory
                try:
                    self._run("pg_ctl", "stop", "-D", str(directory / "data"), "-m", "fast", "-w", timeout=60)
                except (RuntimeError, subprocess.TimeoutExpired):
                    self._run("pg_ctl", "stop", "-D", str(directory / "data"), "-m", "immediate", "-w", timeout=60)
                finally:
                    self.directory = None
        finally:
            shutil.rmtree(directory, ignore_errors=True)
