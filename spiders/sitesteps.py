"""Item pipeline steps that site definitions name (``pipelines:`` in spiders/sites/*.yaml).

A step is an ordinary Scrapy item pipeline class; the site spider's
:class:`crawlplug.sites.spider.SitePipeline` runs the steps a definition lists,
in order, on that site's items only.
"""

from __future__ import annotations

from typing import Any


class AddSite:
    """Adds the name of the item's site as ``item["site"]`` (items of many sites in one store)."""

    def process_item(self, item: Any) -> Any:
        item["site"] = getattr(item, "site", None)
        return item
