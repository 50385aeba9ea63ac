"""``crawlplug.legacy.ScrapyRedisDupeFilter``: a dotted path users put in settings
(docs/migrating.md). The code lives in :mod:`crawlplug.compat.legacy`."""

from __future__ import annotations

from .compat.legacy import ScrapyRedisDupeFilter

__all__ = ["ScrapyRedisDupeFilter"]
