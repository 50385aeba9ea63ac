"""Each node's last WARNING-and-above log records, kept in Redis for the operators.

A node's log lives on its own machine (or in its Scrapyd job's log file); an operator
watching a crawl from the console or the CLI wants what went wrong on any node without
logging in to it. :class:`~crawlplug.nodelog.node.NodeLog` (an extension the add-on
enables) keeps the records of level WARNING and above the node's process logs, and sends
the new ones on the heartbeat's timer, in a round trip of their own only when there are
any (a node with nothing to say costs nothing). :mod:`~crawlplug.nodelog.store` owns the
key, ``node:<node id>:log`` (a list, the oldest first, under ``node:`` so a purge deletes
it): bounded in count (``CRAWLPLUG_NODE_LOG``, 200 by default; 0 keeps none) and in
bytes (a record's text is cut at :data:`~crawlplug.nodelog.store.MAX_TEXT` characters), and
kept an hour after its last record, as the node's metrics are. The console's
``/api/v1/crawls/{crawl}/nodes/{node}/log`` and ``crawlplug logs`` read it, with a summary
by level and by logger.
"""

from .store import Record, read, summary

__all__ = ["Record", "read", "summary"]
