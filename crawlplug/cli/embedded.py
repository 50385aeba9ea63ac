"""``crawlplug embedded start|stop|url``: the embedded Redis of the Scrapy project (.crawlplug/)."""

from __future__ import annotations

from pathlib import Path

import click
import redis

from ..server import embedded
from .common import embedded_dir, fail, friendly_errors, main


@main.group("embedded")
def embedded_group() -> None:
    """The project's embedded Redis (under .crawlplug/ by default)."""


def _embedded_url(directory: Path) -> str | None:
    sock = embedded.socket_path(directory.resolve())
    if not sock.exists():
        return None
    client = redis.Redis(unix_socket_path=str(sock), socket_timeout=2, socket_connect_timeout=2)
    try:
        return f"unix://{sock}" if client.ping() else None
    except redis.RedisError:
        return None
    finally:
        client.close()


@embedded_group.command("start")
@friendly_errors
def embedded_start() -> None:
    """Start it unless it runs; print its URL."""
    directory = embedded_dir()
    try:
        click.echo(embedded.ensure(directory))
    except OSError as exc:
        fail(f"could not start the embedded Redis in {directory}: {exc}")


@embedded_group.command("stop")
@friendly_errors
def embedded_stop() -> None:
    """Shut it down (its data is saved in the project's .crawlplug/)."""
    directory = embedded_dir()
    if embedded.stop(directory):
        click.echo(f"Stopped the embedded Redis of {directory}.")
    else:
        click.echo(f"The embedded Redis of {directory} was not running.")


@embedded_group.command("url")
def embedded_url() -> None:
    """Print its URL (exit 1 if it is not running)."""
    directory = embedded_dir()
    url = _embedded_url(directory)
    if url is None:
        fail(f"the embedded Redis of {directory} is not running; `crawlplug embedded start` starts it")
    click.echo(url)
