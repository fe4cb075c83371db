"""Debian's Chromium, headless, driven by Playwright: for tests of the web pages. Screenshots
are kept in build/test-artifacts/ for people to look at."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Browser, Page, sync_playwright

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


def log_in(page: Page, url: str, token: str | None) -> None:
    """Signs the page in to control's web UI at `url` with `token`, as a person does."""
    page.goto(f"{url}/ui/login")
    page.fill("#token", token or "")
    page.click("button[type=submit]")


def artifact(name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / name


# Every element whose box reaches past its card's (or, outside a card, the page's main column's)
# right edge, or past the window's; what scrolls inside a box of its own is that box's business.
_OVERFLOWING = """() => {
  const found = [];
  const right = (el) => el.getBoundingClientRect().right;
  for (const el of document.querySelectorAll("main *")) {
    const box = el.closest(".card") || el.closest("main");
    if (el === box) continue;
    let scroller = el.parentElement;
    while (scroller && scroller !== box && getComputedStyle(scroller).overflowX === "visible")
      scroller = scroller.parentElement;
    if (scroller !== box || el.getClientRects().length === 0) continue;
    const inner = right(box) - parseFloat(getComputedStyle(box).paddingRight) + 1;
    if (right(el) > Math.min(inner, window.innerWidth)) {
      const name = el.tagName.toLowerCase() + (el.id ? "#" + el.id : "");
      found.push(`${name} ends at ${Math.round(right(el))} px, its box at ${Math.round(inner)}`);
    }
  }
  return found;
}"""


def overflowing(page: Page) -> list[str]:
    """What on the page sticks out of its card or the window (empty when the page fits)."""
    return page.evaluate(_OVERFLOWING)
