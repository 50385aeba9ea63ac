"""Site definitions in Redis and on disk, and where a node finds the one it runs.

Definitions stored with ``crawlplug sites put FILE`` live in one hash,
``<prefix>:sites`` (``crawlplug:sites``), shared by every crawl and every
node that reaches the Redis: a definition describes a site, not one crawl of
it. Two fields per site, written together by one HSET:

* ``<name>``: JSON ``{"doc": <the document as written>, "version", "source", "stored_at"}``;
* ``<name>#v``: the version alone (a digest of the document), what running
  nodes poll every ``CRAWLPLUG_SITES_REFRESH`` seconds: one small HGET per site.

A node looks for a site in Redis first, then in ``CRAWLPLUG_SITES_DIR``
(``<name>.yaml``, ``.yml`` or ``.json``): what an operator stored wins over the
file the nodes were deployed with, and a change stored while the crawl runs
reaches every node within a refresh interval.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
from scrapy.utils.conf import closest_scrapy_cfg

from ..config import setting
from ..errors import ConfigError
from ..frontier.store import text
from .definition import NAME_RE, PIPELINES_SETTING, SiteDefinition, load_file, validate, version_of

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

__all__ = ["SiteStore", "StoredSite", "allowed_pipelines", "find_file", "sites_dir", "sites_key"]

logger = logging.getLogger(__name__)

SUFFIXES = (".yaml", ".yml", ".json")


def allowed_pipelines(settings: BaseSettings) -> tuple[str, ...]:
    """The pipeline steps a site definition may name here: CRAWLPLUG_SITE_PIPELINES."""
    return tuple(str(p) for p in setting(settings, PIPELINES_SETTING, "getlist") or ())


def project_pipelines() -> tuple[str, ...]:
    """The pipeline steps a site definition may name: the CRAWLPLUG_SITE_PIPELINES of the Scrapy
    project this runs in, with the project's root on ``sys.path`` so that they import as
    Scrapy would import them (``crawlplug sites``, the console)."""
    import sys  # noqa: PLC0415

    from scrapy.utils.project import get_project_settings  # noqa: PLC0415

    from ..config.project import project_root  # noqa: PLC0415

    root = project_root()
    if root is not None and str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return allowed_pipelines(get_project_settings())


def sites_key(prefix: str = "crawlplug") -> str:
    """The hash of stored definitions. Not hash-tagged: it is one key, read alone."""
    return f"{prefix}:sites"


@dataclass(frozen=True)
class StoredSite:
    """A definition as stored in Redis."""

    name: str
    doc: dict[str, Any]
    version: str
    source: str
    stored_at: float  # seconds since the epoch

    def definition(self, *, check_imports: bool = True, pipelines: Iterable[str] = ()) -> SiteDefinition:
        """The definition, validated; ``pipelines``: the steps this node allows (CRAWLPLUG_SITE_PIPELINES)."""
        return validate(self.doc, f"{self.name!r} stored in Redis", check_imports=check_imports, pipelines=pipelines)


class SiteStore:
    """Definitions in the ``<prefix>:sites`` hash of ``client``."""

    def __init__(self, client: redis.Redis, prefix: str = "crawlplug") -> None:
        self.client = client
        self.key = sites_key(prefix)

    def put(
        self, doc: dict[str, Any], source: str = "", *, check_imports: bool = True, pipelines: Iterable[str] = ()
    ) -> StoredSite:
        """Validate ``doc`` (``pipelines``: the steps allowed, CRAWLPLUG_SITE_PIPELINES) and store
        it, replacing the site's previous definition."""
        site = validate(doc, source or "<definition>", check_imports=check_imports, pipelines=pipelines)
        doc = {"name": site.name, **doc}
        stored = StoredSite(site.name, doc, version_of(doc), source, time.time())
        record = {"doc": doc, "version": stored.version, "source": source, "stored_at": stored.stored_at}
        self.client.hset(
            self.key, mapping={site.name: json.dumps(record, default=str), f"{site.name}#v": stored.version}
        )
        return stored

    def version(self, name: str) -> str | None:
        raw = self.client.hget(self.key, f"{name}#v")
        return None if raw is None else text(raw)

    def get(self, name: str) -> StoredSite | None:
        raw = self.client.hget(self.key, name)
        return None if raw is None else self._decode(name, raw)

    def names(self) -> list[str]:
        return sorted(n for n in (text(f) for f in self.client.hkeys(self.key)) if "#" not in n)

    def all(self) -> list[StoredSite]:
        names = self.names()
        if not names:
            return []
        return [self._decode(n, raw) for n, raw in zip(names, self.client.hmget(self.key, names)) if raw is not None]

    def delete(self, name: str) -> bool:
        return bool(self.client.hdel(self.key, name, f"{name}#v"))

    @staticmethod
    def _decode(name: str, raw: bytes | str) -> StoredSite:
        try:
            record = json.loads(raw)
            return StoredSite(
                name,
                dict(record["doc"]),
                str(record["version"]),
                str(record.get("source", "")),
                float(record.get("stored_at", 0)),
            )
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError) as exc:
            raise ConfigError(
                f"the stored definition of site {name!r} is not readable ({str(exc)[:200]}); "
                f"store it again with `crawlplug sites put`"
            ) from None


# -- files ------------------------------------------------------------------------------


def sites_dir(raw: str | Path) -> Path:
    """CRAWLPLUG_SITES_DIR as a path: relative ones are under the Scrapy project's directory."""
    path = Path(raw).expanduser()
    if path.is_absolute():
        return path
    cfg = closest_scrapy_cfg()
    return (Path(cfg).parent if cfg else Path.cwd()) / path


def find_file(directory: Path, name: str) -> Path | None:
    """``<name>.yaml``, ``.yml`` or ``.json`` in ``directory``, if one exists."""
    if not NAME_RE.match(name):
        return None
    for suffix in SUFFIXES:
        path = directory / f"{name}{suffix}"
        if path.is_file():
            return path
    return None


def load_named_file(
    directory: Path, name: str, pipelines: Iterable[str] = ()
) -> tuple[SiteDefinition, dict[str, Any], Path] | None:
    """The definition of site ``name`` from its file, None if there is no file."""
    path = find_file(directory, name)
    if path is None:
        return None
    site, doc = load_file(path, pipelines=pipelines)
    if site.name != name:
        raise ConfigError(f"{path} defines site {site.name!r}, not {name!r}: rename the file or its name key")
    return site, doc, path
