"""Meta keys that name code or paths (crawlplug.serializers.metakeys): refused in a stored
request unless the spider opts in by name, on store and on read, in every payload format
and in start entries; what an opted-in spider may then carry; a project's own key.

The crawl of a JavaScript page with such keys planted in its queue (nothing imported, no
file written, each a dead letter with its reason) is in tests/test_playwright_crawl.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.settings import Settings

from crawlplug import starts
from crawlplug.errors import DecodeError, SerializationError
from crawlplug.serializers import JsonSerializer, PickleSerializer, metakeys

SERIALIZERS = {
    "compact": JsonSerializer(),
    "long-keys": JsonSerializer(payload_format=1),
    "pickle": PickleSerializer(secret="k" * 32),
}

#: a value of each of scrapy-playwright's keys as a hostile payload would write it
PLANTED: dict[str, Any] = {
    "playwright_page_init_callback": "os.getcwd",
    "playwright_page_event_handlers": {"close": "closed"},
    "playwright_context_kwargs": {"record_har_path": "/root/.ssh/authorized_keys"},
    "playwright_context": "logged-in",
    "ftp_local_filename": "/etc/cron.d/x",
}


class PageSpider(Spider):
    name = "pages"

    def parse(self, response: Any) -> None:  # pragma: no cover - never called
        pass

    async def init_page(self, page: Any, request: Any) -> None:  # pragma: no cover - an init callback
        pass

    def on_dialog(self, dialog: Any) -> None:  # pragma: no cover - an event handler
        pass


class OptedIn(PageSpider):
    crawlplug_meta_keys = {
        "playwright_page_init_callback": ["init_page", "tests.test_metakeys.module_init"],
        "playwright_page_event_handlers": ["on_dialog"],
        "playwright_context": ["mobile"],
        "playwright_context_kwargs": True,
    }


async def module_init(page: Any, request: Any) -> None:  # pragma: no cover - an init callback by path
    pass


def make(cls: type[Spider] = PageSpider, **settings: Any) -> Spider:
    spider = cls()
    spider.settings = Settings(settings)  # type: ignore[attr-defined]
    return spider


def payload(meta: dict[str, Any]) -> bytes:
    """A compact payload as anyone able to write to the crawl's Redis can write it."""
    return json.dumps({"v": 3, "u": "http://x.test/a", "m": meta}).encode()


def test_the_issues_payload_is_refused_naming_the_key_and_the_opt_in():
    raw = b'{"v":3,"u":"http://x.test/a","m":{"playwright":true,"playwright_page_init_callback":"os.getcwd"}}'
    with pytest.raises(
        DecodeError,
        match=r"meta\['playwright_page_init_callback'\] is refused: it imports a "
        r"function by the path it names.*crawlplug_meta_keys.*CRAWLPLUG_META_KEYS",
    ):
        JsonSerializer().loads(raw, make())


@pytest.mark.parametrize("key", sorted(PLANTED))
@pytest.mark.parametrize("fmt", sorted(SERIALIZERS))
def test_each_registered_key_is_refused_when_read_and_when_stored_without_an_opt_in(key, fmt):
    spider = make()
    serializer = SERIALIZERS[fmt]
    long_keys = json.dumps({"v": 1, "url": "http://x.test/a", "meta": {key: PLANTED[key]}}).encode()
    for raw in (payload({"playwright": True, key: PLANTED[key]}), long_keys):
        with pytest.raises(DecodeError, match=rf"meta\['{key}'\] is refused"):
            serializer.loads(raw, spider)
    with pytest.raises(SerializationError, match=rf"meta\['{key}'\] cannot be stored"):
        serializer.dumps(Request("http://x.test/a", meta={key: PLANTED[key]}), spider)


def test_a_signed_pickle_payload_is_checked_as_json_is():
    serializer = SERIALIZERS["pickle"]
    opted = make(OptedIn)
    signed = serializer.dumps(Request("http://x.test/a", meta={"playwright_context": "mobile"}), opted)
    assert serializer.loads(signed, opted).meta["playwright_context"] == "mobile"
    with pytest.raises(DecodeError, match="playwright_context"):
        serializer.loads(signed, make())  # a node whose spider did not opt in: a dead letter


def test_keys_not_registered_stay_data_and_scrapy_playwrights_own_context_name_needs_no_opt_in():
    spider = make()
    meta = {
        "playwright": True,
        "playwright_include_page": False,
        "proxy": "http://10.0.0.1:3128",
        "playwright_page_goto_kwargs": {"wait_until": "networkidle"},
        "playwright_context": "default",
    }
    for serializer in SERIALIZERS.values():
        assert serializer.loads(serializer.dumps(Request("http://x.test/", meta=meta), spider), spider).meta == meta


def test_opting_in_by_attribute_allows_the_values_listed_and_only_them():
    spider = make(OptedIn)
    har = {"record_har_path": "crawl.har", "viewport": {"width": 400, "height": 800}}
    back = JsonSerializer().loads(payload({"playwright_context": "mobile", "playwright_context_kwargs": har}), spider)
    assert back.meta["playwright_context"] == "mobile" and back.meta["playwright_context_kwargs"] == har
    with pytest.raises(DecodeError, match=r"'logged-in' is not among the values listed for it \(mobile\)"):
        JsonSerializer().loads(payload({"playwright_context": "logged-in"}), spider)


@pytest.mark.parametrize(
    "opt_in",
    [
        ["playwright_context_kwargs", "playwright_context"],
        "playwright_context_kwargs,playwright_context",
        '{"playwright_context_kwargs": true, "playwright_context": ["logged-in"]}',
    ],
    ids=["list", "comma-text", "json-text"],
)
def test_opting_in_by_setting_in_each_form(opt_in):
    spider = make(CRAWLPLUG_META_KEYS=opt_in)
    meta = {"playwright_context": "logged-in", "playwright_context_kwargs": PLANTED["playwright_context_kwargs"]}
    assert JsonSerializer().loads(payload(meta), spider).meta == meta


def test_an_opt_in_that_cannot_be_read_says_so_in_the_refusal():
    spider = make(CRAWLPLUG_META_KEYS={"playwright_context": 5})
    with pytest.raises(DecodeError, match=r"opt-in cannot be read: CRAWLPLUG_META_KEYS\['playwright_context'\]"):
        JsonSerializer().loads(payload({"playwright_context": "x"}), spider)
    with pytest.raises(SerializationError, match="opt-in cannot be read"):
        JsonSerializer().dumps(Request("http://x.test/", meta={"playwright_context": "x"}), spider)


def test_event_handlers_only_among_the_spider_methods_listed():
    spider = make(OptedIn)
    back = JsonSerializer().loads(payload({"playwright_page_event_handlers": {"dialog": "on_dialog"}}), spider)
    assert back.meta["playwright_page_event_handlers"] == {"dialog": "on_dialog"}
    for handlers, why in [
        ({"close": "closed"}, "'closed' is not one of the spider methods listed for it"),
        ({"dialog": "init_page"}, "'init_page' is not one"),
        ({"dialog": 5}, "is not a spider method"),
        (["on_dialog"], "must be a dict of page event"),
    ]:
        with pytest.raises(DecodeError, match=why):
            JsonSerializer().loads(payload({"playwright_page_event_handlers": handlers}), spider)
    # a key allowed "whole" still names no handler: the methods must be listed by name
    whole = make(CRAWLPLUG_META_KEYS=["playwright_page_event_handlers"])
    with pytest.raises(DecodeError, match="none is: list them by name"):
        JsonSerializer().loads(payload({"playwright_page_event_handlers": {"dialog": "on_dialog"}}), whole)


def test_an_event_handler_given_as_the_spiders_method_is_stored_by_name():
    spider = make(OptedIn)
    request = Request("http://x.test/", meta={"playwright_page_event_handlers": {"dialog": spider.on_dialog}})
    stored = JsonSerializer().dumps(request, spider)
    assert json.loads(stored)["m"]["playwright_page_event_handlers"] == {"dialog": "on_dialog"}
    with pytest.raises(SerializationError, match="not a spider method"):
        JsonSerializer().dumps(
            Request("http://x.test/", meta={"playwright_page_event_handlers": {"dialog": print}}), spider
        )


def test_an_init_callback_is_a_listed_spider_method_read_back_bound_so_nothing_is_imported():
    spider = make(OptedIn)
    request = Request("http://x.test/", meta={"playwright_page_init_callback": spider.init_page})
    stored = JsonSerializer().dumps(request, spider)
    assert json.loads(stored)["m"]["playwright_page_init_callback"] == "init_page"
    back = JsonSerializer().loads(stored, spider).meta["playwright_page_init_callback"]
    assert back == spider.init_page and back.__self__ is spider  # scrapy-playwright's load_object returns it as is
    listed = JsonSerializer().loads(
        payload({"playwright_page_init_callback": "tests.test_metakeys.module_init"}), spider
    )
    assert listed.meta["playwright_page_init_callback"] == "tests.test_metakeys.module_init"


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("os.getcwd", "'os.getcwd' is an import path this node does not list"),
        ("on_dialog", "'on_dialog' is not one of the spider methods listed"),
        ("no_such_method", "not one of the spider methods listed"),
        (["init_page"], "is not one of the spider methods listed"),
    ],
    ids=["unlisted-path", "unlisted-method", "missing", "not-a-name"],
)
def test_an_init_callback_not_listed_is_refused_even_when_the_key_is_opted_in(value, why):
    with pytest.raises(DecodeError, match=why):
        JsonSerializer().loads(payload({"playwright_page_init_callback": value}), make(OptedIn))
    # allowed "whole", the key still imports nothing: only names and paths listed one by one
    whole = make(CRAWLPLUG_META_KEYS=["playwright_page_init_callback"])
    with pytest.raises(DecodeError, match="playwright_page_init_callback"):
        JsonSerializer().loads(payload({"playwright_page_init_callback": "os.getcwd"}), whole)


def test_a_listed_name_that_the_spider_lacks_is_refused():
    spider = make(CRAWLPLUG_META_KEYS={"playwright_page_init_callback": ["gone"]})
    with pytest.raises(DecodeError, match="'gone' is not a method of this node's spider"):
        JsonSerializer().loads(payload({"playwright_page_init_callback": "gone"}), spider)


def test_a_start_entry_carrying_a_registered_key_is_refused_as_an_invalid_entry():
    line = json.dumps({"url": "http://x.test/", "meta": {"playwright_page_init_callback": "os.getcwd"}})
    with pytest.raises(DecodeError, match="playwright_page_init_callback"):
        starts.build(starts.parse(line), make())
    ok = starts.build(
        starts.parse(json.dumps({"url": "http://x.test/", "meta": {"playwright_context": "mobile"}})), make(OptedIn)
    )
    assert ok.meta["playwright_context"] == "mobile"


def test_a_project_registers_a_key_of_its_own():
    spider = make()
    meta = {"myplugin_script": "/opt/scripts/run.sh"}
    assert JsonSerializer().loads(payload(meta), spider).meta == meta  # data until registered
    metakeys.register("myplugin_script", "runs the shell script it names")
    try:
        with pytest.raises(DecodeError, match="it runs the shell script it names"):
            JsonSerializer().loads(payload(meta), spider)
        opted = make(CRAWLPLUG_META_KEYS={"myplugin_script": ["/opt/scripts/run.sh"]})
        assert JsonSerializer().loads(payload(meta), opted).meta == meta
        with pytest.raises(TypeError):
            metakeys.register("", "nothing")
    finally:
        metakeys.unregister("myplugin_script")
    assert "myplugin_script" not in metakeys.registered()


def test_a_request_read_only_to_be_fingerprinted_drops_the_keys_instead_of_refusing_them():
    back = JsonSerializer().loads_unbound(payload({"playwright_page_init_callback": "os.getcwd", "depth": 2}))
    assert back.meta == {"depth": 2}
