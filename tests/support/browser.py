"""Debian's Chromium, headless, driven by Playwright: for tests of the web pages. Screenshots
are kept in build/test-artifacts/ for people to look at."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Browser, sync_playwright

from keystone.dashboards.render import CHROMIUM, FLAGS
from tests.support.stack import CHECKOUT

ARTIFACTS = CHECKOUT / "build" / "test-artifacts"


@contextmanager
def chromium() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


def artifact(name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / name
