"""Tests only: shift this process's wall clock by ``CRAWLPLUG_TEST_CLOCK_SHIFT`` seconds.

A node started with this directory first on ``PYTHONPATH`` imports this module
at interpreter start-up (Python's ``sitecustomize`` hook), before Scrapy,
Twisted or crawlplug, so every ``time.time()``, ``time.time_ns()`` and
``datetime.now()`` it makes reads a clock that is off by the shift, as on a
machine whose clock is wrong. ``time.monotonic()`` is left alone (it measures
intervals, not the time of day). Without root or libfaketime.

``CRAWLPLUG_TEST_CLOCK_MARK`` names a file this module writes once the shift
is in place, so a test knows the node really ran on the shifted clock.
"""

from __future__ import annotations

import os

_SHIFT = float(os.environ.get("CRAWLPLUG_TEST_CLOCK_SHIFT") or 0)

if _SHIFT:
    import datetime as _datetime
    import time as _time

    _real_time, _real_time_ns = _time.time, _time.time_ns
    _delta = _datetime.timedelta(seconds=_SHIFT)

    def _shifted_time() -> float:
        return _real_time() + _SHIFT

    def _shifted_time_ns() -> int:
        return _real_time_ns() + int(_SHIFT * 1_000_000_000)

    class _ShiftedDatetime(_datetime.datetime):
        """datetime whose now(), utcnow() and today() read the shifted clock."""

        @classmethod
        def now(cls, tz=None):  # type: ignore[no-untyped-def]
            return super().now(tz) + _delta

        @classmethod
        def utcnow(cls):  # type: ignore[no-untyped-def]
            return super().utcnow() + _delta

        @classmethod
        def today(cls):  # type: ignore[no-untyped-def]
            return super().today() + _delta

    _time.time = _shifted_time
    _time.time_ns = _shifted_time_ns
    _datetime.datetime = _ShiftedDatetime  # type: ignore[misc]

    _mark = os.environ.get("CRAWLPLUG_TEST_CLOCK_MARK")
    if _mark:
        with open(_mark, "a") as _fh:
            _fh.write(f"{os.getpid()} {_SHIFT:+g}\n")
