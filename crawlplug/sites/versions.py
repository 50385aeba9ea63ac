"""The version history of a stored site definition: its records, read and compared.

Every store of a definition (``crawlplug sites put``, the console's PUT, a rollback)
appends one record to the site's list ``<prefix>:sites:log:<name>``
(:func:`crawlplug.sites.store.sites_log_key`), in the same transaction that makes it the
definition in force (:class:`crawlplug.sites.store.SiteStore` writes both). A record is
JSON::

    {"n": 3, "version": "8e45784d4b31", "doc": {...}, "source": "spiders/sites/cars.yaml",
     "by": "cli:ana@build1", "at": 1718000000.0, "rollback_of": 1}

``n`` is the record's place in the list, from 1; ``rollback_of`` the version whose
document a rollback stored again (null for any other store). This module decodes records
(one that is not readable is left out of a history, and an error only for whoever asks
for that very version) and renders the difference of two versions as a unified diff of
their YAML. Nothing here runs on a crawl's path: nodes poll only the version in force.
"""

from __future__ import annotations

import difflib
import json
import logging
from dataclasses import asdict, dataclass
from typing import Any

import yaml

from ..errors import ConfigError

__all__ = ["PREDATES", "InForce", "UnknownVersion", "Version", "decode", "diff_text", "encode", "render"]

logger = logging.getLogger(__name__)

#: The note of a version 1 made from a definition stored before histories were kept.
PREDATES = "stored before the version history was kept"


class UnknownVersion(ConfigError):
    """No such site in the history, or no version of that number."""


class InForce(ConfigError):
    """A rollback to the document already in force: nothing to do."""


@dataclass(frozen=True)
class Version:
    """One record of a site's history."""

    name: str
    n: int
    version: str  # the document's digest (crawlplug.sites.definition.version_of)
    doc: dict[str, Any]
    source: str
    by: str  # who stored it: a console user's name, ``cli:<user>@<host>``, "" if unknown
    at: float  # seconds since the epoch
    rollback_of: int | None = None
    note: str = ""

    def as_dict(self, *, with_doc: bool = True) -> dict[str, Any]:
        out = asdict(self)
        if not with_doc:
            del out["doc"]
        return out


def encode(version: Version) -> str:
    record: dict[str, Any] = {
        "n": version.n,
        "version": version.version,
        "doc": version.doc,
        "source": version.source,
        "by": version.by,
        "at": version.at,
        "rollback_of": version.rollback_of,
    }
    if version.note:
        record["note"] = version.note
    return json.dumps(record, default=str)


def decode(name: str, n: int, raw: bytes | str) -> Version:
    """The record at place ``n`` of site ``name``'s list, or a ConfigError saying it is not readable."""
    try:
        record = json.loads(raw)
        rollback_of = record.get("rollback_of")
        return Version(
            name,
            n,
            str(record["version"]),
            dict(record["doc"]),
            str(record.get("source", "")),
            str(record.get("by", "")),
            float(record.get("at", 0)),
            None if rollback_of is None else int(rollback_of),
            str(record.get("note", "")),
        )
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError) as exc:
        raise ConfigError(
            f"version {n} of site {name!r} is not readable ({str(exc)[:200]}); the other versions are"
        ) from None


def render(doc: dict[str, Any]) -> str:
    """A document as the diff shows it: YAML, keys in their written order."""
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def diff_text(old: Version | None, new: Version) -> str:
    """A unified diff from ``old`` (None: nothing, every line added) to ``new``, headed
    ``v<a>`` / ``v<b>``; "" when the two documents are the same."""
    before = render(old.doc).splitlines() if old is not None else []
    lines = difflib.unified_diff(
        before,
        render(new.doc).splitlines(),
        fromfile=f"v{old.n}" if old is not None else "(nothing)",
        tofile=f"v{new.n}",
        lineterm="",
    )
    return "\n".join(lines)
