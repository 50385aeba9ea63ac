"""The console's users: named tokens with a role, stored hashed in Redis.

A user is a name, a role and a token. The token is made here (32 random bytes, URL-safe)
and shown once, when the user is added; Redis keeps only its SHA-256 (a random token of
256 bits needs no slow hash: there is nothing to guess from). Keys, beside every crawl's
(``<prefix>:...``, no crawl's hash tag: the users are the console's, over every crawl):

* ``<prefix>:users`` hash: name -> JSON {role, created_ms, by};
* ``<prefix>:tokens`` hash: SHA-256 of a token (hex) -> name.

Roles, each allowed what the one before it is, and more (:data:`ROLES`):

* ``viewer``: read every crawl;
* ``operator``: start nodes on Scrapyd, pause, resume, stop, drain, continue, limits, a new
  run, per-domain limits, push start URLs, seeds, dead letters, try a site definition,
  schedules, alert rules;
* ``site-editor``: an operator who may also store site definitions;
* ``admin``: everything, users, forget and purge included.

``CRAWLPLUG_DASHBOARD_TOKEN`` (the dashboard's one token before users existed) is an
admin named ``token``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass

import redis

from ..errors import ConfigError
from ..frontier.store import multi, redis_ms, text

__all__ = [
    "PERMISSIONS",
    "ROLES",
    "SESSION_TTL",
    "TOKEN_USER",
    "User",
    "add",
    "authenticate",
    "close_session",
    "may",
    "open_session",
    "revoke",
    "session_user",
    "users",
    "users_key",
]

#: What each permission lets a user do (the API's routes each name one).
PERMISSIONS = {
    "read": "read every crawl: status, runs, history, reports, nodes, dead letters, schedules, alerts, sites, audit",
    "run": "pause, resume, stop, drain, continue, limits, a new run, per-domain limits",
    "start": "start nodes on Scrapyd daemons",
    "push": "push start URLs, seeds",
    "dead": "requeue and drop dead letters",
    "schedules": "add and delete schedules",
    "alerts": "add and delete alert rules, send a test notification",
    "sites.try": "try a site definition on a URL (fetches it from the console's machine)",
    "sites.put": "store site definitions",
    "forget": "forget URLs' fingerprints",
    "purge": "delete every key of a crawl",
    "users": "add and revoke users",
}

_OPERATOR = {"read", "run", "start", "push", "dead", "schedules", "alerts", "sites.try"}
#: role -> the permissions it has
ROLES: dict[str, frozenset[str]] = {
    "viewer": frozenset({"read"}),
    "operator": frozenset(_OPERATOR),
    "site-editor": frozenset(_OPERATOR | {"sites.put"}),
    "admin": frozenset(PERMISSIONS),
}

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
#: the user CRAWLPLUG_DASHBOARD_TOKEN stands for
TOKEN_USER = "token"


@dataclass(frozen=True)
class User:
    """Who called: a user's name and role (``source``: where from, for the audit log)."""

    name: str
    role: str
    source: str = ""

    def may(self, permission: str) -> bool:
        return may(self.role, permission)


def may(role: str, permission: str) -> bool:
    """Whether ``role`` has ``permission``."""
    return permission in ROLES.get(role, frozenset())


def users_key(prefix: str = "crawlplug") -> str:
    return f"{prefix}:users"


def _tokens_key(prefix: str) -> str:
    return f"{prefix}:tokens"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def add(client: redis.Redis, name: str, role: str, *, by: str, prefix: str = "crawlplug") -> str:
    """Add user ``name`` with ``role`` (replacing one of that name and its token); its token,
    shown once. ConfigError for a name or role that is not one."""
    if not NAME_RE.match(name) or name == TOKEN_USER:
        raise ConfigError(
            f"user name {name!r}: letters, digits and _ . @ -, at most 64, not {TOKEN_USER!r} (CRAWLPLUG_DASHBOARD_TOKEN's)"
        )
    if role not in ROLES:
        raise ConfigError(f"role {role!r} is none of {', '.join(ROLES)}")
    token = f"cp_{secrets.token_urlsafe(32)}"
    record = {"role": role, "created_ms": redis_ms(client), "by": by}
    pipe = multi(client)  # the users and their tokens: two slots on a cluster
    for digest, who in client.hgetall(_tokens_key(prefix)).items():
        if text(who) == name:
            pipe.hdel(_tokens_key(prefix), digest)  # the old token stops working with the new one
    pipe.hset(users_key(prefix), name, json.dumps(record, separators=(",", ":")))
    pipe.hset(_tokens_key(prefix), _digest(token), name)
    pipe.execute()
    return token


def users(client: redis.Redis, prefix: str = "crawlplug") -> list[dict[str, object]]:
    """Every user: name, role, when added and by whom (never a token)."""
    out = []
    for name, raw in sorted(client.hgetall(users_key(prefix)).items()):
        try:
            record = json.loads(raw)
        except ValueError:
            record = {"role": None, "unreadable": text(raw)[:100]}
        out.append({"name": text(name), **(record if isinstance(record, dict) else {"role": None})})
    return out


def revoke(client: redis.Redis, name: str, prefix: str = "crawlplug") -> bool:
    """Remove user ``name`` and its token; False if there was none."""
    pipe = multi(client)
    for digest, who in client.hgetall(_tokens_key(prefix)).items():
        if text(who) == name:
            pipe.hdel(_tokens_key(prefix), digest)
    pipe.hdel(users_key(prefix), name)
    return bool(pipe.execute()[-1])


def authenticate(
    client: redis.Redis, token: str, *, admin_token: str | None = None, prefix: str = "crawlplug"
) -> User | None:
    """The user ``token`` belongs to (CRAWLPLUG_DASHBOARD_TOKEN's ``admin_token``: the
    admin ``token``); None if it is nobody's."""
    if not token:
        return None
    if admin_token and hmac.compare_digest(token.encode(), admin_token.encode()):
        return User(TOKEN_USER, "admin")
    name = client.hget(_tokens_key(prefix), _digest(token))
    if name is None:
        return None
    raw = client.hget(users_key(prefix), name)
    try:
        role = json.loads(raw)["role"] if raw is not None else None
    except (ValueError, KeyError, TypeError):
        role = None
    return User(text(name), role) if role in ROLES else None


# -- cookie sessions (the console's pages) ---------------------------------------------------

#: How long a session lasts without use (seconds).
SESSION_TTL = 12 * 3600


def _session_key(prefix: str, session: str) -> str:
    return f"{prefix}:session:{_digest(session)}"


def open_session(client: redis.Redis, user: User, *, prefix: str = "crawlplug") -> tuple[str, str]:
    """A session for ``user`` (logged in with its token): (session id, its CSRF token). Redis
    keeps the id's SHA-256 only, with the user's name, role and the CSRF token, for
    :data:`SESSION_TTL` seconds from its last use."""
    session, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(24)
    key = _session_key(prefix, session)
    pipe = client.pipeline(transaction=True)
    pipe.hset(key, mapping={"name": user.name, "role": user.role, "csrf": csrf})
    pipe.expire(key, SESSION_TTL)
    pipe.execute()
    return session, csrf


def session_user(client: redis.Redis, session: str, *, prefix: str = "crawlplug") -> tuple[User, str] | None:
    """(the user, the CSRF token) of a live session, its life renewed; None if there is none.
    A user revoked (or whose role changed) since it logged in is looked up again: a session
    of a user that no longer exists is closed."""
    if not session:
        return None
    key = _session_key(prefix, session)
    found = client.hgetall(key)
    if not found:
        return None
    name = text(found.get(b"name", b""))
    if name != TOKEN_USER:
        raw = client.hget(users_key(prefix), name)
        try:
            role = json.loads(raw)["role"] if raw is not None else None
        except (ValueError, KeyError, TypeError):
            role = None
        if role not in ROLES:
            client.delete(key)
            return None
    else:
        role = text(found.get(b"role", b""))
    client.expire(key, SESSION_TTL)
    return User(name, str(role)), text(found.get(b"csrf", b""))


def close_session(client: redis.Redis, session: str, *, prefix: str = "crawlplug") -> bool:
    return bool(client.delete(_session_key(prefix, session)))
