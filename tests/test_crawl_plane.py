"""The crawl's control plane (crawlplug.crawl.Crawl) reads and switches a crawl without a
frontier: status and totals summed over every part, the switches, start entries pushed,
dead letters of every shard, a node's record and the end of its run."""

from __future__ import annotations

import json

from crawlplug.crawl import Crawl, runs
from crawlplug.frontier.core import Frontier, open_frontier
from crawlplug.frontier.interface import CrawlFrontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.layout import claim_shards, shard_of

N = 3
#: what a crawl is beside its data plane: the control plane's, not the frontier's
CONTROL = (
    "pause",
    "resume",
    "paused_info",
    "status",
    "counter",
    "totals",
    "finish_run",
    "queued_elsewhere",
    "dead_letters",
    "push_starts",
    "publish",
    "leave",
)


def _hosts() -> list[str]:
    found: dict[int, str] = {}
    i = 0
    while len(found) < N:
        found.setdefault(shard_of(f"h{i}.test", N), f"h{i}.test")
        i += 1
    return list(found.values())


def _clean(r, keys: CrawlKeys) -> None:
    runs.purge(r, keys)


def test_a_crawl_is_read_and_switched_without_a_frontier(r):
    keys = CrawlKeys("plane")
    _clean(r, keys)
    claim_shards(r, keys, N)
    node = Frontier(r, keys, shards=N, node_id="node-a")
    hosts = _hosts()
    node.admit(
        [
            (f"{h}/{j}".encode().ljust(20, b"_"), 0.0, json.dumps({"url": f"http://{h}/{j}"}).encode(), "", h)
            for h in hosts
            for j in range(2)
        ]
    )
    held = node.pop(N)
    node.dead_letter(held[0].id, "broken on purpose")

    crawl = Crawl(r, keys)  # the parts as the crawl recorded them: no frontier built
    assert [p.tag for p in crawl.parts()] == [p.tag for p in node.parts()]
    st = crawl.status()
    assert (st["queued"], st["in_flight"], st["dead"]) == (2 * N - len(held), len(held) - 1, 1)
    assert len(st["shards"]) == N and sum(s["dead"] for s in st["shards"]) == 1
    assert crawl.totals()["enqueued"] == 2 * N and crawl.totals()["dead"] == 1
    [letter] = crawl.dead_letters()
    assert letter.header["reason"] == "broken on purpose" and letter.header["shard"] == int(held[0].id.split(".")[0])

    assert crawl.pause(by="test") and not crawl.pause(by="test")
    assert crawl.paused_info()["by"] == "test"
    assert node.beat([x.id for x in held[1:]]).paused, "the node reads the pause back at its heartbeat"
    assert crawl.resume() and crawl.paused_info() is None and not crawl.resume()

    assert crawl.push_starts(["http://h0.test/start"]) == 1
    assert crawl.push_starts(["http://h0.test/lane"], lane="start_urls:extra") == 1
    assert crawl.status()["start_urls"] == 2, "a lane's entries count as start entries"

    crawl.publish(node.node_id, paused=1)
    assert r.hget(keys.node(node.node_id), "paused") == b"1"
    crawl.leave(node.node_id)
    assert r.zscore(keys.nodes, node.node_id) is None and r.hexists(keys.node(node.node_id), "closed")
    _clean(r, keys)


def test_a_node_records_the_end_of_its_run_through_the_control_plane(r):
    keys = CrawlKeys("plane-end")
    _clean(r, keys)
    joined = runs.join(r, keys, node_id="node-a", ttl_ms=5000)
    frontier = open_frontier(r, keys, node_id="node-a", epoch=joined.epoch)
    crawl = Crawl.of(frontier)
    crawl.push_starts(["http://h0.test/"])
    assert crawl.finish_run(joined.run, node_id=frontier.node_id, epoch=frontier.epoch) == ("busy", None)
    r.delete(keys.start_urls)
    state, ended = crawl.finish_run(joined.run, node_id=frontier.node_id, epoch=frontier.epoch)
    assert state == "finished" and ended is not None
    _clean(r, keys)


def test_the_frontier_holds_the_data_plane_only():
    """What a crawl is beside its requests (status, switches, runs, the registry of nodes)
    is crawlplug.crawl's: the frontier's Protocol names none of it."""
    members = {n for n in dir(CrawlFrontier) if not n.startswith("_")}
    assert not members & set(CONTROL), sorted(members & set(CONTROL))
    assert all(callable(getattr(Crawl, name)) for name in CONTROL)
