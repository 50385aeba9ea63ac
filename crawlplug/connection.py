"""``crawlplug.connection``: the path scripts (bench/ among them) import Redis clients from.
The code lives in :mod:`crawlplug.server.clients`."""

from __future__ import annotations

from .server.clients import Connection, check, client_from_url, from_settings, mask_url, server_settings, validate_url

__all__ = ["Connection", "check", "client_from_url", "from_settings", "mask_url", "server_settings", "validate_url"]
