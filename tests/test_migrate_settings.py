"""scrapy-redis's settings, honoured where crawlplug's own are unset (docs/migrating.md)."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from urllib.parse import urlsplit

import pytest
from scrapy import Spider
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from crawlplug.compat import names
from crawlplug.config import SchedulerConfig, setting
from crawlplug.errors import ConfigError
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.pipelines import RedisItemPipeline
from crawlplug.queues import FifoQueue, LifoQueue, PriorityQueue, load_queue_class
from crawlplug.scheduler.core import Scheduler
from crawlplug.server.clients import check, from_settings, server_settings
from crawlplug.spiders import RedisSpider
from crawlplug.stats import RedisStatsCollector

ADDON = {"ADDONS": {"crawlplug.Addon": 0}}

# -- the scheduler's settings ---------------------------------------------------------------


def test_scheduler_flush_on_start_is_crawlplugs_when_unset():
    assert setting(Settings({"SCHEDULER_FLUSH_ON_START": True}), "CRAWLPLUG_FLUSH_ON_START", "getbool") is True
    assert setting(Settings({"SCHEDULER_FLUSH_ON_START": "False"}), "CRAWLPLUG_FLUSH_ON_START", "getbool") is False
    assert SchedulerConfig.from_settings(Settings({"SCHEDULER_FLUSH_ON_START": True})).flush_on_start
    own = Settings({"SCHEDULER_FLUSH_ON_START": True, "CRAWLPLUG_FLUSH_ON_START": False})
    assert SchedulerConfig.from_settings(own).flush_on_start is False
    assert SchedulerConfig.from_settings(Settings()).flush_on_start is False


def test_scheduler_idle_before_close_positive_is_the_idle_grace():
    assert SchedulerConfig.from_settings(Settings({"SCHEDULER_IDLE_BEFORE_CLOSE": 7})).idle_close == 7
    assert SchedulerConfig.from_settings(Settings({"SCHEDULER_IDLE_BEFORE_CLOSE": "2.5"})).idle_close == 2.5
    # scrapy-redis's 0 ("do not wait") is not crawlplug's 0 ("never close"): the default stays
    default = SchedulerConfig().idle_close
    assert SchedulerConfig.from_settings(Settings({"SCHEDULER_IDLE_BEFORE_CLOSE": 0})).idle_close == default
    own = Settings({"SCHEDULER_IDLE_BEFORE_CLOSE": 7, "CRAWLPLUG_IDLE_CLOSE": 0})
    assert SchedulerConfig.from_settings(own).idle_close == 0
    with pytest.raises(ConfigError, match="SCHEDULER_IDLE_BEFORE_CLOSE must not be negative"):
        SchedulerConfig.from_settings(Settings({"SCHEDULER_IDLE_BEFORE_CLOSE": -1}))
    with pytest.raises(ConfigError, match="SCHEDULER_IDLE_BEFORE_CLOSE must be a number"):
        SchedulerConfig.from_settings(Settings({"SCHEDULER_IDLE_BEFORE_CLOSE": "soon"}))


@pytest.mark.parametrize(
    ("path", "queue"),
    [
        ("scrapy_redis.queue.PriorityQueue", PriorityQueue),
        ("scrapy_redis.queue.FifoQueue", FifoQueue),
        ("scrapy_redis.queue.LifoQueue", LifoQueue),
        ("scrapy_redis.queue.SpiderPriorityQueue", PriorityQueue),
        ("scrapy_redis.queue.SpiderQueue", FifoQueue),
        ("scrapy_redis.queue.SpiderStack", LifoQueue),
        ("crawlplug.queues.LifoQueue", LifoQueue),
    ],
)
def test_scheduler_queue_class_maps_to_crawlplugs_queue(path, queue):
    s = Settings({"SCHEDULER_QUEUE_CLASS": path})
    assert load_queue_class(setting(s, "CRAWLPLUG_QUEUE_CLASS")) is queue
    # the real scheduler, built as Scrapy builds it (no Redis is touched by from_crawler)
    crawler = get_crawler(settings_dict={**ADDON, "SCHEDULER_QUEUE_CLASS": path})
    assert type(Scheduler.from_crawler(crawler).queue) is queue


def test_crawlplug_queue_class_wins_and_a_foreign_queue_is_refused():
    s = Settings(
        {"SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.LifoQueue", "CRAWLPLUG_QUEUE_CLASS": "crawlplug.queues.FifoQueue"}
    )
    assert load_queue_class(setting(s, "CRAWLPLUG_QUEUE_CLASS")) is FifoQueue
    with pytest.raises(ConfigError, match="SCHEDULER_QUEUE_CLASS='myproject.queues.Custom'.*CRAWLPLUG_QUEUE_CLASS"):
        setting(Settings({"SCHEDULER_QUEUE_CLASS": "myproject.queues.Custom"}), "CRAWLPLUG_QUEUE_CLASS")


def test_deliberate_differences_are_logged_once(caplog):
    names._noted.clear()
    s = Settings(
        {
            "SCHEDULER_PERSIST": False,
            "SCHEDULER_QUEUE_KEY": "proj:%(spider)s:requests",
            "SCHEDULER_SERIALIZER": "scrapy_redis.picklecompat",
        }
    )
    with caplog.at_level(logging.INFO, logger="crawlplug"):
        SchedulerConfig.from_settings(s)
        SchedulerConfig.from_settings(s)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("SCHEDULER_PERSIST=False" in m for m in messages) == 1, messages
    assert sum("SCHEDULER_QUEUE_KEY='proj:%(spider)s:requests'" in m for m in messages) == 1
    assert any("SCHEDULER_SERIALIZER" in m for m in messages)
    # nothing to say for scrapy-redis's defaults, for SCHEDULER_PERSIST=True, or with a crawl id
    quiet = Settings({"SCHEDULER_PERSIST": True, "SCHEDULER_QUEUE_KEY": "%(spider)s:requests"})
    assert names.scrapy_redis_notes(quiet) == []
    named = Settings({"SCHEDULER_QUEUE_KEY": "proj:%(spider)s:requests", "CRAWLPLUG_CRAWL_ID": "proj-shop"})
    assert names.scrapy_redis_notes(named) == []


# -- the connection ----------------------------------------------------------------------------


def test_redis_host_port_db_name_the_server():
    assert server_settings(Settings({"REDIS_HOST": "redis.internal"}))[0] == "redis://redis.internal:6379/0"
    assert server_settings(Settings({"REDIS_PORT": 7000}))[0] == "redis://localhost:7000/0"
    url, _ = server_settings(Settings({"REDIS_HOST": "10.0.0.5", "REDIS_PORT": "6380", "REDIS_DB": 2}))
    assert url == "redis://10.0.0.5:6380/2"
    assert server_settings(Settings({"REDIS_HOST": "::1"}))[0] == "redis://[::1]:6379/0"
    assert server_settings(Settings())[0] is None, "nothing named: the embedded Redis"


def test_redis_url_wins_and_settings_win_over_redis_params():
    url, params = server_settings(Settings({"REDIS_URL": "redis://a:1/0", "REDIS_HOST": "b"}))
    assert url == "redis://a:1/0" and "host" not in params
    s = Settings({"REDIS_PARAMS": {"host": "p", "port": 2, "password": "pw", "socket_timeout": 3}, "REDIS_HOST": "h"})
    url, params = server_settings(s)
    assert url == "redis://h:2/0"
    assert params == {"password": "pw", "socket_timeout": 3}
    assert server_settings(Settings({"REDIS_PARAMS": {"url": "redis://u:9/1"}}))[0] == "redis://u:9/1"
    url, params = server_settings(Settings({"REDIS_URL": "redis://a:1", "REDIS_DB": 4}))
    assert (url, params["db"]) == ("redis://a:1", 4)


def test_scrapy_redis_only_params_are_dropped_and_encoding_is_passed(caplog):
    s = Settings(
        {
            "REDIS_PARAMS": {"redis_cls": "redis.StrictRedis", "decode_responses": True, "retry_on_timeout": True},
            "REDIS_ENCODING": "latin-1",
        }
    )
    with caplog.at_level(logging.WARNING):
        _, params = server_settings(s)
    assert params == {"retry_on_timeout": True, "encoding": "latin-1"}
    with pytest.raises(ConfigError, match="REDIS_ENCODING"):
        server_settings(Settings({"REDIS_ENCODING": "no-such-codec"}))
    with pytest.raises(ConfigError, match="REDIS_PORT"):
        server_settings(Settings({"REDIS_PORT": "http"}))


def test_redis_host_and_port_reach_the_real_server(redis_url, r):
    parts = urlsplit(redis_url)
    conn = from_settings(Settings({"REDIS_HOST": parts.hostname, "REDIS_PORT": parts.port, "REDIS_DB": 3}))
    assert not conn.embedded
    check(conn)
    conn.client.set("where", "db3")
    assert r.get("where") is None  # the test client is on database 0
    assert conn.client.connection_pool.connection_kwargs["db"] == 3
    conn.client.delete("where")
    conn.client.close()


# -- RedisSpider -------------------------------------------------------------------------------


class _Idle(RedisSpider):
    name = "idle"


class _IdleAttr(RedisSpider):
    name = "idleattr"
    max_idle_time = 9


def test_redis_spider_max_idle_time_before_close():
    assert get_crawler(_Idle, settings_dict={}).settings.getfloat("CRAWLPLUG_IDLE_CLOSE") == 0, "a worker"
    s = get_crawler(_Idle, settings_dict={"MAX_IDLE_TIME_BEFORE_CLOSE": 30}).settings
    assert s.getfloat("CRAWLPLUG_IDLE_CLOSE") == 30
    s = get_crawler(_IdleAttr, settings_dict={"MAX_IDLE_TIME_BEFORE_CLOSE": 30}).settings
    assert s.getfloat("CRAWLPLUG_IDLE_CLOSE") == 9, "the spider's max_idle_time first, as scrapy-redis"
    s = get_crawler(_IdleAttr, settings_dict={"CRAWLPLUG_IDLE_CLOSE": 4}).settings
    assert s.getfloat("CRAWLPLUG_IDLE_CLOSE") == 4
    with pytest.raises(ConfigError, match="MAX_IDLE_TIME_BEFORE_CLOSE"):
        get_crawler(_Idle, settings_dict={"MAX_IDLE_TIME_BEFORE_CLOSE": -3})


class _Encoded(RedisSpider):
    name = "encoded"

    def parse(self, response):
        pass


def test_redis_spider_decodes_start_entries_with_redis_encoding():
    crawler = get_crawler(_Encoded, settings_dict={"REDIS_ENCODING": "latin-1"})
    spider = _Encoded.from_crawler(crawler)
    (request,) = [spider.make_request_from_data("http://example.com/caf\xe9".encode("latin-1"))]
    assert request.url == "http://example.com/caf%C3%A9"
    plain = _Encoded.from_crawler(get_crawler(_Encoded, settings_dict={}))
    assert plain.make_request_from_data("http://example.com/café".encode()).url == "http://example.com/caf%C3%A9"


# -- stats and items ---------------------------------------------------------------------------


def test_stats_key_keeps_a_scrapy_redis_style_copy_of_the_crawl_stats(r):
    crawler = get_crawler(settings_dict={"STATS_DUMP": False, "STATS_KEY": "%(spider)s:stats"})
    stats = RedisStatsCollector(crawler)
    stats.bind(r, CrawlKeys("statskey"), "node-a")
    stats.mirror_key = stats.mirror_template % {"spider": "statskey"}  # what open_spider does
    r.hset("statskey:stats", "left_by_scrapy_redis", 1)
    start = datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc)
    stats.set_value("start_time", start)
    stats.inc_value("response_received_count", 3)
    stats.set_value("finish_reason", "finished")
    assert stats.flush()
    copy = {k.decode(): v.decode() for k, v in r.hgetall("statskey:stats").items()}
    assert copy == {"start_time": str(start.timestamp()), "response_received_count": "3", "finish_reason": "finished"}
    stats.inc_value("response_received_count")
    assert stats.flush()
    assert r.hget("statskey:stats", "response_received_count") == b"4"
    assert get_crawler(settings_dict={}).settings.get("STATS_KEY") is None  # no copy unless asked


def test_redis_items_key_names_the_items_list():
    class Shop(Spider):
        name = "shop"

    pipeline = RedisItemPipeline.from_crawler(get_crawler(settings_dict={"REDIS_ITEMS_KEY": "%(spider)s:items"}))
    assert pipeline.key_for(CrawlKeys("shop"), Shop.name) == "shop:items"
