"""Site definitions in Redis and on disk, and where a node finds the one it runs.

Definitions stored with ``crawlplug sites put FILE`` live in one hash,
``<prefix>:sites`` (``crawlplug:sites``), shared by every crawl and every
node that reaches the Redis: a definition describes a site, not one crawl of
it. Two fields per site, written together by one HSET:

* ``<name>``: JSON ``{"doc": <the document as written>, "version", "source", "stored_at",
  "n", "by"}``: the definition in force, its number in the site's history, who stored it;
* ``<name>#v``: the version alone (a digest of the document), what running
  nodes poll every ``CRAWLPLUG_SITES_REFRESH`` seconds: one small HGET per site.

Every store also appends a record to the site's history, the list
``<prefix>:sites:log:<name>`` (:mod:`crawlplug.sites.versions`), in the same
MULTI/EXEC as the HSET, under a WATCH of the list: two operators storing at once get
two numbers and lose no record. A document equal to the one in force stores nothing.
:meth:`SiteStore.rollback` stores an old version's document again, as a new version;
:meth:`SiteStore.delete` removes the definition in force and keeps its history. A
definition stored before histories were kept has none: it shows as version 1, and is
written as version 1 by the next store, before the new version.

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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
from scrapy.utils.conf import closest_scrapy_cfg

from ..config import setting
from ..errors import ConfigError
from ..frontier.store import is_cluster, text
from . import versions
from .definition import NAME_RE, PIPELINES_SETTING, SiteDefinition, load_file, validate, version_of
from .versions import InForce, UnknownVersion, Version

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

__all__ = [
    "SiteStore",
    "StoredSite",
    "VersionDiff",
    "allowed_pipelines",
    "find_file",
    "sites_dir",
    "sites_key",
    "sites_log_key",
]

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


def sites_log_key(name: str, prefix: str = "crawlplug") -> str:
    """The list of a site's versions, oldest first (crawlplug.sites.versions)."""
    return f"{prefix}:sites:log:{name}"


@dataclass(frozen=True)
class StoredSite:
    """A definition as stored in Redis; from :meth:`SiteStore.put`, ``unchanged`` says that
    it was already the one in force and nothing was stored."""

    name: str
    doc: dict[str, Any]
    version: str
    source: str
    stored_at: float  # seconds since the epoch
    n: int = 0  # its number in the site's history; 0: stored before histories were kept
    by: str = ""
    rollback_of: int | None = None
    unchanged: bool = False

    def definition(self, *, check_imports: bool = True, pipelines: Iterable[str] = ()) -> SiteDefinition:
        """The definition, validated; ``pipelines``: the steps this node allows (CRAWLPLUG_SITE_PIPELINES)."""
        return validate(self.doc, f"{self.name!r} stored in Redis", check_imports=check_imports, pipelines=pipelines)


@dataclass(frozen=True)
class VersionDiff:
    """Two versions compared: their numbers (``a`` None: nothing before ``b``) and the diff."""

    a: int | None
    b: int
    text: str


class SiteStore:
    """Definitions in the ``<prefix>:sites`` hash of ``client``, and their histories."""

    def __init__(self, client: redis.Redis, prefix: str = "crawlplug") -> None:
        self.client = client
        self.prefix = prefix
        self.key = sites_key(prefix)

    def put(
        self,
        doc: dict[str, Any],
        source: str = "",
        *,
        by: str = "",
        check_imports: bool = True,
        pipelines: Iterable[str] = (),
    ) -> StoredSite:
        """Validate ``doc`` (``pipelines``: the steps allowed, CRAWLPLUG_SITE_PIPELINES) and store
        it as the site's next version, in force from now on; ``by``: who stores it. A document
        equal to the one in force stores nothing: the stored one comes back, ``unchanged``."""
        site = validate(doc, source or "<definition>", check_imports=check_imports, pipelines=pipelines)
        return self._store(site.name, {"name": site.name, **doc}, source, by, None)

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
        """Remove the definition in force (nodes keep the one they have); its history stays,
        so :meth:`history` still shows it and :meth:`rollback` can store it again."""
        return bool(self.client.hdel(self.key, name, f"{name}#v"))

    # -- the history ------------------------------------------------------------------------

    def history(self, name: str) -> list[Version]:
        """The site's versions, oldest first; a record that is not readable is left out. A
        definition stored before histories were kept shows as its version 1 (not written)."""
        raws = self.client.lrange(sites_log_key(name, self.prefix), 0, -1)
        if not raws:
            current = self._current_or_none(name)
            return [] if current is None else [_predating(current)]
        out = []
        for n, raw in enumerate(raws, 1):
            try:
                out.append(versions.decode(name, n, raw))
            except ConfigError as exc:
                logger.warning("%s", exc)
        return out

    def get_version(self, name: str, n: int) -> Version:
        """Version ``n`` of the site: UnknownVersion naming those there are, or a ConfigError
        if its record is not readable."""
        raw = self.client.lindex(sites_log_key(name, self.prefix), n - 1) if n >= 1 else None
        if raw is not None:
            return versions.decode(name, n, raw)
        known = self.history(name)
        if n == 1 and len(known) == 1 and known[0].note == versions.PREDATES:
            return known[0]
        if not known:
            raise UnknownVersion(f"site {name!r} has no versions stored")
        listed = ", ".join(f"v{v.n}" for v in known)
        raise UnknownVersion(f"site {name!r} has no version {n} (its versions: {listed})")

    def in_force(self, name: str) -> int | None:
        """The number of the version in force, None if none is (deleted, never stored)."""
        current = self._current_or_none(name)
        if current is None:
            return None
        if current.n:
            return current.n
        known = [v.n for v in self.history(name) if v.version == current.version]
        return known[-1] if known else None

    def rollback(
        self, name: str, n: int, *, by: str = "", check_imports: bool = True, pipelines: Iterable[str] = ()
    ) -> StoredSite:
        """Store version ``n``'s document again, as a new version (``rollback_of`` n), validated
        as :meth:`put` validates. Refused: an unknown ``n`` (UnknownVersion), the document in
        force already (InForce), one no longer valid here (ConfigError)."""
        old = self.get_version(name, n)
        if self.version(name) == old.version:
            raise InForce(f"version {n} of site {name!r} is the definition in force already: nothing to roll back")
        validate(old.doc, f"version {n} of site {name!r}", check_imports=check_imports, pipelines=pipelines)
        stored = self._store(name, old.doc, old.source, by, n)
        if stored.unchanged:  # stored by someone else meanwhile
            raise InForce(f"version {n} of site {name!r} was made the definition in force meanwhile")
        return stored

    def diff(self, name: str, a: int | None = None, b: int | None = None) -> str:
        """A unified diff of version ``a``'s document to ``b``'s, as YAML; ``b`` defaults to the
        version in force, ``a`` to the version before ``b``."""
        return self.compare(name, a, b).text

    def compare(self, name: str, a: int | None = None, b: int | None = None) -> VersionDiff:
        """:meth:`diff`, with the numbers it compared (``a`` None: ``b`` is the first version)."""
        known = self.history(name)
        if b is None:
            b = self.in_force(name) or (known[-1].n if known else None)
            if b is None:
                raise UnknownVersion(f"site {name!r} has no versions stored")
        new = self.get_version(name, b)
        if a is None:
            earlier = [v for v in known if v.n < b]
            old = earlier[-1] if earlier else None
        else:
            old = self.get_version(name, a)
        return VersionDiff(None if old is None else old.n, b, versions.diff_text(old, new))

    # -- writing ------------------------------------------------------------------------------

    def _current_or_none(self, name: str) -> StoredSite | None:
        try:
            return self.get(name)
        except ConfigError:  # not readable: stored over, and left out of a history
            return None

    def _store(self, name: str, doc: dict[str, Any], source: str, by: str, rollback_of: int | None) -> StoredSite:
        """``doc`` as the site's next version and the one in force: WATCH the site's history,
        number the version after its last, append it and HSET it in one MULTI/EXEC; again
        when another store got in first (the WATCH failed)."""
        digest = version_of(doc)
        log = sites_log_key(name, self.prefix)
        # On Redis Cluster the hash and a history are in two slots, which no MULTI spans: the
        # HSET follows the EXEC there (a failure in between leaves a version in the history
        # that is not in force, which a rollback can make so)
        cluster = is_cluster(self.client)
        while True:
            with self.client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(log)
                    raw, in_force = self.client.hmget(self.key, [name, f"{name}#v"])
                    current = self._decode_or_none(name, raw)
                    if current is not None and in_force is not None and text(in_force) == digest:
                        return replace(current, unchanged=True)
                    length = int(pipe.llen(log))
                    predating = _predating(current) if length == 0 and current is not None else None
                    n = length + 1 + (predating is not None)
                    new = Version(name, n, digest, doc, source, by, time.time(), rollback_of)
                    record = {"doc": doc, "version": digest, "source": source, "stored_at": new.at, "n": n, "by": by}
                    if rollback_of is not None:
                        record["rollback_of"] = rollback_of
                    fields = {name: json.dumps(record, default=str), f"{name}#v": digest}
                    pipe.multi()
                    if predating is not None:
                        pipe.rpush(log, versions.encode(predating))
                    pipe.rpush(log, versions.encode(new))
                    if not cluster:
                        pipe.hset(self.key, mapping=fields)
                    pipe.execute()
                except redis.WatchError:
                    continue
            if cluster:
                self.client.hset(self.key, mapping=fields)
            return StoredSite(name, doc, digest, source, new.at, n, by, rollback_of)

    def _decode_or_none(self, name: str, raw: bytes | str | None) -> StoredSite | None:
        if raw is None:
            return None
        try:
            return self._decode(name, raw)
        except ConfigError:
            return None

    @staticmethod
    def _decode(name: str, raw: bytes | str) -> StoredSite:
        try:
            record = json.loads(raw)
            rollback_of = record.get("rollback_of")
            return StoredSite(
                name,
                dict(record["doc"]),
                str(record["version"]),
                str(record.get("source", "")),
                float(record.get("stored_at", 0)),
                int(record.get("n", 0)),
                str(record.get("by", "")),
                None if rollback_of is None else int(rollback_of),
            )
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError) as exc:
            raise ConfigError(
                f"the stored definition of site {name!r} is not readable ({str(exc)[:200]}); "
                f"store it again with `crawlplug sites put`"
            ) from None


def _predating(current: StoredSite) -> Version:
    """Version 1 of a definition stored before histories were kept: the one in force."""
    return Version(
        current.name, 1, current.version, current.doc, current.source, "", current.stored_at, None, versions.PREDATES
    )


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
