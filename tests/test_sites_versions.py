"""The version history of stored site definitions (crawlplug.sites.store, .versions): every
store numbered with who and from where, an identical store refused, rollback as a new
version nodes see, a history older than this change, two stores at once, a corrupt record,
the diff, a delete that keeps the history. Against the real test Redis."""

from __future__ import annotations

import copy
import json
import threading
import time

import pytest
import yaml

from crawlplug.errors import ConfigError
from crawlplug.server.clients import client_from_url
from crawlplug.sites.definition import version_of
from crawlplug.sites.store import SiteStore, sites_log_key
from crawlplug.sites.versions import PREDATES, InForce, UnknownVersion

from .support.nodes import ROOT

SITES = ROOT / "spiders" / "sites"
STEPS = ("spiders.sitesteps.AddSite",)
LOG = "crawlplug:sites:log:cars"


def doc_of(name: str = "cars") -> dict:
    return yaml.safe_load((SITES / f"{name}.yaml").read_text())


def changed(doc: dict, css: str) -> dict:
    doc = copy.deepcopy(doc)
    doc["fields"]["name"]["css"] = css
    return doc


def test_each_store_is_a_numbered_version_with_who_from_where_and_when(r):
    store = SiteStore(r)
    assert sites_log_key("cars") == LOG
    before = time.time()
    one = store.put(doc_of(), "cars.yaml", by="ana", pipelines=STEPS)
    two = store.put(changed(doc_of(), "h1.title"), "console (bob)", by="bob", pipelines=STEPS)
    assert (one.n, two.n, one.unchanged, two.unchanged) == (1, 2, False, False)
    history = store.history("cars")
    assert [(v.n, v.by, v.source, v.rollback_of) for v in history] == [
        (1, "ana", "cars.yaml", None),
        (2, "bob", "console (bob)", None),
    ]
    assert [v.version for v in history] == [one.version, two.version] == [version_of(v.doc) for v in history]
    assert all(before <= v.at <= time.time() for v in history)
    current = store.get("cars")
    assert (current.n, current.by) == (2, "bob") and store.in_force("cars") == 2
    assert json.loads(r.lindex(LOG, 0))["n"] == 1 and json.loads(r.hget("crawlplug:sites", "cars"))["n"] == 2
    assert store.get_version("cars", 1).doc == {"name": "cars", **doc_of()}


def test_an_identical_store_stores_nothing_and_says_so(r):
    store = SiteStore(r)
    first = store.put(doc_of(), "cars.yaml", by="ana", pipelines=STEPS)
    again = store.put(doc_of(), "elsewhere.yaml", by="bob", pipelines=STEPS)
    assert again.unchanged and (again.n, again.version, again.by, again.source) == (
        1,
        first.version,
        "ana",
        "cars.yaml",
    )
    assert r.llen(LOG) == 1 and store.get("cars").source == "cars.yaml"


def test_a_rollback_is_a_new_version_whose_document_nodes_see_again(r):
    store = SiteStore(r)
    v1 = store.put(doc_of(), "cars.yaml", by="ana", pipelines=STEPS)
    store.put(changed(doc_of(), "h1.title"), "cars.yaml", by="ana", pipelines=STEPS)
    back = store.rollback("cars", 1, by="carl", pipelines=STEPS)
    assert (back.n, back.rollback_of, back.by, back.version) == (3, 1, "carl", v1.version)
    assert store.version("cars") == v1.version, "what the nodes poll is the old digest again"
    three = store.get_version("cars", 3)
    assert three.doc == store.get_version("cars", 1).doc == store.get("cars").doc
    assert three.rollback_of == 1 and store.get("cars").rollback_of == 1
    with pytest.raises(InForce, match="version 1 of site 'cars' is the definition in force already"):
        store.rollback("cars", 1, by="carl", pipelines=STEPS)
    with pytest.raises(InForce):
        store.rollback("cars", 3, by="carl", pipelines=STEPS)
    with pytest.raises(UnknownVersion, match=r"site 'cars' has no version 7 \(its versions: v1, v2, v3\)"):
        store.rollback("cars", 7, pipelines=STEPS)
    with pytest.raises(UnknownVersion, match="site 'nosuch' has no versions stored"):
        store.rollback("nosuch", 1, pipelines=STEPS)
    # validated again: a step this node no longer allows is refused, and nothing stored
    with pytest.raises(ConfigError, match="is not a pipeline step this node allows"):
        store.rollback("cars", 2, pipelines=())
    assert r.llen(LOG) == 3 and store.in_force("cars") == 3


def test_a_definition_stored_before_histories_shows_as_v1_and_is_kept_by_the_next_store(r):
    doc = {"name": "cars", **doc_of()}
    old = {"doc": doc, "version": version_of(doc), "source": "old.yaml", "stored_at": 1700000000.0}
    r.hset("crawlplug:sites", mapping={"cars": json.dumps(old), "cars#v": version_of(doc)})
    store = SiteStore(r)
    (v1,) = store.history("cars")
    assert (v1.n, v1.version, v1.source, v1.by, v1.at, v1.note) == (
        1,
        version_of(doc),
        "old.yaml",
        "",
        1700000000.0,
        PREDATES,
    )
    assert not r.exists(LOG), "read, not written"
    assert store.in_force("cars") == 1 and store.get_version("cars", 1).doc == doc
    with pytest.raises(InForce):
        store.rollback("cars", 1, pipelines=STEPS)
    assert store.put(doc_of(), pipelines=STEPS).unchanged, "the same document: nothing stored, nothing written"
    assert not r.exists(LOG)
    new = store.put(changed(doc_of(), "h1.title"), "new.yaml", by="ana", pipelines=STEPS)
    assert new.n == 2
    assert [(v.n, v.source, v.by, v.note) for v in store.history("cars")] == [
        (1, "old.yaml", "", PREDATES),
        (2, "new.yaml", "ana", ""),
    ]
    assert store.rollback("cars", 1, by="ana", pipelines=STEPS).version == version_of(doc)


def test_two_stores_at_once_get_two_numbers_and_lose_no_record(redis_url, r):
    store = SiteStore(r)
    store.put(doc_of(), "cars.yaml", pipelines=STEPS)
    rounds, results, errors = 8, [], []
    clients = [client_from_url(redis_url), client_from_url(redis_url)]
    barrier = threading.Barrier(2)

    def writer(i: int) -> None:
        mine = SiteStore(clients[i])
        try:
            for k in range(rounds):
                barrier.wait(timeout=30)
                results.append(mine.put(changed(doc_of(), f"h{i}.t{k}"), f"writer {i}", by=f"w{i}", pipelines=STEPS))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    numbers = sorted(s.n for s in results)
    assert numbers == list(range(2, 2 + 2 * rounds)), "distinct numbers, none lost"
    history = store.history("cars")
    assert [v.n for v in history] == list(range(1, 2 + 2 * rounds))
    assert {(v.n, v.version) for v in history[1:]} == {(s.n, s.version) for s in results}
    last = max(results, key=lambda s: s.n)
    assert store.version("cars") == last.version and store.in_force("cars") == last.n
    for c in clients:
        c.close()


def test_a_corrupt_record_is_left_out_of_the_history_and_refused_when_asked_for(r):
    store = SiteStore(r)
    store.put(doc_of(), pipelines=STEPS)
    store.put(changed(doc_of(), "h1.title"), pipelines=STEPS)
    r.lset(LOG, 0, b"{not json")
    assert [v.n for v in store.history("cars")] == [2]
    with pytest.raises(ConfigError, match="version 1 of site 'cars' is not readable"):
        store.get_version("cars", 1)
    third = store.put(changed(doc_of(), "h2.title"), pipelines=STEPS)
    assert third.n == 3 and [v.n for v in store.history("cars")] == [2, 3]
    with pytest.raises(ConfigError, match="version 1 of site 'cars' is not readable"):
        store.diff("cars", 1, 3)


def test_the_diff_shows_the_changed_selector_line(r):
    store = SiteStore(r)
    store.put(doc_of(), pipelines=STEPS)
    store.put(changed(doc_of(), "h1.title"), pipelines=STEPS)
    text = store.diff("cars")
    assert text.splitlines()[:2] == ["--- v1", "+++ v2"]
    assert "-    css: h2.title" in text.splitlines() and "+    css: h1.title" in text.splitlines()
    assert store.diff("cars", 2, 1).splitlines()[:2] == ["--- v2", "+++ v1"]
    assert store.diff("cars", 1, 1) == ""
    first = store.compare("cars", b=1)
    assert first.a is None and first.text.splitlines()[:2] == ["--- (nothing)", "+++ v1"]
    with pytest.raises(UnknownVersion, match="no version 9"):
        store.diff("cars", 9)
    with pytest.raises(UnknownVersion, match="has no versions stored"):
        store.diff("nosuch")


def test_a_delete_keeps_the_history_and_a_rollback_restores(r):
    store = SiteStore(r)
    v1 = store.put(doc_of(), pipelines=STEPS)
    assert store.delete("cars") and store.get("cars") is None and store.version("cars") is None
    assert [v.n for v in store.history("cars")] == [1] and store.in_force("cars") is None
    back = store.rollback("cars", 1, by="ana", pipelines=STEPS)
    assert (back.n, back.rollback_of, store.version("cars")) == (2, 1, v1.version)
    assert store.names() == ["cars"]
    # a put of the deleted document is a new version too: it was not in force
    store.delete("cars")
    assert store.put(doc_of(), pipelines=STEPS).n == 3


def test_on_redis_cluster_the_history_and_the_definition_in_force_are_written_too(cluster_client):
    """The hash and a history are in two slots of a cluster: the record under the WATCH,
    the definition in force right after it."""
    store = SiteStore(cluster_client)
    one = store.put(doc_of(), "cars.yaml", by="ana", pipelines=STEPS)
    two = store.put(changed(doc_of(), "h1.title"), by="ana", pipelines=STEPS)
    assert store.put(changed(doc_of(), "h1.title"), pipelines=STEPS).unchanged
    back = store.rollback("cars", 1, by="bob", pipelines=STEPS)
    assert [v.n for v in store.history("cars")] == [one.n, two.n, back.n] == [1, 2, 3]
    assert store.version("cars") == one.version and store.in_force("cars") == 3
