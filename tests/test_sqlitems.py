"""Items stored once per key (issue 43): SQLItemPipeline's markers and the change report.

The markers and the report, against SQLite in a file (the same SQL PostgreSQL runs: the
end-to-end test crawls into both); then real crawls: the demo shop crawled three times
by two nodes into a real PostgreSQL server while its prices change and items go, a node
SIGKILLed mid-run, and once into SQLite by one node.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
from click.testing import CliRunner
from scrapy.utils.test import get_crawler

from crawlplug.cli import main
from crawlplug.crawl import runs
from crawlplug.errors import ConfigError, ItemError
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.pipelines import sqlitems
from crawlplug.pipelines.sqlitems import SQLItemPipeline, change_report

from .support.nodes import start_joined, wait_for_fetches
from .test_integration import FAST

KEYS = CrawlKeys("shop")


def _crawler(run: int):
    crawler = get_crawler()
    crawler.stats.set_value("crawlplug/run", run)
    return crawler


def _pipeline(url: str, run: int) -> SQLItemPipeline:
    p = SQLItemPipeline(_crawler(run), url=url, key=["sku"], table="crawlplug_items")
    p.engine = sqlitems.make_engine(url)
    p.table = sqlitems.open_table(p.engine)
    p.crawl = "shop"
    return p


def _report(p: SQLItemPipeline, run: int, previous: int | None, checked: bool = True) -> dict:
    assert p.engine is not None and p.table is not None
    return change_report(p.engine, p.table, "shop", run, full_previous=previous, checked=checked)


def test_markers_count_new_changed_unchanged_gone_once_and_a_resend_changes_nothing(tmp_path):
    url = f"sqlite:///{tmp_path / 'items.db'}"
    items = {i: {"sku": f"S{i}", "price": float(i), "name": f"n{i}"} for i in range(10)}
    p = _pipeline(url, 1)
    assert {p.process_item(dict(item)) == item for item in items.values()} == {True}
    one = _report(p, 1, None)
    assert one["total"] == {"new": 10, "changed": 0, "unchanged": 0, "gone": 0, "fields": {}}

    # run 2: two prices change, one name and price, item 9 is gone; everything sent twice (a resend)
    p.crawler.stats.set_value("crawlplug/run", 2)
    items[0]["price"] = 100.0
    items[1]["price"] = 101.0
    items[2].update(price=102.0, name="renamed")
    del items[9]
    for _ in range(2):
        for item in items.values():
            p.process_item(dict(item))
    two = _report(p, 2, 1)
    assert two["total"] == {"new": 0, "changed": 3, "unchanged": 6, "gone": 1, "fields": {"price": 3, "name": 1}}
    # an incremental or unfinished run: gone is not checked
    assert _report(p, 2, 1, checked=False)["total"]["gone"] == "not checked"

    # run 3: nothing changes; item 9 stays gone and is not counted again; a new item comes
    p.crawler.stats.set_value("crawlplug/run", 3)
    for item in [*items.values(), {"sku": "S10", "price": 1.0, "name": "n10"}]:
        p.process_item(dict(item))
    three = _report(p, 3, 2)
    assert three["total"] == {"new": 1, "changed": 0, "unchanged": 9, "gone": 0, "fields": {}}

    rows = (
        sqlite3.connect(tmp_path / "items.db")
        .execute(
            "select item_key, first_run, last_run, changed_run, changed_fields from crawlplug_items order by item_key"
        )
        .fetchall()
    )
    assert len(rows) == 11, "one row per key"
    assert ('["S2"]', 1, 3, 2, '["name", "price"]') in rows and ('["S9"]', 1, 1, None, None) in rows
    # a straggler of an older run changes nothing
    assert p.upsert("", '["S0"]', {"sku": "S0", "price": 5.0}, 2) == "stale"
    with pytest.raises(ItemError, match=r"by its key \['sku'\]: it has no sku"):
        p.process_item({"price": 1})


def test_settings_are_checked():
    with pytest.raises(ConfigError, match="needs CRAWLPLUG_ITEMS_SQL_URL"):
        SQLItemPipeline(_crawler(1), url="", key=["sku"], table="t")
    with pytest.raises(ConfigError, match="CRAWLPLUG_ITEM_KEY must name at least one field"):
        SQLItemPipeline(_crawler(1), url="sqlite://", key=[], table="t")
    with pytest.raises(ConfigError, match="is not a database URL SQLAlchemy reads"):
        sqlitems.make_engine("not a url")


# -- real crawls -----------------------------------------------------------------------------


def _settings(redis_url: str, sql_url: str) -> dict[str, object]:
    return {
        "REDIS_URL": redis_url,
        **FAST,
        "CONCURRENT_REQUESTS": 4,
        "ITEM_PIPELINES": json.dumps({"crawlplug.pipelines.SQLItemPipeline": 300}),
        "CRAWLPLUG_ITEMS_SQL_URL": sql_url,
        "CRAWLPLUG_ITEM_KEY": "sku",
    }


def _run(crawl, shop, settings, nodes: int = 2, *, kill_one: bool = False):
    started = start_joined(lambda: crawl(args={"base_url": shop.url}, settings=settings), shop, nodes)
    if kill_one:
        wait_for_fetches(shop, started[0], sum(shop.hits.values()) + 20)
        started[0].kill()  # mid-run: its leases come back, another node stores those items again
        started += start_joined(lambda: crawl(args={"base_url": shop.url}, settings=settings), shop, 1)
    for node in started[1:] if kill_one else started:
        assert node.wait(180) == 0, node.text()[-3000:]
    return started


def _rows(engine) -> list[tuple]:
    import sqlalchemy as sa

    with engine.connect() as conn:
        return list(conn.execute(sa.text("select item_key, first_run, last_run, changed_run from crawlplug_items")))


@pytest.mark.e2e
def test_three_runs_of_two_nodes_into_postgresql_count_what_changed(crawl, make_shop, redis_url, r, pg_url):
    shop = make_shop(items=60, delay=0.02)
    settings = _settings(redis_url, pg_url)
    _run(crawl, shop, settings)
    assert runs.view(r, KEYS).id == 1 and runs.view(r, KEYS).state == "finished"
    one = sqlitems.kept_report(r, KEYS, 1)
    assert one is not None and one["total"]["new"] == 60 and one["total"]["gone"] == 0

    # between runs 1 and 2 the site changes 10 prices and removes 5 items
    changed_ids, removed_ids = list(range(1, 11)), list(range(20, 25))
    shop.shop.change(prices={i: 1000.0 + i for i in changed_ids}, removed=removed_ids)
    _run(crawl, shop, settings)
    two = sqlitems.kept_report(r, KEYS, 2)
    assert two is not None and two["state"] == "finished"
    assert two["total"] == {"new": 0, "changed": 10, "unchanged": 45, "gone": 5, "fields": {"price": 10}}, two

    # run 3: nothing changes, and a node is SIGKILLed mid-run: the counts do not move
    _run(crawl, shop, settings, kill_one=True)
    three = sqlitems.kept_report(r, KEYS, 3)
    assert three is not None
    assert three["total"] == {"new": 0, "changed": 0, "unchanged": 55, "gone": 0, "fields": {}}, three

    engine = sqlitems.make_engine(pg_url)
    rows = _rows(engine)
    assert len(rows) == 60 and len({row[0] for row in rows}) == 60, "one row per item"
    assert sorted(json.loads(row[0])[0] for row in rows if row[2] == 1) == [f"SKU-{i:06d}" for i in removed_ids]
    assert sorted(json.loads(row[0])[0] for row in rows if row[3] == 2) == [f"SKU-{i:06d}" for i in changed_ids]

    # the report again, from the database, as JSON and CSV
    res = CliRunner().invoke(
        main, ["--redis-url", redis_url, "report", "shop", "--changes", "--run", "2", "--sql-url", pg_url, "--json"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["total"]["gone"] == 5
    csv_out = CliRunner().invoke(main, ["--redis-url", redis_url, "report", "shop", "--changes", "--csv"])
    assert csv_out.exit_code == 0, csv_out.output
    assert csv_out.output.splitlines()[1] == "(all),0,0,55,0,"


@pytest.mark.e2e
def test_one_node_into_sqlite(crawl, make_shop, redis_url, r, tmp_path):
    shop = make_shop(items=30, delay=0.01)
    url = f"sqlite:///{tmp_path / 'items.db'}"
    _run(crawl, shop, _settings(redis_url, url), nodes=1)
    shop.shop.change(prices={3: 9.99})
    _run(crawl, shop, _settings(redis_url, url), nodes=1)
    two = sqlitems.kept_report(r, KEYS, 2)
    assert two is not None and two["total"] == {
        "new": 0,
        "changed": 1,
        "unchanged": 29,
        "gone": 0,
        "fields": {"price": 1},
    }, two
    assert len(sqlite3.connect(tmp_path / "items.db").execute("select * from crawlplug_items").fetchall()) == 30
    text = CliRunner().invoke(main, ["--redis-url", redis_url, "report", "shop", "--changes"])
    assert text.exit_code == 0, text.output
    assert "0 new, 1 changed (price 1), 29 unchanged, 0 gone" in text.output
