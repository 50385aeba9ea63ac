"""Keep what a node made before its crawl began out of the garbage collector's sweeps.

A crawling node allocates and drops objects all the time (requests, responses, Deferreds,
asyncio handles), so CPython's collector runs a full collection every few hundred pages.
A full collection traverses every container object the process tracks, and most of them
were made at start and live until the end: Scrapy's, Twisted's, redis-py's and crawlplug's
modules, classes and functions, the crawler and its components (about 110,000 objects in
the demo project's node). On the demo shop at 64 concurrent requests those sweeps cost
about a quarter of the node's CPU (docs/scaling.md, "The garbage collector").

:func:`hold` calls :func:`gc.freeze` once the Scheduler has opened: the objects alive then
move to the collector's permanent generation, which no collection traverses. Reference
counting still frees them; only a cycle of them that became garbage waits for
:func:`release`, which the Scheduler's close calls, and which gives them all back to the
oldest generation when the last crawlplug Scheduler of the process closes (a process may
run several crawlers). ``CRAWLPLUG_GC_FREEZE = False`` leaves the collector as it was.
"""

from __future__ import annotations

import gc
import logging

__all__ = ["hold", "release"]

logger = logging.getLogger(__name__)

_held = 0  # crawlplug Schedulers of this process that froze and have not closed


def hold() -> int:
    """Freeze what is alive now (another Scheduler of the process may have frozen before);
    answers how many objects the collector's sweeps now leave out."""
    global _held
    gc.freeze()
    _held += 1
    frozen = gc.get_freeze_count()
    logger.debug(
        "crawlplug: %d objects alive at start are left out of the garbage collector's sweeps (CRAWLPLUG_GC_FREEZE)",
        frozen,
    )
    return frozen


def release() -> None:
    """Undo :func:`hold`: the last Scheduler to close gives the frozen objects back to the collector."""
    global _held
    _held = max(0, _held - 1)
    if _held == 0:
        gc.unfreeze()
