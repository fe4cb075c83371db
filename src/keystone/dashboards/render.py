"""A dashboard page as an image, for reports: headless Chromium (Debian's, driven by
Playwright), signed in with the caller's token, once the charts have drawn."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import sync_playwright

from keystone.contracts.errors import KeystoneError

CHROMIUM = "/usr/bin/chromium"
# As root, without a sandbox; and none of Chromium's calls home, which a closed network refuses.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def render_png(url: str, token: str, path: Path, timeout_s: float = 60) -> None:
    """Signs in with the token (a session of its own, ended when the image is drawn), opens the
    page and saves it once its charts have drawn."""
    parts = urlsplit(url)
    base = f"{parts.scheme}://{parts.netloc}"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            try:
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                # The context's requests share its cookies: the session's is the page's too.
                signed_in = context.request.post(
                    f"{base}/ui/login", form={"token": token}, max_redirects=0
                )
                if signed_in.status != 303:
                    raise KeystoneError("the token was refused: cannot sign in to draw the page")
                try:
                    page = context.new_page()
                    page.goto(url)
                    page.wait_for_selector("#charts[data-loaded=true]", timeout=timeout_s * 1000)
                    page.screenshot(path=str(path), full_page=True)
                finally:
                    context.request.post(f"{base}/ui/logout", max_redirects=0)
            finally:
                browser.close()
    except PlaywrightError as e:
        raise KeystoneError(f"could not draw {url}: {e.message.splitlines()[0]}") from e
