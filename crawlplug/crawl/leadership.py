"""A crawl's leader for one duty: a lease in Redis with a fencing token (``lua/leader.lua``).

Several control processes (and dashboards, for alerts) may run; for each crawl and each
duty one of them leads. The leader holds a lease in the crawl's ``leader`` key
(``alertleader`` for the alerts duty), renewed while it runs, and a **fencing token**,
one more than the leader's before it (``fence``, ``alertfence``). The duty's writes go
through scripts that refuse them unless the writer still holds the lease with that token
(crawlplug.schedules.store's firings, crawlplug.alerts.store's rule states), so a leader
that stalled past its lease and was replaced writes nothing when it wakes.
"""

from __future__ import annotations

import redis

from ..frontier.keys import CrawlKeys
from ..frontier.scripts import Scripts
from ..frontier.store import text

__all__ = ["DUTIES", "Leadership"]

#: the duties led this way, each with its lease and fencing token keys
DUTIES = ("schedules", "alerts")


class Leadership:
    """One process's leadership of one crawl's ``duty`` (``lua/leader.lua``).

    ``duty`` is ``"schedules"`` (the ``leader`` and ``fence`` keys) or ``"alerts"`` (the
    ``alertleader`` and ``alertfence`` keys), each led apart, so a dashboard evaluating alert
    rules never takes the schedules from a control process.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: CrawlKeys,
        owner: str,
        lease_ms: int,
        scripts: Scripts | None = None,
        duty: str = "schedules",
    ) -> None:
        self.client = client
        self.keys = keys
        self.duty = duty
        if duty == "schedules":
            self.leader_key, self.fence_key = keys.leader, keys.fence
        elif duty == "alerts":
            self.leader_key, self.fence_key = keys.alertleader, keys.alertfence
        else:
            raise ValueError(f"no duty {duty!r}: schedules or alerts")
        self.owner = owner
        self.lease_ms = lease_ms
        self.scripts = scripts or Scripts(client)
        #: the fencing token of the current leadership (0: not the leader)
        self.fence = 0
        #: who leads when this process does not
        self.holder = ""

    def hold(self) -> str:
        """Become or stay the leader: "acquired", "renewed", or "held" (by ``holder``)."""
        fence, what, holder = self.scripts.leader(
            keys=[self.leader_key, self.fence_key], args=[self.owner, self.lease_ms, "hold"]
        )
        self.fence, self.holder = int(fence), text(holder)
        return text(what)

    def release(self) -> None:
        """Step down (a control process that stops lets another take over at once)."""
        self.scripts.leader(keys=[self.leader_key, self.fence_key], args=[self.owner, self.lease_ms, "release"])
        self.fence = 0
