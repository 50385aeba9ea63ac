"""A module that leaves a mark when it is imported: what a payload naming it as code to run
would do to a node that imported it (tests/test_playwright_crawl.py plants such payloads).

Importing it creates the file named by the environment variable ``CRAWLPLUG_TEST_IMPORT_MARKER``
(if set); :func:`init_page`, a scrapy-playwright page init callback, writes a second one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

MARKER_ENV = "CRAWLPLUG_TEST_IMPORT_MARKER"

if os.environ.get(MARKER_ENV):
    Path(os.environ[MARKER_ENV]).touch()


async def init_page(page: Any, request: Any) -> None:
    """A page init callback that says it ran."""
    if os.environ.get(MARKER_ENV):
        Path(os.environ[MARKER_ENV] + ".called").touch()
