"""The Scrapy add-on: ADDONS = {"crawlplug.Addon": 0} turns crawlplug on, below project settings."""

from __future__ import annotations

import subprocess
import sys

import pytest
from scrapy import Spider
from scrapy.settings import SETTINGS_PRIORITIES, Settings
from scrapy.utils.conf import build_component_list
from scrapy.utils.misc import load_object
from scrapy.utils.test import get_crawler

from crawlplug import Addon
from crawlplug.addon import ADDON_COMPONENTS, ADDON_SETTINGS
from crawlplug.probes.domainstats import DomainStatsMiddleware
from crawlplug.scrapyd.node import ScrapydJob

ADDONS = {"ADDONS": {"crawlplug.Addon": 0}}


def test_addon_turns_crawlplug_on():
    # get_crawler() runs Crawler._apply_settings(), which loads the add-ons
    crawler = get_crawler(settings_dict=dict(ADDONS))
    s = crawler.settings
    assert s["SCHEDULER"] == "crawlplug.scheduler.Scheduler"
    assert s["DUPEFILTER_CLASS"] == "crawlplug.dupefilters.RedisSetDupeFilter"
    assert s.getpriority("SCHEDULER") == SETTINGS_PRIORITIES["addon"]
    assert s.getpriority("DUPEFILTER_CLASS") == SETTINGS_PRIORITIES["addon"]
    assert isinstance(crawler.get_addon(Addon), Addon)


def test_addon_keeps_the_stats_in_redis_unless_the_project_names_a_collector():
    """Reports, alerts and the dashboard's per-node numbers read the stats the nodes keep in
    Redis: the add-on line alone turns the collector on; a project's own STATS_CLASS wins."""
    s = get_crawler(settings_dict=dict(ADDONS)).settings
    assert s["STATS_CLASS"] == "crawlplug.stats.RedisStatsCollector"
    assert s.getpriority("STATS_CLASS") == SETTINGS_PRIORITIES["addon"]
    own = get_crawler(settings_dict={**ADDONS, "STATS_CLASS": "scrapy.statscollectors.MemoryStatsCollector"})
    assert own.settings["STATS_CLASS"] == "scrapy.statscollectors.MemoryStatsCollector"
    assert repr(Addon()) == "crawlplug.Addon", "Scrapy's 'Enabled addons:' line prints it"


def test_addon_by_class_object():
    crawler = get_crawler(settings_dict={"ADDONS": {Addon: 0}})
    assert crawler.settings["SCHEDULER"] == "crawlplug.scheduler.Scheduler"


def test_without_addon_scrapy_defaults_stay():
    s = get_crawler(settings_dict={}).settings
    assert s["SCHEDULER"] not in ADDON_SETTINGS.values()
    assert s["DUPEFILTER_CLASS"] not in ADDON_SETTINGS.values()


def test_project_settings_win_over_the_addon():
    crawler = get_crawler(settings_dict={**ADDONS, "SCHEDULER": "x.y"})
    s = crawler.settings
    assert s["SCHEDULER"] == "x.y"
    assert s.getpriority("SCHEDULER") == SETTINGS_PRIORITIES["project"]
    # what the project did not set still comes from the add-on
    assert s["DUPEFILTER_CLASS"] == "crawlplug.dupefilters.RedisSetDupeFilter"


def test_project_dupefilter_wins_over_the_addon():
    crawler = get_crawler(settings_dict={**ADDONS, "DUPEFILTER_CLASS": "scrapy.dupefilters.BaseDupeFilter"})
    assert crawler.settings["DUPEFILTER_CLASS"] == "scrapy.dupefilters.BaseDupeFilter"
    assert crawler.settings["SCHEDULER"] == "crawlplug.scheduler.Scheduler"


def test_spider_custom_settings_win_over_the_addon():
    class OwnScheduler(Spider):
        name = "own"
        custom_settings = {"SCHEDULER": "spider.Scheduler"}

    crawler = get_crawler(OwnScheduler, settings_dict=dict(ADDONS))
    assert crawler.settings["SCHEDULER"] == "spider.Scheduler"
    assert crawler.settings["DUPEFILTER_CLASS"] == "crawlplug.dupefilters.RedisSetDupeFilter"


def test_update_settings_directly():
    settings = Settings()
    settings.set("SCHEDULER", "x.y", priority="project")
    Addon().update_settings(settings)
    assert settings["SCHEDULER"] == "x.y"
    assert settings["DUPEFILTER_CLASS"] == "crawlplug.dupefilters.RedisSetDupeFilter"
    assert settings.getpriority("DUPEFILTER_CLASS") == SETTINGS_PRIORITIES["addon"]


def _enabled(settings: Settings, name: str) -> list[type]:
    """The classes Scrapy builds from the component setting ``name``, in order (None is off)."""
    return [load_object(c) for c in build_component_list(settings.getwithbase(name))]


def test_the_addon_enables_each_of_its_components_once():
    s = get_crawler(settings_dict=dict(ADDONS)).settings
    for setting_name, path, _order in ADDON_COMPONENTS:
        assert _enabled(s, setting_name).count(load_object(path)) == 1, path


@pytest.mark.parametrize(
    ("setting_name", "written", "cls"),
    [
        ("DOWNLOADER_MIDDLEWARES", "crawlplug.probes.domainstats.DomainStatsMiddleware", DomainStatsMiddleware),
        ("DOWNLOADER_MIDDLEWARES", "crawlplug.domainstats.DomainStatsMiddleware", DomainStatsMiddleware),
        ("DOWNLOADER_MIDDLEWARES", DomainStatsMiddleware, DomainStatsMiddleware),
        ("EXTENSIONS", "crawlplug.scrapydjob.ScrapydJob", ScrapydJob),
        ("EXTENSIONS", "crawlplug.scrapyd.node.ScrapydJob", ScrapydJob),
    ],
)
def test_a_project_turns_a_component_of_the_addon_off_under_any_of_its_paths(setting_name, written, cls):
    """``{path: None}`` in a project's settings keeps the add-on's component off, whether the
    project names its path, its path before issue 38 moved it, or the class: the add-on
    compares classes (given a path, Scrapy compared a class with a string and the add-on's
    order replaced the project's None)."""
    s = get_crawler(settings_dict={**ADDONS, setting_name: {written: None}}).settings
    assert cls not in _enabled(s, setting_name)
    others = [load_object(p) for name, p, _ in ADDON_COMPONENTS if name == setting_name and load_object(p) is not cls]
    assert set(others) <= set(_enabled(s, setting_name)), "the other components stay on"


def test_a_project_moves_a_component_of_the_addon_under_its_old_path():
    """A project's own order, written under the old path, is the one order the component runs at."""
    s = get_crawler(
        settings_dict={**ADDONS, "DOWNLOADER_MIDDLEWARES": {"crawlplug.domainstats.DomainStatsMiddleware": 990}}
    ).settings
    enabled = _enabled(s, "DOWNLOADER_MIDDLEWARES")
    assert enabled.count(DomainStatsMiddleware) == 1
    assert enabled[-1] is DomainStatsMiddleware, "990 is after every default downloader middleware"


@pytest.mark.integration  # a fresh interpreter: this session has imported everything already
def test_the_components_of_features_left_off_load_none_of_their_libraries():
    """Scrapy loads every component the add-on adds, used or not: the alert rules' grammar (lark)
    and the metrics server (prometheus_client) are read only by a node that asks for them."""
    code = (
        "import sys\n"
        "from scrapy.utils.misc import load_object\n"
        "from crawlplug.addon import ADDON_COMPONENTS\n"
        "for _, path, _ in ADDON_COMPONENTS: load_object(path)\n"
        "print(sorted(m for m in ('lark', 'prometheus_client', 'crawlplug.alerts.rules', 'crawlplug.metrics.exporter')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
