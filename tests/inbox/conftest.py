"""The browser the inbox's browser tests drive: Debian's chromium through chromedriver.

Absent, the tests skip; under ``AKCHAT_REQUIRE_SERVERS=1`` (CI) the missing browser is a
failure, like a missing database server (tests/conftest.py).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = os.environ.get("AKCHAT_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("AKCHAT_CHROMEDRIVER", "/usr/bin/chromedriver")


def _found(path: str) -> bool:
    return os.access(path, os.X_OK) or shutil.which(path) is not None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless chromium; skips (or fails in CI) when chromium or chromedriver is absent."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not _found(p)]
    if missing:
        message = f"the browser tests need {', '.join(missing)}"
        if os.environ.get("AKCHAT_REQUIRE_SERVERS") == "1":
            pytest.fail(f"{message} (AKCHAT_REQUIRE_SERVERS=1)")
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1100,900", "--disable-extensions", "--no-first-run"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
