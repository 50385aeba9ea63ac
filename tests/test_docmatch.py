"""The docs' tests compare a page's output blocks with what the commands printed
(tests/support/docmatch.py) and read the page's markers (tests/support/docsteps.py): a
placeholder that matched too much, or a marker read wrong, would let a page drift
unnoticed. Unit tier: no process, no Redis."""

from __future__ import annotations

import pytest
from sybil import Document

from .support import docmatch
from .support.docpages import set_assignments
from .support.docsteps import Options, parse_steps
from .support.patience import patient


def test_dots_in_a_line_stand_for_text_and_a_line_of_dots_for_lines():
    page = "crawl 'shop' on unix://.../redis.sock (embedded)\n...\n  done       131"
    printed = "crawl 'shop' on unix:///tmp/x/redis.sock (embedded)\nrun 1: finished\n  queued 0\n  done       131\n"
    assert docmatch.whole(page, printed) is None
    assert docmatch.whole(page, printed.replace("131", "130")) is not None
    assert docmatch.whole(page, "crawl 'shop' on unix:///tmp/x/redis.sock (embedded)\n  done 131") is None


def test_n_stands_for_a_number_and_nothing_else():
    assert docmatch.whole("  <N> items1.jsonl", "  1,436 items1.jsonl") is None
    assert docmatch.whole("rate <N> pages/min", "rate 98.4 pages/min") is None
    assert docmatch.whole("  <N> items1.jsonl", "  many items1.jsonl") is not None
    assert docmatch.whole("exit <N>", "exit 1 and more") is not None


def test_a_missing_or_an_extra_line_fails_and_the_diff_names_only_it():
    page = "crawl 'shop' on x: run 1\n  job shop-...-0-0  scheduled\n  watch them"
    printed = "crawl 'shop' is new: created it\ncrawl 'shop' on x: run 1\n  job shop-ab12-0-0  scheduled\n  watch them"
    why = docmatch.whole(page, printed)
    assert why is not None
    changed = [line for line in why.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed == ["+crawl 'shop' is new: created it"], why
    assert docmatch.whole(printed, page) is not None  # the page shows a line the output lacks


def test_an_excerpt_finds_its_lines_in_order_among_others():
    log = "a INFO: one\nnoise\nb WARNING: two\nmore noise\n"
    assert docmatch.excerpt("... INFO: one\n... WARNING: two", log) is None
    assert docmatch.excerpt("... WARNING: two\n... INFO: one", log) is not None  # out of order
    assert "line 2" in (docmatch.excerpt("... INFO: one\n... ERROR: three", log) or "")


@pytest.mark.parametrize(
    ("marker", "field", "value"),
    [
        ("background, terminal 1", "terminal", "terminal 1"),
        ("excerpt of terminal 1 and terminal 2, ended", "excerpt_of", "terminal 1 and terminal 2"),
        ("fails", "fails", True),
        ("timeout 30", "timeout", patient(30.0)),  # a wait, times CRAWLPLUG_TEST_PATIENCE
        ("set shopcrawl/settings.py", "file_action", ("set", "shopcrawl/settings.py")),
    ],
)
def test_marker_clauses(marker, field, value):
    assert getattr(Options.parse(marker), field) == value


def test_an_unknown_marker_clause_is_refused():
    with pytest.raises(ValueError, match="unknown doc-test marker clause 'backgroud'"):
        Options.parse("backgroud")


def test_a_page_pairs_each_command_block_with_its_output_and_flags_an_orphan():
    text = (
        "```sh\necho hi\n```\n\n```\nhi\n```\n\n"
        "<!-- doc-test: background, terminal 1 -->\n```sh\nsleep 9\n```\n\n"
        "Text.\n\n```\nnobody prints this\n```\n"
    )
    steps = [region.parsed for region in parse_steps(Document(text, "page.md"), lambda example: None)]
    assert [(s.kind, s.expected) for s in steps] == [("commands", "hi\n"), ("commands", None), ("orphan", None)]
    assert steps[1].options.background and steps[1].options.terminal == "terminal 1"


def test_set_assignments_replaces_a_setting_or_adds_it():
    module = 'BOT_NAME = "x"\nADDONS = {}\n'
    assert (
        set_assignments(module, 'ADDONS = {"crawlplug.Addon": 0}')
        == 'BOT_NAME = "x"\nADDONS = {"crawlplug.Addon": 0}\n'
    )
    assert set_assignments(module, "DOWNLOAD_DELAY = 1").endswith("ADDONS = {}\nDOWNLOAD_DELAY = 1\n")
