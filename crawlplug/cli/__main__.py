"""``python -m crawlplug.cli``: the ``crawlplug`` command."""

from __future__ import annotations

from . import main

main()
