"""The web UI in a real headless Chromium: an owner signs in, creates a stream and an output
through the pages (errors shown inline, a preview on recent events), then sees events flow;
gives an app a Kafka user of its own on the apps page, and takes it back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from keystone.ingest_proxy.client import ProxyClient
from keystone.loadtest.run import await_key
from tests.support.api import Api, owner
from tests.support.browser import artifact, chromium, overflowing
from tests.support.kafka_users import as_user, login_errors
from tests.support.stack import Stack

STREAM, OWNER, APP = "ui_stream", "team-ui", "ui-app"
WAIT_MS = 180_000  # a router's first start, then Prometheus' scrape and the page's refresh


@pytest.fixture(scope="module")
def page(stack: Stack, admin: Api) -> Iterator[Page]:
    with chromium() as browser:
        tab = browser.new_page(viewport={"width": 1400, "height": 1000})
        tab.set_default_timeout(30_000)
        yield tab
    admin.call("DELETE", f"/v1/streams/{STREAM}")


def test_an_owner_creates_a_stream_and_an_output_in_the_browser_and_sees_events_flow(
    stack: Stack, admin: Api, page: Page
) -> None:
    team = owner(admin, OWNER)
    key = team.ok("POST", "/v1/apps", {"name": APP})["key"]
    ui = f"{admin.url}/ui"

    page.goto(f"{ui}/")  # not signed in: sent to sign in
    expect(page).to_have_url(f"{ui}/login")
    page.fill("#token", "ko_not-a-token")
    page.click("button[type=submit]")
    expect(page.get_by_role("alert")).to_have_text("That token is not valid.")
    page.fill("#token", team.token)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{ui}/")

    # A new stream; an unknown producer is refused inline, then corrected.
    page.click("text=New stream")
    page.fill("#name", STREAM)
    page.fill("#partitions", "2")
    page.fill("#producers", "nobody-app")
    page.click("#create-stream")
    expect(page.locator('.field-error[data-field="producers"]')).to_contain_text(
        "no app 'nobody-app'"
    )
    page.fill("#producers", APP)
    page.click("#create-stream")
    expect(page).to_have_url(f"{ui}/streams/{STREAM}")

    await_key(stack.address("ingest_proxy"), key, STREAM)  # the proxy knows the new stream
    with ProxyClient(stack.address("ingest_proxy"), key) as proxy:
        proxy.send(STREAM, [{"n": n, "kind": "ab"[n % 2]} for n in range(20)])

        # The editor: a broken filter is pointed at, a good one previewed on those events.
        page.fill("#out-name", "picked")
        page.select_option("#out-sink", "kafka")
        page.fill("#out-filter", "kind = 'a' and")
        page.click("#preview-button")
        expect(page.locator("#filter-error")).to_contain_text("(column 15)")
        page.fill("#out-filter", "kind = 'a' and n >= 4")
        page.fill("#out-projection", "guid\nn as number\nmask(kind, 0) as kind")
        page.click("#preview-button")
        expect(page.locator("#preview-summary")).to_have_text("8 of the last 20 events match.")
        expect(page.locator("#preview-records tbody tr")).to_have_count(8)
        expect(page.locator("#filter-error")).to_be_hidden()
        # Each record beside its event, what the projection changed marked: the masked kind.
        first = page.locator("#preview-records tbody tr").first
        expect(first.locator("td").nth(1)).to_contain_text('"kind":"a"')
        expect(first.locator('mark [data-member="kind"]')).to_have_text('"kind": "*"')
        expect(first.locator('mark [data-member="number"]')).to_have_count(0)  # n, unchanged

        page.select_option("#out-start", "earliest")
        # Exactly once needs micro-batches: refused beside the mode, then saved with them.
        page.select_option("#out-guarantee", "exactly_once")
        page.click("#save-output")
        expect(page.locator('pre[data-field="mode"]')).to_contain_text(
            "exactly_once needs delivery.mode 'microbatch'"
        )
        page.select_option("#out-mode", "microbatch")
        page.fill("#out-trigger", "2 seconds")
        page.click("#save-output")
        expect(page.locator('tr[data-output="picked"]')).to_be_visible()
        # The stream's fields: which output reads which, and where.
        readers = page.locator('#lineage-fields tr[data-field="kind"] [data-readers]')
        expect(readers).to_have_text("picked (filter, projection)")
        expect(page.locator('#lineage-fields tr[data-field="n"] [data-readers]')).to_have_text(
            "picked (filter, projection)"
        )
        expect(page.locator('tr[data-output="picked"] [data-guarantee]')).to_have_text(
            "exactly once"
        )
        expect(page.locator("#router-state")).to_have_text("running", timeout=WAIT_MS)

        proxy.send(STREAM, [{"n": n, "kind": "ab"[n % 2]} for n in range(20, 40)])
    # 8 + 10 events of kind 'a' with n >= 4: the page refreshes its figures by itself.
    delivered = page.locator('tr[data-output="picked"] [data-total="delivered"]')
    expect(delivered).to_have_text("18", timeout=WAIT_MS)
    page.screenshot(path=artifact("ui-stream.png"), full_page=True)

    # The pages fit common widths: nothing sticks out of its card (the outputs table did).
    for width in (1280, 1400):
        page.set_viewport_size({"width": width, "height": 1000})
        for path in (f"streams/{STREAM}", f"streams/{STREAM}/dashboard", ""):
            page.goto(f"{ui}/{path}")
            assert overflowing(page) == [], (width, path)

    page.click("text=Streams")
    row = page.locator(f'tr[data-stream="{STREAM}"]')
    expect(row.locator(".state")).to_have_text("running")
    expect(row).to_contain_text("picked · kafka")


def test_an_owner_gives_an_app_a_kafka_user_on_the_apps_page_and_takes_it_back(
    stack: Stack, admin: Api, page: Page
) -> None:
    team = owner(admin, "team-ui-apps")
    team.ok("POST", "/v1/apps", {"name": "ui-direct-app"})
    ui = f"{admin.url}/ui"
    browser = page.context.browser
    assert browser is not None
    # A context of its own: its sign-in is not the module's other test's.
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    try:
        tab = context.new_page()
        tab.goto(f"{ui}/login")
        tab.fill("#token", team.token)
        tab.click("button[type=submit]")
        tab.click("nav >> text=Apps")
        row = tab.locator('tr[data-app="ui-direct-app"]')
        row.locator("text=Kafka user").click()
        secret = tab.locator(".secret code")
        expect(secret).to_have_count(1)
        password = secret.inner_text().strip()
        expect(row).to_contain_text("keystone-app-ui-direct-app")
        # The password shown is the user's: Kafka takes it.
        assert not login_errors(as_user(stack, "keystone-app-ui-direct-app", password))
        row.locator("text=Revoke Kafka user").click()
        expect(tab).to_have_url(f"{ui}/apps")
        expect(row).not_to_contain_text("keystone-app-ui-direct-app")
        expect(tab.locator(".secret")).to_have_count(0)
        assert overflowing(tab) == []
        tab.screenshot(path=artifact("ui-apps.png"), full_page=True)
    finally:
        context.close()
