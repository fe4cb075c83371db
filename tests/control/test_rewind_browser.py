"""A rewind from the stream's page in a real headless Chromium, on the stack: an owner opens an
output's recovery section, sees its restore points, is told what a rewind would do to its sink
before anything moves (a cancelled plan moves nothing), confirms, and follows the replay until
it has caught up. The routes and the page's markup without a browser are
tests/control/test_recovery_views.py."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from keystone.ingest_proxy.client import ProxyClient
from keystone.loadtest.run import await_key
from tests.support.api import Api, owner
from tests.support.browser import artifact, chromium, log_in
from tests.support.stack import Stack
from tests.support.waiting import eventually

STREAM, OWNER, APP = "ui_rewind", "team-ui-rewind", "ui-rewind-app"
WAIT_MS = 180_000  # a replay's end, as the fleet sees it and the page's status polling shows it
EVENTS = 30


def test_an_owner_rewinds_an_output_from_its_page_once_shown_the_plan(
    stack: Stack, admin: Api
) -> None:
    team = owner(admin, OWNER)
    key = team.ok("POST", "/v1/apps", {"name": APP})["key"]
    search = {
        "name": "search",
        "sink": {"type": "elasticsearch"},
        "delivery": {"mode": "realtime", "trigger": "5 seconds"},
        "start": "earliest",
    }
    spec = {"name": STREAM, "owner": OWNER, "partitions": 2, "producers": [APP]}
    team.ok("POST", "/v1/streams", {**spec, "outputs": [search]})
    points = f"/v1/streams/{STREAM}/outputs/search/restore-points"
    try:
        await_key(stack.address("ingest_proxy"), key, STREAM)
        with ProxyClient(stack.address("ingest_proxy"), key) as proxy:
            proxy.send(STREAM, [{"n": n} for n in range(EVENTS)])
        eventually(
            "a restore point past every event",
            lambda: any(sum(p["offsets"].values()) >= EVENTS for p in team.ok("GET", points)),
            timeout=180,
        )
        with chromium() as browser:
            page = browser.new_page(viewport={"width": 1400, "height": 1200})
            page.set_default_timeout(30_000)
            log_in(page, team.url, team.token)
            page.goto(f"{team.url}/ui/streams/{STREAM}#recovery-search")  # opened by its hash
            box = page.locator("#recovery-search")
            rows = box.locator("tr[data-point]")
            expect(rows.first).to_be_visible()
            expect(box.locator("[data-rewind-summary]")).to_have_text("not rewound")

            # Wrong input is said inline, before (offsets) or by control (a future time).
            box.locator("select[name=kind]").select_option("offsets")
            box.locator("input[name=offsets]").fill("zero")
            box.locator("[data-rewind-button]").click()
            expect(box.locator("[data-rewind-error]")).to_contain_text("partition:offset pairs")
            box.locator("select[name=kind]").select_option("to")
            box.locator("form.rewind-form input[name=to]").fill("2099-01-01T00:00")
            box.locator("[data-rewind-button]").click()
            expect(box.locator("[data-rewind-error]")).to_contain_text("is in the future")

            # The oldest point (newest first: the last row), from before most events or all.
            first = team.ok("GET", points)[-1]
            oldest, replays = first["id"], EVENTS - sum(first["offsets"].values())
            expect(rows.last).to_have_attribute("data-point", oldest)
            box.locator("select[name=kind]").select_option("restore_point")
            box.locator("select[name=restore_point]").select_option(oldest)
            box.locator("[data-rewind-button]").click()
            dialog = page.locator("#rewind-dialog")
            expect(dialog).to_be_visible()
            expect(dialog.locator('[data-plan="kind"]')).to_have_text("idempotent")
            expect(dialog.locator('[data-plan="effect"]')).to_contain_text("under their guids")
            expect(dialog.locator('[data-plan="events"]')).to_contain_text(
                f"{replays} events of the fronting topic"
            )
            expect(dialog.locator('[data-plan="target"]')).to_contain_text(oldest)
            page.screenshot(path=artifact("ui-rewind-plan.png"), full_page=True)
            page.click("#rewind-cancel")
            expect(dialog).to_be_hidden()
            rewind = f"/v1/streams/{STREAM}/outputs/search/rewind"
            assert team.call("GET", rewind).status_code == 404  # a cancelled plan moved nothing

            box.locator("[data-rewind-button]").click()
            expect(dialog).to_be_visible()
            page.click("#rewind-confirm")
            expect(box).to_have_attribute("data-rewind-state", re.compile("replaying|caught_up"))
            started = team.ok("GET", rewind)
            assert started["restore_point"] == oldest and started["events"] == replays
            expect(box.locator("[data-rewind-summary]")).to_contain_text(f"rewind {started['id']}")
            expect(box.locator("[data-rewind-summary]")).to_contain_text(
                "caught up", timeout=WAIT_MS
            )
            expect(box.locator("[data-rewind-button]")).to_be_enabled()
            page.screenshot(path=artifact("ui-rewind-done.png"), full_page=True)
        entries = team.audit()
        assert any(e["action"] == "output.rewind" and e["who"] == OWNER for e in entries)
    finally:
        team.call("DELETE", f"/v1/streams/{STREAM}")
