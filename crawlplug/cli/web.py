"""``crawlplug console`` (every crawl of a Redis: the HTTP API of :mod:`crawlplug.console`) and
``crawlplug dashboard`` (the same, with one crawl's live dashboard: :mod:`crawlplug.web`)."""

from __future__ import annotations

import errno
import ipaddress
import os
import socket

import click

from ..crawl import registry
from .common import Cli, Target, fail, main, pass_cli

TOKEN_ENVVAR = "CRAWLPLUG_DASHBOARD_TOKEN"
#: Environment variable: more hosts the dashboard answers (comma- or space-separated), as --allow-host.
HOSTS_ENVVAR = "CRAWLPLUG_DASHBOARD_HOSTS"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port``, or a :class:`~crawlplug.cli.common.Fail` that says
    why not (a port in use, an address not of this machine), before anything claims to serve."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        fail(f"cannot serve the dashboard on {host}:{port}: {exc}")
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: not a port in use
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            fail(
                f"port {port} on {host} is already in use (another dashboard?): give another one with "
                "--port N, or --port 0 for any free port"
            )
        fail(f"cannot serve the dashboard on {host}:{port}: {exc.strerror or exc}")
    return sock


def _serving(host: str, port: int, allow_hosts: tuple[str, ...]) -> tuple[list[str], str | None]:
    """(the Host names answered, CRAWLPLUG_DASHBOARD_TOKEN) for a server on ``host``: checked
    before connecting, so a bad name or a short token fails fast."""
    from ..web import allowed_hosts  # noqa: PLC0415 - the [web] extra, checked by the caller

    extra = [*os.environ.get(HOSTS_ENVVAR, "").replace(",", " ").split(), *allow_hosts]
    hosts = allowed_hosts(host, extra)
    token = os.environ.get(TOKEN_ENVVAR) or None
    if token is not None and len(token) < 12:
        fail(f"{TOKEN_ENVVAR} is too short: use at least 12 random characters")
    return hosts, token


def _shown(host: str) -> str:
    return f"[{host.strip('[]')}]" if ":" in host else host


@main.command()
@pass_cli()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (loopback by default; 0.0.0.0 exposes it to your network).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8642,
    show_default=True,
    help="Port to listen on (0: any free port, printed at start).",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Answer requests for this host name too (repeatable; *.example.com allowed; also "
    f"{HOSTS_ENVVAR}). By default only 127.0.0.1, localhost, [::1] and the --host address.",
)
def dashboard(cli: Cli, host: str, port: int, allow_hosts: tuple[str, ...]) -> None:
    """Serve the live dashboard of a crawl (pages, and a JSON API under /api), beside the
    console's API over every crawl (/api/v1: `crawlplug console`).

    Read-only unless CRAWLPLUG_DASHBOARD_TOKEN is set: then pausing, resuming,
    changing a domain's limits and requeueing dead letters need that token (an admin of
    the console's API too; `crawlplug users add` makes others).
    Requests whose Host header names another host get 400 (DNS rebinding):
    --allow-host adds the name you reach it by.
    """
    try:  # the [web] extra: Starlette, FastAPI and uvicorn, only for this command
        import uvicorn  # noqa: PLC0415

        from ..console.app import create_console  # noqa: PLC0415
    except ImportError as exc:
        fail(f"the dashboard needs crawlplug's [web] extra ({exc}): pip install 'crawlplug[web]'")

    hosts, token = _serving(host, port, allow_hosts)
    keys, target = cli.keys, cli.target  # after the checks of its own arguments
    sock = listen(host, port)
    port = sock.getsockname()[1]
    shown = _shown(host)
    link = os.environ.get("CRAWLPLUG_DASHBOARD_URL") or f"http://{shown}:{port}/"
    app = create_console(target, admin_token=token, hosts=hosts, crawl=keys, alerts_link=link)
    mode = "actions need the token" if token else f"read-only (set {TOKEN_ENVVAR} to allow actions)"
    click.echo(f"crawlplug dashboard of crawl {keys.crawl!r} on http://{shown}:{port}/  ({mode})", err=True)
    if not registry.exists(target.client, keys):  # started before the crawl's first node, or misspelt
        click.echo(
            f"note: {registry.unknown_crawl_message(target.client, keys)}: it shows the crawl once "
            "a node (or `crawlplug push`) creates it",
            err=True,
        )
    if "*" in hosts:
        click.echo("warning: --allow-host '*': any Host header is answered (no DNS-rebinding protection)", err=True)
    else:
        click.echo(f"answering Host: {', '.join(hosts)} (others get 400; --allow-host adds one)", err=True)
    if not is_loopback(host):
        click.echo(
            f"warning: {host} is not a loopback address: anyone who can reach it can read the crawl's "
            "state"
            + (
                ", and the token crosses the network in clear text (plain HTTP): put a TLS-terminating proxy in front"
                if token
                else ""
            ),
            err=True,
        )
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


@main.command()
@pass_cli(crawl_option=False)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (loopback by default).")
@click.option("--port", type=click.IntRange(0, 65535), default=8643, show_default=True, help="Port (0: any free port).")
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help=f"Answer requests for this host name too (repeatable; also {HOSTS_ENVVAR}).",
)
@click.option(
    "--read-open",
    is_flag=True,
    help="Anyone who reaches the console may read every crawl without logging in (changes still need a user).",
)
def console(target: Target, host: str, port: int, allow_hosts: tuple[str, ...], read_open: bool) -> None:
    """Serve the console: one HTTP API over every crawl of this Redis (/api/v1, described by
    /api/v1/openapi.json), for users with roles.

    `crawlplug users add NAME --role viewer|operator|site-editor|admin` makes a user and
    prints its token, once; a call sends it as `Authorization: Bearer <token>` (or logs in
    with it: POST /api/v1/session, a cookie and its CSRF token). CRAWLPLUG_DASHBOARD_TOKEN,
    if set, is an admin. Every change goes to the audit log (GET /api/v1/audit).
    """
    try:  # the [web] extra
        import uvicorn  # noqa: PLC0415

        from ..console.app import create_console  # noqa: PLC0415
    except ImportError as exc:
        fail(f"the console needs crawlplug's [web] extra ({exc}): pip install 'crawlplug[web]'")
    hosts, token = _serving(host, port, allow_hosts)
    sock = listen(host, port)
    port = sock.getsockname()[1]
    shown = _shown(host)
    app = create_console(target, admin_token=token, hosts=hosts, read_open=read_open)
    known = len(registry.known_crawls(target.client))
    click.echo(
        f"crawlplug console on http://{shown}:{port}/ over {known} crawl{'s' if known != 1 else ''} of "
        f"{target.safe_url}; API /api/v1 (described at /api/v1/openapi.json)",
        err=True,
    )
    click.echo(
        f"answering Host: {', '.join(hosts)}; reads {'open to anyone who reaches it' if read_open else 'need a user'}",
        err=True,
    )
    if not is_loopback(host):
        click.echo(
            f"warning: {host} is not a loopback address: tokens cross the network in clear text (plain "
            "HTTP): put a TLS-terminating proxy in front",
            err=True,
        )
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
