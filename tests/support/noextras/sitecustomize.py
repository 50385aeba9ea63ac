"""Put on PYTHONPATH by tests/test_extras.py: the optional extras' packages cannot be
imported, as on a machine where only `pip install crawlplug` (no extras) ran."""

import sys

BLOCKED = ("starlette", "uvicorn", "pydantic", "yaml", "scrapy_playwright", "playwright")


class _NoExtras:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {name!r} (blocked: the extras are not installed)")


sys.meta_path.insert(0, _NoExtras())
