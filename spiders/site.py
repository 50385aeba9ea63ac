"""A spider driven by a site definition instead of code (:mod:`crawlplug.sites.spider`).

    scrapy crawl site -a site=shop -a base_url=http://127.0.0.1:8000
    crawlplug sites put spiders/sites/cars.yaml     # or store it in Redis: all nodes use it

The definition of ``-a site=NAME`` comes from Redis (``crawlplug sites put``),
else from ``spiders/sites/NAME.yaml`` (``CRAWLPLUG_SITES_DIR``). The format, and
the two worked definitions in ``spiders/sites/``, are explained in docs/sites.md.
"""

from __future__ import annotations

from crawlplug.sites.spider import SiteSpider as _SiteSpider


class SiteSpider(_SiteSpider):
    name = "site"
