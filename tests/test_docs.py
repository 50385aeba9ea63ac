"""The docs agree with the code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

from crawlplug.config.doc import render
from crawlplug.defaults import SETTINGS

from .support.nodes import ROOT


def test_settings_reference_is_generated_from_defaults():
    on_disk = (ROOT / "docs" / "settings.md").read_text()
    assert on_disk == render(), "docs/settings.md is stale: run `make docs`"


def test_every_setting_the_code_reads_is_documented():
    code = "\n".join(p.read_text() for p in (ROOT / "crawlplug").glob("*.py"))
    # settings are read through _setting(settings, "NAME", ...) or settings.get*("NAME")
    used = set(re.findall(r"(?:setting\(\w+, |\.get\w*\()\"(CRAWLPLUG_[A-Z_]+)\"", code))
    assert len(used) >= 10, used
    missing = used - set(SETTINGS)
    assert not missing, f"settings read but not in defaults.py: {sorted(missing)}"


def test_readme_starts_with_the_two_commands():
    head = "\n".join((ROOT / "README.md").read_text().splitlines()[:15])
    assert "make crawl" in head and "make test" in head


def _nav_pages(entries: list) -> list[str]:
    pages = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages.extend(_nav_pages(value) if isinstance(value, list) else [value])
    return pages


def test_every_docs_page_is_in_the_site_nav_and_every_nav_page_exists():
    """What `mkdocs build --strict` checks in CI (make docs-site), checked here without MkDocs."""
    # (a `!!python/name:` tag, as Material's emoji options use, is read as a plain string)
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python/name:", ""))
    nav = _nav_pages(config["nav"])
    assert len(nav) == len(set(nav)), "a page is twice in the nav"
    on_disk = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert set(nav) == on_disk, f"not in the nav: {sorted(on_disk - set(nav))}; missing: {sorted(set(nav) - on_disk)}"
    assert {"getting-started.md", "tutorial.md", "settings.md", "architecture.md"} <= set(nav)


def test_readme_links_lead_to_files():
    """The README is read on GitHub and PyPI, outside the docs site that mkdocs checks."""
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert len(local) >= 15, local
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, missing


def _security_table() -> list[list[str]]:
    """The rows of docs/security.md's table of what a writer of each key can make a node do."""
    text = (ROOT / "docs" / "security.md").read_text()
    head = "## What a writer of each key can make a node do"
    section = text.split(head, 1)[1].split("\n## ", 1)[0] if head in text else ""
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


def _defined_tests(path: Path) -> set[str]:
    """``name`` and ``Class::name`` of every test function in a test file (read, not imported)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.add(node.name)
        elif isinstance(node, ast.ClassDef):
            found.update(
                f"{node.name}::{item.name}"
                for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
            )
    return found


def test_every_row_of_the_security_table_names_tests_that_exist():
    rows = _security_table()
    assert len(rows) >= 15, "the table of docs/security.md was not found"
    for row in rows:
        assert len(row) == 4, row
        named = re.findall(r"`(tests/[\w/]+\.py)::([\w:]+)(?:\[[^\]]*\])?`", row[3])
        assert named, f"the row of {row[0]} names no test: {row[3]!r}"
        for path, name in named:
            file = ROOT / path
            assert file.is_file(), f"docs/security.md, row {row[0]}: no file {path}"
            assert name in _defined_tests(file), f"docs/security.md, row {row[0]}: {path} has no test {name}"
