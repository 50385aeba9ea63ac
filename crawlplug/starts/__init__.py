"""Start entries, where a crawl begins: the entry format operators push into a crawl's
``start_urls`` (:mod:`.entry`: parse, check, build the request) and seeds, the entries
pushed again on a schedule (:mod:`.seeds`).

``crawlplug.starts.parse`` and ``build`` are the names a spider's own
``make_request_from_data`` may call (docs/security.md); they are :mod:`.entry`'s.
"""

from __future__ import annotations

from .entry import KNOWN_KEYS, MAX_ENTRY_BYTES, StartEntry, build, checked_lines, near_miss, parse, to_line

__all__ = ["KNOWN_KEYS", "MAX_ENTRY_BYTES", "StartEntry", "build", "checked_lines", "near_miss", "parse", "to_line"]
