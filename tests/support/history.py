"""The real ``lua/history.lua`` with Redis's clock replaced by a time the test gives, so
a test writes a day or a month of the history in a second. Only the line that reads
the clock differs from what the nodes send (checked: the replacement must happen)."""

from __future__ import annotations

from typing import Any

import redis

from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.luatext import source
from crawlplug.history import store as history

CLOCK_LINE = "local now = redis_now_ms()"


class HistoryAt:
    """``sample(keys, at_ms)``: history.lua's sample of part ``keys`` as if Redis's clock said ``at_ms``."""

    def __init__(self, client: redis.Redis) -> None:
        text = source("history")
        assert text.count(CLOCK_LINE) == 1, "history.lua reads the clock elsewhere: update tests/support/history.py"
        # the time rides as the argument before the epoch; the script's own stay where they are
        # the keys' expiries are durations until a deadline, from the script's clock (PEXPIRE):
        # here from Redis's real one, as a deadline in the past (a sample of long ago) expires at once
        expiries = ("keep_minutes - now)", "keep_hours - now)")
        assert all(text.count(e) == 1 for e in expiries), "history.lua sets its expiries elsewhere: update me"
        for e in expiries:
            text = text.replace(e, e.replace("- now)", "- redis_now_ms())"))
        self.script = client.register_script(text.replace(CLOCK_LINE, "local now = tonumber(ARGV[#ARGV - 1])"))
        self.client = client

    def call(self, keys: CrawlKeys, at_ms: int, pipe: Any = None, run: int | None = None) -> Any:
        _, names, args = history.sample_call(keys, at_ms, "", run)
        return self.script(keys=names, args=[*args[:-1], at_ms, args[-1]], client=pipe or self.client)

    def sample(
        self,
        keys: CrawlKeys,
        at_ms: int,
        *,
        run: int | None = None,
        acked: int = 0,
        enqueued: int = 0,
        items: int = 0,
        errors: int = 0,
        queued: int = 0,
    ) -> None:
        """Set the run's counters and queue to these values, then sample at ``at_ms``."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(keys.stats, mapping={"acked": acked, "enqueued": enqueued, "items": items, "errors": errors})
        pipe.delete(keys.queue)
        if queued:
            pipe.zadd(keys.queue, {f"{i:016d}": 0 for i in range(queued)})
        pipe.execute()
        assert list(self.call(keys, at_ms, run=run)) == [at_ms, 1]
