"""A site definition's text checked, each problem at its line: for an editor that marks
errors as the operator types (the console's ``POST /api/v1/sites/check``) and for
``crawlplug sites check FILE`` (``FILE:LINE: path: message``).

The text is parsed once with PyYAML's composer, which keeps where each node is, and the
document it makes is validated as ``crawlplug sites put`` validates it
(:func:`crawlplug.sites.definition.errors_of`). Each error's path is then followed down
the nodes: its line is the line of the key it names, or of the nearest key above it
that is in the text (a required key that is missing is reported at its parent). A YAML
syntax error is reported at the line PyYAML stopped at.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import yaml

from .definition import Loc, SiteDefinition, _loc, errors_of

__all__ = ["Checked", "Problem", "check_text"]


@dataclass(frozen=True)
class Problem:
    """One problem: where (1-based line and column, None if nowhere in particular; the
    key's path, "" for the whole document) and what."""

    line: int | None
    column: int | None
    path: str
    message: str

    def text(self, source: str) -> str:
        """``source:LINE: path: message``, as compilers print it."""
        where = f"{source}:{self.line}" if self.line is not None else source
        return f"{where}: {self.path + ': ' if self.path else ''}{self.message}"


@dataclass(frozen=True)
class Checked:
    """What :func:`check_text` found: the definition if it is valid, else its problems."""

    site: SiteDefinition | None
    doc: Any
    errors: list[Problem] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.site is not None and not self.errors

    def as_dict(self) -> dict[str, Any]:
        """The console's answer: ``valid``, ``errors``, and the ``name``, ``steps``, ``fields``
        of a valid definition (the name alone, if it has one, of an invalid one)."""
        site = self.site if self.valid else None
        name = site.name if site else (self.doc.get("name") if isinstance(self.doc, dict) else None)
        return {
            "valid": self.valid,
            "errors": [asdict(p) for p in self.errors],
            "name": name if isinstance(name, str) else None,
            "steps": [s.name for s in site.steps] if site else [],
            "fields": list(site.fields) if site else [],
        }


def check_text(
    text: str, *, default_name: str | None = None, check_imports: bool = True, pipelines: Iterable[str] = ()
) -> Checked:
    """Parse and validate a definition's YAML (or JSON) text; ``default_name`` names one that
    has no ``name`` (a file's stem), ``pipelines`` and ``check_imports`` as
    :func:`crawlplug.sites.definition.validate` takes them."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        doc = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        return Checked(None, None, [Problem(line, column, "", f"not valid YAML/JSON: {problem}")])
    finally:
        loader.dispose()
    site, errors = errors_of(doc, default_name=default_name, check_imports=check_imports, pipelines=pipelines)
    problems = [Problem(*_position(root, loc), "" if not loc else _loc(loc), msg) for loc, msg in errors]
    return Checked(site if not problems else None, doc, problems)


def _position(root: yaml.Node | None, loc: Loc) -> tuple[int | None, int | None]:
    """(line, column) of the node at ``loc``, or of the nearest one above it in the text: a
    mapping's entry is where its key is written, a list's item where the item begins."""
    if root is None:
        return None, None
    node, mark = root, root.start_mark
    for part in loc:
        found = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:  # the last of two equal keys wins, as when loaded
                if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                    found = (value, key.start_mark)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            found = (node.value[part], node.value[part].start_mark)
        if found is None:
            break
        node, mark = found
    return mark.line + 1, mark.column + 1
