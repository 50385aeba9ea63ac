"""``crawlplug sites``: site definitions in Redis, for ``scrapy crawl site -a site=NAME``.

    crawlplug sites check spiders/sites/cars.yaml    # validate only (no Redis)
    crawlplug sites put spiders/sites/cars.yaml      # validate and store; running nodes switch to it
    crawlplug sites list [--json]
    crawlplug sites show cars [--json]
    crawlplug sites delete cars                      # the definition in force; its history stays
    crawlplug sites history cars [--json]            # every version stored: who, when, from where
    crawlplug sites diff cars [A [B]]                # what changed (default: the one in force vs the one before)
    crawlplug sites rollback cars 2                  # store version 2 again, as a new version
    crawlplug sites try spiders/sites/cars.yaml http://127.0.0.1:8001/model/3.html [--step model] [--json]

Definitions live in one hash shared by every crawl (:mod:`crawlplug.sites.store`),
so these commands need no ``--crawl``. A definition is validated before it is
stored, pipeline class paths included (imported with the Scrapy project of the
current directory on the path): an invalid one is refused with the path of
every bad key and stored nothing. Importing this module adds the group to
``crawlplug.cli.main`` (crawlplug.cli imports it).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from ..access import audit
from ..errors import ConfigError, CrawlplugError
from .common import Cli, Target, fail, main, pass_cli

try:  # the [sites] extra: pydantic (the schema) and PyYAML (the files)
    import yaml

    from ..sites import fetch as site_fetch
    from ..sites import trial as site_trial
    from ..sites.checking import check_text
    from ..sites.definition import expand_start_urls, load_file, version_of
    from ..sites.render import problems as render_problems
    from ..sites.render import uses_render
    from ..sites.store import SiteStore, project_pipelines
except ImportError as missing:  # pragma: no cover - without the extra
    _MISSING: ImportError | None = missing
else:
    _MISSING = None


def _need_sites() -> None:
    if _MISSING is not None:
        fail(f"site definitions need crawlplug's [sites] extra ({_MISSING}): pip install 'crawlplug[sites]'")


_REDIS_HELP = "Redis holding the definitions (default: REDIS_URL, else the project's embedded Redis)."


def _project_on_path() -> tuple[str, ...]:
    return project_pipelines()


def _store(target: Target) -> tuple[SiteStore, str]:
    return SiteStore(target.client), target.safe_url


def _summary(site: Any) -> str:
    return (
        f"{len(expand_start_urls(site))} start URLs, steps {' -> '.join(s.name for s in site.steps)} "
        f"(detail: {site.detail_step}), {len(site.fields)} fields "
        f"({sum(f.required for f in site.fields.values())} required)"
    )


@click.group("sites")
def sites() -> None:
    """Site definitions for `scrapy crawl site -a site=NAME` (see docs/sites.md)."""
    _need_sites()


@sites.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
def sites_check(files: tuple[str, ...]) -> None:
    """Validate definition FILES (YAML or JSON); store nothing.

    Every problem is printed as FILE:LINE: the path of its key, and what is wrong; exit 1
    if any file is invalid.
    """
    pipelines = _project_on_path()
    bad = 0
    for path in files:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            click.echo(f"cannot read site definition {path}: {exc.strerror or exc}", err=True)
            bad += 1
            continue
        checked = check_text(text, default_name=Path(path).stem, pipelines=pipelines)
        if checked.site is None or checked.errors:
            click.echo("\n".join(problem.text(path) for problem in checked.errors), err=True)
            bad += 1
            continue
        site = checked.site
        click.echo(f"{path}: site {site.name!r} is valid: {_summary(site)}")
        if uses_render(site):
            from scrapy.utils.project import get_project_settings  # noqa: PLC0415

            for problem in render_problems(get_project_settings()):
                click.echo(f"{path}: warning: it renders pages (render:), and this machine cannot: {problem}")
    if bad:
        fail(f"{bad} of {len(files)} definitions are invalid")


@sites.command("put")
@pass_cli(crawl_option=False, redis_help=_REDIS_HELP)
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
def sites_put(cli: Cli, files: tuple[str, ...]) -> None:
    """Validate definition FILES and store them in Redis (all valid, or none stored).

    A site's stored definition wins over its file in CRAWLPLUG_SITES_DIR;
    running nodes switch to it within CRAWLPLUG_SITES_REFRESH seconds.
    """
    pipelines = _project_on_path()
    loaded = []
    errors = []
    for path in files:
        try:
            loaded.append((path, *load_file(path, pipelines=pipelines)))
        except ConfigError as exc:
            errors.append(str(exc))
    if errors:
        click.echo("\n".join(errors), err=True)
        fail(f"{len(errors)} of {len(files)} definitions are invalid; nothing was stored")
    store, where = _store(cli.server)
    who = audit.cli_user()
    for path, site, doc in loaded:
        before = store.version(site.name)
        stored = store.put(doc, str(Path(path)), by=who.name, pipelines=pipelines)
        detail = {"site": site.name, "version": stored.version, "n": stored.n}
        audit.record(store.client, who, "sites.put", "", detail, "unchanged" if stored.unchanged else "ok")
        if stored.unchanged:
            click.echo(
                f"site {site.name!r} version {stored.version} unchanged, nothing stored "
                f"(v{stored.n or 1} is in force) on {where}"
            )
            continue
        what = "new" if before is None else f"replaces version {before}"
        click.echo(
            f"stored site {site.name!r} version {stored.version} as v{stored.n} ({what}) on {where}: {_summary(site)}"
        )


@sites.command("list")
@pass_cli(crawl_option=False, redis_help=_REDIS_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def sites_list(target: Target, as_json: bool) -> None:
    """The definitions stored in Redis: name, version, when, from which file."""
    store, where = _store(target)
    rows = []
    for stored in store.all():
        doc = stored.doc
        rows.append(
            {
                "name": stored.name,
                "version": stored.version,
                "source": stored.source,
                "stored_at": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stored.stored_at)),
                "steps": [s.get("name") for s in doc.get("steps", []) if isinstance(s, dict)],
                "fields": list(doc.get("fields", {}) or {}),
            }
        )
    if as_json:
        click.echo(json.dumps({"redis": where, "sites": rows}, indent=2))
        return
    click.echo(f"{len(rows)} site definitions on {where}")
    for row in rows:
        click.echo(
            f"  {row['name']}  version {row['version']}  stored {row['stored_at']}"
            f"{'  from ' + row['source'] if row['source'] else ''}  "
            f"steps {' -> '.join(map(str, row['steps']))}  {len(row['fields'])} fields"
        )


@sites.command("show")
@pass_cli(crawl_option=False, redis_help=_REDIS_HELP)
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the definition as JSON instead of YAML.")
def sites_show(target: Target, name: str, as_json: bool) -> None:
    """Print the stored definition of site NAME (as it was written)."""
    store, where = _store(target)
    stored = store.get(name)
    if stored is None:
        known = ", ".join(store.names()) or "none"
        fail(f"no site {name!r} stored on {where} (stored: {known})")
    if as_json:
        click.echo(
            json.dumps(
                {
                    "name": stored.name,
                    "version": stored.version,
                    "source": stored.source,
                    "stored_at": stored.stored_at,
                    "definition": stored.doc,
                },
                indent=2,
            )
        )
        return
    click.echo(
        f"# site {stored.name!r} version {stored.version}, stored "
        f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(stored.stored_at))}"
        f"{' from ' + stored.source if stored.source else ''}"
    )
    click.echo(yaml.safe_dump(stored.doc, sort_keys=False, allow_unicode=True, width=100).rstrip())


@sites.command("delete")
@pass_cli(crawl_option=False, redis_help=_REDIS_HELP)
@click.argument("name")
def sites_delete(target: Target, name: str) -> None:
    """Delete the stored definition of site NAME (nodes then keep the one they have)."""
    store, where = _store(target)
    if not store.delete(name):
        fail(f"no site {name!r} stored on {where}")
    click.echo(f"deleted site {name!r} from {where}")


@sites.command("history")
@pass_cli(crawl_option=False, redis_help=_REDIS_HELP)
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def sites_history(target: Target, name: str, as_json: bool) -> None:
    """Every version of site NAME stored, oldest first: its number, digest, when (UTC), by
    whom, from where, and which one is in force (a deleted site has none)."""
    store, where = _store(target)
    history = store.history(name)
    if not history:
        known = ", ".join(store.names()) or "none"
        fail(f"site {name!r} has no versions stored on {where} (stored: {known})")
    in_force = store.in_force(name)
    if as_json:
        rows = [v.as_dict(with_doc=False) for v in history]
        click.echo(json.dumps({"redis": where, "name": name, "in_force": in_force, "versions": rows}, indent=2))
        return
    state = f"v{in_force} in force" if in_force else "none in force (deleted)"
    click.echo(f"site {name!r}: {len(history)} versions on {where}, {state}")
    for v in history:
        parts = [
            f"v{v.n}",
            v.version,
            time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(v.at)),
            f"by {v.by or 'unknown'}",
        ]
        parts += [f"from {v.source}"] if v.source else []
        parts += [f"rollback of v{v.rollback_of}"] if v.rollback_of else []
        parts += [f"({v.note})"] if v.note else []
        parts += ["<- in force"] if v.n == in_force else []
        click.echo("  " + "  ".join(parts))


@sites.command("diff")
@pass_cli(crawl_option=False, redis_help=_REDIS_HELP)
@click.argument("name")
@click.argument("a", type=click.IntRange(min=1), required=False)
@click.argument("b", type=click.IntRange(min=1), required=False)
def sites_diff(target: Target, name: str, a: int | None, b: int | None) -> None:
    """What changed in site NAME from version A to version B, as a unified diff of the two
    documents in YAML. B defaults to the version in force, A to the version before B."""
    store, _ = _store(target)
    compared = store.compare(name, a, b)
    if not compared.text:
        click.echo(f"v{compared.a} and v{compared.b} of site {name!r} are the same document")
        return
    click.echo(compared.text)


@sites.command("rollback")
@pass_cli(crawl_option=False, redis_help=_REDIS_HELP)
@click.argument("name")
@click.argument("n", type=click.IntRange(min=1))
def sites_rollback(cli: Cli, name: str, n: int) -> None:
    """Store version N of site NAME again, as a new version in force (running nodes switch to
    it as to any stored definition). Refused, storing nothing: an unknown N, the version in
    force already, a document that is no longer valid here (its pipeline steps)."""
    pipelines = _project_on_path()
    store, where = _store(cli.server)
    who = audit.cli_user()
    try:
        stored = store.rollback(name, n, by=who.name, pipelines=pipelines)
    except ConfigError as exc:
        fail(f"{exc}; nothing was stored")
    detail = {"site": name, "to": n, "n": stored.n, "version": stored.version}
    audit.record(store.client, who, "sites.rollback", "", detail)
    click.echo(
        f"site {name!r}: stored version {n}'s document again as v{stored.n} (version {stored.version}, "
        f"rollback of v{n}), in force now on {where}"
    )


@sites.command("try")
@click.argument("file", type=click.Path(dir_okay=False))
@click.argument("url")
@click.option(
    "--step",
    default=None,
    metavar="NAME",
    help="The step the page is a page of (default: show the fields and every step's links).",
)
@click.option("--base-url", default=None, metavar="URL", help="As -a base_url=URL: the host relative URLs are on.")
@click.option(
    "--timeout", type=click.FloatRange(min=1), default=30.0, show_default=True, help="Seconds to wait for the page."
)
@click.option("--json", "as_json", is_flag=True, help="Print the whole trial as JSON (every link).")
@click.option("--verbose", "-v", is_flag=True, help="Show Scrapy's log (INFO) while fetching.")
def sites_try(
    file: str, url: str, step: str | None, base_url: str | None, timeout: float, as_json: bool, verbose: bool
) -> None:
    """Fetch URL through Scrapy with the project's settings and run FILE's definition on it.

    Shows the fields it extracts and, for a missing one, why (the selector matched
    nothing, or matched but the value was refused), whether the item is complete, and
    the links each discovery step would follow from the page. Touches no crawl: no
    Redis, no queue, nothing stored. URL may be relative to the definition's
    base_url. Exit code 1 if the definition is invalid or no page came back.
    """
    from scrapy.utils.project import get_project_settings  # noqa: PLC0415

    pipelines = _project_on_path()
    try:
        site, doc = load_file(file, pipelines=pipelines)
        if base_url:
            site = site.with_base_url(base_url)
        result = site_fetch.try_definition(
            site,
            url,
            settings=get_project_settings(),
            version=version_of(doc),
            origin=str(file),
            step=step,
            timeout=timeout,
            log_level="INFO" if verbose else "ERROR",
        )
    except CrawlplugError as exc:
        fail(str(exc))
    if as_json:
        click.echo(json.dumps(result, indent=2, default=repr))
    else:
        click.echo("\n".join(site_trial.text_lines(result)))


main.add_command(sites)
