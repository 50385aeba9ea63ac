"""Who is calling the console's API, and whether they may: FastAPI dependencies.

A caller is a console user (crawlplug.access.users): by ``Authorization: Bearer <token>``
(scripts, the CLI of another machine), or by the session cookie a page got when it logged
in with that token (``POST /api/v1/session``). A request that changes something on a
cookie session must carry the session's CSRF token in ``X-CSRF-Token`` (a page reads it
from the ``crawlplug_csrf`` cookie, which the session's own cookie is not readable beside:
a page of another site can make the browser send the cookies, not read them). A token in
the header needs no CSRF token: no browser adds it by itself.

No credentials: 401. A user whose role lacks the permission a route names: 403. A console
started with ``read_open`` lets anyone who reaches it read (``read``), as the dashboard of
one crawl always has.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass

import redis
from fastapi import HTTPException, Request

from ..access import users
from ..access.users import User

__all__ = ["CSRF_COOKIE", "SESSION_COOKIE", "Access", "need"]

SESSION_COOKIE = "crawlplug_session"
CSRF_COOKIE = "crawlplug_csrf"
_SAFE = {"GET", "HEAD", "OPTIONS"}


@dataclass
class Access:
    """How the console authenticates: its Redis, the admin token of CRAWLPLUG_DASHBOARD_TOKEN,
    whether reads are open to anyone who reaches it."""

    client: redis.Redis
    admin_token: str | None = None
    read_open: bool = False
    prefix: str = "crawlplug"

    def caller(self, request: Request) -> User | None:
        """The user a request comes from (its address as ``source``), or None."""
        source = request.client.host if request.client else "?"
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token:
            found = users.authenticate(self.client, token.strip(), admin_token=self.admin_token, prefix=self.prefix)
            if found is None:
                raise HTTPException(401, "the token is nobody's (revoked, or mistyped)")
            return User(found.name, found.role, source)
        session = request.cookies.get(SESSION_COOKIE)
        if session:
            got = users.session_user(self.client, session, prefix=self.prefix)
            if got is None:
                raise HTTPException(401, "the session ended: log in again")
            user, csrf = got
            if request.method not in _SAFE:
                sent = request.headers.get("x-csrf-token", "")
                if not sent or not hmac.compare_digest(sent.encode(), csrf.encode()):
                    raise HTTPException(403, "a change made with a session cookie needs its X-CSRF-Token header")
            return User(user.name, user.role, source)
        return None


def need(permission: str) -> Callable[[Request], User]:
    """A dependency: the caller, who must have ``permission`` (401 without credentials, 403
    without the permission)."""

    def check(request: Request) -> User:
        access: Access = request.app.state.access
        user = access.caller(request)
        if user is None:
            if permission == "read" and access.read_open:
                return User("anonymous", "viewer", request.client.host if request.client else "?")
            raise HTTPException(
                401,
                "log in: Authorization: Bearer <token> (`crawlplug users add NAME --role ROLE` makes one)",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not user.may(permission):
            raise HTTPException(403, f"user {user.name!r} ({user.role}) may not {users.PERMISSIONS[permission]}")
        return user

    check.permission = permission  # type: ignore[attr-defined]  # read by tests and the route table
    return check
