"""How long the tests wait for something to happen: each wait's timeout times
``CRAWLPLUG_TEST_PATIENCE`` (default 1). A wait returns as soon as what it waits for
happens, so patience costs nothing on a test that passes; it is for a loaded machine
(the suite on several workers, ``make test``), where a node takes longer to start and a
crawl longer to reach a point, and a timeout would fail a test that is right."""

from __future__ import annotations

import os


def _patience() -> float:
    try:
        value = float(os.environ.get("CRAWLPLUG_TEST_PATIENCE") or 1)
    except ValueError:
        return 1.0
    return value if value >= 1 else 1.0


PATIENCE = _patience()


def patient(seconds: float) -> float:
    """``seconds`` of waiting, at this run's patience."""
    return seconds * PATIENCE
