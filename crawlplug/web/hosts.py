"""The Host header values a dashboard answers (Starlette's TrustedHostMiddleware): the
loopback names, the address it binds, and the names an operator allows (``--allow-host``,
``CRAWLPLUG_DASHBOARD_HOSTS``). Anything else gets 400: DNS rebinding (docs/security.md)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from ..errors import ConfigError

__all__ = ["LOOPBACK_HOSTS", "allowed_hosts", "host_pattern"]

#: Host header values a dashboard answers by default: this machine's loopback names.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
#: Addresses that bind every interface: they name no host a browser would send.
_WILDCARDS = ("0.0.0.0", "::", "[::]", "")


def host_pattern(host: str) -> str:
    """``host`` as TrustedHostMiddleware matches it: lower case, an IPv6 address in brackets.

    Accepts a name, an address, ``*.example.com`` or ``*`` (any host: the check off);
    :class:`ConfigError` for what a Host header cannot hold (a port, a path, spaces).
    """
    text = host.strip().lower()
    bare = text.strip("[]")
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        address = None
    if address is not None:
        return f"[{address}]" if address.version == 6 else str(address)
    if text == "*":
        return text
    name = text.removeprefix("*.")
    if not name or any(c in name for c in ":/[]@ *\t") or name.startswith(".") or name.endswith(".."):
        raise ConfigError(
            f"{host!r} is not a host name for the dashboard's allowed hosts (a name, an address, "
            "*.example.com or *; no port, no scheme)"
        )
    return text


def allowed_hosts(bind: str | None = None, extra: Iterable[str] = ()) -> list[str]:
    """The Host header values a dashboard bound to ``bind`` answers: the loopback names, the
    bound address unless it binds every interface (0.0.0.0), and ``extra`` (real hostnames)."""
    hosts = list(LOOPBACK_HOSTS)
    if bind is not None and bind.strip() not in _WILDCARDS:
        hosts.append(host_pattern(bind))
    hosts += [host_pattern(h) for h in extra]
    return list(dict.fromkeys(hosts))
