"""Hypothesis for the tests: its cache kept out of the work tree, and damaged copies of
valid bytes (payloads a hostile or broken writer left in Redis)."""

from __future__ import annotations

import os
import tempfile

from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

# keep hypothesis' caches out of the work tree
set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "crawlplug-hypothesis"))

#: ``make test-fast`` runs a tenth of each property test's examples (CRAWLPLUG_FUZZ_SCALE=0.1);
#: ``make test`` and CI run them all
SCALE = float(os.environ.get("CRAWLPLUG_FUZZ_SCALE", "1"))


def examples(n: int) -> int:
    """How many examples a property test written for ``n`` runs here (at least 10)."""
    return max(10, round(n * SCALE))


@st.composite
def mutated(draw, data: bytes) -> bytes:
    """``data`` with one to four bytes flipped, deleted or inserted."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(out) - 1))
        action = draw(st.sampled_from(["flip", "delete", "insert"]))
        if action == "flip":
            out[pos] = draw(st.integers(0, 255))
        elif action == "delete":
            del out[pos]
        else:
            out.insert(pos, draw(st.integers(0, 255)))
    return bytes(out)
