"""An output block of a page against what the commands printed.

The expected text is the block as the page shows it, with two placeholders for what
varies between runs (times, process ids, node names, counts):

* ``...`` inside a line stands for any text on that line (a long line cut, a time, a
  path); a line that is only ``...`` stands for any number of lines, none included;
* ``<N>`` stands for a number (``7``, ``1,436``, ``98.4``, ``-1``).

A run of spaces stands for one or more (a table's columns widen with their numbers);
trailing spaces and blank lines at either end do not count.

Two ways to compare: :func:`whole` (the output of a command: every line accounted for)
and :func:`excerpt` (lines picked from a log: each expected line, in order, among the
others).
"""

from __future__ import annotations

import difflib
import re
from functools import lru_cache

NUMBER = r"-?\d[\d,]*(?:\.\d+)?"
_TOKENS = re.compile(r"(\.\.\.|<N>| +)")


@lru_cache(maxsize=4096)
def line_pattern(expected: str) -> re.Pattern[str]:
    """The regular expression one expected line stands for."""
    parts = []
    for token in _TOKENS.split(expected.rstrip()):
        if token == "...":
            parts.append(".*?")
        elif token == "<N>":
            parts.append(NUMBER)
        elif token and token.strip() == "":
            parts.append(" +")
        else:
            parts.append(re.escape(token))
    return re.compile("".join(parts) + r"\s*")


def lines_of(text: str) -> list[str]:
    """``text``'s lines, trailing spaces dropped, blank lines at either end left out."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _matches(expected: str, actual: str) -> bool:
    return line_pattern(expected).fullmatch(actual) is not None


def whole(expected: str, actual: str) -> str | None:
    """None if ``actual`` is ``expected`` line for line (placeholders filled), else why not."""
    want, got = lines_of(expected), lines_of(actual)
    memo: dict[tuple[int, int], bool] = {}

    def match(i: int, j: int) -> bool:
        key = (i, j)
        if key not in memo:
            if i == len(want):
                memo[key] = j == len(got)
            elif want[i].strip() == "...":
                memo[key] = match(i + 1, j) or (j < len(got) and match(i, j + 1))
            else:
                memo[key] = j < len(got) and _matches(want[i], got[j]) and match(i + 1, j + 1)
        return memo[key]

    if match(0, 0):
        return None
    return "the output differs from the page's:\n" + _diff(want, got)


def excerpt(expected: str, actual: str) -> str | None:
    """None if every expected line matches a line of ``actual``, in the page's order (other
    lines between them, as when a page shows a few lines of a log), else why not."""
    want = [line for line in lines_of(expected) if line.strip() != "..."]
    got = lines_of(actual)
    j = 0
    for i, line in enumerate(want):
        while j < len(got) and not _matches(line, got[j]):
            j += 1
        if j == len(got):
            shown = "\n".join(got[-40:])
            return (
                f"line {i + 1} of the page's excerpt is not in the output (after the lines before it):\n"
                f"  {line}\nthe output's last lines:\n{shown}"
            )
        j += 1
    return None


def _diff(want: list[str], got: list[str]) -> str:
    """A unified diff, page against output, that leaves out the lines that matched."""
    shown_got = list(got)
    # where an output line matches the page's next line that it can (in order: an extra or
    # a missing line shifts the rest), show the page's text on both sides, so that the diff
    # points at the lines that really differ, not at a placeholder and what it stood for
    k = 0
    for j, line in enumerate(got):
        for kk in range(k, len(want)):
            if want[kk].strip() != "..." and _matches(want[kk], line):
                shown_got[j], k = want[kk], kk + 1
                break
    return "\n".join(difflib.unified_diff(want, shown_got, "the page", "the commands' output", lineterm="", n=2))
