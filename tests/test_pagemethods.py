"""scrapy-playwright requests in JSON payloads: the meta codec registry and PageMethod's codec.

Round trips (a list and a dict of page methods, meta next to them, the payloads of
requests without any unchanged), what is refused when stored and when read (a payload
written into Redis by someone else), the opt-ins by name (spider attribute, setting, a
spider method as the callable), and the registry's own rules. The real crawl of a
JavaScript page through Debian's chromium is tests/test_playwright_crawl.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.settings import Settings

from crawlplug.errors import DecodeError, SerializationError
from crawlplug.serializers import JsonSerializer, metacodecs
from crawlplug.serializers.pagemethods import ALLOWED, PageMethodCodec

page = pytest.importorskip("scrapy_playwright.page", reason="scrapy-playwright is not installed (the playwright extra)")
PageMethod = page.PageMethod
SERIALIZER = JsonSerializer()


class QuotesSpider(Spider):
    name = "quotes"

    def parse(self, response: Any) -> None:  # pragma: no cover - never called
        pass

    async def scroll_down(self, page: Any) -> None:  # pragma: no cover - a page method by name
        pass


class OptedInSpider(QuotesSpider):
    crawlplug_page_methods = ["evaluate", "scroll_down"]


def spider(cls: type[Spider] = QuotesSpider, **settings: Any) -> Spider:
    made = cls()
    made.settings = Settings(settings)  # type: ignore[attr-defined]
    return made


def playwright_request(*methods: Any, spider_: Spider | None = None, **meta: Any) -> Request:
    s = spider_ or spider()
    return Request(
        "http://quotes.test/js/",
        callback=s.parse,  # type: ignore[attr-defined]
        meta={"playwright": True, "playwright_page_methods": list(methods), **meta},
    )


def described(methods: Any) -> Any:
    items = methods.items() if isinstance(methods, dict) else enumerate(methods)
    return {k: (pm.method if isinstance(pm.method, str) else pm.method.__name__, pm.args, pm.kwargs) for k, pm in items}


def round_trip(request: Request, s: Spider) -> tuple[bytes, Request]:
    payload = SERIALIZER.dumps(request, s)
    return payload, SERIALIZER.loads(payload, s)


def test_the_issues_request_survives_the_json_payload():
    s = spider()
    request = playwright_request(PageMethod("wait_for_selector", "div.quote"), spider_=s, other={"n": [1, 2]})
    payload, back = round_trip(request, s)
    stored = json.loads(payload)
    xmeta = {
        "playwright_page_methods": [
            {"$crawlplug": "playwright.PageMethod", "data": {"method": "wait_for_selector", "args": ["div.quote"]}}
        ]
    }
    assert stored["v"] == 3 and stored["m"] == {"playwright": True, "other": {"n": [1, 2]}} and stored["x"] == xmeta
    # the long-key format (CRAWLPLUG_PAYLOAD_FORMAT = 1) writes them as version 2 did, read the same
    old = JsonSerializer(payload_format=1).dumps(request, s)
    assert json.loads(old)["v"] == 2 and json.loads(old)["xmeta"] == xmeta
    assert described(SERIALIZER.loads(old, s).meta["playwright_page_methods"]) == described(
        back.meta["playwright_page_methods"]
    )
    methods = back.meta["playwright_page_methods"]
    assert all(type(pm) is PageMethod for pm in methods)
    assert described(methods) == {0: ("wait_for_selector", ("div.quote",), {})}
    assert back.meta["playwright"] is True and back.meta["other"] == {"n": [1, 2]}
    assert back.callback == s.parse and back.url == request.url


def test_waits_clicks_and_keys_with_arguments_round_trip_in_order():
    s = spider()
    methods = [
        PageMethod("wait_for_load_state", "networkidle"),
        PageMethod("click", "a.more", timeout=500),
        PageMethod("press", "body", "End"),
        PageMethod("wait_for_timeout", 250),
        PageMethod("screenshot", full_page=True, type="png"),
        PageMethod("fill", "#q", "scrapy"),
    ]
    _, back = round_trip(playwright_request(*methods, spider_=s), s)
    assert described(back.meta["playwright_page_methods"]) == described(methods)


def test_a_dict_of_page_methods_round_trips_as_a_dict():
    s = spider()
    methods = {"wait": PageMethod("wait_for_selector", "div.quote"), "next": PageMethod("click", "li.next a")}
    request = Request("http://quotes.test/", meta={"playwright": True, "playwright_page_methods": methods})
    _, back = round_trip(request, s)
    assert described(back.meta["playwright_page_methods"]) == described(methods)


def test_a_request_without_codec_values_has_no_codec_field():
    s = spider()
    request = Request("http://quotes.test/", callback=s.parse, meta={"playwright": True, "n": 1})
    assert json.loads(SERIALIZER.dumps(request, s)) == {
        "v": 3,
        "u": "http://quotes.test/",
        "m": {"playwright": True, "n": 1},
        "c": "parse",
    }
    assert json.loads(JsonSerializer(payload_format=1).dumps(request, s)) == {
        "v": 1,
        "url": "http://quotes.test/",
        "meta": {"playwright": True, "n": 1},
        "callback": "parse",
    }


def test_a_result_left_by_a_page_method_that_ran_is_not_stored():
    s = spider()
    done = PageMethod("wait_for_selector", "div.quote")
    done.result = object()  # what scrapy-playwright leaves after running it (an ElementHandle)
    payload, back = round_trip(playwright_request(done, spider_=s), s)
    assert b"result" not in payload and back.meta["playwright_page_methods"][0].result is None


@pytest.mark.parametrize(
    ("method", "why"),
    [
        (PageMethod("evaluate", "window.scrollBy(0, 1e4)"), "'evaluate' is not one a stored request may run"),
        (PageMethod("wait_for_function", "() => window.ready"), "'wait_for_function' is not one"),
        (PageMethod("goto", "http://10.0.0.1/"), "'goto' is not one"),
        (PageMethod("set_input_files", "input", "/etc/passwd"), "'set_input_files' is not one"),
        (PageMethod("screenshot", path="/tmp/shot.png"), "'screenshot' with a 'path' argument writes a file"),
        (PageMethod("pdf", path="/tmp/page.pdf"), "'pdf' with a 'path' argument writes a file"),
        (PageMethod(lambda page: None), "a callable that is not a method of the spider"),
        (PageMethod("wait_for_selector", "div", state=object()), "cannot be stored as JSON"),
    ],
    ids=["evaluate", "js-function", "goto", "input-files", "screenshot-path", "pdf-path", "callable", "object-arg"],
)
def test_what_a_stored_page_method_may_not_do_is_refused_when_stored(method, why):
    s = spider()
    with pytest.raises(SerializationError, match=why) as refused:
        SERIALIZER.dumps(playwright_request(method, spider_=s), s)
    if "JSON" not in why:
        assert "crawlplug_page_methods" in str(refused.value) or "spider" in str(refused.value)


def test_a_spider_method_needs_an_opt_in_by_name():
    s = spider()
    with pytest.raises(SerializationError, match="spider method 'scroll_down' is not allowed"):
        SERIALIZER.dumps(playwright_request(PageMethod(s.scroll_down), spider_=s), s)  # type: ignore[attr-defined]


def test_opting_in_by_spider_attribute_allows_evaluate_and_a_spider_method():
    s = spider(OptedInSpider)
    methods = [PageMethod("evaluate", "window.scrollBy(0, document.body.scrollHeight)"), PageMethod(s.scroll_down, 3)]  # type: ignore[attr-defined]
    payload, back = round_trip(playwright_request(*methods, spider_=s), s)
    assert json.loads(payload)["x"]["playwright_page_methods"][1]["data"] == {
        "spider_method": "scroll_down",
        "args": [3],
    }
    back_methods = back.meta["playwright_page_methods"]
    assert back_methods[0].method == "evaluate"
    assert back_methods[1].method == s.scroll_down and back_methods[1].args == (3,)  # type: ignore[attr-defined]


def test_opting_in_by_setting_allows_a_path_argument():
    s = spider(CRAWLPLUG_PAGE_METHODS=["screenshot"])
    _, back = round_trip(playwright_request(PageMethod("screenshot", path="shot.png"), spider_=s), s)
    assert back.meta["playwright_page_methods"][0].kwargs == {"path": "shot.png"}


def hand_written(*data: Any, version: int = 2) -> bytes:
    """A payload as someone able to write to the crawl's Redis could write it."""
    xmeta = {"playwright_page_methods": [{"$crawlplug": "playwright.PageMethod", "data": d} for d in data]}
    return json.dumps(
        {"v": version, "url": "http://quotes.test/", "meta": {"playwright": True}, "xmeta": xmeta}
    ).encode()


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (
            {"method": "evaluate", "args": ["fetch('http://10.0.0.1/')"]},
            "'evaluate' is not one a stored request may run",
        ),
        ({"method": "screenshot", "kwargs": {"path": "/root/.bashrc"}}, "with a 'path' argument"),
        ({"spider_method": "scroll_down"}, "spider method 'scroll_down', which this node's spider does not allow"),
        ({"spider_method": "closed"}, "does not allow"),
        ({"method": "click", "args": "a"}, "args must be a list"),
        ({"method": "click", "extra": 1}, "not an object of method, args, kwargs"),
        ({"method": "click", "spider_method": "parse"}, "one of method or spider_method"),
        ({"method": ["click"]}, "method is not a name"),
        # PageMethod(method, *args, **kwargs) itself would raise TypeError: a DecodeError, so a dead letter at once
        ({"method": "click", "kwargs": {"method": "a.next"}}, "kwargs name 'method', which is PageMethod's own"),
        ({"method": "click", "kwargs": {"self": 1}}, "kwargs name 'self', which is PageMethod's own"),
        ({"spider_method": "scroll_down", "kwargs": {"method": 1}}, "kwargs name 'method'"),
    ],
    ids=[
        "evaluate",
        "path",
        "spider-method",
        "closed",
        "args",
        "extra-field",
        "both",
        "not-a-name",
        "kwarg-method",
        "kwarg-self",
        "spider-method-kwarg-method",
    ],
)
def test_a_payload_naming_what_the_node_does_not_allow_is_refused_when_read(data, why):
    with pytest.raises(DecodeError, match=why):
        SERIALIZER.loads(hand_written(data), spider())


def test_a_node_whose_spider_opted_in_reads_what_it_allows():
    s = spider(OptedInSpider)
    back = SERIALIZER.loads(hand_written({"method": "evaluate", "args": ["1"]}, {"spider_method": "scroll_down"}), s)
    assert [pm.method for pm in back.meta["playwright_page_methods"]] == ["evaluate", s.scroll_down]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (
            json.dumps({"v": 2, "url": "http://q.test/", "xmeta": {"x": {"$crawlplug": "os.system", "data": "ls"}}}),
            "no meta codec 'os.system' on this node",
        ),
        (
            json.dumps(
                {
                    "v": 2,
                    "url": "http://q.test/",
                    "xmeta": {"x": {"$crawlplug": "playwright.PageMethod", "data": {"method": "click"}, "also": 1}},
                }
            ),
            "other fields than 'data'",
        ),
        (json.dumps({"v": 1, "url": "http://q.test/", "xmeta": {}}), "has xmeta, which version 2 brought"),
        (json.dumps({"v": 2, "url": "http://q.test/", "xmeta": []}), "xmeta is not an object"),
        (json.dumps({"v": 2, "url": "http://q.test/"}), "has no xmeta"),
        (json.dumps({"v": 4, "url": "http://q.test/"}), "unknown payload version 4"),
        (json.dumps({"v": 3, "url": "http://q.test/"}), "a version 3 payload has no field 'url'"),
        (json.dumps({"v": 3, "u": "http://q.test/", "x": []}), "xmeta is not an object"),
        (
            json.dumps({"v": 3, "u": "http://q.test/", "x": {"x": {"$crawlplug": "os.system", "data": "ls"}}}),
            "no meta codec 'os.system' on this node",
        ),
    ],
    ids=[
        "unknown-codec",
        "extra-field",
        "v1-with-xmeta",
        "xmeta-list",
        "v2-without-xmeta",
        "v4",
        "v3-long-keys",
        "v3-xmeta-list",
        "v3-unknown-codec",
    ],
)
def test_malformed_codec_payloads_are_decode_errors(payload, why):
    with pytest.raises(DecodeError, match=why):
        SERIALIZER.loads(payload.encode(), spider())


def test_a_plain_dict_with_the_reserved_key_next_to_a_page_method_is_refused():
    s = spider()
    request = Request(
        "http://q.test/", meta={"playwright_page_methods": [PageMethod("click", "a"), {"$crawlplug": "x"}]}
    )
    with pytest.raises(SerializationError, match="reserve"):
        SERIALIZER.dumps(request, s)


def test_meta_json_cannot_hold_and_no_codec_takes_is_still_refused_naming_the_key():
    with pytest.raises(SerializationError, match=r"meta\['when'\]"):
        SERIALIZER.dumps(Request("http://q.test/", meta={"when": object()}), spider())


def test_the_registry_builds_only_registered_types_and_refuses_a_second_codec_for_one():
    assert "playwright.PageMethod" in metacodecs.registered()
    assert metacodecs.needs_codec({"a": [1, (PageMethod("click", "a"),)]})
    assert not metacodecs.needs_codec({"a": [1, "x", {"b": None}]})

    class Other:
        name = "playwright.PageMethod"
        type = int

        def encode(self, value: Any, spider: Any) -> Any:
            return value

        def decode(self, data: Any, spider: Any) -> Any:
            return data

    with pytest.raises(ValueError, match="registered already"):
        metacodecs.register(Other())
    metacodecs.register(metacodecs.registered()["playwright.PageMethod"])  # the same codec again: harmless
    assert isinstance(metacodecs.registered()["playwright.PageMethod"], PageMethodCodec)


def test_the_default_allowances_hold_no_method_that_runs_script_text_or_navigates():
    for name in (
        "evaluate",
        "evaluate_handle",
        "wait_for_function",
        "add_script_tag",
        "add_init_script",
        "expose_function",
        "expose_binding",
        "route",
        "goto",
        "set_content",
        "set_input_files",
        "eval_on_selector",
        "eval_on_selector_all",
        "close",
    ):
        assert name not in ALLOWED
