"""Site definitions that render JavaScript (issue 41): ``render:`` carried to scrapy-playwright
as PageMethods from the codec's allow-list, in a real crawl through Debian's chromium.

The JavaScript site (tests/support/jssite.py) writes its quotes into the page 1.5 s after
it loads: a definition that renders and waits for ``div.quote`` finds them; the same
definition without ``render:`` fetches plain HTML and finds none. ``sites try`` renders the
page the same way, and ``sites check`` says what a machine lacks to render.

Skipped, saying why, where scrapy-playwright (the ``playwright`` extra) or chromium is missing.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from click.testing import CliRunner

from crawlplug.cli import main
from crawlplug.errors import ConfigError
from crawlplug.sites.definition import validate
from crawlplug.sites.render import meta, problems
from tests.support.jssite import JsSite

from .support.nodes import ROOT
from .test_playwright_crawl import _launch_options
from .test_sites_crawl import SETTINGS, finished, items_of

pytestmark = pytest.mark.e2e


def definition(name: str, base: str, render: dict[str, object] | None) -> dict[str, object]:
    doc: dict[str, object] = {
        "name": name,
        "base_url": base,
        "start_urls": ["/page/1/"],
        "steps": [{"name": "page"}],
        "fields": {
            "title": {"css": "title"},
            "quotes": {"css": "div.quote", "multiple": True},
        },
        "incomplete_items": "keep",
    }
    if render is not None:
        doc["render"] = render
    return doc


def test_a_rendered_page_has_the_field_a_plain_fetch_misses(crawl, redis_url, tmp_path):
    launch = _launch_options()
    sites = tmp_path / "sites"
    sites.mkdir()
    with JsSite(pages=1, per_page=3, delay_ms=1500) as site:
        rendered = definition("jsrendered", site.url, {"engine": "playwright", "wait_for": "div.quote", "timeout": 20})
        plain = definition("jsplain", site.url, None)
        for doc in (rendered, plain):
            (sites / f"{doc['name']}.yaml").write_text(yaml.safe_dump(doc))
        settings = {
            "REDIS_URL": redis_url,
            **SETTINGS,
            "CRAWLPLUG_SITES_DIR": str(sites),
            "PLAYWRIGHT_LAUNCH_OPTIONS": json.dumps(launch),
        }
        with_render = crawl("site", args={"site": "jsrendered"}, settings=settings)
        finished([with_render])
        without = crawl("site", args={"site": "jsplain"}, settings=settings)
        finished([without])

        got = items_of([with_render])
        assert [item["quotes"] for item in got] == [["Quote 1.1", "Quote 1.2", "Quote 1.3"]], got
        assert "'playwright/page_count'" in with_render.text(), "scrapy-playwright rendered the page"
        missed = items_of([without])
        assert [item["quotes"] for item in missed] == [None], missed  # plain HTML: no quote yet
        assert [item["title"] for item in missed] == ["quotes 1"]
        assert "playwright" not in without.text().lower(), "a definition without render: fetches plain HTML"

        # sites try renders the page as the crawl does (its own process: it runs the reactor)
        script = (
            "import json, sys\n"
            "from scrapy.settings import Settings\n"
            "from crawlplug.sites.definition import load_file\n"
            "from crawlplug.sites.fetch import try_definition\n"
            "site, doc = load_file(sys.argv[1])\n"
            "out = try_definition(site, '/page/1/', settings=Settings({'PLAYWRIGHT_LAUNCH_OPTIONS': json.loads(sys.argv[2])}),"
            " version='t', origin=sys.argv[1], timeout=30)\n"
            "print(json.dumps({'page': out['page'], 'fields': out['fields']}, default=repr))\n"
        )
        tried = subprocess.run(
            [sys.executable, "-c", script, str(sites / "jsrendered.yaml"), json.dumps(launch)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert tried.returncode == 0, tried.stderr[-3000:]
        out = json.loads(tried.stdout.strip().splitlines()[-1])
        assert out["page"]["rendered"] is True
        quotes = next(f for f in out["fields"] if f["name"] == "quotes")
        assert quotes["value"] == ["Quote 1.1", "Quote 1.2", "Quote 1.3"], quotes


def test_render_is_data_from_the_codecs_allow_list_and_checked(monkeypatch, tmp_path):
    pytest.importorskip("scrapy_playwright")
    site = validate(definition("s", "http://127.0.0.1:1", None) | {"render": {"wait_for": ".price", "wait": 0.5}})
    methods = meta(site.render_for("page"))["playwright_page_methods"]
    assert [(m.method, m.args, m.kwargs) for m in methods] == [
        ("wait_for_selector", (".price",), {"timeout": 10000}),
        ("wait_for_timeout", (500,), {}),
    ]
    # a step's own render wins over the site's; no render: plain HTML
    doc = definition("s", "http://127.0.0.1:1", {"wait_for": "#a"})
    doc["steps"] = [{"name": "list", "render": {"wait_for": "#b"}}, {"name": "page"}]
    two = validate(doc)
    assert two.render_for("list").wait_for == "#b" and two.render_for("page").wait_for == "#a"
    for bad, said in (
        ({"engine": "selenium"}, "render.engine: Input should be 'playwright'"),
        ({"wait_for": "div[", "timeout": 5}, "render.wait_for: invalid CSS selector"),
        ({"timeout": 0}, "render.timeout: Input should be greater than 0"),
        ({"evaluate": "document.title"}, "render.evaluate: Extra inputs are not permitted"),
    ):
        with pytest.raises(ConfigError, match=said.replace("[", r"\[")):
            validate(definition("s", "http://127.0.0.1:1", bad))
    # what a machine lacks, said by sites check (the definition itself is valid)
    from scrapy.settings import Settings

    said = problems(Settings({"PLAYWRIGHT_LAUNCH_OPTIONS": {"executable_path": "/no/such/chromium"}}))
    assert said == ["PLAYWRIGHT_LAUNCH_OPTIONS executable_path '/no/such/chromium' is not a program on this machine"]
    monkeypatch.setenv("PLAYWRIGHT_BROWSERS_PATH", str(tmp_path / "none"))
    file = tmp_path / "js.yaml"
    file.write_text(yaml.safe_dump(definition("js", "http://127.0.0.1:1", {"wait_for": ".price"})))
    monkeypatch.chdir(ROOT)
    res = CliRunner().invoke(main, ["sites", "check", str(file)])
    assert res.exit_code == 0, res.output
    assert "site 'js' is valid" in res.output
    assert (
        f"warning: it renders pages (render:), and this machine cannot: no browser for Playwright ({tmp_path / 'none'}"
        in res.output
    )
