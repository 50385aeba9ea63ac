"""Start URLs of a site definition: ``{1..100}`` ranges and templates with variables.

    /category/{1..10}/                 1, 2, ... 10
    /list/{01..20}.html                zero-padded: 01 ... 20
    /archive/{0..100..10}/             with a step: 0, 10, ... 100
    {url: "/b/{make}?p={page}", vars: {make: [audi, bmw], page: "1..5"}}   every combination

A definition expands to at most :data:`MAX_START_URLS` URLs, in order, without duplicates.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urljoin

__all__ = ["MAX_START_URLS", "expand", "var_values"]

#: Most start URLs one definition may expand to.
MAX_START_URLS = 100_000
#: ``{1..100}``, ``{01..20}`` (zero-padded), ``{0..100..10}`` (with a step)
_RANGE_RE = re.compile(r"\{(-?\d+)\.\.(-?\d+)(?:\.\.(\d+))?\}")
_VAR_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_RANGE_SPEC_RE = re.compile(r"^\s*(-?\d+)\s*\.\.\s*(-?\d+)\s*(?:\.\.\s*(\d+)\s*)?$")


def _range_values(start: str, stop: str, step: str | None) -> list[str]:
    a, b, by = int(start), int(stop), int(step or 1)
    if by < 1:
        raise ValueError("a range step must be at least 1")
    width = len(start.lstrip("-")) if start.lstrip("-").startswith("0") and len(start.lstrip("-")) > 1 else 0
    values = range(a, b + 1, by) if a <= b else range(a, b - 1, -by)
    if len(values) > MAX_START_URLS:
        raise ValueError(f"range {start}..{stop} has {len(values)} values (at most {MAX_START_URLS})")
    return [str(n).zfill(width) if width else str(n) for n in values]


def var_values(spec: str | list[str | int]) -> list[str]:
    if isinstance(spec, list):
        return [str(x) for x in spec]
    m = _RANGE_SPEC_RE.match(spec)
    if not m:
        raise ValueError(f"{spec!r} is neither a range like '1..100' (or '0..100..10') nor a list of values")
    return _range_values(*m.groups())


def _expand_one(template: str, values: dict[str, list[str]]) -> list[str]:
    names = _VAR_RE.findall(template)
    unknown = sorted(set(names) - set(values))
    if unknown:
        raise ValueError(f"no vars for {', '.join('{' + n + '}' for n in unknown)}")
    # named variables first, then inline ranges, every combination
    distinct = list(dict.fromkeys(names))
    filled = []
    for combo in itertools.product(*(values[n] for n in distinct)):
        chosen = dict(zip(distinct, combo))
        filled.append(_VAR_RE.sub(lambda m: chosen[m.group(1)], template))  # noqa: B023 - used at once
    out: list[str] = []
    for url in filled:
        ranges = [_range_values(*m.groups()) for m in _RANGE_RE.finditer(url)]
        parts = _RANGE_RE.split(url)
        # re.split with 3 groups: [text, g1, g2, g3, text, ...]: keep the literal pieces
        texts = parts[::4]
        for combo in itertools.product(*ranges):
            out.append("".join(t + (combo[i] if i < len(combo) else "") for i, t in enumerate(texts)))
            if len(out) > MAX_START_URLS:
                raise ValueError(f"expands to more than {MAX_START_URLS} URLs")
    return out


def expand(start_urls: Iterable[Any], base_url: str | None, first: str) -> list[tuple[str, str]]:
    """Every start URL of a definition's ``start_urls`` (each a template, or an entry with
    ``url``, ``vars`` and ``step``) with its step, ``first`` when the entry names none:
    ``[(absolute url, step name), ...]``, in order, no duplicates."""
    seen: dict[str, str] = {}
    for entry in start_urls:
        template, variables, step = (entry, {}, None) if isinstance(entry, str) else (entry.url, entry.vars, entry.step)
        values = {k: var_values(v) for k, v in variables.items()}
        for url in _expand_one(template, values):
            absolute = urljoin(base_url, url) if base_url else url
            seen.setdefault(absolute, step or first)
            if len(seen) > MAX_START_URLS:
                raise ValueError(f"more than {MAX_START_URLS} start URLs")
    return list(seen.items())
