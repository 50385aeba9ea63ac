"""What a script call is on the Python side: ``(name, KEYS, ARGV)`` of one
``crawlplug/frontier/lua/<name>.lua``, and what it answers.

A reply is typed :data:`Reply` (``object``) where it is handed on: its shape is each
script's (its header says it), so the function that reads one states the shape it reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from .keys import CrawlKeys

__all__ = ["Arg", "Call", "Reply", "Sampler"]

#: one ARGV value: redis-py sends bytes as they are, text as UTF-8, numbers as their digits
Arg: TypeAlias = bytes | str | int | float

#: one script call: its name (crawlplug.frontier.scripts.NAMES), KEYS (one crawl's: one hash
#: tag) and ARGV
Call: TypeAlias = tuple[str, list[str], list[Arg]]

#: what a script answered, as redis-py hands it back (integers, bulk strings as bytes, nil,
#: arrays of those), or, from Scripts' pipelined calls, the error the call met (not raised)
Reply: TypeAlias = object

#: what a part samples into the crawl's history with its heartbeat: (its keys, Redis's clock
#: as the node estimates it, the epoch, the run joined) -> the call (crawlplug.history.store's
#: sample_call; handed to the frontier by the node, which knows the history: the frontier
#: does not)
Sampler: TypeAlias = "Callable[[CrawlKeys, int, str, int | None], Call]"
