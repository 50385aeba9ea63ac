"""``crawlplug users add|list|revoke``: the console's users (crawlplug.access.users).

crawlplug users add alice --role operator    # prints alice's token, once
crawlplug users list [--json]
crawlplug users revoke alice
"""

from __future__ import annotations

import json

import click

from ..access import audit, users
from ..errors import ConfigError
from .common import Target, fail, main, pass_cli, when


@main.group("users")
def users_group() -> None:
    """The console's users: named tokens with a role (viewer, operator, site-editor, admin)."""


@users_group.command("add")
@pass_cli(crawl_option=False)
@click.argument("name")
@click.option("--role", required=True, type=click.Choice(list(users.ROLES)), help="What the user may do.")
def users_add(target: Target, name: str, role: str) -> None:
    """Add user NAME (replacing one of that name, whose old token stops working); print its
    token on standard output, shown this once (Redis keeps only its SHA-256)."""
    who = audit.cli_user()
    try:
        token = users.add(target.client, name, role, by=who.name)
    except ConfigError as exc:
        fail(str(exc))
    audit.record(target.client, who, "users.add", "", {"user": name, "role": role})
    # the token alone on standard output (TOKEN=$(crawlplug users add ...)); the rest on standard error
    click.echo(f"user {name!r} ({role}) on {target.safe_url}; its token, shown this once:", err=True)
    click.echo(token)
    click.echo(f"  it may: {', '.join(sorted(users.ROLES[role]))}", err=True)


@users_group.command("list")
@pass_cli(crawl_option=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def users_list(target: Target, as_json: bool) -> None:
    """Every user: name, role, when added and by whom (never a token)."""
    rows = users.users(target.client)
    if as_json:
        click.echo(json.dumps({"users": rows}, indent=2))
        return
    click.echo(f"{len(rows)} users on {target.safe_url}")
    for row in rows:
        created = row.get("created_ms")
        click.echo(
            f"  {row['name']}  {row.get('role')}  added {when(created) if isinstance(created, int) else '?'} by {row.get('by')}"
        )


@users_group.command("revoke")
@pass_cli(crawl_option=False)
@click.argument("name")
def users_revoke(target: Target, name: str) -> None:
    """Remove user NAME: its token stops working at once, its sessions at their next request."""
    if not users.revoke(target.client, name):
        fail(f"no user {name!r} on {target.safe_url}")
    audit.record(target.client, audit.cli_user(), "users.revoke", "", {"user": name})
    click.echo(f"revoked user {name!r}")
