"""Render docs/settings.md from :mod:`crawlplug.defaults` (``make docs``)."""

from __future__ import annotations

import sys

from ..defaults import SETTINGS

HEADER = """# Settings reference

Generated from `crawlplug/defaults.py` by `make docs`; a test checks that the
two agree. Set them like any Scrapy setting (`settings.py`, `custom_settings`,
or `-s NAME=value`). The add-on never overrides a value your project sets.
A node warns once at start about a `CRAWLPLUG_*` setting it does not know, or a
near miss of a scrapy-redis setting it reads, naming the closest real one
(`CRAWLPLUG_LEASE_TIMOUT is not a crawlplug setting and is ignored: did you mean
CRAWLPLUG_LEASE_TIMEOUT?`).

| setting | default | meaning |
|---|---|---|
"""


def render() -> str:
    rows = []
    for name, (value, text) in SETTINGS.items():
        shown = "unset" if value is None else f"`{value!r}`"
        escaped = text.replace("|", "\\|")
        rows.append(f"| `{name}` | {shown} | {escaped} |")
    return HEADER + "\n".join(rows) + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
