"""Alerts reach their owners (issue 46), on the suite's stack's real Prometheus and Alertmanager:
two owners register webhook receivers served here on loopback (the suite's settings allow
http on 127.0.0.1, which the defaults refuse). One owner's router, frozen past its stream's
`router_down_for`, brings that owner one KeystoneRouterDown notification naming the stream, the
owner and its dashboard, then a resolved one once it runs again; the other owner hears nothing.
A silence the owner makes suppresses the next one (sent as Prometheus sends it), and another
owner can neither see nor expire it; control silences the stream's lag and delivery alerts
while the router is redeployed.
Receivers to refused networks are refused, naming the setting.

The router is frozen (SIGSTOP), not killed: the fleet would start a killed one again at once,
and Prometheus sees a frozen one as down for as long as the test needs. While a router is down
its own lag series are gone, so the inhibited lag alert is one sent to Alertmanager here, as
Prometheus would send it for a router whose query is stopped (`keystone_router_up` 0) while it
still reports its lag; a dead-letter alert sent with it is the control that arrives."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from playwright.sync_api import Page, expect

from keystone.contracts import http
from keystone.control.launcher import Deployment
from keystone.control.silences import CONTROL
from keystone.dashboards.rules import DEAD_LETTERS, DELIVERY_RATE_LOW, LAG_GROWING, ROUTER_DOWN
from tests.support.api import Api, owner
from tests.support.browser import artifact, chromium, overflowing
from tests.support.stack import Stack, checked
from tests.support.waiting import eventually

STREAM, OWNER, OTHER = "al_main", "team-alerts", "team-alerts-other"
SPEC = {
    "name": STREAM,
    "owner": OWNER,
    "partitions": 1,
    "outputs": [{"name": "copy", "sink": {"type": "kafka"}}],
    "objectives": {"router_down_for": "10 seconds"},
    "archive": {"enabled": False},
}
MAIL_TO = "data-oncall@example.com"
WAIT = 120  # seconds: an alert's `for`, two evaluations, the group's wait, with room


class Webhooks:
    """Notifications received, by path, as Alertmanager POSTed them."""

    def __init__(self) -> None:
        self.received: dict[str, list[dict]] = {}
        self.lock = threading.Lock()
        hooks = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with hooks.lock:
                    hooks.received.setdefault(self.path, []).append(body)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def bodies(self, path: str) -> list[dict]:
        with self.lock:
            return list(self.received.get(path, []))

    def alerts(self, path: str) -> list[tuple[str, dict]]:
        """Every alert notified at `path`, in order: (the notification's status, the alert)."""
        with self.lock:
            bodies = list(self.received.get(path, []))
        return [(b["status"], a) for b in bodies for a in b["alerts"]]


class Mailbox:
    """An SMTP server on loopback, where the stack's settings send alert e-mails: every
    message it was given, parsed."""

    def __init__(self, smarthost: str) -> None:
        host, port = smarthost.rsplit(":", 1)
        self.messages: list[EmailMessage] = []
        self.lock = threading.Lock()
        box = self

        class Handler:
            async def handle_DATA(self, server: object, session: object, envelope: Any) -> str:
                message = BytesParser(policy=policy.default).parsebytes(envelope.content)
                assert isinstance(message, EmailMessage)
                with box.lock:
                    box.messages.append(message)
                return "250 OK"

        self.server = Controller(Handler(), hostname=host, port=int(port))
        self.server.start()

    def to(self, address: str) -> list[EmailMessage]:
        with self.lock:
            return [m for m in self.messages if address in m["To"]]


@pytest.fixture(scope="module")
def hooks() -> Iterator[Webhooks]:
    found = Webhooks()
    yield found
    found.server.shutdown()


@pytest.fixture(scope="module")
def mailbox(stack: Stack) -> Iterator[Mailbox]:
    found = Mailbox(stack.settings.smtp_smarthost)
    yield found
    found.server.stop()


@pytest.fixture(scope="module")
def teams(stack: Stack, admin: Api, hooks: Webhooks, mailbox: Mailbox) -> Iterator[tuple[Api, Api]]:
    team, other = owner(admin, OWNER), owner(admin, OTHER)
    team.ok("POST", "/v1/streams", SPEC)
    for who, path in ((team, "/a"), (other, "/b")):
        body = {"name": "hook", "kind": "webhook", "url": f"{hooks.url}{path}"}
        who.ok("POST", "/v1/receivers", body)
    # The owner's other two kinds: a Slack-compatible webhook, and e-mail.
    slack = {"name": "chat", "kind": "slack", "url": f"{hooks.url}/slack", "channel": "#data"}
    team.ok("POST", "/v1/receivers", slack)
    team.ok("POST", "/v1/receivers", {"name": "mail", "kind": "email", "to": MAIL_TO})
    try:
        yield team, other
    finally:
        router = _router(stack)
        if router is not None:
            os.killpg(router, signal.SIGCONT)
        # One test's failure must not silence another's alerts.
        for silence in team.call("GET", f"/v1/streams/{STREAM}/silences").json():
            team.call("DELETE", f"/v1/streams/{STREAM}/silences/{silence['id']}")
        team.call("DELETE", f"/v1/streams/{STREAM}")
        for who in (team, other):
            for receiver in who.call("GET", "/v1/receivers").json():
                who.call("DELETE", f"/v1/receivers/{receiver['name']}")


@pytest.fixture(scope="module")
def page(stack: Stack, teams: tuple[Api, Api]) -> Iterator[Page]:
    """A browser signed in as the stream's owner."""
    team, _ = teams
    with chromium() as browser:
        tab = browser.new_page(viewport={"width": 1400, "height": 1000})
        tab.set_default_timeout(30_000)
        tab.on("dialog", lambda dialog: dialog.accept())  # the pages' "are you sure?"
        tab.goto(f"{team.url}/ui/login")
        tab.fill("#token", team.token)
        tab.click("button[type=submit]")
        expect(tab).to_have_url(f"{team.url}/ui/")
        yield tab


def _router(stack: Stack) -> int | None:
    deployed = Deployment.load(stack.settings, STREAM)
    return deployed.pid if deployed is not None and deployed.alive() else None


def _alertmanager(
    stack: Stack, method: str, path: str, body: object = None, **params: object
) -> object:
    answer = http.client().request(
        method,
        f"{stack.settings.alertmanager_url}/api/v2{path}",
        json=body,
        params=params,
        timeout=10,
        auth=stack.settings.alertmanager_auth(),
    )
    assert answer.status_code < 300, answer.text
    return answer.json() if answer.content else None


def _sent(stack: Stack, alertname: str, seconds: float = 60, **labels: str) -> None:
    """An alert sent to Alertmanager as Prometheus sends one, for `seconds` (0: resolved)."""
    ends = datetime.fromtimestamp(time.time() + seconds, UTC).isoformat()
    alert = {"labels": {"alertname": alertname, "stream": STREAM, "owner": OWNER, **labels}}
    _alertmanager(stack, "POST", "/alerts", [alert | {"endsAt": ends}])


def _published(stack: Stack, hooks: Webhooks) -> None:
    """Waits until the owners' receivers are in Alertmanager's configuration (control loads
    them every 10 s)."""

    def published() -> bool:
        status = _alertmanager(stack, "GET", "/status")
        assert isinstance(status, dict)
        text = status["config"]["original"]
        return f"{hooks.url}/a" in text and f"{hooks.url}/b" in text

    eventually("the receivers in Alertmanager's configuration", published, 60)


def _state(stack: Stack, alertname: str) -> dict | None:
    """Alertmanager's view of the stream's alert (its state, silences, inhibitions)."""
    found = _alertmanager(
        stack, "GET", "/alerts", filter=[f'alertname="{alertname}"', f'stream="{STREAM}"']
    )
    assert isinstance(found, list)
    return found[0]["status"] if found else None


def _running(team: Api) -> None:
    eventually(
        "the router to run",
        lambda: team.ok("GET", f"/v1/streams/{STREAM}/status")["router"]["state"] == "running",
        240,
    )


def _control_silences(stack: Stack) -> list[dict]:
    """Control's own active silences of the stream (while an operation runs)."""
    found = _alertmanager(stack, "GET", "/silences", filter=[f'stream="{STREAM}"'])
    assert isinstance(found, list)
    return [s for s in found if s["createdBy"] == CONTROL and s["status"]["state"] == "active"]


def _freeze(stack: Stack, team: Api) -> int:
    """Once the router runs, Prometheus sees it up and no redeploy silences it: frozen, the
    router and its JVM, so that Prometheus reaches neither."""
    _running(team)
    eventually("Prometheus to see it up", lambda: _state(stack, ROUTER_DOWN) is None, WAIT)
    eventually("no silence of control's", lambda: not _control_silences(stack), WAIT)
    pid = _router(stack)
    assert pid is not None
    os.killpg(pid, signal.SIGSTOP)
    return pid


def test_a_router_down_notifies_its_owner_once_then_resolved_and_inhibits_its_lag_alert(
    stack: Stack, teams: tuple[Api, Api], hooks: Webhooks, mailbox: Mailbox
) -> None:
    team, _ = teams
    _published(stack, hooks)
    pid = _freeze(stack, team)
    before = len(hooks.alerts("/a"))  # this outage's notifications are those after
    slack_before = len(hooks.bodies("/slack"))  # (another test's alerts reached it too)

    def heard() -> list[tuple[str, dict]]:  # but the pages test's alerts (`source`)
        return [(s, a) for s, a in hooks.alerts("/a")[before:] if "source" not in a["labels"]]

    try:
        eventually(
            "the owner's router-down notification",
            lambda: ("firing", ROUTER_DOWN) in {(s, a["labels"]["alertname"]) for s, a in heard()},
            WAIT,
        )
        # Meanwhile a lag alert of the stream is inhibited; the dead-letter alert sent with it
        # is not, and arrives.
        _sent(stack, LAG_GROWING, output="copy")
        _sent(stack, DEAD_LETTERS, output="copy")

        def inhibited() -> bool:
            state = _state(stack, LAG_GROWING)
            return state is not None and bool(state["inhibitedBy"])

        eventually(
            "the lag alert inhibited",
            inhibited,
            30,
            seen=lambda: json.dumps(_alertmanager(stack, "GET", "/alerts", None), indent=1),
        )
        eventually(
            "the dead-letter notification",
            lambda: any(a["labels"]["alertname"] == DEAD_LETTERS for _, a in heard()),
            WAIT,
        )
        # The stream's status and `keystone stream show` say what fires, and who hears it.
        held = team.ok("GET", f"/v1/streams/{STREAM}/status")["alerts"]
        states = {(a["alert"], a["state"]) for a in held}
        assert {(ROUTER_DOWN, "firing"), (LAG_GROWING, "inhibited")} <= states, held
        down = next(a for a in held if a["alert"] == ROUTER_DOWN)
        assert f"owner-{OWNER}" in down["receivers"]
        shown = checked(stack.keystone("stream", "show", STREAM)).stdout  # as the admin
        assert f"alert {ROUTER_DOWN}: firing" in shown, shown
        # Resolved while still inhibited: its inhibition ends with the router's outage.
        _sent(stack, LAG_GROWING, seconds=0, output="copy")
    finally:
        os.killpg(pid, signal.SIGCONT)
    eventually(
        "the resolved notification",
        lambda: ("resolved", ROUTER_DOWN) in {(s, a["labels"]["alertname"]) for s, a in heard()},
        WAIT,
    )
    firing = [a for s, a in heard() if a["labels"]["alertname"] == ROUTER_DOWN]
    alert = firing[0]
    assert alert["labels"]["stream"] == STREAM and alert["labels"]["owner"] == OWNER
    assert alert["annotations"]["dashboard"].endswith(f"/ui/streams/{STREAM}/dashboard")
    notified = {(s, a["labels"]["alertname"]) for s, a in heard()}
    assert ("firing", LAG_GROWING) not in notified  # one notification for one cause
    assert hooks.alerts("/b") == []  # another owner hears nothing of it
    # The owner's Slack channel and mailbox heard it too, each in its own shape.
    said = [
        b
        for b in hooks.bodies("/slack")[slack_before:]
        if b["attachments"][0]["title"] == f"{ROUTER_DOWN}: {STREAM}"
    ]
    assert said, hooks.bodies("/slack")
    assert all(b["channel"] == "#data" for b in said)
    dashboard = f"/ui/streams/{STREAM}/dashboard"
    assert any(dashboard in b["attachments"][0]["text"] for b in said), said
    eventually("the owner's e-mail", lambda: mailbox.to(MAIL_TO), WAIT)
    mail = next(m for m in mailbox.to(MAIL_TO) if ROUTER_DOWN in str(m["Subject"]))
    assert mail["From"] == stack.settings.smtp_from
    assert STREAM in mail.get_body(("html", "plain")).get_content()


def test_an_owners_silence_suppresses_the_next_and_is_theirs_alone(
    stack: Stack, teams: tuple[Api, Api], hooks: Webhooks
) -> None:
    team, other = teams
    path = f"/v1/streams/{STREAM}/silences"
    made = team.ok("POST", path, {"alert": ROUTER_DOWN, "hours": 1, "comment": "maintenance"})
    assert made["alert"] == ROUTER_DOWN and made["state"] == "active"
    assert made["id"] in {s["id"] for s in team.ok("GET", path)}
    assert other.call("GET", path).status_code == 404  # not their stream
    assert other.call("DELETE", f"{path}/{made['id']}").status_code == 404
    unknown = team.call("POST", path, {"alert": "NoSuchAlert", "hours": 1})
    assert unknown.status_code == 422
    too_long = team.call("POST", path, {"hours": 10_000})
    assert too_long.status_code == 422 and "max_silence_hours" in too_long.text

    # The next router-down alert, sent as Prometheus sends one (the previous test proved that
    # Prometheus does, for a frozen router, in the first test): silenced, so never notified.
    before = len(hooks.alerts("/a"))
    _sent(stack, ROUTER_DOWN)

    def silenced() -> bool:
        state = _state(stack, ROUTER_DOWN)
        return state is not None and made["id"] in state["silencedBy"]

    eventually("the router-down alert, silenced", silenced, WAIT)
    # A control that is not silenced: once it is notified, the silenced one would have been.
    _sent(stack, DEAD_LETTERS, output="after-silence")
    eventually(
        "the unsilenced notification",
        lambda: any(a["labels"].get("output") == "after-silence" for _, a in hooks.alerts("/a")),
        WAIT,
    )
    # Resolved before the silence expires: expired while it fires, it would be notified then.
    _sent(stack, ROUTER_DOWN, seconds=0)
    eventually("the alert resolved", lambda: _state(stack, ROUTER_DOWN) is None, WAIT)
    since = hooks.alerts("/a")[before:]
    assert ("firing", ROUTER_DOWN) not in {(s, a["labels"]["alertname"]) for s, a in since}
    assert team.call("DELETE", f"{path}/{made['id']}").status_code == 204
    assert made["id"] not in {s["id"] for s in team.ok("GET", path)}


def test_a_receiver_to_a_refused_network_scheme_or_port_is_refused_naming_the_setting(
    teams: tuple[Api, Api],
) -> None:
    team, _ = teams
    private = team.call(
        "POST",
        "/v1/receivers",
        {"name": "inside", "kind": "webhook", "url": "http://10.1.2.3:8080/x"},
    )
    assert private.status_code == 422 and private.json()["setting"] == "alert_receiver_networks"
    scheme = team.call(
        "POST", "/v1/receivers", {"name": "ftp", "kind": "webhook", "url": "ftp://example.com/"}
    )
    assert scheme.status_code == 422 and scheme.json()["setting"] == "alert_receiver_schemes"
    port = team.call(
        "POST", "/v1/receivers", {"name": "ssh", "kind": "webhook", "url": "http://8.8.8.8:22/"}
    )
    assert port.status_code == 422 and port.json()["setting"] == "alert_receiver_ports"
    listed = team.ok("GET", "/v1/receivers")
    assert [(r["name"], r["where"]) for r in listed] == [
        ("chat", "http://127.0.0.1/…"),
        ("hook", "http://127.0.0.1/…"),
        ("mail", MAIL_TO),
    ]
    assert "/a" not in json.dumps(listed)  # the URL is not shown again


def test_a_redeploy_silences_the_streams_lag_and_delivery_alerts_until_it_runs(
    stack: Stack, teams: tuple[Api, Api], page: Page
) -> None:
    team, _ = teams

    _running(team)
    eventually(
        "no silence of control's (its first start's ended)",
        lambda: not _control_silences(stack),
        WAIT,
    )
    changed = SPEC | {"outputs": [*SPEC["outputs"], {"name": "more", "sink": {"type": "kafka"}}]}
    team.ok("PUT", f"/v1/streams/{STREAM}", changed)
    eventually("control's silence of the redeploy", lambda: bool(_control_silences(stack)), WAIT)
    (silence,) = _control_silences(stack)
    assert silence["comment"] == "while its router's redeploy runs"
    alertnames = next(m for m in silence["matchers"] if m["name"] == "alertname")
    assert alertnames["isRegex"] and set(alertnames["value"].split("|")) == {
        LAG_GROWING,
        DELIVERY_RATE_LOW,
    }
    listed = team.ok("GET", f"/v1/streams/{STREAM}/silences")  # the owner sees it
    assert [s["comment"] for s in listed] == [silence["comment"]]
    page.goto(f"{team.url}/ui/streams/{STREAM}")  # and the stream's page says so
    said = page.locator(f'[data-control-silence="{silence["id"]}"]')
    expect(said).to_contain_text(f"Control silenced {LAG_GROWING} and {DELIVERY_RATE_LOW}")
    expect(said).to_contain_text("while its router's redeploy runs")
    _running(team)
    eventually("control's silence to end", lambda: _control_silences(stack) == [], WAIT)


def test_the_pages_take_receivers_and_silences_and_show_who_hears_each_alert(
    stack: Stack, teams: tuple[Api, Api], hooks: Webhooks, page: Page
) -> None:
    team, _ = teams
    ui = f"{team.url}/ui"
    # The receivers page: the owner's, never their URL; a new one, then a refused one.
    page.goto(f"{ui}/receivers")
    expect(page.locator('#receivers tr[data-receiver="hook"] [data-where]')).to_have_text(
        "http://127.0.0.1/…"
    )
    page.fill("#receiver-name", "pager")
    page.select_option("#receiver-kind", "webhook")
    page.fill("#receiver-url", f"{hooks.url}/pager-secret")
    page.click("#add-receiver")
    expect(page).to_have_url(f"{ui}/receivers")
    expect(page.locator('#receivers tr[data-receiver="pager"]')).to_be_visible()
    assert "pager-secret" not in page.content()
    assert [r["name"] for r in team.ok("GET", "/v1/receivers")] == ["chat", "hook", "mail", "pager"]
    page.fill("#receiver-name", "inside")
    page.fill("#receiver-url", "http://10.1.2.3:8080/inside-secret")
    page.click("#add-receiver")
    expect(page.get_by_role("alert")).to_contain_text("alert_receiver_networks")
    assert "inside-secret" not in page.content()  # the refused URL is not sent back either
    assert overflowing(page) == []
    page.locator('#receivers tr[data-receiver="pager"] button').click()
    expect(page.locator('#receivers tr[data-receiver="pager"]')).to_have_count(0)
    assert [r["name"] for r in team.ok("GET", "/v1/receivers")] == ["chat", "hook", "mail"]

    # An outage's alerts, sent as Prometheus sends them: the stream's page and its dashboard
    # show the router-down alert firing to the owner's receivers, the lag alert inhibited.
    _published(stack, hooks)
    _sent(stack, ROUTER_DOWN, seconds=600, source="pages")  # resolved below
    _sent(stack, LAG_GROWING, seconds=600, output="copy", source="pages")
    try:
        page.goto(f"{ui}/streams/{STREAM}")
        down = page.locator(f'#stream-alerts tr[data-alert="{ROUTER_DOWN}"]')
        expect(down).to_have_attribute("data-state", "firing", timeout=WAIT * 1000)
        expect(down).to_contain_text(f"owner-{OWNER}")
        lag = page.locator(f'#stream-alerts tr[data-alert="{LAG_GROWING}"]')
        expect(lag).to_have_attribute("data-state", "inhibited", timeout=WAIT * 1000)
        expect(lag).to_contain_text("nobody (inhibited)")
        page.goto(f"{ui}/streams/{STREAM}/dashboard")
        told = page.locator(f'#alerts tr[data-alert="{ROUTER_DOWN}"] td[data-notified]')
        expect(told).to_contain_text("firing → ", timeout=WAIT * 1000)
        expect(told).to_contain_text(f"owner-{OWNER}")
        expect(
            page.locator(f'#alerts tr[data-alert="{LAG_GROWING}"] td[data-notified]')
        ).to_have_text("inhibited (copy)")
        page.screenshot(path=artifact("alerts-dashboard.png"), full_page=True)

        # A silence made on the stream's page: the alert silenced, then the silence ended.
        page.goto(f"{ui}/streams/{STREAM}")
        page.select_option("#silence-alert", ROUTER_DOWN)
        page.fill("#silence-hours", "1")
        page.fill("#silence-comment", "from the page")
        page.click("#silence-form button[type=submit]")
        row = page.locator("#silences tr", has_text="from the page")
        expect(row).to_contain_text(ROUTER_DOWN)
        expect(down).to_have_attribute("data-state", "silenced", timeout=WAIT * 1000)
        expect(down).to_contain_text("nobody (silenced)")
        page.screenshot(path=artifact("alerts-stream.png"), full_page=True)
        assert overflowing(page) == []
        row.locator("button").click()
        expect(page.locator("#silences tr", has_text="from the page")).to_have_count(0)
        assert team.ok("GET", f"/v1/streams/{STREAM}/silences") == []
    finally:
        _sent(stack, LAG_GROWING, seconds=0, output="copy", source="pages")
        _sent(stack, ROUTER_DOWN, seconds=0, source="pages")
    # Resolved: Alertmanager holds neither now (the other tests leave out what they did not
    # send, by this label).
    eventually(
        "the sent alerts resolved",
        lambda: _alertmanager(stack, "GET", "/alerts", filter=['source="pages"']) == [],
        WAIT,
    )


def test_alertmanager_answers_only_those_who_log_in(stack: Stack) -> None:
    # Its API shows every receiver's address and takes silences of any alert: nobody else.
    for url in stack.settings.alertmanager_urls:
        for path in ("/api/v2/status", "/api/v2/silences"):
            assert http.client().get(f"{url}{path}", timeout=10).status_code == 401
