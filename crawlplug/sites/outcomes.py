"""The outcomes of site spiders, as Scrapy stats, and how operators read them.

A site spider (:mod:`crawlplug.sites.spider`) counts what happens on each page
under stat names that start with ``site/<site>/``:

=========================================  ================================================
``site/<site>/step/<step>/pages``           pages of that step handled
``site/<site>/step/<step>/links``           requests made from links found on them
``site/<site>/step/<step>/no_links``        pages of a step with link rules where none matched
``site/<site>/step/<step>/failed``          requests of that step that failed (HTTP error, download error)
``site/<site>/items/ok``                    items with every required field
``site/<site>/items/incomplete``            items missing a required field (dropped unless kept)
``site/<site>/field/<field>/filled``        the page gave the field a value (not null, not its default)
``site/<site>/field/<field>/missing``       required field is null: the error "<field> is null"
``site/<site>/field/<field>/invalid``       the text did not convert to the field's type
``site/<site>/field/<field>/default``       an optional field was null and got its default
``site/<site>/errors/<ExceptionClass>``     exceptions while extracting or in a pipeline step
``site/<site>/version/<version>``           nodes running that definition version (1 or 0 per node)
``site/<site>/v/<version>/pages``           item pages parsed with that definition version
``site/<site>/v/<version>/items/<ok|...>``  their items, complete or not
``site/<site>/v/<version>/field/<f>/<o>``   their fields' outcomes (filled, missing, invalid, default)
``site/<site>/steps``                       the steps in order, "brand,series,model" (text)
=========================================  ================================================

With ``STATS_CLASS = "crawlplug.stats.RedisStatsCollector"`` (the site spider
sets it) these are summed over every node of the crawl, live;
``crawlplug status`` and the dashboard's Fields page show them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["by_version", "describe", "outcomes", "per_version", "status_lines"]


def step_pages(site: str, step: str) -> str:
    return f"site/{site}/step/{step}/pages"


def step_links(site: str, step: str) -> str:
    return f"site/{site}/step/{step}/links"


def step_no_links(site: str, step: str) -> str:
    return f"site/{site}/step/{step}/no_links"


def step_failed(site: str, step: str) -> str:
    return f"site/{site}/step/{step}/failed"


def items(site: str, what: str) -> str:
    return f"site/{site}/items/{what}"


def field(site: str, name: str, what: str) -> str:
    return f"site/{site}/field/{name}/{what}"


def error(site: str, exc: BaseException | str) -> str:
    name = exc if isinstance(exc, str) else type(exc).__name__
    return f"site/{site}/errors/{name}"


def render_unavailable(site: str) -> str:
    """Pages of a site whose definition renders them, requested by a node that cannot render."""
    return f"site/{site}/render_unavailable"


def version(site: str, ver: str) -> str:
    return f"site/{site}/version/{ver}"


def by_version(site: str, ver: str, what: str) -> str:
    """``what`` (pages, items/ok, field/<f>/missing...) of the item pages a definition version parsed."""
    return f"site/{site}/v/{ver}/{what}"


def per_version(stats: dict[str, Any], site: str) -> dict[str, dict[str, Any]]:
    """The outcomes of ``site``'s item pages per definition version that parsed them:
    {version: {"pages", "items_ok", "items_incomplete", "fields": {field: {outcome: n}}}}."""
    out: dict[str, dict[str, Any]] = {}
    prefix = f"site/{site}/v/"
    for key, value in stats.items():
        if not key.startswith(prefix) or not isinstance(value, int):
            continue
        ver, _, what = key[len(prefix) :].partition("/")
        row = out.setdefault(ver, {"pages": 0, "items_ok": 0, "items_incomplete": 0, "fields": {}})
        parts = what.split("/")
        if what == "pages":
            row["pages"] = value
        elif what in ("items/ok", "items/incomplete"):
            row["items_" + parts[1]] = value
        elif len(parts) == 3 and parts[0] == "field":
            row["fields"].setdefault(parts[1], {})[parts[2]] = value
    return out


def steps(site: str) -> str:
    return f"site/{site}/steps"


def outcomes(stats: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Stats named ``site/<site>/<what...>`` grouped per site: ``{site: {what: value}}``."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in stats.items():
        if not key.startswith("site/"):
            continue
        site, _, rest = key[5:].partition("/")
        if site and rest:
            out.setdefault(site, {})[rest] = value
    return {site: dict(sorted(v.items())) for site, v in sorted(out.items())}


def describe(what: str) -> str:
    """An outcome in words: ``field/price/missing`` -> ``price is null``."""
    parts = what.split("/")
    if len(parts) == 3 and parts[0] == "field":
        return {
            "missing": f"{parts[1]} is null",
            "invalid": f"{parts[1]} is not a valid value",
            "default": f"{parts[1]} took its default",
            "filled": f"{parts[1]} filled",
        }.get(parts[2], what)
    if len(parts) == 3 and parts[0] == "step":
        return f"step {parts[1]}: {parts[2].replace('_', ' ')}"
    if len(parts) == 2 and parts[0] == "items":
        return f"items {parts[1]}"
    if len(parts) == 2 and parts[0] == "errors":
        return f"error {parts[1]}"
    if what == "steps":
        return "steps, in order"
    if len(parts) == 2 and parts[0] == "version":
        return f"nodes on definition {parts[1]}"
    return what


def status_lines(stats: dict[str, Any]) -> list[str]:
    """The ``sites`` section of ``crawlplug status``: per site, pages per step, items, errors."""
    lines: list[str] = []
    for site, values in outcomes(stats).items():
        steps: dict[str, dict[str, Any]] = {name: {} for name in str(values.get("steps", "")).split(",") if name}
        for what, value in values.items():
            parts = what.split("/")
            if len(parts) == 3 and parts[0] == "step":
                steps.setdefault(parts[1], {})[parts[2]] = value
        versions = {w.split("/", 1)[1]: v for w, v in values.items() if w.startswith("version/") and v}
        head = f"  {site}"
        if versions:
            head += "  (definition " + ", ".join(f"{v} on {n} node{'s' * (n != 1)}" for v, n in versions.items()) + ")"
        lines.append(head)
        if steps:
            lines.append("    pages    " + ", ".join(f"{s} {v.get('pages', 0)}" for s, v in steps.items()))
            links = {s: v["links"] for s, v in steps.items() if v.get("links")}
            if links:
                lines.append("    links    " + ", ".join(f"{s} {n}" for s, n in links.items()))
        failed = {s: v["failed"] for s, v in steps.items() if v.get("failed")}
        if failed:
            lines.append("    failed   " + ", ".join(f"{s} {n}" for s, n in failed.items()))
        empty = {s: v["no_links"] for s, v in steps.items() if v.get("no_links")}
        if empty:
            lines.append("    no links " + ", ".join(f"{s} {n} pages" for s, n in empty.items()))
        lines.append(f"    items    ok {values.get('items/ok', 0)}, incomplete {values.get('items/incomplete', 0)}")
        for ver, row in per_version(stats, site).items():
            nulls = ", ".join(f"{f} {o['missing']}" for f, o in row["fields"].items() if o.get("missing"))
            lines.append(
                f"    {ver}  {row['pages']} item pages: ok {row['items_ok']}, incomplete {row['items_incomplete']}"
                + (f"; null: {nulls}" if nulls else "")
            )
        problems = [
            (describe(w), v)
            for w, v in values.items()
            if w.startswith(("field/", "errors/")) and not w.endswith(("/default", "/filled"))
        ]
        width = max((len(p) for p, _ in problems), default=0)
        lines += [f"    {label.ljust(width)}  {value}" for label, value in problems]
    return lines
