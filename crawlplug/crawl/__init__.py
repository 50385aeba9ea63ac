"""The control plane of a crawl: its runs and epochs (``runs``), pause and the switches,
stop, drain and limits (``control``), the registry of nodes with the one live-node rule
(``nodes``), start entries pushed, the dead letters read, requeued and dropped, status
and totals for readers (:class:`Crawl`, ``views``), a run begun by an operator
(``newrun``), export and import of a whole crawl (``transfer``).

It sits above the data plane (crawlplug.frontier: admit, lease, ack, reap), whose key
names and scripts it uses, and knows nothing of Scrapy's engine either.
"""

from __future__ import annotations

from .crawl import Crawl, part_status

__all__ = ["Crawl", "part_status"]
