"""A site definition put to work on a page: links to follow and fields to extract.

:class:`CompiledSite` is built once per definition version (link extractors,
regexes, type adapters) and then applied to every page. Nothing here raises
for a page: a selector that matches nothing, a value that does not convert, an
exception while selecting, all come back as data in an :class:`Extraction`
for the spider to count (see :mod:`crawlplug.sites.outcomes`).

A region between two strings (``sub_prefix``/``sub_suffix``, of a link rule or a
field) is the page's text after the first ``sub_prefix`` up to the first
``sub_suffix`` after it: :class:`PageCuts` cuts it once per page and extraction
call, and parses the cut as a page of its own (links in it still resolve against
the page's URL and ``<base href>``). A bound not found on the page makes the region
empty (no links, no match), never the whole page; :class:`Cut` says which bound.

How a field's value is made from a page, in order:

1. select with ``css`` or ``xpath`` (only in the cut region when the field has
   ``sub_prefix``/``sub_suffix``); an element gives its text content,
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
from scrapy.http import HtmlResponse, Response
from scrapy.link import Link
from scrapy.linkextractors import LinkExtractor
from scrapy.utils.response import get_base_url

from .definition import Bounds, FieldSpec, SiteDefinition, expand_start_urls

__all__ = ["CompiledSite", "Cut", "Extraction", "FollowLink", "LinkRuleRun", "PageCuts", "cut_text"]

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


@dataclass(frozen=True)
class Cut:
    """A region between two strings as cut from one page."""

    text: str | None  # None: a bound was not found, the region is empty
    prefix_found: bool | None  # None: no sub_prefix (the cut starts at the page's start)
    suffix_found: bool | None  # None: no sub_suffix (to the page's end), or not looked for
    why: str | None = None  # why the region is empty

    @property
    def found(self) -> bool:
        return self.text is not None


def cut_text(text: str, bounds: Bounds) -> Cut:
    """``text`` after the first ``sub_prefix`` up to the first ``sub_suffix`` after it."""
    prefix, suffix = bounds
    start, prefix_found = 0, None
    if prefix is not None:
        at = text.find(prefix)
        if at < 0:
            return Cut(None, False, None, f"sub_prefix {prefix!r} not found on the page")
        start, prefix_found = at + len(prefix), True
    end, suffix_found = len(text), None
    if suffix is not None:
        end = text.find(suffix, start)
        if end < 0:
            after = "after sub_prefix" if prefix is not None else "on the page"
            return Cut(None, prefix_found, False, f"sub_suffix {suffix!r} not found {after}")
        suffix_found = True
    return Cut(text[start:end], prefix_found, suffix_found)


class PageCuts:
    """The string-cut regions of one page, each cut and parsed once: one per extraction call,
    shared by the rules and fields that name the same bounds. Nothing here raises."""

    def __init__(self, response: Response) -> None:
        self.response = response
        self._cuts: dict[Bounds, Cut] = {}
        self._pages: dict[tuple[Bounds, bool], HtmlResponse | None] = {}

    def cut(self, bounds: Bounds) -> Cut:
        if bounds not in self._cuts:
            try:
                text = self.response.text
            except AttributeError:  # a binary response: no text to cut
                self._cuts[bounds] = Cut(None, None, None, "the page is not text")
            else:
                self._cuts[bounds] = cut_text(text, bounds)
        return self._cuts[bounds]

    def page(self, bounds: Bounds, *, links: bool = False) -> HtmlResponse | None:
        """The cut region as a page of its own (None: it is empty). With ``links``, it starts
        with the page's ``<base href>`` (which is seldom inside the cut): relative links in it
        resolve as they do on the page."""
        key = (bounds, links)
        if key not in self._pages:
            cut = self.cut(bounds).text
            page = None
            if cut is not None:
                response = self.response
                if links:
                    # w3lib reads a base href as written (no entities); only a quote would end it early
                    base = get_base_url(response).replace('"', "%22").replace("'", "%27")  # type: ignore[arg-type]
                    cut = f'<base href="{base}">' + cut
                encoding = getattr(response, "encoding", None) or "utf-8"
                try:
                    # the page's encoding: a link's query is percent-encoded in it, as on the page
                    body = cut.encode(encoding, "xmlcharrefreplace")
                except (LookupError, UnicodeError):
                    body, encoding = cut.encode("utf-8"), "utf-8"
                page = HtmlResponse(url=response.url, body=body, encoding=encoding)
            self._pages[key] = page
        return self._pages[key]


class _Invalid(Exception):
    """A text that does not convert to the field's type."""


class _CompiledField:
    def __init__(self, name: str, spec: FieldSpec) -> None:
        self.name = name
        self.spec = spec
        self.regex = re.compile(spec.regex) if spec.regex is not None else None
        self.adapter = _ADAPTERS[spec.type]
        self.bounds = spec.bounds

    def select(self, response: Response, cuts: PageCuts | None = None) -> list[str]:
        spec = self.spec
        if self.bounds is not None:
            part = (cuts or PageCuts(response)).page(self.bounds)
            if part is None:  # a bound not found: the field matches nothing
                return []
            response = part
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

    def explain(self, response: Response, cuts: PageCuts | None = None) -> tuple[list[str], list[str]]:
        """(the texts the selector matched, why each one gave no value), for
        crawlplug.sites.trial: the same selection and cleaning as :meth:`value`."""
        texts = self.select(response, cuts)
        refused: list[str] = []
        for text in texts:
            reason: list[str] = []
            try:
                if self.clean(text, reason) is None:
                    refused += reason
            except _Invalid as exc:
                refused.append(str(exc))
        return texts, refused

    def value(self, response: Response, cuts: PageCuts | None = None) -> tuple[Any, str | None]:
        """(value or None, why it is invalid or None)."""
        values, why = [], None
        for text in self.select(response, cuts):
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


@dataclass(frozen=True)
class LinkRuleRun:
    """A link rule, compiled: its extractor (restricted to a CSS/XPath region, or run on
    the cut region when ``bounds``), the step and priority of the pages it links to."""

    extractor: LinkExtractor
    target: str
    priority: int
    bounds: Bounds | None = None

    def extract_links(self, response: Response, cuts: PageCuts | None = None) -> list[Link]:
        if self.bounds is None:
            return self.extractor.extract_links(response)  # type: ignore[arg-type]
        part = (cuts or PageCuts(response)).page(self.bounds, links=True)
        return [] if part is None else self.extractor.extract_links(part)


class CompiledSite:
    """One version of a site definition, ready to apply to pages."""

    def __init__(self, site: SiteDefinition, version: str, origin: str) -> None:
        self.site = site
        self.name = site.name
        self.version = version
        self.origin = origin  # "Redis" or the file it came from
        self.detail_step = site.detail_step
        self.steps = {s.name for s in site.steps}
        self.rules: dict[str, list[LinkRuleRun]] = {}
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
                bounds = region.bounds if region is not None else None
                rules.append(LinkRuleRun(extractor, target, site.priority(target), bounds))
            self.rules[step.name] = rules
        self.fields = [_CompiledField(name, spec) for name, spec in site.fields.items()]

    def start(self) -> list[tuple[str, str, int]]:
        """(url, step, priority) of every start URL."""
        return [(url, step, self.site.priority(step)) for url, step in expand_start_urls(self.site)]

    def has_links(self, step: str) -> bool:
        return bool(self.rules.get(step))

    def links(self, response: Response, step: str, cuts: PageCuts | None = None) -> list[FollowLink]:
        """The links to follow from a page of ``step``, in page order (a URL once, first rule wins)."""
        cuts = cuts or PageCuts(response)
        out: dict[str, FollowLink] = {}
        for rule in self.rules.get(step, []):
            for link in rule.extract_links(response, cuts):
                out.setdefault(link.url, FollowLink(link.url, rule.target, rule.priority))
        return list(out.values())

    def extract(self, response: Response, cuts: PageCuts | None = None) -> Extraction:
        """The item of a detail page, and what went wrong with its fields."""
        cuts = cuts or PageCuts(response)
        result = Extraction(item={"url": response.url})
        for f in self.fields:
            value: Any = None
            try:
                value, why = f.value(response, cuts)
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
