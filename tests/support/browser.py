"""Headless Chromium for the dashboard's end-to-end tests, and reading the page.

Needs Debian's chromium and chromium-driver (``apt-get install chromium
chromium-driver``; .ci/run installs them) and selenium (test extra). Selenium is
given the driver's path, so it never tries to download one. A test module imports
:func:`browser` (the fixture) and skips itself with :func:`skip_without_chromium`.
Screenshots are kept in tests/artifacts/; with CRAWLPLUG_UPDATE_SCREENSHOT=1 they also
replace the docs' pictures (a test run never changes the repository otherwise).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .nodes import ROOT
from .patience import patient

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = ROOT / "tests" / "artifacts"
DOCS = ROOT / "docs"


def skip_without_chromium() -> None:
    """Skip the calling test module when selenium or Chromium is missing."""
    pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
    if not CHROMIUM.exists() or not CHROMEDRIVER.exists():
        pytest.skip(
            f"headless Chromium is not installed ({CHROMIUM} and {CHROMEDRIVER} are needed: "
            "apt-get install chromium chromium-driver)",
            allow_module_level=True,
        )


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(arg)
    options.binary_location = str(CHROMIUM)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def number(driver: Any, selector: str) -> int | None:
    """The integer shown in ``selector`` ("1,234" -> 1234; "-" -> None)."""
    from selenium.webdriver.common.by import By

    digits = re.sub(r"\D", "", driver.find_element(By.CSS_SELECTOR, selector).text)
    return int(digits) if digits else None


def table(driver: Any, table_id: str) -> list[list[str]]:
    """The table's body cells as shown, read in one script: a page that redraws the table between
    two WebDriver calls would leave the second holding a detached (stale) row."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]),"
        " tr => Array.from(tr.querySelectorAll('td'), td => td.innerText.trim()))",
        f"#{table_id} tbody tr",
    )


def refreshed(driver: Any) -> int:
    """When the page last finished a refresh (ms, the browser's clock; 0: never)."""
    return int(driver.execute_script("return document.body.dataset.refreshed || '0'"))


def until(driver: Any, check: Any, timeout: float, what: str) -> Any:
    """``check(driver)`` until it is truthy (returned), at most ``timeout`` s."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(
        driver, patient(timeout), poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,)
    ).until(lambda d: check(d), message=f"waiting {timeout}s for {what}")


def fresh(driver: Any, timeout: float = 10) -> None:
    """Wait for a refresh that began after this call (the page shows what is now)."""
    mark = refreshed(driver)
    until(driver, lambda d: refreshed(d) > mark, timeout, "a refresh of the page")


def severe_logs(driver: Any) -> list[dict[str, Any]]:
    """The browser console's errors since the last call."""
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def screenshot(driver: Any, name: str) -> Path:
    """Save the whole page (the window grown to its height, for the time of the picture) as
    tests/artifacts/<name>.png (and docs/<name>.png with CRAWLPLUG_UPDATE_SCREENSHOT=1);
    checks it is a real picture."""
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"{name}.png"
    size = driver.get_window_size()
    page = int(driver.execute_script("return document.documentElement.scrollHeight"))
    inner = int(driver.execute_script("return window.innerHeight"))
    if page > inner:
        driver.set_window_size(size["width"], min(size["height"] + page - inner, 4000))
        driver.execute_script("window.scrollTo(0, 0)")
    try:
        assert driver.save_screenshot(str(shot))
    finally:
        if page > inner:
            driver.set_window_size(size["width"], size["height"])
    assert shot.stat().st_size > 10_000
    if os.environ.get("CRAWLPLUG_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(shot, DOCS / f"{name}.png")
    return shot
