"""A site definition tried on one page: what each field gives and why, and the links each
discovery step would follow (``crawlplug sites try FILE URL``, the dashboard's Sites page).

:func:`explain` takes a page already fetched (crawlplug.sites.fetch fetches it through
Scrapy with the project's settings) and applies the definition exactly as a site spider
does (:class:`crawlplug.sites.extract.CompiledSite`: the same item, the same missing,
invalid and defaulted fields), then says for each field what its selector matched and,
when it has no value, why:

* ``the selector matched nothing``: no element, text or attribute there;
* ``matched N, but the value was refused``: each text it matched was cleaned to
  nothing (empty, the regex did not match, ``map`` made it null) or did not convert
  to the field's type (invalid);
* ``sub_prefix '...' not found on the page`` (or ``sub_suffix '...' not found after
  sub_prefix``): the field looks only in a region between two strings, and the page
  has none.

For every step with link rules (or the one step asked for), each rule's links on the
page and the requests the step would make (a URL once, the first rule naming it wins).
Each rule and field says its region (``region`` in the JSON): for a region between two
strings, whether each was found and how many characters the cut has.
Nothing is written anywhere: no crawl's state is touched.
"""

from __future__ import annotations

from typing import Any

from scrapy.http import Response

from ..errors import ConfigError
from .definition import Bounds, SiteDefinition
from .extract import CompiledSite, PageCuts

__all__ = ["explain", "text_lines"]

#: How many URLs per rule the text shows (the JSON has them all).
SHOWN_LINKS = 10
#: How many matched texts per field are reported.
SHOWN_TEXTS = 5


def _selector(spec: Any) -> str:
    return f"css {spec.css}" if spec.css is not None else f"xpath {spec.xpath}"


def _bounds_text(bounds: Bounds) -> str:
    prefix, suffix = bounds
    start = f"sub_prefix {prefix!r}" if prefix is not None else "the page's start"
    end = f"sub_suffix {suffix!r}" if suffix is not None else "the page's end"
    return f"from {start} to {end}"


def _cut(bounds: Bounds | None, cuts: PageCuts) -> dict[str, Any] | None:
    """The region between two strings as this page has it (None: no such region)."""
    if bounds is None:
        return None
    cut = cuts.cut(bounds)
    return {
        "sub_prefix": bounds[0],
        "sub_suffix": bounds[1],
        "prefix_found": cut.prefix_found,
        "suffix_found": cut.suffix_found,
        "found": cut.found,
        "chars": len(cut.text) if cut.text is not None else 0,
        "why": cut.why,
    }


def _region_status(region: dict[str, Any]) -> str:
    """A region between two strings on this page: each bound found and the cut's size, or why it is empty."""
    if not region["found"]:
        return f"empty, {region['why']}"
    said = [f"{k} found" for k in ("sub_prefix", "sub_suffix") if region[k] is not None]
    return f"{', '.join(said)}, {region['chars']:,} characters"


def _field(site: CompiledSite, f: Any, response: Response, result: Any, cuts: PageCuts) -> dict[str, Any]:
    texts, refused = f.explain(response, cuts)
    region = _cut(f.bounds, cuts)
    value = result.item.get(f.name)
    invalid = dict(result.invalid).get(f.name)
    if f.name in result.missing:
        outcome = "missing"
    elif f.name in result.defaulted:
        outcome = "defaulted"
    else:
        outcome = "filled"
    why = None
    if outcome != "filled":
        if region is not None and not region["found"]:
            why = region["why"]
        elif not texts:
            why = "the selector matched nothing" + (" in its region" if region is not None else "")
        else:
            reasons = list(dict.fromkeys(refused))
            why = (
                f"matched {len(texts)}, but the value was refused: "
                + "; ".join(reasons[:3])
                + (f" (and {len(reasons) - 3} more)" if len(reasons) > 3 else "")
            )
    errors = [f"{type(exc).__name__}: {exc}" for name, exc in result.errors if name == f.name]
    return {
        "name": f.name,
        "required": f.spec.required,
        "type": f.spec.type,
        "multiple": f.spec.multiple,
        "selector": _selector(f.spec),
        "matched": len(texts),
        "texts": [t.strip()[:200] for t in texts[:SHOWN_TEXTS]],
        "value": value,
        "outcome": outcome,
        "why": why,
        "invalid": invalid,
        "errors": errors,
        "region": region,
    }


def _rule_text(rule: Any) -> str:
    parts = []
    if rule.region is not None:
        bounds = rule.region.bounds
        parts.append(f"region {_bounds_text(bounds) if bounds is not None else _selector(rule.region)}")
    if rule.match is not None:
        parts.append(f"{rule.match.method} {', '.join(rule.match.patterns)}")
    return ", ".join(parts) or "every link"


def _links(site: CompiledSite, response: Response, step: str, cuts: PageCuts) -> dict[str, Any]:
    defined = site.site.step(step).links
    rules = []
    for i, (run, rule) in enumerate(zip(site.rules[step], defined), 1):
        urls = [link.url for link in run.extract_links(response, cuts)]
        region: dict[str, Any] | None = None
        if rule.region is not None:
            kind = "css" if rule.region.css is not None else "xpath"
            region = _cut(run.bounds, cuts) or {kind: getattr(rule.region, kind)}
        rules.append(
            {
                "rule": i,
                "what": _rule_text(rule),
                "to": run.target,
                "priority": run.priority,
                "count": len(urls),
                "urls": urls,
                "region": region,
            }
        )
    follow = [{"url": x.url, "step": x.step, "priority": x.priority} for x in site.links(response, step, cuts)]
    return {"step": step, "rules": rules, "follow": follow}


def explain(
    definition: SiteDefinition, response: Response, *, step: str | None = None, version: str = "", origin: str = ""
) -> dict[str, Any]:
    """The definition applied to ``response``: fields (if ``step`` is None or the detail step)
    and the links of each step with rules (only ``step``'s if given); ConfigError for a step
    the definition does not have."""
    site = CompiledSite(definition, version, origin)
    cuts = PageCuts(response)  # each region between two strings cut once, for every field and rule
    names = [s.name for s in definition.steps]
    if step is not None and step not in names:
        raise ConfigError(f"site {definition.name!r} has no step {step!r} (steps: {', '.join(names)})")
    out: dict[str, Any] = {
        "site": definition.name,
        "version": version,
        "origin": origin,
        "step": step,
        "steps": names,
        "detail_step": site.detail_step,
        "fields": None,
        "links": [],
    }
    if step is None or step == site.detail_step:
        result = site.extract(response, cuts)
        out["fields"] = [_field(site, f, response, result, cuts) for f in site.fields]
        out["item"] = result.item
        out["complete"] = result.complete
        out["missing"] = result.missing
        out["dropped"] = not result.complete and definition.incomplete_items == "drop"
    for name in names if step is None else [step]:
        if site.has_links(name):
            out["links"].append(_links(site, response, name, cuts))
    return out


# -- as text ------------------------------------------------------------------------------------


def _shown(value: Any) -> str:
    return "null" if value is None else repr(value)


def text_lines(result: dict[str, Any]) -> list[str]:
    """What ``crawlplug sites try`` prints."""
    page = result["page"]
    lines = [
        f"site {result['site']!r}, definition {result['version']} from {result['origin']}, tried on "
        f"{page['url']}: HTTP {page['status']}, {page['bytes']:,} bytes, {page['ms']:,.0f} ms "
        f"({page['content_type'] or 'no Content-Type'})" + (", rendered in a browser" if page.get("rendered") else "")
    ]
    if page["url"] != result["url"]:
        lines.append(f"  (asked for {result['url']}; redirected)")
    if page["status"] >= 400:
        lines.append(
            f"  note: the page answered HTTP {page['status']}; a crawl counts it as failed and extracts nothing from it"
        )
    fields = result["fields"]
    if fields is not None:
        lines.append(f"fields, as the detail step {result['detail_step']!r} extracts them:")
        width = max(len(f["name"]) for f in fields)
        for f in fields:
            need = "required" if f["required"] else "optional"
            if f["outcome"] == "filled":
                said = f"{_shown(f['value'])}"
            elif f["outcome"] == "missing":
                said = f"MISSING ({need}): {f['why']}"
            else:
                said = f"null, took its default {_shown(f['value'])}: {f['why']}"
            lines.append(f"  {f['name'].ljust(width)}  {said}")
            lines.append(f"  {''.ljust(width)}  {f['selector']} -> {f['type']}, matched {f['matched']}")
            if f.get("region") is not None:
                cut = f["region"]
                where = _bounds_text((cut["sub_prefix"], cut["sub_suffix"]))
                lines.append(f"  {''.ljust(width)}  region {where}: {_region_status(cut)}")
            if f["invalid"] and f["outcome"] == "filled":
                lines.append(f"  {''.ljust(width)}  (one text was refused: {f['invalid']})")
            for err in f["errors"]:
                lines.append(f"  {''.ljust(width)}  error while selecting: {err}")
        if result["complete"]:
            lines.append("item: complete (every required field has a value)")
        else:
            fate = "the crawl drops it (incomplete_items: drop)" if result["dropped"] else "the crawl keeps it"
            lines.append(f"item: INCOMPLETE, {', '.join(m + ' is null' for m in result['missing'])}; {fate}")
    for block in result["links"]:
        lines.append(f"links a page of step {block['step']!r} follows: {len(block['follow'])} requests")
        for rule in block["rules"]:
            lines.append(f"  rule {rule['rule']} ({rule['what']}) -> step {rule['to']}: {rule['count']} links")
            if rule.get("region") is not None and "found" in rule["region"]:
                lines.append(f"    region: {_region_status(rule['region'])}")
            lines += [f"    {u}" for u in rule["urls"][:SHOWN_LINKS]]
            if rule["count"] > SHOWN_LINKS:
                lines.append(f"    ... and {rule['count'] - SHOWN_LINKS} more (--json lists them all)")
    if not result["links"] and result["step"] is not None and fields is None:
        lines.append(f"step {result['step']!r} has no link rules and is not the detail step: nothing to show")
    lines.append("(nothing was stored: no crawl's state was touched)")
    return lines
