"""CRAWLPLUG_GC_FREEZE: the objects alive when a node's Scheduler opens are left out of
the garbage collector's sweeps until it closes (crawlplug.scheduler.gcfreeze), with a
real Scheduler over a real Redis and CPython's own collector."""

from __future__ import annotations

import gc
import weakref

import pytest
from scrapy.settings import Settings

from crawlplug.config import SchedulerConfig
from crawlplug.errors import ConfigError

from .support.engine import open_scheduler


class Node:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def cyclic_garbage() -> weakref.ref[Node]:
    node = Node()
    ref = weakref.ref(node)
    del node
    return ref


def test_what_is_alive_at_open_is_frozen_until_close_then_given_back(redis_url):
    assert gc.get_freeze_count() == 0
    holder = [Node()]  # alive when the node opens
    with open_scheduler(redis_url) as (scheduler, _):
        assert scheduler._frozen
        assert gc.get_freeze_count() > 10_000, "the modules, the crawler and its components"
        assert scheduler.crawler.stats.get_value("crawlplug/gc_frozen_objects") > 10_000, "said in the stats"
        before = weakref.ref(holder.pop())  # now a garbage cycle, frozen
        gc.collect()
        assert before() is not None, "a full collection does not sweep what was alive at open"
        during = cyclic_garbage()  # made during the crawl: swept as usual
        gc.collect()
        assert during() is None
    assert gc.get_freeze_count() == 0, "close gives every frozen object back to the collector"
    gc.collect()
    assert before() is None, "and nothing frozen outlives the node's close"


def test_the_last_of_two_schedulers_in_a_process_to_close_unfreezes(redis_url):
    with open_scheduler(redis_url) as _:
        with open_scheduler(redis_url, CRAWLPLUG_CRAWL_ID="other") as _:
            assert gc.get_freeze_count() > 0
        assert gc.get_freeze_count() > 0, "the first crawler is still running"
    assert gc.get_freeze_count() == 0


def test_false_leaves_the_collector_alone(redis_url):
    garbage = cyclic_garbage()
    with open_scheduler(redis_url, CRAWLPLUG_GC_FREEZE=False) as (scheduler, _):
        assert not scheduler._frozen and gc.get_freeze_count() == 0
        gc.collect()
        assert garbage() is None


def test_a_value_that_is_not_a_bool_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"CRAWLPLUG_GC_FREEZE: 'sometimes' is not a valid value"):
        SchedulerConfig.from_settings(Settings({"CRAWLPLUG_GC_FREEZE": "sometimes"}))
