"""The URLs of a site its crawls fetched last: what the site studio tries a definition on.

Each node of a site spider keeps, per site, the last pages it parsed (URL, step, when,
crawl) in memory, at most :data:`KEPT` of them, and every time it checks Redis for a new
definition (``CRAWLPLUG_SITES_REFRESH`` seconds) sends the ones met since in one round
trip: ``LPUSH`` then ``LTRIM`` of ``<prefix>:sites:recent:<site>``, a list of JSON entries,
newest first, the last :data:`KEPT` over every node and every crawl of the site (a
definition describes a site, not one crawl of it). URLs only, never the pages: a trial
fetches them again (``crawlplug sites try NAME --recent N``, the console's Sites page).
Losing a push (Redis down) loses a sample, nothing else: the next one comes a refresh
later.
"""

from __future__ import annotations

import json
import time
from collections import deque
from typing import Any
from urllib.parse import urlsplit

import redis

from ..frontier.store import text

__all__ = ["KEPT", "Recent", "recent_key", "recent_urls"]

#: How many URLs a site keeps (per node in memory, and in Redis).
KEPT = 50


def recent_key(site: str, prefix: str = "crawlplug") -> str:
    """The list of a site's recent URLs. Not hash-tagged: it is one key, read alone."""
    return f"{prefix}:sites:recent:{site}"


class Recent:
    """One node's recent pages per site, sent to Redis by :meth:`push`."""

    def __init__(self, crawl: str, prefix: str = "crawlplug", kept: int = KEPT) -> None:
        self.crawl, self.prefix, self.kept = crawl, prefix, kept
        self._new: dict[str, deque[tuple[str, str, float]]] = {}

    def saw(self, site: str, url: str, step: str) -> None:
        """A page of ``site`` of step ``step`` was parsed (on every page: a tuple kept, the JSON
        made at the push, for the last :attr:`kept` only)."""
        new = self._new.get(site)
        if new is None:
            new = self._new[site] = deque(maxlen=self.kept)
        new.append((url, step, time.time()))

    def push(self, client: redis.Redis) -> int:
        """Send the pages met since the last push (one round trip); the number sent. Raises
        the client's errors, having kept nothing back (the next push sends newer ones)."""
        new, self._new = self._new, {}
        if not new:
            return 0
        pipe = client.pipeline(transaction=False)
        for site, pages in new.items():
            key = recent_key(site, self.prefix)
            entries = [
                json.dumps({"url": url, "step": step, "at": round(at, 1), "crawl": self.crawl})
                for url, step, at in pages
            ]
            pipe.lpush(key, *entries)
            pipe.ltrim(key, 0, self.kept - 1)
        pipe.execute()
        return sum(len(e) for e in new.values())


def recent_urls(client: redis.Redis, site: str, n: int = KEPT, prefix: str = "crawlplug") -> list[dict[str, Any]]:
    """The last ``n`` distinct URLs of ``site``, newest first: {"url", "step", "at", "crawl"};
    an entry that is not one (written by hand), or whose URL is not http(s), is skipped, and a
    key of another type holds none."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    try:
        raws = client.lrange(recent_key(site, prefix), 0, -1)
    except redis.ResponseError:  # WRONGTYPE: not a list
        return out
    for raw in raws:
        try:
            entry = json.loads(text(raw))
        except ValueError:
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("url"), str) or entry["url"] in seen:
            continue
        if urlsplit(entry["url"]).scheme not in ("http", "https"):
            continue
        seen.add(entry["url"])
        out.append(
            {
                "url": entry["url"],
                "step": str(entry.get("step") or ""),
                "at": entry.get("at"),
                "crawl": entry.get("crawl"),
            }
        )
        if len(out) >= n:
            break
    return out
