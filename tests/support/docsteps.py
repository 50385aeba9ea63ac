"""A page's shell sessions as steps: what Sybil finds in a Markdown page, and the
markers that say how each block runs (tests/support/docpages.py runs them).

`Sybil <https://sybil.readthedocs.io/>`_ lexes the page (its fenced blocks, its
``<!-- skip: next -->`` comments, positions for the failure message) and hands each step
to an evaluator here, in page order. A step is:

* a ``sh`` block: commands a reader types into the terminal they are in, with the
  unlabeled block right after it (blank lines between at most) as what they print;
* a ``console`` block: ``host$ command`` lines, each followed by what it prints; each
  host (``web1$``, ``redis1$``, ``$``) is a terminal of its own, on this machine;
* an unlabeled block marked ``excerpt of terminal NAME`` or ``excerpt of file PATH``: lines
  a background command logged (other lines between them);
* a ``python``, ``ini`` or ``yaml`` block marked ``file PATH`` (save it as that file),
  ``set PATH`` (its top-level assignments replace those of that Python file, or are added),
  or ``in PATH`` (the file already has these lines: a page describing a template).

Markers are HTML comments right before a block, invisible on the page, clauses separated
by commas: ``<!-- doc-test: background, terminal 1 -->``:

``background``
    the commands keep running (a node, a daemon): sent to a terminal of their own, the
    page goes on; their output block is an excerpt, waited for;
``terminal NAME``
    the terminal to type into (opened with the directory and environment of the page's
    first one, as a reader opens one and activates the venv);
``illustrative``
    the output shown is an example, not compared (the commands must still succeed);
``fails``
    a command of the block exits non-zero, as its output shows (else a failing command
    fails the page);
``ended``
    (an excerpt) wait until the terminal's commands ended;
``as written``
    no address of the page is rewritten to the test's loopback ones;
``timeout N``
    seconds the block may take, or an excerpt may be waited for (default 120: a failing page
    says why before pytest-timeout ends the test).

``<!-- skip: next "why" -->`` (Sybil's own) leaves the next step out, and
``<!-- doc-test: run ... -->`` holds commands the page does not show (the test's set-up
of what a page takes as given), run and checked to succeed.

Every unlabeled block of a page run this way must be one of the above: a block of output
that no command is paired with fails, so a page cannot drift by losing a command.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass

from sybil import Document, Region
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer, RawFencedCodeBlockLexer
from sybil.typing import Evaluator

from .patience import patient

SHELLS = {"sh", "shell", "bash", "console"}
FILES = {"python", "ini", "yaml", "toml"}
DEFAULT_TIMEOUT = 120.0
#: a console block's prompt: the host (``web1``, ``redis1``, none) and the command
PROMPT = re.compile(r"^(?P<host>[\w-]*)\$ (?P<command>.*)$")


@dataclass
class Options:
    """The clauses of a ``<!-- doc-test: ... -->`` marker."""

    background: bool = False
    terminal: str | None = None
    illustrative: bool = False
    fails: bool = False
    ended: bool = False
    as_written: bool = False
    timeout: float = patient(DEFAULT_TIMEOUT)  # times CRAWLPLUG_TEST_PATIENCE, as every wait of the tests
    excerpt_of: str | None = None  # "terminal NAME" or "file PATH"
    file_action: tuple[str, str] | None = None  # ("file" | "set" | "in", path)
    hidden: str | None = None  # the commands of a `run` marker

    @classmethod
    def parse(cls, text: str, body: str = "") -> Options:
        options = cls()
        for clause in filter(None, (c.strip() for c in text.split(","))):
            word, _, rest = clause.partition(" ")
            rest = rest.strip()
            if clause in ("background", "illustrative", "fails", "ended"):
                setattr(options, clause, True)
            elif clause == "as written":
                options.as_written = True
            elif word == "terminal" and rest:
                options.terminal = clause
            elif word == "timeout" and rest:
                options.timeout = patient(float(rest))
            elif clause.startswith("excerpt of ") and rest:
                options.excerpt_of = clause.removeprefix("excerpt of ").strip()
            elif word in ("file", "set", "in") and rest:
                options.file_action = (word, rest)
            elif clause == "run":
                options.hidden = textwrap.dedent(body).strip()
            else:
                raise ValueError(f"unknown doc-test marker clause {clause!r}")
        return options


@dataclass
class Block:
    """One fenced block: its info string, its text, and where it is."""

    info: str
    source: str
    start: int
    end: int

    @property
    def language(self) -> str:
        return self.info.split()[0] if self.info.strip() else ""


@dataclass
class Step:
    kind: str  # "commands", "excerpt", "file", "hidden", "orphan"
    options: Options
    block: Block | None = None
    expected: str | None = None


# -- parsing ---------------------------------------------------------------------------------------

_FENCES = RawFencedCodeBlockLexer(info_pattern=re.compile(r"(?P<info>[^\n]*)\n"))
_MARKERS = DirectiveInHTMLCommentLexer(directive="doc-test", arguments=".*?")


def _between_is_blank(text: str, start: int, end: int) -> bool:
    return text[start:end].strip() == ""


def _content(text: str, start: int, end: int) -> str:
    """A fenced block's lines as written (Sybil's lexeme is dedented, and a table's indent
    matters), less only the indent of its fence (a block inside a list item or a note)."""
    indent = len(text[start:]) - len(text[start:].lstrip(" \t"))
    first = text.index("\n", start) + 1
    last = text.rfind("\n", 0, end) + 1
    return "".join(
        line[indent:] if line[:indent].strip() == "" else line for line in text[first:last].splitlines(keepends=True)
    )


def parse_steps(document: Document, evaluator: Evaluator) -> Iterable[Region]:
    """Sybil's parser (with ``evaluator`` bound): the page's steps, one region each (a
    marker, its block and the output block paired with it)."""
    text = document.text
    blocks = [
        Block(r.lexemes["info"].strip(), _content(text, r.start, r.end), r.start, r.end) for r in _FENCES(document)
    ]
    markers = []
    for region in _MARKERS(document):
        end = text.index("-->", region.end) + 3
        markers.append((region.start, end, Options.parse(region.lexemes["arguments"], str(region.lexemes["source"]))))
    used: set[int] = set()
    for m_start, m_end, options in markers:
        if options.hidden is not None:
            yield Region(m_start, m_end, Step("hidden", options), evaluator)
    for i, block in enumerate(blocks):
        if i in used:
            continue
        marker = next(
            (
                (s, o)
                for s, e, o in markers
                if o.hidden is None and e <= block.start and _between_is_blank(text, e, block.start)
            ),
            None,
        )
        start, options = marker if marker else (block.start, Options())
        end = block.end
        step: Step | None = None
        if block.language in SHELLS:
            step = Step("commands", options, block)
            after = blocks[i + 1] if i + 1 < len(blocks) else None
            if (
                block.language != "console"
                and after
                and not after.language
                and _between_is_blank(text, end, after.start)
            ):
                step.expected = after.source
                used.add(i + 1)
                end = after.end
        elif not block.language:
            if options.excerpt_of:
                step = Step("excerpt", options, block, block.source)
            elif not options.illustrative:
                step = Step("orphan", options, block)
        elif block.language in FILES and options.file_action:
            step = Step("file", options, block)
        if step is not None:
            yield Region(start, end, step, evaluator)
