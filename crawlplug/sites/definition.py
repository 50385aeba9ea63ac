"""Site definitions: what a site spider crawls and extracts, as data (YAML or JSON).

A definition names the site, its start URLs (with ``{1..100}`` ranges or a
template and its variables), the discovery steps (which region of a page to
take links from, which links, into which step, at which priority), the step
whose pages are detail pages, the fields to extract there, and optional item
pipeline steps. A region is one CSS or XPath selector, or the page's text cut
between two strings (``sub_prefix``/``sub_suffix``, which a field may take too).
``docs/sites.md`` describes the format with two worked examples
(``spiders/sites/shop.yaml``, ``spiders/sites/cars.yaml``); start URL ranges and
templates are expanded by :mod:`crawlplug.sites.starts`.

:func:`validate` checks a parsed document against the schema (pydantic) and
then what a schema cannot see (a link into an unknown step, a CSS selector
cssselect cannot parse, a pipeline step the node does not list or that does not
import); every problem is reported at once, each with the path of its key::

    invalid site definition cars.yaml:
      steps[1].links[0].to: no step named 'modle' (steps: brand, series, model)
      fields.price.type: Input should be 'str', 'int', 'float' or 'bool'

Pipeline steps are class paths, and a definition is text anyone who can write to the
Redis may store: a step must be listed in the node's ``CRAWLPLUG_SITE_PIPELINES``
(the ``pipelines`` argument of :func:`validate`) before anything is imported, so a
stored definition can make a node import only what its own settings name.

Its size: the schema of a definition is one set of pydantic models with the checks that
cross them (steps named by links, fields by pipelines); apart, a reader would lose what
refers to what.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from lxml import etree
from parsel.csstranslator import HTMLTranslator
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from scrapy.utils.misc import load_object

from ..errors import ConfigError
from .starts import expand, var_values

__all__ = [
    "NAME_RE",
    "PIPELINES_SETTING",
    "Bounds",
    "FieldSpec",
    "LinkRule",
    "Loc",
    "SiteDefinition",
    "StartSpec",
    "Step",
    "errors_of",
    "expand_start_urls",
    "load_file",
    "parse_text",
    "validate",
    "version_of",
]

#: Site, step and field names: they become parts of stat names (``site/<site>/step/<step>/pages``).
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
#: The node-side list of the pipeline steps (class paths) a site definition may name.
PIPELINES_SETTING = "CRAWLPLUG_SITE_PIPELINES"
#: Where an error is: the keys and list indexes from the top of the document down
#: (``("steps", 1, "links", 0, "to")``); shown as ``steps[1].links[0].to``.
Loc = tuple[str | int, ...]


class _Model(BaseModel):
    # a misspelt key (requried: true) is an error with its path, not silently ignored
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_css(value: str) -> str:
    try:
        HTMLTranslator().css_to_xpath(value)
    except Exception as exc:  # noqa: BLE001 - cssselect's SelectorError is a SyntaxError or a RuntimeError
        raise ValueError(f"invalid CSS selector {value!r}: {exc}") from None
    return value


def _check_xpath(value: str) -> str:
    try:
        etree.XPath(value)
    except etree.XPathSyntaxError as exc:
        raise ValueError(f"invalid XPath {value!r}: {exc}") from None
    return value


def _check_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {value!r}: {exc}") from None
    return value


#: A string cut: (sub_prefix, sub_suffix), at least one of them given.
Bounds = tuple[str | None, str | None]


def _check_bound(value: str | None, info: ValidationInfo) -> str | None:
    if value == "":
        instead = "from the page's start" if info.field_name == "sub_prefix" else "to the page's end"
        raise ValueError(f"an empty {info.field_name} cuts nothing: leave it out to cut {instead}")
    return value


def _bounds(sub_prefix: str | None, sub_suffix: str | None) -> Bounds | None:
    return None if sub_prefix is None and sub_suffix is None else (sub_prefix, sub_suffix)


class Region(_Model):
    """The part(s) of a page links are taken from: one CSS or one XPath selector, or the
    page's text (its HTML source, decoded) after the first ``sub_prefix`` up to the first
    ``sub_suffix`` after it (one of the two may be left out: from the page's start, to its end)."""

    css: str | None = None
    xpath: str | None = None
    sub_prefix: str | None = None
    sub_suffix: str | None = None

    _css = field_validator("css")(lambda v: v if v is None else _check_css(v))
    _xpath = field_validator("xpath")(lambda v: v if v is None else _check_xpath(v))
    _bound = field_validator("sub_prefix", "sub_suffix")(_check_bound)

    @model_validator(mode="after")
    def _one(self) -> Region:
        kinds = (self.css is not None) + (self.xpath is not None) + (self.bounds is not None)
        if kinds != 1:
            raise ValueError("give exactly one of css, xpath, or sub_prefix/sub_suffix")
        return self

    @property
    def bounds(self) -> Bounds | None:
        """(sub_prefix, sub_suffix) of a string cut; None for a CSS or XPath region."""
        return _bounds(self.sub_prefix, self.sub_suffix)


StrOrList = str | list[str]


class Match(_Model):
    """Which links to keep: a URL prefix, a substring or a regex (one method; a list: any of them).

    A prefix starting with "/" is compared with the link's path (and query); any other
    prefix, a substring and a regex are compared with the absolute URL.
    """

    prefix: StrOrList | None = None
    contains: StrOrList | None = None
    regex: StrOrList | None = None

    @field_validator("regex")
    @classmethod
    def _regexes(cls, v: StrOrList | None) -> StrOrList | None:
        for pattern in [v] if isinstance(v, str) else v or []:
            _check_regex(pattern)
        return v

    @model_validator(mode="after")
    def _one(self) -> Match:
        given = [k for k in ("prefix", "contains", "regex") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of prefix, contains or regex")
        return self

    @property
    def method(self) -> str:
        return next(k for k in ("prefix", "contains", "regex") if getattr(self, k) is not None)

    @property
    def patterns(self) -> list[str]:
        value = getattr(self, self.method)
        return [value] if isinstance(value, str) else list(value)

    def as_regexes(self) -> list[str]:
        """The patterns as regexes searched in the absolute URL (what LinkExtractor's allow takes)."""
        method = self.method
        if method == "regex":
            return self.patterns
        if method == "contains":
            return [re.escape(p) for p in self.patterns]
        out = []
        for p in self.patterns:
            # "/item/" matches the path of a link on any host; "https://x/item/" the URL itself
            out.append(
                r"^[a-zA-Z][a-zA-Z0-9+.-]*://[^/?#]*" + re.escape(p) if p.startswith("/") else "^" + re.escape(p)
            )
        return out


class LinkRule(_Model):
    """Links of a page, in ``region``, matching ``match``, are followed into step ``to``."""

    region: Region | None = None
    match: Match | None = None
    to: str | None = Field(default=None, description="step of the linked pages (default: the next step)")


class Render(_Model):
    """The page rendered by a browser before it is parsed (crawlplug.sites.render)."""

    engine: Literal["playwright"] = "playwright"
    wait_for: str | None = Field(default=None, description="a CSS selector to wait for")
    timeout: float = Field(default=10.0, gt=0, le=300, description="seconds wait_for may take")
    wait: float = Field(default=0.0, ge=0, le=60, description="seconds to wait after it (or after the load)")

    _css = field_validator("wait_for")(lambda v: v if v is None else _check_css(v))


class Step(_Model):
    name: str
    priority: int | None = Field(default=None, description="of the requests for pages of this step")
    links: list[LinkRule] = Field(default_factory=list)
    render: Render | None = Field(default=None, description="render this step's pages (default: the site's)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(
                "a step name is letters, digits, '_' and '-' (at most 63), starting with a letter or digit"
            )
        return v


class StartSpec(_Model):
    """A start URL template: ``{var}`` placeholders filled from ``vars`` (every combination)."""

    url: str
    vars: dict[str, str | list[str | int]] = Field(default_factory=dict)
    step: str | None = Field(default=None, description="step of these pages (default: the first step)")


FieldType = Literal["str", "int", "float", "bool"]


class FieldSpec(_Model):
    """One field of an item: where it is, how to clean it, its type, whether it is required.

    ``sub_prefix``/``sub_suffix`` say where on the page the selector looks: only in the
    page's text after the first ``sub_prefix`` up to the first ``sub_suffix`` after it (as a
    :class:`Region` cuts it). ``prefix``/``suffix`` are another thing: they are stripped from
    the text of each value the selector found.
    """

    css: str | None = None
    xpath: str | None = None
    sub_prefix: str | None = None
    sub_suffix: str | None = None
    multiple: bool = False
    prefix: str | None = None
    suffix: str | None = None
    replace: dict[str, str] = Field(default_factory=dict)
    regex: str | None = None
    map: dict[str, Any] | None = None
    type: FieldType = "str"
    required: bool = False
    default: Any = None

    _css = field_validator("css")(lambda v: v if v is None else _check_css(v))
    _xpath = field_validator("xpath")(lambda v: v if v is None else _check_xpath(v))
    _regex = field_validator("regex")(lambda v: v if v is None else _check_regex(v))
    _bound = field_validator("sub_prefix", "sub_suffix")(_check_bound)

    @model_validator(mode="after")
    def _consistent(self) -> FieldSpec:
        if (self.css is None) == (self.xpath is None):
            raise ValueError("give exactly one of css or xpath")
        if self.required and "default" in self.model_fields_set:
            raise ValueError("a required field takes no default (a page without it is an error, not a default)")
        return self

    @property
    def bounds(self) -> Bounds | None:
        """(sub_prefix, sub_suffix) of the part of the page the selector looks in; None: all of it."""
        return _bounds(self.sub_prefix, self.sub_suffix)


class SiteDefinition(_Model):
    name: str
    description: str = ""
    base_url: str | None = Field(default=None, description="relative start URLs are resolved against it")
    start_urls: list[str | StartSpec] = Field(min_length=1)
    steps: list[Step] = Field(min_length=1)
    last_step: str | None = Field(default=None, description="the step of the detail pages (default: the last)")
    fields: dict[str, FieldSpec] = Field(min_length=1)
    pipelines: list[str] = Field(default_factory=list)
    incomplete_items: Literal["drop", "keep"] = "drop"
    render: Render | None = Field(default=None, description="render every page in a browser (a step may differ)")
    item_key: list[str] = Field(
        default_factory=list, description="fields that say which item it is, for items stored by key (SQLItemPipeline)"
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(
                "a site name is letters, digits, '_' and '-' (at most 63), starting with a letter or digit"
            )
        return v

    @field_validator("base_url")
    @classmethod
    def _base(cls, v: str | None) -> str | None:
        if v is not None:
            parts = urlsplit(v)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(f"base_url must be an absolute http(s) URL, not {v!r}")
        return v

    @field_validator("fields")
    @classmethod
    def _field_names(cls, v: dict[str, FieldSpec]) -> dict[str, FieldSpec]:
        for name in v:
            if not FIELD_RE.match(name):
                raise ValueError(f"field name {name!r}: letters, digits and '_', not starting with a digit")
            if name == "url":
                raise ValueError("'url' is reserved: every item has the URL of its page")
        return v

    # -- derived ------------------------------------------------------------------
    @property
    def detail_step(self) -> str:
        return self.last_step or self.steps[-1].name

    def step(self, name: str) -> Step:
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(name)

    def priority(self, step: str) -> int:
        """A step's priority: its own, else 10 per step before the last (earlier steps first)."""
        for i, s in enumerate(self.steps):
            if s.name == step:
                return s.priority if s.priority is not None else 10 * (len(self.steps) - 1 - i)
        raise KeyError(step)

    def render_for(self, step: str) -> Render | None:
        """How pages of ``step`` are rendered: the step's own ``render``, else the site's."""
        own = self.step(step).render
        return own if own is not None else self.render

    def next_step(self, step: str) -> str | None:
        names = [s.name for s in self.steps]
        i = names.index(step)
        return names[i + 1] if i + 1 < len(names) else None

    def with_base_url(self, base_url: str | None) -> SiteDefinition:
        """This definition with another base URL (``-a base_url=...``), validated."""
        if not base_url:
            return self
        try:
            return SiteDefinition.model_validate({**self.model_dump(exclude_unset=True), "base_url": base_url})
        except ValidationError as exc:
            raise ConfigError(_message("(with -a base_url)", _pydantic_errors(exc))) from None


# -- checks the schema cannot express --------------------------------------------------


def expand_start_urls(site: SiteDefinition) -> list[tuple[str, str]]:
    """Every start URL of ``site`` with its step: ``[(absolute url, step name), ...]``, in
    order, no duplicates (crawlplug.sites.starts)."""
    return expand(site.start_urls, site.base_url, site.steps[0].name)


def _cross_errors(site: SiteDefinition, check_imports: bool, pipelines: frozenset[str]) -> list[tuple[Loc, str]]:
    errors: list[tuple[Loc, str]] = []
    names = [s.name for s in site.steps]
    known = ", ".join(names)
    for i, name in enumerate(names):
        if name in names[:i]:
            errors.append((("steps", i, "name"), f"step {name!r} is defined twice"))
    if site.last_step is not None and site.last_step not in names:
        errors.append((("last_step",), f"no step named {site.last_step!r} (steps: {known})"))
    for i, step in enumerate(site.steps):
        for j, rule in enumerate(step.links):
            if rule.to is None:
                if i + 1 >= len(names):
                    errors.append(
                        (("steps", i, "links", j, "to"), "the last step's links need 'to' (there is no next step)")
                    )
            elif rule.to not in names:
                errors.append((("steps", i, "links", j, "to"), f"no step named {rule.to!r} (steps: {known})"))
    for i, entry in enumerate(site.start_urls):
        spec = entry if isinstance(entry, StartSpec) else StartSpec(url=entry)
        where: Loc = ("start_urls", i)
        if spec.step is not None and spec.step not in names:
            errors.append(((*where, "step"), f"no step named {spec.step!r} (steps: {known})"))
        for var, value in spec.vars.items():
            try:
                var_values(value)
            except ValueError as exc:
                errors.append(((*where, "vars", var), str(exc)))
    if not any(err[0][0] == "start_urls" for err in errors):
        try:
            urls = expand_start_urls(site)
        except ValueError as exc:
            errors.append((("start_urls",), str(exc)))
        else:
            for url, _ in urls:
                parts = urlsplit(url)
                if parts.scheme not in ("http", "https") or not parts.netloc:
                    hint = "" if site.base_url else " (relative start URLs need base_url)"
                    errors.append((("start_urls",), f"{url!r} is not an absolute http(s) URL{hint}"))
                    break
    for i, name in enumerate(site.item_key):
        if name != "url" and name not in site.fields:
            errors.append((("item_key", i), f"no field named {name!r} (fields: url, {', '.join(site.fields)})"))
    for i, path in enumerate(site.pipelines):
        problem = _pipeline_problem(path, pipelines, check_imports)
        if problem:
            errors.append((("pipelines", i), problem))
    return errors


def _pipeline_problem(path: str, allowed: frozenset[str], check_imports: bool) -> str | None:
    """Why pipeline step ``path`` cannot run here: not listed in the node's settings (then it
    is never imported), or, when ``check_imports``, it does not import as an item pipeline."""
    if path not in allowed:
        return (
            f"{path!r:.200} is not a pipeline step this node allows: list it in {PIPELINES_SETTING} (a site "
            "definition names only steps the nodes' settings list)"
        )
    if not check_imports:
        return None
    try:
        obj = load_object(path)
    except Exception as exc:  # noqa: BLE001 - whatever a module raises at import is a definition error
        return (
            f"cannot import {path!r}: {exc}"
            if isinstance(exc, ImportError)
            else f"cannot import {path!r}: {type(exc).__name__}: {exc}"
        )
    if not isinstance(obj, type) or not callable(getattr(obj, "process_item", None)):
        return f"{path!r} is not an item pipeline class (a class with process_item)"
    return None


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _pydantic_errors(exc: ValidationError) -> list[tuple[str, str]]:
    return [(_loc(loc), msg) for loc, msg in _pydantic_locs(exc)]


def _pydantic_locs(exc: ValidationError) -> list[tuple[Loc, str]]:
    """(path, message) of each error; the branch names pydantic puts in the path of a
    union (``str``, ``StartSpec``) are dropped, and so is the branch that does not apply."""
    out: dict[Loc, list[str]] = {}
    branches = {"str", "int", "StartSpec", "list[union[str,int]]", "list[str]"}
    for err in exc.errors(include_url=False):
        loc = err["loc"]
        kept = tuple(p for p in loc if p not in branches)
        # "a valid string" said of a mapping or list: the other branch of the union explains it
        if len(kept) != len(loc) and isinstance(err.get("input"), (dict, list)) and err["type"] == "string_type":
            continue
        msg = err["msg"].removeprefix("Value error, ")
        out.setdefault(kept, [])
        if msg not in out[kept]:
            out[kept].append(msg)
    return [(loc, "; ".join(msgs)) for loc, msgs in out.items()]


def validate(
    doc: Any,
    source: str = "<definition>",
    *,
    default_name: str | None = None,
    check_imports: bool = True,
    pipelines: Iterable[str] = (),
) -> SiteDefinition:
    """A :class:`SiteDefinition` from a parsed document, or a ConfigError listing every problem.

    ``default_name`` (a file's stem) names a definition that has no ``name``.
    ``pipelines``: the steps the node allows (CRAWLPLUG_SITE_PIPELINES); a step not
    among them is an error and is never imported. Listed steps are imported (any
    exception an error of the definition) unless ``check_imports`` is false.
    """
    if not isinstance(doc, dict):
        raise ConfigError(
            f"invalid site definition {source}: the top level must be a mapping, not {type(doc).__name__}"
        )
    site, errors = errors_of(doc, default_name=default_name, check_imports=check_imports, pipelines=pipelines)
    if site is None or errors:
        raise ConfigError(_message(source, [(_loc(loc), msg) for loc, msg in errors]))
    return site


def errors_of(
    doc: Any, *, default_name: str | None = None, check_imports: bool = True, pipelines: Iterable[str] = ()
) -> tuple[SiteDefinition | None, list[tuple[Loc, str]]]:
    """What :func:`validate` finds, as data: (the definition, or None if the schema refused
    it; every problem with where it is, as a :data:`Loc`), ``(site, [])`` for a valid one.
    An editor marks each problem at the line of its key (crawlplug.sites.checking)."""
    if not isinstance(doc, dict):
        return None, [((), f"the top level must be a mapping, not {type(doc).__name__}")]
    if default_name is not None and "name" not in doc:
        doc = {"name": default_name, **doc}
    try:
        site = SiteDefinition.model_validate(doc)
    except ValidationError as exc:
        return None, _pydantic_locs(exc)
    return site, _cross_errors(site, check_imports, frozenset(pipelines))


def _message(source: str, errors: list[tuple[str, str]]) -> str:
    lines = [f"invalid site definition {source}:"] + [f"  {loc}: {msg}" for loc, msg in errors]
    return "\n".join(lines)


# -- documents -------------------------------------------------------------------------


def parse_text(text: str, source: str = "<definition>") -> Any:
    """A YAML (or JSON, which is YAML) document, or a ConfigError saying where it breaks."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{source}: not valid YAML/JSON{where}: {problem}") from None


def load_file(
    path: str | Path, *, check_imports: bool = True, pipelines: Iterable[str] = ()
) -> tuple[SiteDefinition, dict[str, Any]]:
    """(definition, the document as written) of a ``.yaml``/``.yml``/``.json`` file; ``pipelines``
    and ``check_imports`` as :func:`validate` takes them."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read site definition {path}: {exc.strerror or exc}") from None
    doc = parse_text(text, str(path))
    site = validate(doc, str(path), default_name=path.stem, check_imports=check_imports, pipelines=pipelines)
    if "name" not in doc:
        doc = {"name": site.name, **doc}
    return site, doc


def version_of(doc: dict[str, Any]) -> str:
    """A short digest of a document: equal documents (whatever their formatting) share it."""
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha1(canonical.encode("utf-8")).hexdigest()[:12]
