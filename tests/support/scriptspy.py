"""A Frontier's registered scripts with its ``admit.lua`` calls recorded (and sent again).

A test wraps ``frontier.scripts`` to see the admission script's raw replies (a Bloom
filter's STALE or PARTIAL, the fused admit-and-pop's pair), or to send each admission
twice, dropping the first reply: a call whose reply was lost (the connection reset after
the script ran), sent again as redis-py's retry sends it, with the same keys and arguments.
Every other script passes through untouched.
"""

from __future__ import annotations

from typing import Any


class AdmitSpy:
    """``frontier.scripts = AdmitSpy(frontier.scripts)``; ``replies`` holds every raw reply
    of admit.lua, in order; ``sends=2`` sends each call twice (both replies recorded, the
    second returned)."""

    def __init__(self, scripts: Any, sends: int = 1) -> None:
        self._scripts = scripts
        self.sends = sends
        self.replies: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._scripts, name)
        if name == "run_many":
            return self._run_many
        if name != "admit":
            return target

        def admit_script(*args: Any, **kwargs: Any) -> Any:
            for _ in range(self.sends):
                self.replies.append(target(*args, **kwargs))
            return self.replies[-1]

        return admit_script

    def _run_many(self, calls: list[tuple[str, list[Any], list[Any]]]) -> list[Any]:
        """The frontier's calls of one round trip, each admission through the spy."""
        out: list[Any] = []
        for name, keys, args in calls:
            if name != "admit":
                out += self._scripts.run_many([(name, keys, args)])
                continue
            try:
                out.append(self.admit(keys=keys, args=args))
            except Exception as exc:  # noqa: BLE001 - run_many answers errors as values
                out.append(exc)
        return out
