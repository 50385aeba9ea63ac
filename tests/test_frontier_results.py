"""What a frontier call found comes back in its result (crawlplug.frontier.results), for
the single frontier and the sharded one alike: a pop's leases with the queue size it saw,
a heartbeat's reply with the pause and the run's state, an idle read with the start
entries waiting."""

from __future__ import annotations

import json

import pytest

from crawlplug.crawl import Crawl, runs
from crawlplug.frontier.core import open_frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.layout import claim_shards
from crawlplug.frontier.results import Beat, Idle, Leases


@pytest.mark.parametrize("shards", [1, 3])
def test_calls_answer_with_what_they_found(r, shards):
    keys = CrawlKeys(f"results{shards}")
    runs.purge(r, keys)
    if shards > 1:
        claim_shards(r, keys, shards)
    f = open_frontier(r, keys, shards=shards, node_id="node-a")
    items = [
        (f"r{j}".encode().ljust(20, b"_"), 0.0, json.dumps({"url": f"http://h{j}.test/"}).encode(), "", f"h{j}.test")
        for j in range(20)
    ]
    result, leased = f.admit_and_pop(items, [], 5)
    assert result.admitted == 20
    assert isinstance(leased, Leases) and len(leased) == 5
    assert leased.queued_seen >= 0 and leased.next_ready_ms == -1  # a plain queue has no next ready time
    if shards == 1:
        assert leased.queued_seen == 15, "the queue as the pop left it"

    Crawl.of(f).pause(by="test")
    beat = f.heartbeat_and_reap([x.id for x in leased])
    lost, (requeued, dead) = beat  # unpacked as before
    assert isinstance(beat, Beat) and beat.paused and beat.run_state == "" and not beat.data_lost
    assert lost == [] and (requeued, dead) == (0, 0)
    Crawl.of(f).resume()
    assert not f.heartbeat_and_reap([x.id for x in leased]).paused

    Crawl.of(f).push_starts(["http://h0.test/start"])
    idle = f.idle_state()
    queued, in_flight, producers = idle
    assert isinstance(idle, Idle) and idle.start_entries == 1 and idle.start_urls_kind == "" and not idle.data_lost
    assert (queued, in_flight) == (15 + 1, 5)
    runs.purge(r, keys)
