"""Misspelt settings are named at start, not silently ignored (a real `scrapy crawl` node)."""

from __future__ import annotations

import re

import pytest
from scrapy.settings import Settings

import crawlplug
from crawlplug.config import misspelt_settings

MISSPELT = {
    "CRAWLPLUG_LEASE_TIMOUT": "CRAWLPLUG_LEASE_TIMEOUT",
    "CRAWLPLUG_FLUSH_ON_STRAT": "CRAWLPLUG_FLUSH_ON_START",
    "SCHEDULER_IDLE_BEFOR_CLOSE": "SCHEDULER_IDLE_BEFORE_CLOSE",  # scrapy-redis's name, read by crawlplug
}
#: set too, and must not be reported: Scrapy's own, a project's own, scrapy-redis's real ones
NOT_REPORTED = {
    "DOWNLOAD_TIMEOUT": 30,
    "SCHEDULER_DEBUG": False,
    "MY_PROJECT_API_KEY": "x",
    "REDIS_PASSWORD": "x",
    "SCHEDULER_DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "CRAWLPLUG_LEASE_TIMEOUT": 9,
}


def test_a_node_names_each_misspelt_setting_once(crawl, shop, redis_url, r):
    settings = {"REDIS_URL": redis_url, "CRAWLPLUG_IDLE_CLOSE": 1, **{k: "4" for k in MISSPELT}, **NOT_REPORTED}
    node = crawl(args={"base_url": shop.url}, settings=settings)
    assert node.wait(120) == 0, node.text()[-3000:]
    log = node.text()
    warnings = [line for line in log.splitlines() if "WARNING: crawlplug:" in line and "ignored" in line]
    for name, meant in MISSPELT.items():
        mine = [line for line in warnings if f" {name} " in line]
        assert len(mine) == 1, (name, warnings)
        assert mine[0].endswith(f"did you mean {meant}?"), mine[0]
    assert len(warnings) == len(MISSPELT), warnings
    for name in NOT_REPORTED:
        assert not [line for line in warnings if f" {name} " in line], name
    # the node's first crawlplug INFO line says which crawlplug this is
    first = next(line for line in log.splitlines() if "INFO: crawlplug" in line)
    assert re.search(rf"INFO: crawlplug {re.escape(crawlplug.__version__)}: crawl 'shop' on Redis ", first), first
    # the crawl itself ran as configured (the misspelt names changed nothing)
    assert sum(shop.hits.values()) == len(shop.shop.paths())
    # and, by default, with the objects made at start frozen out of the collector's sweeps
    frozen = re.search(r"'crawlplug/gc_frozen_objects': (\d+)", log)
    assert frozen and int(frozen.group(1)) > 50_000, "CRAWLPLUG_GC_FREEZE is on in a real node"


def test_names_crawlplug_does_not_know_and_those_it_leaves_alone():
    s = Settings()
    s.setdict(
        {
            **{k: 1 for k in MISSPELT},
            **NOT_REPORTED,
            "CRAWLPLUG_NO_SUCH_THING": 1,
            "CRAWLPLUG_CRAWL": "shop",
            "REDIS_ULR": "redis://x",
        }
    )
    found = {name: meant for name, meant, _ in misspelt_settings(s)}
    assert found == {
        **MISSPELT,
        "CRAWLPLUG_NO_SUCH_THING": None,
        "CRAWLPLUG_CRAWL": "CRAWLPLUG_CRAWL_ID",
        "REDIS_ULR": "REDIS_URL",
    }
    assert misspelt_settings(Settings()) == [], "Scrapy's defaults alone are never reported"


@pytest.mark.parametrize("bad", ["abc", "0", "-2", "1.5"])
def test_a_run_id_that_is_none_is_refused_naming_the_setting(bad):
    from crawlplug.config.read import SchedulerConfig
    from crawlplug.errors import ConfigError

    with pytest.raises(ConfigError, match="CRAWLPLUG_FOR_RUN must be a run id"):
        SchedulerConfig.from_settings(Settings({"CRAWLPLUG_FOR_RUN": bad}))
    assert SchedulerConfig.from_settings(Settings({"CRAWLPLUG_FOR_RUN": "3"})).for_run == 3


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("CRAWLPLUG_GC_FREEZE", "sometimes", "CRAWLPLUG_GC_FREEZE: 'sometimes' is not a valid value"),
        ("CRAWLPLUG_ASYNC_CALLS", "sometimes", "CRAWLPLUG_ASYNC_CALLS must be auto, on or off"),
        ("CRAWLPLUG_HEARTBEAT", "-1", "CRAWLPLUG_HEARTBEAT must be positive"),
        ("CRAWLPLUG_HEARTBEAT", "often", "CRAWLPLUG_HEARTBEAT: 'often' is not a valid value"),
    ],
)
def test_a_scheduler_setting_crawlplug_cannot_read_stops_the_node_in_one_line(
    crawl, shop, redis_url, r, name, value, said
):
    """A real node: one ERROR line naming the setting, no traceback, finish reason config_error,
    and nothing written to the crawl."""
    node = crawl(args={"base_url": shop.url}, settings={"REDIS_URL": redis_url, name: value})
    assert node.wait(120) != 0
    text = node.text()
    errors = [line for line in text.splitlines() if " ERROR: " in line]
    assert len(errors) == 1 and said in errors[0], text[-2000:]
    assert "Traceback" not in text
    assert "'finish_reason': 'config_error'" in text
    assert not r.keys("shop*") and sum(shop.hits.values()) == 0
