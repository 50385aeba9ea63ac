"""`crawlplug sites check|put|list|show|delete` and the sites section of `crawlplug status`,
against the real test Redis."""

from __future__ import annotations

import json

import yaml
from click.testing import CliRunner
from scrapy.utils.test import get_crawler
from starlette.testclient import TestClient

from crawlplug.cli import main
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.sites.store import SiteStore
from crawlplug.stats import RedisStatsCollector
from crawlplug.web import create_app

from .support.nodes import ROOT

CARS = str(ROOT / "spiders" / "sites" / "cars.yaml")
SHOP = str(ROOT / "spiders" / "sites" / "shop.yaml")


def cars_doc() -> dict:
    with open(CARS) as fh:
        return yaml.safe_load(fh)


def run(*args: str):
    return CliRunner().invoke(main, list(args), env={"REDIS_URL": None, "CRAWLPLUG_CRAWL": None})


def test_check_validates_without_redis(tmp_path):
    res = run("sites", "check", CARS, SHOP)
    assert res.exit_code == 0, res.output
    assert "site 'cars' is valid: 6 start URLs, steps brand -> series -> model (detail: model), 7 fields" in res.output
    bad = tmp_path / "bad.yaml"
    doc = cars_doc()
    doc["steps"][0]["links"][0]["match"] = {"prefix": "/series/", "contains": "x"}
    doc["fields"]["year"]["type"] = "integer"
    bad.write_text(yaml.safe_dump(doc))
    res = run("sites", "check", CARS, str(bad))
    assert res.exit_code == 1
    assert f"invalid site definition {bad}:" in res.output
    assert "  steps[0].links[0].match: give exactly one of prefix, contains or regex" in res.output
    assert "  fields.year.type: Input should be 'str', 'int', 'float' or 'bool'" in res.output
    assert "crawlplug: error: 1 of 2 definitions are invalid" in res.output


def test_put_list_show_delete(redis_url, r, tmp_path):
    res = run("sites", "put", "--redis-url", redis_url, CARS, SHOP)
    assert res.exit_code == 0, res.output
    store = SiteStore(r)
    version = store.version("cars")
    assert f"stored site 'cars' version {version} (new) on {redis_url}" in res.output
    assert store.names() == ["cars", "shop"]

    res = run("sites", "put", "--redis-url", redis_url, CARS)
    assert f"stored site 'cars' version {version} (unchanged)" in res.output

    res = run("sites", "list", "--redis-url", redis_url)
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0] == f"2 site definitions on {redis_url}"
    cars_line = next(line for line in res.output.splitlines() if line.strip().startswith("cars"))
    assert f"version {version}" in cars_line and "steps brand -> series -> model" in cars_line
    assert "7 fields" in cars_line and CARS in cars_line
    listed = json.loads(run("sites", "list", "--redis-url", redis_url, "--json").output)
    assert [s["name"] for s in listed["sites"]] == ["cars", "shop"]
    assert listed["sites"][0]["fields"] == ["name", "brand", "series", "year", "price", "electric", "seats"]

    res = run("sites", "show", "--redis-url", redis_url, "cars")
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"# site 'cars' version {version}, stored ")
    assert yaml.safe_load(res.output) == cars_doc(), "shown as written"
    shown = json.loads(run("sites", "show", "--redis-url", redis_url, "cars", "--json").output)
    assert shown["version"] == version and shown["definition"]["name"] == "cars"

    # a changed file replaces the definition; an invalid one stores nothing
    doc = cars_doc()
    doc["fields"]["title"] = doc["fields"].pop("name")
    changed = tmp_path / "cars.yaml"
    changed.write_text(yaml.safe_dump(doc))
    res = run("sites", "put", "--redis-url", redis_url, str(changed))
    assert f"(replaces version {version})" in res.output
    new_version = store.version("cars")
    doc["steps"][2]["name"] = "model page"
    changed.write_text(yaml.safe_dump(doc))
    res = run("sites", "put", "--redis-url", redis_url, str(changed), SHOP)
    assert res.exit_code == 1
    assert "steps[2].name: a step name is letters, digits" in res.output
    assert "1 of 2 definitions are invalid; nothing was stored" in res.output
    assert store.version("cars") == new_version

    res = run("sites", "show", "--redis-url", redis_url, "nosuch")
    assert res.exit_code == 1 and "no site 'nosuch' stored on" in res.output and "(stored: cars, shop)" in res.output
    assert run("sites", "delete", "--redis-url", redis_url, "shop").exit_code == 0
    assert store.names() == ["cars"]
    assert run("sites", "delete", "--redis-url", redis_url, "shop").exit_code == 1


def test_status_shows_the_outcomes_per_site(redis_url, r):
    keys = CrawlKeys("site-cars")
    for node, (ok, missing) in {"node-a": (40, 3), "node-b": (50, 4)}.items():
        stats = RedisStatsCollector(get_crawler(settings_dict={"STATS_DUMP": False}))
        stats.bind(r, keys, node)
        stats.set_value("site/cars/steps", "brand,series,model")
        stats.inc_value("site/cars/version/0123abcd4567")
        stats.inc_value("site/cars/step/brand/pages", 3)
        stats.inc_value("site/cars/step/model/pages", ok + missing)
        stats.inc_value("site/cars/items/ok", ok)
        stats.inc_value("site/cars/items/incomplete", missing)
        stats.inc_value("site/cars/field/year/missing", missing)
        assert stats.flush()
    res = run("status", "--redis-url", redis_url, "--crawl", "site-cars")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    at = lines.index("sites (outcomes of site spiders, crawl-wide)")
    assert lines[at + 1] == "  cars  (definition 0123abcd4567 on 2 nodes)"
    assert lines[at + 2] == "    pages    brand 6, series 0, model 97"
    assert "    items    ok 90, incomplete 7" in lines
    assert "    year is null  7" in lines
    report = json.loads(run("status", "--redis-url", redis_url, "--crawl", "site-cars", "--json").output)
    assert report["sites"]["cars"]["field/year/missing"] == 7

    # the dashboard's Fields page reads the same, with labels
    fields = TestClient(create_app(r, keys), base_url="http://127.0.0.1").get("/api/fields").json()
    assert fields["sites"]["cars"]["items/ok"] == 90
    rows = {row["outcome"]: row for row in fields["rows"]}
    assert rows["field/year/missing"] == {
        "site": "cars",
        "outcome": "field/year/missing",
        "label": "year is null",
        "value": 7,
    }
    assert rows["steps"]["value"] == "brand,series,model"
