"""Settings of the crawlplug demo project (scrapy.cfg points here).

The one line that turns crawlplug on is ``ADDONS``; everything else is an
ordinary Scrapy setting. With no ``REDIS_URL`` the crawl uses the embedded
Redis kept under ``.crawlplug/``; set ``REDIS_URL`` (or pass
``-s REDIS_URL=redis://host:6379/0``) to share a crawl between machines.
"""

BOT_NAME = "crawlplug_demo"
SPIDER_MODULES = ["spiders"]
NEWSPIDER_MODULE = "spiders"

ADDONS = {"crawlplug.Addon": 0}

ROBOTSTXT_OBEY = False
CONCURRENT_REQUESTS = 16
CONCURRENT_REQUESTS_PER_DOMAIN = 16
DOWNLOAD_DELAY = 0
TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "INFO"
FEED_EXPORT_ENCODING = "utf-8"

# Site definitions (spiders/sites/*.yaml) may name these item pipeline steps, and only these:
# a definition stored in Redis names code the nodes import, so the nodes list what it may be
CRAWLPLUG_SITE_PIPELINES = ["spiders.sitesteps.AddSite"]
