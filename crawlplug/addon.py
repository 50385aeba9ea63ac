"""The Scrapy add-on: ``ADDONS = {"crawlplug.Addon": 0}`` turns crawlplug on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.utils.misc import load_object

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

#: What the add-on sets, at "addon" priority (a project's own settings win).
ADDON_SETTINGS = {
    "SCHEDULER": "crawlplug.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "crawlplug.dupefilters.RedisSetDupeFilter",
    # each node's Scrapy stats in Redis, and the crawl's: `crawlplug report`, null_rate alerts, the
    # dashboard's per-node numbers; one stats.lua call per node every CRAWLPLUG_STATS_INTERVAL s
    "STATS_CLASS": "crawlplug.stats.RedisStatsCollector",
}


#: Components the add-on adds: (setting, class path, order); a project disables one by
#: setting it to None in that setting, under this path, its old one (``crawlplug.domainstats.
#: DomainStatsMiddleware``, kept as a re-export) or the class itself: the add-on compares classes.
ADDON_COMPONENTS = (
    # crawl-wide error counts with sample URLs (the dashboard's errors page): next to the engine,
    # beside domainstats, so both count the failures of crawlplug.failures once retries are done
    ("DOWNLOADER_MIDDLEWARES", "crawlplug.probes.errorsamples.ErrorSamplesMiddleware", 26),
    # pages, items, errors and download time per host, as Scrapy stats (crawlplug report); next
    # to the engine, so it sees what is left of a request once retries and redirects are done
    ("DOWNLOADER_MIDDLEWARES", "crawlplug.probes.domainstats.DomainStatsMiddleware", 25),
    # drops the links of pages leased before the crawl was reset under a live node (crawlplug.crawl.runs)
    ("SPIDER_MIDDLEWARES", "crawlplug.scheduler.staleoutput.StaleOutputMiddleware", 10),
    # the start URLs of Scrapy's default start() fetched once a run, not once per node start
    ("SPIDER_MIDDLEWARES", "crawlplug.scheduler.startonce.StartOnceMiddleware", 20),
    # a node started through Scrapyd records its job (on only with CRAWLPLUG_SCRAPYD_JOB: crawlplug start)
    ("EXTENSIONS", "crawlplug.scrapyd.node.ScrapydJob", 500),
    # the node's own /metrics (on only with CRAWLPLUG_METRICS_PORT; crawlplug.metrics.exporter)
    ("EXTENSIONS", "crawlplug.metrics.node.NodeMetrics", 510),
    # alert rules declared in the settings, stored at start (on only with CRAWLPLUG_ALERTS)
    ("EXTENSIONS", "crawlplug.alerts.declared.SettingsRules", 520),
    # the node's WARNING-and-above log records, kept in Redis for the console and `crawlplug logs`
    # (off with CRAWLPLUG_NODE_LOG = 0)
    ("EXTENSIONS", "crawlplug.nodelog.node.NodeLog", 530),
)


class Addon:
    """Swap Scrapy's in-memory scheduler, dupefilter and stats collector for crawlplug's."""

    def __repr__(self) -> str:
        # Scrapy's "Enabled addons:" line prints the add-on objects: the name a project writes
        return "crawlplug.Addon"

    def update_settings(self, settings: BaseSettings) -> None:
        for name, value in ADDON_SETTINGS.items():
            settings.set(name, value, priority="addon")
        for setting_name, path, order in ADDON_COMPONENTS:
            # the class, not its path: Scrapy compares it with every entry the project wrote, by the
            # class each loads, so that a project's None under any path of it keeps it off (given the
            # path, Scrapy compared a class with a string and wrote the add-on's order over the None)
            settings.setdefault_in_component_priority_dict(setting_name, load_object(path), order)
