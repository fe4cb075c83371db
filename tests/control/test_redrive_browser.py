"""Dead letters on the stream's page in a real headless Chromium, on the stack: an owner opens
the dead-letters box, sees them grouped by output and reason, and is asked to confirm a redrive
with what it would send, narrowed by the time range the page's fields give; declined, nothing
moves. A redrive carried out is tests/router/test_redrive.py; the routes and the markup without
a browser, tests/control/test_recovery_views.py."""

from __future__ import annotations

from playwright.sync_api import expect

from keystone.ingest_proxy.client import DirectProducer
from tests.support.api import Api, owner
from tests.support.browser import artifact, chromium, log_in
from tests.support.stack import Stack
from tests.support.waiting import eventually

STREAM, OWNER, APP = "ui_redrive", "team-ui-redrive", "ui-redrive-app"
UNREADABLE = ["not json at all", "[1, 2]"]  # "not JSON", "not a JSON object"


def test_an_owner_is_shown_what_a_redrive_of_a_time_range_would_send_before_it_starts(
    stack: Stack, admin: Api
) -> None:
    team = owner(admin, OWNER)
    team.ok("POST", "/v1/apps", {"name": APP})
    picked = {"name": "picked", "sink": {"type": "kafka"}, "start": "earliest"}
    spec = {"name": STREAM, "owner": OWNER, "partitions": 1, "producers": [APP]}
    team.ok("POST", "/v1/streams", {**spec, "archive": {"enabled": False}, "outputs": [picked]})
    listed = f"/v1/streams/{STREAM}/dead-letters"
    try:
        DirectProducer(stack.kafka(), APP).send(STREAM, UNREADABLE)
        eventually(
            "the stream's dead letters",
            lambda: sum(g["count"] for g in team.ok("GET", listed)["groups"]) == len(UNREADABLE),
            timeout=180,
        )
        asked: list[str] = []
        with chromium() as browser:
            page = browser.new_page(viewport={"width": 1400, "height": 1200})
            page.set_default_timeout(30_000)

            def redrive_all_declined() -> None:
                """Asks for a redrive of all; its confirmation, said, is declined."""
                with page.expect_event("dialog") as shown:
                    box.locator("[data-redrive-all]").click()
                asked.append(shown.value.message)
                shown.value.dismiss()

            log_in(page, team.url, team.token)
            page.goto(f"{team.url}/ui/streams/{STREAM}")
            box = page.locator("#dead-letters-box")
            box.locator("summary").click()
            rows = box.locator("#dead-letter-groups tbody tr")
            expect(rows).to_have_count(2)
            expect(rows.first).to_contain_text("_stream")
            page.screenshot(path=artifact("ui-dead-letters.png"), full_page=True)

            # A range after them selects none; one around them, both: the plan says so.
            box.locator("#redrive-from").fill("2099-01-01T00:00")
            redrive_all_declined()
            box.locator("#redrive-from").fill("2000-01-01T00:00")
            box.locator("#redrive-to").fill("2099-01-01T00:00")
            redrive_all_declined()
        after = "dead-lettered from 2099-01-01T00:00:00Z again"
        assert asked[0].startswith(f"Send 0 dead letters {after}"), asked
        around = "from 2000-01-01T00:00:00Z before 2099-01-01T00:00:00Z again"
        assert asked[1].startswith(f"Send {len(UNREADABLE)} dead letters dead-lettered {around}")
        assert "picked: 2" in asked[1], asked
        redrive = team.call("GET", f"{listed}/redrive")
        assert redrive.status_code == 404, redrive.text  # declined: nothing started
    finally:
        team.call("DELETE", f"/v1/streams/{STREAM}")
