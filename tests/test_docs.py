"""The docs agree with the code."""

from __future__ import annotations

import re

from crawlplug.defaults import SETTINGS
from crawlplug.settingsdoc import render

from .conftest import ROOT


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
