"""The audit log: every change made to a crawl or to the console's users, by whom, when and
from where, through the API or the CLI.

A Redis stream, ``<prefix>:audit`` (the console's, over every crawl), capped at about
:data:`KEEP` entries (``XADD MAXLEN ~``); an entry's id is its time on Redis's clock. Fields:
``who`` (a console user's name, or ``cli:<os user>@<host>``), ``role``, ``action`` (the
API's name for it: ``pause``, ``schedules.add``...), ``crawl`` (empty for the users'),
``detail`` (the call's arguments, JSON, secrets left out), ``source`` (the caller's address,
or the host), ``outcome`` (``ok``, or why nothing was done).
"""

from __future__ import annotations

import getpass
import json
import socket
from collections.abc import Mapping

import redis

from ..frontier.store import text
from .users import User

__all__ = ["KEEP", "audit_key", "cli_user", "entries", "record"]

#: About how many entries the log keeps (the oldest go first).
KEEP = 10_000


def audit_key(prefix: str = "crawlplug") -> str:
    return f"{prefix}:audit"


def cli_user() -> User:
    """Who a change made with the CLI is recorded as: the OS user, on this host."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        name = "?"
    host = socket.gethostname()
    return User(f"cli:{name}@{host}", "cli", host)


def record(
    client: redis.Redis,
    who: User,
    action: str,
    crawl: str = "",
    detail: Mapping[str, object] | None = None,
    outcome: str = "ok",
    *,
    prefix: str = "crawlplug",
) -> str:
    """Write one entry; its id."""
    fields = {
        "who": who.name,
        "role": who.role,
        "action": action,
        "crawl": crawl,
        "detail": json.dumps(dict(detail or {}), separators=(",", ":"), sort_keys=True, default=str),
        "source": who.source,
        "outcome": outcome,
    }
    return text(client.xadd(audit_key(prefix), fields, maxlen=KEEP, approximate=True))  # type: ignore[arg-type]


def entries(
    client: redis.Redis, n: int = 100, *, crawl: str | None = None, prefix: str = "crawlplug"
) -> list[dict[str, object]]:
    """The newest ``n`` entries (of ``crawl`` only, if given), newest first."""
    out: list[dict[str, object]] = []
    last = "+"
    while len(out) < n:
        batch = client.xrevrange(audit_key(prefix), max=last, count=max(n, 100))
        if not batch:
            break
        for entry_id, fields in batch:
            eid = text(entry_id)
            if eid == last:
                continue
            row: dict[str, object] = {text(k): text(v) for k, v in fields.items()}
            if crawl is not None and row.get("crawl") != crawl:
                continue
            try:
                row["detail"] = json.loads(str(row.get("detail") or "{}"))
            except ValueError:
                pass
            row["id"] = eid
            row["at_ms"] = int(eid.split("-")[0])
            out.append(row)
            if len(out) >= n:
                break
        last = text(batch[-1][0])
        if len(batch) < max(n, 100):
            break
    return out
