"""Reports of a crawl's run, per node: node x domain, node x site definition, and per field.

Every number comes from the Scrapy stats each node keeps in Redis
(:class:`crawlplug.stats.RedisStatsCollector`): the per-domain stats of
:mod:`crawlplug.probes.domainstats` (the add-on counts them) and the outcomes of site
spiders (:mod:`crawlplug.sites.outcomes`). The current run reads the nodes' stats
as they stand; an ended run reads what was kept of them when the next run began
(:mod:`crawlplug.reports.store`, the last 20 runs). ``crawlplug report`` prints
it (text, JSON, CSV) and the dashboard serves it: one definition of each number.

* domains: pages (responses), items, errors by kind (``http/<status>``,
  ``download/<Exception>``, ``spider/<Exception>``), success rate = responses below
  400 / (responses + failed downloads), mean response time = the mean download time
  of its responses;
* sites: pages (of every step), items (complete, incomplete), errors (failed requests
  and exceptions while extracting), success rate = complete items / detail pages that
  gave an item or not; the definition version(s) the node ran;
* fields: per site and field, how often it was filled, missing (a required field
  that was null), invalid (a text that did not convert) and defaulted.

A node that stays across runs (a worker) keeps counting in its Scrapy stats: its
stats kept for the run before are taken off, so each run shows its own share.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Any

import redis

from ..crawl import runs
from ..errors import ConfigError
from ..frontier.keys import CrawlKeys
from ..probes.domainstats import PREFIX as DOMAIN_PREFIX
from ..stats import decode, node_stats
from . import store as runstats

#: The node name of the rows that add up every node.
ALL = "all nodes"
FIELD_OUTCOMES = ("filled", "missing", "invalid", "default")
#: The columns of each table, in order, for CSV (errors as "kind=count;..." text).
COLUMNS = {
    "domains": ("node", "domain", "pages", "items", "errors", "errors_by_kind", "success_rate", "mean_response_ms"),
    "sites": ("node", "site", "versions", "pages", "items_ok", "items_incomplete", "errors", "success_rate"),
    "fields": ("node", "site", "field", "filled", "missing", "invalid", "defaulted"),
}


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _own_share(now: dict[str, Any], before: dict[str, Any] | None) -> dict[str, Any]:
    """A node's stats less what it had counted by the end of the run before (a worker)."""
    if not before:
        return now
    out = dict(now)
    for key, value in now.items():
        old = before.get(key)
        if isinstance(value, (int, float)) and isinstance(old, (int, float)) and not isinstance(value, bool):
            out[key] = value - old
    return out


def _kept(client: redis.Redis, keys: CrawlKeys, run: int) -> dict[str, dict[str, Any]] | None:
    raw = runstats.read(client, keys, run)
    return None if raw is None else {n: {k: decode(v) for k, v in s.items()} for n, s in raw.items()}


def stats_of_run(
    client: redis.Redis, keys: CrawlKeys, run: int | None = None
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """({"id", "state", "source"}, each node's own stats) of run ``run`` (default: the
    current one): the nodes' stats in Redis for the current run, those kept at its end for
    an ended one; ConfigError naming the runs there are for one that has none."""
    current = runs.view(client, keys)
    if run is None or run == current.id:
        nodes = node_stats(client, keys)
        info = {"id": current.id, "state": current.state, "source": "live"}
    else:
        kept = _kept(client, keys, run)
        if kept is None:
            there = runstats.kept(client, keys)
            known = ", ".join(str(r) for r in there) or "none"
            cur = f", and the current run {current.id}" if current.id is not None else ""
            raise ConfigError(
                f"no report kept of run {run} of crawl {keys.crawl!r} (the node stats of ended runs "
                f"are kept for the last {runstats.KEEP}: runs {known}{cur})"
            )
        nodes = kept
        summary = next((s for s in runs.history(client, keys) if s.get("id") == run), {})
        info = {"id": run, "state": summary.get("state", "ended"), "source": "kept"}
    before = _kept(client, keys, info["id"] - 1) if isinstance(info["id"], int) and info["id"] > 1 else None
    if before:
        nodes = {n: _own_share(s, before.get(n)) for n, s in nodes.items()}
    return info, nodes


# -- node x domain -----------------------------------------------------------------------------


def _domain_counts(stats: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key, value in stats.items():
        if not key.startswith(DOMAIN_PREFIX):
            continue
        domain, _, what = key[len(DOMAIN_PREFIX) :].partition("/")
        if not domain or not what:
            continue
        row = out.setdefault(domain, {"pages": 0, "ok": 0, "items": 0, "latency_ms": 0, "errors": {}})
        if what.startswith("error/"):
            kind = what[len("error/") :]
            row["errors"][kind] = row["errors"].get(kind, 0) + int(_number(value))
        elif what in ("pages", "ok", "items", "latency_ms"):
            row[what] += int(_number(value))
    for row in out.values():
        row["errors"] = {kind: n for kind, n in row["errors"].items() if n}
    # a domain with nothing this run (a worker's earlier runs taken off) is not shown
    return {d: row for d, row in out.items() if row["pages"] or row["items"] or row["errors"]}


def _domain_row(node: str, domain: str, c: dict[str, Any]) -> dict[str, Any]:
    downloads_failed = sum(n for kind, n in c["errors"].items() if kind.startswith("download/"))
    attempts = c["pages"] + downloads_failed
    return {
        "node": node,
        "domain": domain,
        "pages": c["pages"],
        "items": c["items"],
        "errors": sum(c["errors"].values()),
        "errors_by_kind": dict(sorted(c["errors"].items())),
        "success_rate": round(c["ok"] / attempts, 4) if attempts else None,
        "mean_response_ms": round(c["latency_ms"] / c["pages"], 1) if c["pages"] else None,
    }


def _add(total: dict[str, Any], c: dict[str, Any]) -> None:
    for name in ("pages", "ok", "items", "latency_ms"):
        total[name] += c[name]
    for kind, n in c["errors"].items():
        total["errors"][kind] = total["errors"].get(kind, 0) + n


def domain_rows(nodes: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Node x domain rows, a node's busiest domains first, then the ALL rows (every node)."""
    rows: list[dict[str, Any]] = []
    totals: dict[str, dict[str, Any]] = {}
    for node, stats in sorted(nodes.items()):
        counts = _domain_counts(stats)
        for domain, c in sorted(counts.items(), key=lambda kv: (-kv[1]["pages"], kv[0])):
            rows.append(_domain_row(node, domain, c))
            _add(totals.setdefault(domain, {"pages": 0, "ok": 0, "items": 0, "latency_ms": 0, "errors": {}}), c)
    if len(nodes) > 1:
        for domain, c in sorted(totals.items(), key=lambda kv: (-kv[1]["pages"], kv[0])):
            rows.append(_domain_row(ALL, domain, c))
    return rows


# -- node x site, and per field --------------------------------------------------------------------


def _site_counts(stats: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key, value in stats.items():
        if not key.startswith("site/"):
            continue
        site, _, what = key[5:].partition("/")
        if not site or not what:
            continue
        c = out.setdefault(
            site,
            {
                "pages": 0,
                "items_ok": 0,
                "items_incomplete": 0,
                "failed": 0,
                "exceptions": 0,
                "versions": {},
                "fields": {},
            },
        )
        parts = what.split("/")
        n = int(_number(value))
        if len(parts) == 3 and parts[0] == "step" and parts[2] in ("pages", "failed"):
            c["pages" if parts[2] == "pages" else "failed"] += n
        elif what in ("items/ok", "items/incomplete"):
            c["items_" + parts[1]] += n
        elif parts[0] == "errors":
            c["exceptions"] += n
        elif parts[0] == "version" and len(parts) == 2 and n > 0:
            c["versions"][parts[1]] = n
        elif len(parts) == 3 and parts[0] == "field" and parts[2] in FIELD_OUTCOMES:
            c["fields"].setdefault(parts[1], dict.fromkeys(FIELD_OUTCOMES, 0))[parts[2]] += n
    for c in out.values():
        c["fields"] = {name: f for name, f in c["fields"].items() if any(f.values())}
    return {
        site: c
        for site, c in out.items()
        if c["pages"] or c["items_ok"] or c["items_incomplete"] or c["failed"] or c["exceptions"] or c["fields"]
    }


def _site_row(node: str, site: str, c: dict[str, Any]) -> dict[str, Any]:
    items = c["items_ok"] + c["items_incomplete"]
    return {
        "node": node,
        "site": site,
        "versions": dict(sorted(c["versions"].items())),
        "pages": c["pages"],
        "items_ok": c["items_ok"],
        "items_incomplete": c["items_incomplete"],
        "errors": c["failed"] + c["exceptions"],
        "success_rate": round(c["items_ok"] / items, 4) if items else None,
    }


def site_rows(nodes: dict[str, dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(node x site rows, node x site x field rows), each followed by its ALL rows."""
    sites: list[dict[str, Any]] = []
    fields: list[dict[str, Any]] = []
    totals: dict[str, dict[str, Any]] = {}
    for node, stats in sorted(nodes.items()):
        for site, c in sorted(_site_counts(stats).items()):
            sites.append(_site_row(node, site, c))
            fields += [
                {"node": node, "site": site, "field": name, **_field_counts(f)} for name, f in c["fields"].items()
            ]
            t = totals.setdefault(
                site,
                {
                    "pages": 0,
                    "items_ok": 0,
                    "items_incomplete": 0,
                    "failed": 0,
                    "exceptions": 0,
                    "versions": {},
                    "fields": {},
                },
            )
            for name in ("pages", "items_ok", "items_incomplete", "failed", "exceptions"):
                t[name] += c[name]
            for ver, n in c["versions"].items():
                t["versions"][ver] = t["versions"].get(ver, 0) + n
            for name, f in c["fields"].items():
                into = t["fields"].setdefault(name, dict.fromkeys(FIELD_OUTCOMES, 0))
                for k in FIELD_OUTCOMES:
                    into[k] += f[k]
    if len(nodes) > 1:
        for site, t in sorted(totals.items()):
            sites.append(_site_row(ALL, site, t))
            fields += [
                {"node": ALL, "site": site, "field": name, **_field_counts(f)} for name, f in t["fields"].items()
            ]
    return sites, fields


def _field_counts(f: dict[str, int]) -> dict[str, int]:
    return {"filled": f["filled"], "missing": f["missing"], "invalid": f["invalid"], "defaulted": f["default"]}


# -- the report ----------------------------------------------------------------------------------------


def report(client: redis.Redis, keys: CrawlKeys, run: int | None = None) -> dict[str, Any]:
    """The report of run ``run`` (default: the current one): see the module docstring."""
    info, nodes = stats_of_run(client, keys, run)
    sites, fields = site_rows(nodes)
    out = {
        "crawl": keys.crawl,
        "run": info,
        "nodes": sorted(nodes),
        "domains": domain_rows(nodes),
        "sites": sites,
        "fields": fields,
        "kept_runs": runstats.kept(client, keys),
    }
    out["note"] = _note(out)
    return out


def _note(out: dict[str, Any]) -> str | None:
    """Why a report is empty, in words (None when it is not)."""
    if not out["nodes"]:
        return (
            "no node stats for this run: the crawl's nodes keep their Scrapy stats in Redis only with "
            "STATS_CLASS = 'crawlplug.stats.RedisStatsCollector' (the add-on sets it, unless the project "
            "names another collector), and write them every CRAWLPLUG_STATS_INTERVAL seconds"
        )
    if not out["domains"] and not out["sites"]:
        return (
            "the nodes' stats hold no per-domain numbers: they are counted by "
            "crawlplug.probes.domainstats.DomainStatsMiddleware, which the add-on enables"
        )
    return None


def as_csv(report_: dict[str, Any], table: str) -> str:
    """One table of the report as CSV (a header row, then a row per node and domain, site
    or field); errors by kind as "kind=count;..."."""
    if table not in COLUMNS:
        raise ConfigError(f"no table {table!r} in a report: {', '.join(COLUMNS)}")
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS[table])
    for row in report_[table]:
        writer.writerow([_cell(row.get(c)) for c in COLUMNS[table]])
    return buf.getvalue()


def _cell(value: Any) -> Any:
    if isinstance(value, dict):
        return ";".join(f"{k}={v}" for k, v in value.items())
    return "" if value is None else value


def percent(rate: float | None) -> str:
    """A success rate as text: 98.5%, "-" when there was nothing to rate."""
    return "-" if rate is None else f"{rate * 100:.1f}%"


def kinds(errors: dict[str, int], top: int = 3) -> str:
    """Errors by kind, the most frequent first: "http/404 3, download/TimeoutError 1"."""
    ranked = sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{k} {n}" for k, n in ranked[:top])
    return text + (f", {len(ranked) - top} more kinds" if len(ranked) > top else "")


def text_tables(report_: dict[str, Any]) -> Iterable[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of each table as ``crawlplug report`` prints it."""
    yield (
        "domains: pages, items, errors by kind, success rate (responses below 400 / responses and failed "
        "downloads), mean response time",
        ["node", "domain", "pages", "items", "errors", "success", "mean ms", "errors by kind"],
        [
            [
                r["node"],
                r["domain"],
                f"{r['pages']:,}",
                f"{r['items']:,}",
                f"{r['errors']:,}",
                percent(r["success_rate"]),
                "-" if r["mean_response_ms"] is None else f"{r['mean_response_ms']:,.0f}",
                kinds(r["errors_by_kind"]),
            ]
            for r in report_["domains"]
        ],
    )
    if report_["sites"]:
        yield (
            "sites: pages of every step, items complete and incomplete, errors (failed requests, exceptions), "
            "success rate (complete items / items), definition versions",
            ["node", "site", "pages", "items ok", "incomplete", "errors", "success", "versions"],
            [
                [
                    r["node"],
                    r["site"],
                    f"{r['pages']:,}",
                    f"{r['items_ok']:,}",
                    f"{r['items_incomplete']:,}",
                    f"{r['errors']:,}",
                    percent(r["success_rate"]),
                    ", ".join(r["versions"]) or "-",
                ]
                for r in report_["sites"]
            ],
        )
        yield (
            "fields: filled, missing (required and null), invalid (did not convert), defaulted",
            ["node", "site", "field", "filled", "missing", "invalid", "defaulted"],
            [
                [
                    r["node"],
                    r["site"],
                    r["field"],
                    f"{r['filled']:,}",
                    f"{r['missing']:,}",
                    f"{r['invalid']:,}",
                    f"{r['defaulted']:,}",
                ]
                for r in report_["fields"]
            ],
        )
