"""A stream's dashboards on the real stack, after real traffic: every PromQL expression of its
Grafana model parses and returns data from the stack's Prometheus, which loaded its rules; the
live page in headless Chromium draws non-empty charts and its alerts; alerts fire when their
condition is made true (a dead letter; the router stopped); deleting a stream removes it all.

The tests share one stream and its traffic, in any order; the deletion has a stream of its own."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from playwright.sync_api import expect

from keystone.contracts import http
from keystone.contracts.names import fronting_topic
from keystone.contracts.processes import PidFile
from keystone.ingest_proxy.client import ProxyClient
from tests.support.api import Api, owner
from tests.support.browser import artifact, chromium, log_in
from tests.support.kafka import produce
from tests.support.processes import processes_mentioning
from tests.support.stack import Stack, checked
from tests.support.waiting import eventually

STREAM, OWNER, APP = "dash_main", "team-dash", "dash-app"
OUTPUTS = [
    {
        "name": "picked",
        "filter": "n >= 0",
        "sink": {"type": "kafka"},
        "delivery": {"mode": "realtime", "trigger": "5 seconds"},
    },
    {"name": "search", "projection": ["n"], "sink": {"type": "elasticsearch"}},
]
DRAWN = (
    "ingest-by-app",
    "ingest-results",
    "output-picked",
    "output-search",
    "lag",
    "latency",
    "delivery-rate",
    "router-up",
)
# The dashboards and alerts here; the archive (one more query per router) is tested elsewhere.
SPEC = {
    "owner": OWNER,
    "partitions": 2,
    "producers": [APP],
    "outputs": OUTPUTS,
    "archive": {"enabled": False},
    "objectives": {"router_down_for": "15 seconds"},  # the router-down test waits for it
}


@dataclass
class Dash:
    stack: Stack
    api: Api
    prometheus: str

    def query(self, promql: str, minutes: int = 10) -> list[dict]:
        now = time.time()
        answer = http.client().get(
            f"{self.prometheus}/api/v1/query_range",
            params={"query": promql, "start": now - minutes * 60, "end": now, "step": 5},
            timeout=30,
        )
        assert answer.status_code == 200, f"{promql}: {answer.text}"  # it parses
        return answer.json()["data"]["result"]

    def empty_panels(self) -> list[str]:
        """The panels of the stream's Grafana model with a query Prometheus has no data for."""
        model = self.api.ok("GET", f"/v1/streams/{STREAM}/dashboard")
        targets = {t["expr"]: p["title"] for p in model["panels"] for t in p["targets"]}
        return [title for expr, title in targets.items() if not self.query(expr)]

    def alert_state(self, name: str, stream: str = STREAM) -> str:
        groups = (
            http.client()
            .get(f"{self.prometheus}/api/v1/rules", timeout=10)
            .json()["data"]["groups"]
        )
        rules = [
            r
            for g in groups
            if g["name"] == f"keystone-stream-{stream}"
            for r in g["rules"]
            if r.get("name") == name
        ]
        return rules[0]["state"] if rules else "absent"


@pytest.fixture(scope="module")
def dash(stack: Stack, admin: Api) -> Iterator[Dash]:
    team = owner(admin, OWNER)
    key = team.ok("POST", "/v1/apps", {"name": APP})["key"]
    team.ok(
        "POST",
        "/v1/streams",
        {**SPEC, "name": STREAM},
    )
    handle = Dash(stack, team, stack.address("prometheus"))
    eventually(
        "the router",
        lambda: team.ok("GET", f"/v1/streams/{STREAM}/status")["router"]["state"] == "running",
        timeout=120,
    )
    proxy_url = stack.address("ingest_proxy")
    with ProxyClient(proxy_url, key) as proxy:
        for second in range(12):  # traffic for a while: rates need two scrapes or more
            proxy.send(STREAM, [{"n": second * 50 + i} for i in range(50)])
            http.client().post(
                f"{proxy_url}/v1/streams/{STREAM}/events",
                content=b"{broken",
                headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
            )
            time.sleep(1)
    yield handle
    team.call("DELETE", f"/v1/streams/{STREAM}")


@pytest.fixture(scope="module")
def charted(dash: Dash) -> None:
    """Prometheus has data for every panel (which the first test proves), for the tests that
    draw them, whichever runs first."""
    eventually("data in every panel", lambda: not dash.empty_panels(), timeout=120)


def test_every_expression_of_the_grafana_model_returns_data(dash: Dash) -> None:
    model = dash.api.ok("GET", f"/v1/streams/{STREAM}/dashboard")
    on_disk = dash.stack.state_dir / "dashboards" / f"{STREAM}.json"
    eventually("the published model", on_disk.exists)
    assert json.loads(on_disk.read_text()) == model
    targets = {t["expr"]: p["title"] for p in model["panels"] for t in p["targets"]}

    def empty() -> list[str]:
        return [title for expr, title in targets.items() if not dash.query(expr)]

    eventually("data in every panel", lambda: not empty(), timeout=120)
    for record in ("keystone:stream_router_events:rate1m", "keystone:stream_delivery_rate:ratio5m"):
        eventually(record, lambda r=record: dash.query(f'{r}{{stream="{STREAM}"}}'), timeout=60)


@pytest.mark.usefixtures("charted")
def test_the_live_page_draws_its_charts_and_alerts_in_a_browser(dash: Dash) -> None:
    produce(
        dash.stack.settings,
        fronting_topic(STREAM),
        [(b"not json", {"ks_guid": "g-bad", "ks_ts": str(int(time.time() * 1000))})],
    )
    eventually(
        "the dead-letter alert",
        lambda: dash.alert_state("KeystoneDeadLetters") == "firing",
        timeout=90,
    )
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        log_in(page, dash.api.url, dash.api.token)
        page.goto(f"{dash.api.url}/ui/streams/{STREAM}/dashboard")
        expect(page.locator("#charts")).to_have_attribute("data-loaded", "true", timeout=30_000)
        points = {
            key: int(page.locator(f'figure[data-key="{key}"]').get_attribute("data-points"))
            for key in DRAWN
        }
        assert all(n > 0 for n in points.values()), points
        assert page.locator("figure .u-over").count() >= len(DRAWN)  # uPlot drew them
        expect(page.locator('#alerts tr[data-alert="KeystoneDeadLetters"]')).to_have_attribute(
            "data-state", "firing"
        )
        page.screenshot(path=artifact("dashboard-stream.png"), full_page=True)
        page.goto(f"{dash.api.url}/ui/dashboard")
        expect(page.locator("#charts")).to_have_attribute("data-loaded", "true", timeout=30_000)
        ingest = page.locator('figure[data-key="fleet-ingest"]')
        assert int(ingest.get_attribute("data-points")) > 0
        assert page.locator('figure[data-key="fleet-routers"]').count() == 0  # the admin's only
        page.screenshot(path=artifact("dashboard-fleet.png"), full_page=True)


@pytest.mark.usefixtures("charted")
def test_keystone_dashboard_prints_the_page_and_draws_it_into_a_png(dash: Dash) -> None:
    env = {**dash.stack.env, "KEYSTONE_TOKEN": dash.api.token or ""}
    as_owner = Stack(env, dash.stack.state_dir)
    address = checked(as_owner.keystone("dashboard", STREAM)).stdout.strip()
    assert address == f"{dash.api.url}/ui/streams/{STREAM}/dashboard"
    image = artifact("dashboard-cli.png")
    image.unlink(missing_ok=True)
    checked(as_owner.keystone("dashboard", STREAM, "--png", str(image), timeout=120))
    data = image.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 50_000


def test_the_router_down_alert_fires_when_its_router_is_stopped(dash: Dash) -> None:
    """The router stopped (SIGSTOP, its whole process group: hung, not dead, so the fleet, which
    restarts a router that ended, leaves it be and control goes on for every other test);
    Prometheus cannot scrape it, and the rule waits the stream's `router_down_for` (15 s) before
    it fires. Let go on again, the router is back."""
    router = PidFile(dash.stack.state_dir / "run" / "routers" / f"{STREAM}.json").running_pid()
    assert router is not None
    os.killpg(router, signal.SIGSTOP)
    try:
        eventually(
            "KeystoneRouterDown pending",
            lambda: dash.alert_state("KeystoneRouterDown") == "pending",
            timeout=30,
        )
        eventually(
            "KeystoneRouterDown firing",
            lambda: dash.alert_state("KeystoneRouterDown") == "firing",
            timeout=120,
        )
    finally:
        os.killpg(router, signal.SIGCONT)
    eventually(
        "the router back",
        lambda: dash.api.ok("GET", f"/v1/streams/{STREAM}/status")["router"]["state"] == "running",
        timeout=120,
    )
    eventually(
        "the alert resolved", lambda: dash.alert_state("KeystoneRouterDown") == "inactive", 60
    )


def test_deleting_a_stream_stops_its_router_and_removes_its_dashboard_and_rules(
    dash: Dash, unique: str
) -> None:
    """A stream of its own (the other tests' stays), its router running, its dashboard
    published and its rules loaded when it is deleted."""
    stream = f"dash_gone_{unique}"
    spec = {**SPEC, "name": stream}
    dash.api.ok("POST", "/v1/streams", spec)
    state = dash.stack.state_dir
    dashboard, rules = state / "dashboards" / f"{stream}.json", state / "prometheus" / "rules"
    try:
        eventually(
            "its router",
            lambda: (
                dash.api.ok("GET", f"/v1/streams/{stream}/status")["router"]["state"] == "running"
            ),
            timeout=120,
        )
        eventually(
            "its dashboard and rules published",
            lambda: dashboard.exists() and (rules / f"{stream}.yml").exists(),
            timeout=30,
        )
        eventually(
            "Prometheus to load its rules",
            lambda: dash.alert_state("KeystoneRouterDown", stream) != "absent",
            timeout=30,
        )
        assert processes_mentioning(f"--stream\0{stream}\0")
        dash.api.ok("DELETE", f"/v1/streams/{stream}")
        eventually(
            "the router to stop",
            lambda: not processes_mentioning(f"--stream\0{stream}\0"),
            timeout=60,
        )
        eventually(
            "the files to go",
            lambda: not dashboard.exists() and not (rules / f"{stream}.yml").exists(),
        )
        eventually(
            "Prometheus to drop the rules",
            lambda: dash.alert_state("KeystoneRouterDown", stream) == "absent",
            timeout=30,
        )
    finally:
        dash.api.call("DELETE", f"/v1/streams/{stream}")  # when the test failed before
