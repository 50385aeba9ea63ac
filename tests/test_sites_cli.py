"""`crawlplug sites check|put|list|show|delete|history|diff|rollback` and the sites section of
`crawlplug status`, against the real test Redis."""

from __future__ import annotations

import json
import re

import yaml
from click.testing import CliRunner
from scrapy.utils.test import get_crawler
from starlette.testclient import TestClient

from crawlplug.access import audit
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
    lines = bad.read_text().splitlines()
    match = re.search(
        rf"^{re.escape(str(bad))}:(\d+): steps\[0\]\.links\[0\]\.match: give exactly one of prefix, contains or regex$",
        res.output,
        re.MULTILINE,
    )
    assert match and lines[int(match[1]) - 1].strip().endswith("match:"), res.output
    typed = re.search(
        rf"^{re.escape(str(bad))}:(\d+): fields\.year\.type: Input should be 'str', 'int', 'float' or 'bool'$",
        res.output,
        re.MULTILINE,
    )
    assert typed and lines[int(typed[1]) - 1].strip() == "type: integer", res.output
    assert "crawlplug: error: 1 of 2 definitions are invalid" in res.output
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nsteps: [\n")
    res = run("sites", "check", str(broken))
    assert res.exit_code == 1 and f"{broken}:3: not valid YAML/JSON" in res.output, res.output


def test_put_list_show_delete(redis_url, r, tmp_path):
    res = run("sites", "put", "--redis-url", redis_url, CARS, SHOP)
    assert res.exit_code == 0, res.output
    store = SiteStore(r)
    version = store.version("cars")
    assert f"stored site 'cars' version {version} as v1 (new) on {redis_url}" in res.output
    assert store.names() == ["cars", "shop"]

    res = run("sites", "put", "--redis-url", redis_url, CARS)
    assert res.output.startswith(f"site 'cars' version {version} unchanged, nothing stored (v1 is in force)")
    assert r.llen("crawlplug:sites:log:cars") == 1
    assert audit.entries(r, 1)[0]["outcome"] == "unchanged"

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
    assert f"as v2 (replaces version {version})" in res.output
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


def test_history_diff_rollback(redis_url, r, tmp_path):
    import getpass
    import socket

    me = f"cli:{getpass.getuser()}@{socket.gethostname()}"
    assert run("sites", "put", "--redis-url", redis_url, CARS).exit_code == 0
    doc = cars_doc()
    doc["fields"]["name"]["css"] = "h1.title"
    changed = tmp_path / "cars.yaml"
    changed.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert run("sites", "put", "--redis-url", redis_url, str(changed)).exit_code == 0
    store = SiteStore(r)
    v1, v2 = (v.version for v in store.history("cars"))

    res = run("sites", "history", "--redis-url", redis_url, "cars")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == f"site 'cars': 2 versions on {redis_url}, v2 in force"
    assert re.fullmatch(
        rf"  v1  {v1}  \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC  by {re.escape(me)}  from {re.escape(CARS)}", lines[1]
    )
    assert lines[2].startswith(f"  v2  {v2}  ") and lines[2].endswith(f"from {changed}  <- in force")
    listed = json.loads(run("sites", "history", "--redis-url", redis_url, "cars", "--json").output)
    assert listed["in_force"] == 2 and [v["n"] for v in listed["versions"]] == [1, 2]
    assert listed["versions"][0]["by"] == me and "doc" not in listed["versions"][0]

    res = run("sites", "diff", "--redis-url", redis_url, "cars")
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[:2] == ["--- v1", "+++ v2"]
    assert "-    css: h2.title" in res.output.splitlines() and "+    css: h1.title" in res.output.splitlines()
    assert run("sites", "diff", "--redis-url", redis_url, "cars", "2", "1").output.startswith("--- v2\n+++ v1\n")
    same = run("sites", "diff", "--redis-url", redis_url, "cars", "1", "1")
    assert same.output == "v1 and v1 of site 'cars' are the same document\n"
    unknown = run("sites", "diff", "--redis-url", redis_url, "cars", "5")
    assert unknown.exit_code == 1 and "site 'cars' has no version 5 (its versions: v1, v2)" in unknown.output

    res = run("sites", "rollback", "--redis-url", redis_url, "cars", "1")
    assert res.exit_code == 0, res.output
    assert res.output == (
        f"site 'cars': stored version 1's document again as v3 (version {v1}, rollback of v1), in force now on {redis_url}\n"
    )
    assert store.version("cars") == v1
    entry = audit.entries(r, 1)[0]
    assert (entry["action"], entry["who"], entry["detail"]) == (
        "sites.rollback",
        me,
        {"site": "cars", "to": 1, "n": 3, "version": v1},
    )
    again = run("sites", "rollback", "--redis-url", redis_url, "cars", "1")
    assert again.exit_code == 1
    assert (
        "version 1 of site 'cars' is the definition in force already: nothing to roll back; nothing was stored"
        in again.output
    )
    nowhere = run("sites", "rollback", "--redis-url", redis_url, "cars", "9")
    assert nowhere.exit_code == 1 and "has no version 9 (its versions: v1, v2, v3)" in nowhere.output
    assert r.llen("crawlplug:sites:log:cars") == 3
    lines = run("sites", "history", "--redis-url", redis_url, "cars").output.splitlines()
    assert lines[3].endswith("rollback of v1  <- in force") and not lines[1].endswith("in force")

    assert run("sites", "delete", "--redis-url", redis_url, "cars").exit_code == 0
    res = run("sites", "history", "--redis-url", redis_url, "cars")
    assert res.output.splitlines()[0] == f"site 'cars': 3 versions on {redis_url}, none in force (deleted)"
    missing = run("sites", "history", "--redis-url", redis_url, "nosuch")
    assert missing.exit_code == 1 and "site 'nosuch' has no versions stored on" in missing.output
