"""Property tests (hypothesis) for the text crawlplug reads back from Redis besides queue
payloads: lease and per-domain queue records, alert rules, cron expressions and time zones,
site definitions, and the PageMethod codec with the meta keys that name code.

Whatever the input, each reader raises only the error type its docstring documents
(ConfigError for rules, schedules and definitions, DecodeError for payloads, nothing at all
for lease records), and what it accepts reads back the same. The unit tier: in process,
``deadline=None`` (a slow example is not a failure), a tenth of the examples under
``make test-fast`` (tests/support/fuzz.py).
"""

from __future__ import annotations

import json
import string
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from scrapy import Request, Spider
from scrapy.settings import Settings

from crawlplug.alerts import rules as alerts
from crawlplug.alerts.declared import rule_from
from crawlplug.alerts.evaluator import Evaluator
from crawlplug.errors import ConfigError, DecodeError
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.frontier.store import dq_member, parse_dq_member, parse_lease
from crawlplug.schedules import firing as schedules
from crawlplug.serializers import JsonSerializer, metakeys
from crawlplug.sites.definition import parse_text, validate
from crawlplug.sites.store import SiteStore

from .support.fuzz import examples
from .support.nodes import ROOT

page = pytest.importorskip("scrapy_playwright.page", reason="scrapy-playwright is not installed (the playwright extra)")
PageMethod = page.PageMethod

FUZZ = settings(
    max_examples=examples(300),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
SERIALIZER = JsonSerializer()

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


# -- lease records and per-domain queue members: read back, never raising ---------------------------

_field = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="|"), max_size=12)


@FUZZ
@given(st.binary(max_size=60) | st.text(max_size=60))
@example("node-1|5|²")  # "²".isdigit() is true, and int("²") raises
@example("node-1|5|" + "9" * 5000)  # more digits than int() reads
def test_any_lease_record_reads_without_raising(record):
    lease = parse_lease(record)
    assert lease.deliveries >= 0 and isinstance(lease.freed, bool)


@FUZZ
@given(_field, st.sampled_from(["12.5", "-3", "start", "1e308"]), st.integers(0, 10**12), _field, st.booleans())
def test_a_lease_record_reads_back_what_was_written(node, score, deliveries, domain, freed):
    record = f"{node}|{score}|{deliveries}" + (f"|{domain}" if domain or freed else "") + ("|f" if freed else "")
    lease = parse_lease(record.encode())
    assert (lease.node, lease.score, lease.deliveries, lease.domain, lease.freed) == (
        node,
        score,
        deliveries,
        domain,
        freed,
    )


@FUZZ
@given(st.binary(max_size=60) | st.text(max_size=60))
@example("shop.test\tnot-a-rank-at-all")
def test_any_domain_queue_member_reads_without_raising(member):
    parse_dq_member(member)


@FUZZ
@given(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\t"), max_size=20),
    st.integers(-(2**49), 2**49),
    st.text(max_size=12),
)
def test_a_domain_queue_member_reads_back_what_was_written(domain, score, request_id):
    read = parse_dq_member(dq_member(domain, float(score), request_id))
    assert (read.domain, read.score, read.id) == (domain, float(score), request_id)


# -- alert rules: only ConfigError, and what is accepted reads back the same -----------------------

_RULE_TOKENS = [
    "error_rate",
    "null_rate",
    "run_end",
    "silent_nodes",
    "limit_reached",
    "redis_memory_percent",
    "(",
    ")",
    ",",
    "shop.price",
    "my-site.f_1",
    "finished",
    "10m",
    "1h30m",
    "0s",
    ">",
    ">=",
    "<",
    "<=",
    "==",
    "!=",
    "=",
    "0.2",
    "3",
    "007",
    "9" * 30,
    "1.",
    "*",
    "last_run",
    ".",
    "for",
    "2m",
    "2x",
    "at",
    "end",
    "x",
    "'",
    "__import__",
    "-",
    "\t",
    "\n",
    "é",
    "₁",
]
_rules = st.lists(st.sampled_from(_RULE_TOKENS), max_size=14).flatmap(
    lambda tokens: st.lists(st.sampled_from(["", " ", "  "]), min_size=len(tokens), max_size=len(tokens)).map(
        lambda gaps: "".join(g + t for g, t in zip(gaps, tokens))
    )
) | st.text(max_size=80)


@FUZZ
@given(_rules)
def test_any_condition_raises_only_config_error_and_an_accepted_one_reads_back_the_same(text):
    try:
        condition = alerts.parse(text)
    except ConfigError:
        return
    assert alerts.parse(str(condition)) == condition
    try:
        rule = alerts.make_rule("r", text, [])
    except ConfigError as exc:
        # a window the site's minutes cannot cover is the one refusal of a condition that parses
        assert condition.window_ms and "between 1m and 1d" in str(exc)
    else:
        assert rule["when"] == str(condition) and condition.not_evaluated is None


@FUZZ
@given(_json, st.text(max_size=8))
def test_any_rule_read_from_redis_or_the_settings_is_skipped_or_used_never_raising(entry, rule_id):
    evaluator = Evaluator(client=None, owner="test")  # type: ignore[arg-type]  # _condition reads no Redis
    rule = entry if isinstance(entry, dict) else {"when": entry}
    condition = evaluator._condition(CrawlKeys("c"), rule_id, rule)
    assert condition is None or condition.not_evaluated is None
    try:
        rule_from(entry if not isinstance(entry, dict) else {"name": "r", **entry}, 300.0)
    except ConfigError:
        pass


# -- cron expressions and time zones: only ConfigError, and an accepted one has a next time ---------

_CRON_FIELDS = [
    "*",
    "*/5",
    "*/0",
    "1-5",
    "5-1",
    "1,2",
    "0",
    "59",
    "60",
    "31",
    "29",
    "2",
    "L",
    "W",
    "1W",
    "?",
    "mon",
    "jan",
    "MON-FRI",
    "5#2",
    "7#6",
    "7",
    "-1",
    "1-",
    ",",
    "H",
    "%",
    "1/0",
    "0/15",
    "99999999",
]
_crons = st.lists(st.sampled_from(_CRON_FIELDS), min_size=4, max_size=7).map(" ".join) | st.text(max_size=40)
_zones = st.sampled_from(
    [
        "UTC",
        "utc",
        "Europe/Paris",
        "America/New_York",
        "Asia/Kathmandu",
        "Nope/Zone",
        "",
        "../../etc/passwd",
        "a" * 300,
        "Europe",
    ]
)


@FUZZ
@given(_crons, _zones, st.integers(0, 4_000_000_000_000))
@example("0 0 31 2 *", "UTC", 0)  # croniter's syntax check passes February 31st, which never comes
@example("0 2 * * *", "a" * 300, 0)  # a zone name too long for a file name
def test_any_cron_expression_raises_only_config_error_and_an_accepted_one_comes_after(expr, tz, after_ms):
    try:
        schedules.check_cron(expr, tz)
    except ConfigError:
        return
    assert schedules.next_after(expr, tz, after_ms) > after_ms


# -- site definitions: only ConfigError, nothing imported that the node does not list ---------------

CARS = yaml.safe_load((ROOT / "spiders" / "sites" / "cars.yaml").read_text())
STEPS = ("spiders.sitesteps.AddSite",)


@st.composite
def _mutated_definitions(draw: Any) -> Any:
    """The cars definition with one value anywhere in it replaced, or a key added or dropped."""
    doc = json.loads(json.dumps(CARS))
    node, path = doc, []
    while isinstance(node, (dict, list)) and node and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else range(len(node))))
        path.append(key)
        if not isinstance(node[key], (dict, list)):
            break
        node = node[key]
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    value = draw(_json | st.text(max_size=30) | st.sampled_from(["{1..999999999}", "a[", "//*[", "(?P<", "x.Y"]))
    if not path:
        doc[draw(st.text(max_size=8))] = value
    elif draw(st.integers(0, 4)) == 0 and isinstance(parent, dict):
        parent.pop(path[-1])
    else:
        parent[path[-1]] = value
    return doc


@FUZZ
@given(_mutated_definitions() | _json)
def test_any_definition_raises_only_config_error(doc):
    try:
        site = validate(doc, pipelines=STEPS)
    except ConfigError:
        return
    assert set(site.pipelines) <= set(STEPS)


@FUZZ
@given(st.text(max_size=200))
def test_any_definition_text_raises_only_config_error(text):
    try:
        parse_text(text)
    except ConfigError:
        pass


@FUZZ
@given(
    st.binary(max_size=80)
    | _json.map(json.dumps)
    | st.just('{"doc": {}, "version": 1, "stored_at": ' + "9" * 400 + "}")
)
def test_any_stored_definition_record_raises_only_config_error(raw):
    try:
        stored = SiteStore._decode("cars", raw)
    except ConfigError:
        return
    try:
        stored.definition(pipelines=STEPS)
    except ConfigError:
        pass


# -- the PageMethod codec and the meta keys that name code: only DecodeError ------------------------


class PageSpider(Spider):
    name = "pages"

    def parse(self, response: Any) -> None:  # pragma: no cover - never called
        pass

    async def scroll_down(self, page: Any) -> None:  # pragma: no cover - a page method by name
        pass


def _spider(**settings: Any) -> Spider:
    spider = PageSpider()
    spider.settings = Settings(settings)  # type: ignore[attr-defined]
    return spider


SPIDERS = [
    _spider(),
    _spider(
        CRAWLPLUG_PAGE_METHODS=["evaluate", "scroll_down"],
        CRAWLPLUG_META_KEYS={
            "playwright_context": True,
            "playwright_page_init_callback": ["scroll_down", "os.getcwd"],
            "playwright_page_event_handlers": ["scroll_down"],
        },
    ),
]
_names = st.sampled_from(["click", "evaluate", "goto", "screenshot", "scroll_down", "closed", "__init__"]) | st.text(
    max_size=10
)
_kwargs = st.dictionaries(
    st.sampled_from(["method", "self", "path", "timeout", "state"]) | st.text(max_size=6), _json, max_size=3
)
_page_methods = (
    st.fixed_dictionaries(
        {},
        optional={
            "method": _names | _json,
            "spider_method": _names | _json,
            "args": st.lists(_json, max_size=3) | _json,
            "kwargs": _kwargs | _json,
            "extra": _json,
        },
    )
    | _json
)


@FUZZ
@given(st.lists(_page_methods, max_size=3), st.sampled_from([0, 1]))
@example([{"method": "click", "args": ["a"], "kwargs": {"method": "x"}}], 0)  # PageMethod's own argument
@example([{"spider_method": "scroll_down", "kwargs": {"self": 1}}], 1)
def test_any_stored_page_method_raises_only_decode_error(data, which):
    xmeta = {"playwright_page_methods": [{"$crawlplug": "playwright.PageMethod", "data": d} for d in data]}
    payload = json.dumps({"v": 3, "u": "http://x.test/", "m": {"playwright": True}, "x": xmeta}).encode()
    try:
        request = SERIALIZER.loads(payload, SPIDERS[which])
    except DecodeError:
        return
    assert all(type(pm) is PageMethod for pm in request.meta["playwright_page_methods"])


_meta_values = (
    _json
    | st.sampled_from(["default", "scroll_down", "os.getcwd", "os.system", "closed"])
    | st.dictionaries(st.text(max_size=6), st.sampled_from(["scroll_down", "closed", "parse"]) | _json, max_size=2)
)


@FUZZ
@given(
    st.dictionaries(st.sampled_from(sorted(metakeys.registered())) | st.text(max_size=6), _meta_values, max_size=3),
    st.sampled_from([0, 1]),
)
def test_any_meta_naming_code_raises_only_decode_error_and_what_is_read_stores_again(meta, which):
    spider = SPIDERS[which]
    try:
        request = SERIALIZER.loads(json.dumps({"v": 3, "u": "http://x.test/", "m": meta}).encode(), spider)
    except DecodeError:
        return
    # what a node accepted it stores again (a retry, a redirect) and reads back the same
    again = SERIALIZER.loads(SERIALIZER.dumps(request, spider), spider)
    assert again.meta == request.meta


@FUZZ
@given(
    st.sampled_from(sorted(("click", "fill", "press", "wait_for_selector", "screenshot", "hover"))),
    st.lists(_json, max_size=3),
    st.dictionaries(
        st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=6).filter(
            lambda k: k not in ("method", "self", "path")
        ),
        _json,
        max_size=3,
    ),
)
def test_an_allowed_page_method_with_any_json_arguments_round_trips(name, args, kwargs):
    spider = SPIDERS[0]
    request = Request("http://x.test/", meta={"playwright_page_methods": [PageMethod(name, *args, **kwargs)]})
    back = SERIALIZER.loads(SERIALIZER.dumps(request, spider), spider).meta["playwright_page_methods"][0]
    assert (back.method, list(back.args), back.kwargs) == (name, args, kwargs)
