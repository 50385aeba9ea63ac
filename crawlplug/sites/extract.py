"""A site definition put to work on a page: links to follow and fields to extract.

:class:`CompiledSite` is built once per definition version (link extractors,
regexes, type adapters) and then applied to every page. Nothing here raises
for a page: a selector that matches nothing, a value that does not convert, an
exception while selecting, all come back as data in an :class:`Extraction`
for the spider to count (see :mod:`crawlplug.sites.outcomes`).

How a field's value is made from a page, in order:

1. select with ``css`` or ``xpath``; an element gives its text content,
   a text node or attribute its value;
2. strip whitespace; remove ``prefix`` and ``suffix`` where present;
   apply ``replace`` (literal substrings); search ``regex`` (its first group
   if it has one, else the whole match; no match: null);
3. an empty text is null; ``map`` turns an exact text into a value (null too);
4. convert to ``type`` (pydantic's lax rules: "12" -> 12, "yes" -> True);
   a text that does not convert is *invalid*, and null;
5. ``multiple: true`` keeps every non-null value as a list (empty: null),
   else the first non-null value is taken.

A null required field makes the item *incomplete* ("<field> is null"); a null
optional field takes its ``default``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError
from scrapy.http import Response
from scrapy.linkextractors import LinkExtractor

from .definition import FieldSpec, SiteDefinition, expand_start_urls

__all__ = ["CompiledSite", "Extraction", "FollowLink"]

_ADAPTERS: dict[str, TypeAdapter[Any]] = {
    "str": TypeAdapter(str),
    "int": TypeAdapter(int),
    "float": TypeAdapter(float),
    "bool": TypeAdapter(bool),
}


@dataclass(frozen=True)
class FollowLink:
    url: str
    step: str
    priority: int


@dataclass
class Extraction:
    """What the fields of one page gave."""

    item: dict[str, Any]
    missing: list[str] = field(default_factory=list)  # required fields that are null
    invalid: list[tuple[str, str]] = field(default_factory=list)  # (field, why) values that did not convert
    defaulted: list[str] = field(default_factory=list)  # optional fields that took their default
    errors: list[tuple[str, BaseException]] = field(default_factory=list)  # (field, exception raised selecting it)

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def filled(self) -> list[str]:
        """Fields the page gave a value (not null, not a default), in definition order."""
        unfilled = set(self.missing) | set(self.defaulted)
        return [name for name in self.item if name != "url" and name not in unfilled]


class _Invalid(Exception):
    """A text that does not convert to the field's type."""


class _CompiledField:
    def __init__(self, name: str, spec: FieldSpec) -> None:
        self.name = name
        self.spec = spec
        self.regex = re.compile(spec.regex) if spec.regex is not None else None
        self.adapter = _ADAPTERS[spec.type]

    def select(self, response: Response) -> list[str]:
        spec = self.spec
        found = response.css(spec.css) if spec.css is not None else response.xpath(spec.xpath)  # type: ignore[arg-type]
        out = []
        for sel in found:
            root = sel.root
            if isinstance(root, str):
                out.append(root)
            elif hasattr(root, "tag"):  # an element: its text content
                out.append(sel.xpath("string()").get() or "")
            elif root is not None:  # an XPath number or boolean
                out.append(str(root))
        return out

    def clean(self, text: str, why: list[str] | None = None) -> Any:
        """One selected text as a value (None: null, and the reason appended to ``why``);
        raises _Invalid."""
        spec = self.spec
        value = text.strip()
        if spec.prefix and value.startswith(spec.prefix):
            value = value[len(spec.prefix) :].strip()
        if spec.suffix and value.endswith(spec.suffix):
            value = value[: -len(spec.suffix)].strip()
        for old, new in spec.replace.items():
            value = value.replace(old, new)
        if self.regex is not None:
            m = self.regex.search(value)
            if m is None:
                if why is not None:
                    why.append(f"regex {spec.regex!r} did not match {value[:80]!r}")
                return None
            value = (m.group(1) if self.regex.groups else m.group(0)) or ""
            value = value.strip()
        if value == "":
            if why is not None:
                why.append("the text is empty" if not text.strip() else f"nothing is left of {text.strip()[:80]!r}")
            return None
        mapped: Any = value
        if spec.map is not None and value in spec.map:
            mapped = spec.map[value]
            if mapped is None:
                if why is not None:
                    why.append(f"map turns {value[:80]!r} into null")
                return None
        try:
            return self.adapter.validate_python(mapped)
        except ValidationError as exc:
            why = exc.errors(include_url=False)[0]["msg"]
            raise _Invalid(f"{why}: {value[:80]!r}") from None

    def explain(self, response: Response) -> tuple[list[str], list[str]]:
        """(the texts the selector matched, why each one gave no value), for
        crawlplug.sites.trial: the same selection and cleaning as :meth:`value`."""
        texts = self.select(response)
        refused: list[str] = []
        for text in texts:
            reason: list[str] = []
            try:
                if self.clean(text, reason) is None:
                    refused += reason
            except _Invalid as exc:
                refused.append(str(exc))
        return texts, refused

    def value(self, response: Response) -> tuple[Any, str | None]:
        """(value or None, why it is invalid or None)."""
        values, why = [], None
        for text in self.select(response):
            try:
                v = self.clean(text)
            except _Invalid as exc:
                why = why or str(exc)
                continue
            if v is not None:
                if not self.spec.multiple:
                    return v, None
                values.append(v)
        return (values or None) if self.spec.multiple else None, why


class CompiledSite:
    """One version of a site definition, ready to apply to pages."""

    def __init__(self, site: SiteDefinition, version: str, origin: str) -> None:
        self.site = site
        self.name = site.name
        self.version = version
        self.origin = origin  # "Redis" or the file it came from
        self.detail_step = site.detail_step
        self.steps = {s.name for s in site.steps}
        self.rules: dict[str, list[tuple[LinkExtractor, str, int]]] = {}
        for step in site.steps:
            rules = []
            for rule in step.links:
                target = rule.to or site.next_step(step.name)
                assert target is not None  # validated: the last step's rules name their step
                region = rule.region
                extractor = LinkExtractor(
                    allow=rule.match.as_regexes() if rule.match is not None else (),
                    restrict_css=(region.css,) if region is not None and region.css else (),
                    restrict_xpaths=(region.xpath,) if region is not None and region.xpath else (),
                    unique=True,
                )
                rules.append((extractor, target, site.priority(target)))
            self.rules[step.name] = rules
        self.fields = [_CompiledField(name, spec) for name, spec in site.fields.items()]

    def start(self) -> list[tuple[str, str, int]]:
        """(url, step, priority) of every start URL."""
        return [(url, step, self.site.priority(step)) for url, step in expand_start_urls(self.site)]

    def has_links(self, step: str) -> bool:
        return bool(self.rules.get(step))

    def links(self, response: Response, step: str) -> list[FollowLink]:
        """The links to follow from a page of ``step``, in page order (a URL once, first rule wins)."""
        out: dict[str, FollowLink] = {}
        for extractor, target, priority in self.rules.get(step, []):
            for link in extractor.extract_links(response):
                out.setdefault(link.url, FollowLink(link.url, target, priority))
        return list(out.values())

    def extract(self, response: Response) -> Extraction:
        """The item of a detail page, and what went wrong with its fields."""
        result = Extraction(item={"url": response.url})
        for f in self.fields:
            value: Any = None
            try:
                value, why = f.value(response)
            except Exception as exc:  # noqa: BLE001 - a page must never crash the crawl
                result.errors.append((f.name, exc))
                why = None
            if why is not None:
                result.invalid.append((f.name, why))
            if value is None:
                if f.spec.required:
                    result.missing.append(f.name)
                else:
                    value = f.spec.default
                    result.defaulted.append(f.name)
            result.item[f.name] = value
        return result
