"""Fuzzing the start-entry decoder all the way to what a node stores.

tests/test_starts.py fuzzes ``starts.parse``/``build`` with mostly invalid input. Here
the entries are mostly *valid* (every known key, scrapy-redis form fields, callbacks of
the demo spider, odd numbers and text), and the property is the one a crawl relies on:
an entry that parse() and build() accept makes requests the serializer stores and
reads back unchanged, so an accepted entry can never be refused later, at enqueue,
where it would be acknowledged without being crawled; anything else is a DecodeError.
"""

from __future__ import annotations

import json
import os
import string
import sys
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from crawlplug import starts
from crawlplug.errors import DecodeError
from crawlplug.serializers import JsonSerializer

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the demo project is not installed into the venv
    sys.path.insert(0, str(ROOT))

from spiders.shop import ShopSpider

from .support.fuzz import examples

set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "crawlplug-hypothesis"))
SPIDER = ShopSpider(base_url="http://shop.test")
SERIALIZER = JsonSerializer()
FUZZ = settings(max_examples=examples(400), deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

_text = st.text(max_size=12)
_numbers = st.integers() | st.floats() | st.sampled_from([1e308, -0.0, 2**63, -(2**70)])
_json = st.recursive(
    st.none() | st.booleans() | _numbers | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_urls = st.builds(
    lambda scheme, host, path: f"{scheme}://{host}/{path}",
    st.sampled_from(["http", "https", "HTTP"]),
    st.sampled_from(["shop.test", "127.0.0.1:8000", "[::1]", "exämple.com", "a.b.c"]),
    st.text(alphabet=string.ascii_letters + string.digits + "-._~/?&=%#é ", max_size=20),
)
_entries = st.fixed_dictionaries(
    {"url": _urls},
    optional={
        "method": st.sampled_from(["GET", "post", "PUT", "HEAD", "PATCH"]),
        "headers": st.dictionaries(
            st.text(alphabet=string.ascii_letters + "-", min_size=1, max_size=10),
            st.text(alphabet=string.printable, max_size=10) | st.lists(st.text(max_size=6), max_size=2),
            max_size=3,
        ),
        "body": st.text(max_size=30),
        "meta": st.dictionaries(_text, _json, max_size=3),
        "priority": st.integers(-(2**40), 2**40),
        "callback": st.sampled_from(["parse_item", "parse_list", "parse_nothing", "start", "log"]),
        "errback": st.sampled_from(["parse_list", "nope"]),
        "cb_kwargs": st.dictionaries(st.from_regex(r"[a-z_]{1,6}", fullmatch=True), _json, max_size=2),
        "dont_filter": st.booleans(),
        "encoding": st.sampled_from(["utf-8", "latin-1", "cp1252", "ascii", "no-such-codec"]),
        "formdata": st.dictionaries(_text, _text | st.integers() | st.lists(_text, max_size=2), max_size=2),
        "q": _text | _numbers,  # a scrapy-redis form field
    },
)


def _stored_and_read_back(line: str | bytes) -> None:
    try:
        request = starts.build(starts.parse(line), SPIDER)
    except DecodeError:
        return
    payload = SERIALIZER.dumps(request, SPIDER)  # must not raise: the entry was accepted
    back = SERIALIZER.loads(payload, SPIDER)
    assert (back.url, back.method, back.body, back.meta, back.cb_kwargs, back.priority, back.callback) == (
        request.url,
        request.method,
        request.body,
        request.meta,
        request.cb_kwargs,
        request.priority,
        request.callback,
    )
    assert back.url.startswith(("http://", "https://"))


@FUZZ
@given(_entries)
def test_accepted_json_entries_make_requests_a_node_can_store(entry):
    _stored_and_read_back(json.dumps(entry))


@FUZZ
@given(_entries, st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e400", "1.5", "7"]))
def test_non_finite_numbers_are_refused_not_lost(entry, number):
    """JSON text may hold NaN, Infinity or 1e999, which no stored request can: refused
    with a DecodeError (a dead letter), not accepted and then refused at enqueue."""
    where = "meta" if "meta" in entry else "q"
    line = json.dumps({**entry, where: "@@"}).replace('"@@"', number)
    _stored_and_read_back(line)
    if number not in ("1.5", "7"):
        try:
            starts.parse(line)
        except DecodeError as exc:
            assert "number" in str(exc) or "JSON" in str(exc)
        else:
            raise AssertionError(f"{line!r} was accepted")


@FUZZ
@given(_urls | st.text(max_size=40))
def test_accepted_plain_entries_make_requests_a_node_can_store(line):
    _stored_and_read_back(line)
