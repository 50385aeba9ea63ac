"""A node that stalls while it begins a run clears nothing once another node took the
beginning over (issue 32 item 1): its clearing is fenced by the token the beginning carries
(lua/runclear.lua), so it cannot wipe the queue, leases and fingerprints of the run the other
node has since begun and crawls. On a real Redis, the stall made by blocking the node's
clearing in a thread until the takeover is done."""

from __future__ import annotations

import threading
import time

import pytest

from crawlplug.crawl import runs
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.layout import claim_shards

K = CrawlKeys("fenced")


@pytest.mark.parametrize("shards", [1, 2])
def test_a_node_that_stalled_beginning_a_run_clears_nothing_of_the_run_another_began(r, monkeypatch, shards):
    from crawlplug.frontier.core import open_frontier

    claim_shards(r, K, shards)
    first = runs.join(r, K, node_id="a", ttl_ms=10_000)
    r.hset(K.run, "state", "finished")  # run 1 ended: the next node to start begins run 2
    monkeypatch.setattr(runs, "BEGIN_GRACE_MS", 300)
    stalling, release = threading.Event(), threading.Event()
    real_begin = runs.begin

    def begin(*args, **kwargs):
        if threading.current_thread().name == "stalled":
            stalling.set()
            assert release.wait(30)
        return real_begin(*args, **kwargs)

    monkeypatch.setattr(runs, "begin", begin)
    joined: dict[str, runs.Joined] = {}
    stalled = threading.Thread(
        target=lambda: joined.update(a=runs.join(r, K, node_id="a", ttl_ms=10_000)), name="stalled"
    )
    stalled.start()
    assert stalling.wait(30), "node a began run 2 and stalls before clearing run 1's state"
    time.sleep(0.4)  # past its grace: node b takes the beginning over and begins run 2 itself
    b = runs.join(r, K, node_id="b", ttl_ms=10_000)
    assert b.action == "new" and b.run == first.run + 1
    node = open_frontier(r, K, shards=shards, node_id="b", epoch=b.epoch)
    items = [(bytes([i]) * 20, 0.0, b"run 2 request %d" % i, "", f"h{i}.test") for i in range(6)]
    assert node.admit(items).flags == "1" * 6
    release.set()  # node a wakes, and goes on with its clearing
    stalled.join(30)
    assert joined["a"].action == "join" and joined["a"].epoch == b.epoch, "a joined the run b began"
    assert len(node) == 6, "run 2's requests are still queued"
    assert node.admit(items).flags == "0" * 6, "and its fingerprints recorded"
