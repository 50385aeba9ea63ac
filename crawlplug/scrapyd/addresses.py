"""Whether a host names this machine only, in every spelling an address has.

``crawlplug start`` must not hand daemons on other machines a Redis at an address that, on
each of them, means itself. Such an address has many spellings besides ``127.0.0.1``: the
short and numeric forms ``inet_aton`` (and so every resolver) reads (``127.1``,
``2130706433``, ``0x7f000001``, ``0177.0.0.1``), the unspecified addresses a connection
to which reaches the machine itself (``0.0.0.0``, ``::``), IPv4 addresses mapped into IPv6
(``::ffff:127.0.0.1``, which ``ipaddress`` does not call loopback on Python 3.11), and the
names ``localhost`` and ``*.localhost``. :func:`local_address` reads them all.

A host *name* is another matter: it may resolve to loopback on this machine and to the
machine's network address on the others (Debian maps the machine's own name to 127.0.1.1
in ``/etc/hosts``), so :func:`resolves_here_to_loopback` only says what it resolves to
here, for a warning, never a refusal.
"""

from __future__ import annotations

import ipaddress
import re
import socket

__all__ = ["is_loopback_host", "local_address", "resolves_here_to_loopback"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Names that are this machine wherever they are resolved.
LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
#: What inet_aton reads as an IPv4 address: one to four numbers (decimal, octal 0..., hex 0x...).
_INET_ATON = re.compile(r"[0-9][0-9a-fA-FxX]{0,11}(?:\.[0-9][0-9a-fA-FxX]{0,11}){0,3}")
#: "This host on this network" (RFC 1122): a connection to one reaches the machine itself.
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")


def _address(name: str) -> Address | None:
    """``name`` as an IP address in any numeric spelling, or None if it is a name."""
    try:
        return ipaddress.ip_address(name.split("%", 1)[0])  # an IPv6 zone (fe80::1%eth0) changes nothing here
    except ValueError:
        pass
    if _INET_ATON.fullmatch(name):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(name))
        except (OSError, ValueError):
            return None
    return None


def _is_local(address: Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback or address.is_unspecified:
        return True
    return isinstance(address, ipaddress.IPv4Address) and address in _THIS_NETWORK


def local_address(host: str) -> str | None:
    """What ``host`` is when it names this machine only, written plainly (``127.0.0.1 (loopback)``,
    ``0.0.0.0 (unspecified)``, ``localhost``), or None. Names are not resolved."""
    name = host.strip().strip("[]").rstrip(".").lower()
    if name in LOCAL_NAMES or name.endswith(".localhost"):
        return "localhost"
    address = _address(name)
    if address is None or not _is_local(address):
        return None
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    plain = mapped or address
    unspecified = plain.is_unspecified or (isinstance(plain, ipaddress.IPv4Address) and plain in _THIS_NETWORK)
    return f"{plain} ({'unspecified' if unspecified else 'loopback'})"


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` names this machine only (:func:`local_address`). Names are not resolved:
    any other name is taken as another machine."""
    return local_address(host) is not None


def resolves_here_to_loopback(host: str) -> list[str]:
    """The addresses host *name* ``host`` resolves to on this machine when every one of them is
    this machine only (``['127.0.1.1']``), else ``[]`` (an address, a name that does not resolve
    here or that resolves to a network address)."""
    name = host.strip().strip("[]")
    if not name or _address(name.lower()) is not None or local_address(name) is not None:
        return []
    try:
        found = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []
    addresses = sorted({str(info[4][0]) for info in found})
    if addresses and all(local_address(a) is not None for a in addresses):
        return addresses
    return []
