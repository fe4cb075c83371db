"""Two fronting clusters on the suite's stack (`east`, home, and `west`; switched by command
only there): one stream's writes moved to west and back by the admin, the proxy following within
seconds; its router reads both clusters, every event delivered (once where the sink is exact),
and west's queries held again once they have read what it took; its dashboard marks the
switches; the fronting page and the
stream's page say where its writes go, and the admin fails it back there. The automatic
failover, a whole cluster killed under load: tests/cluster/test_nodes.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from keystone.contracts import fronting, http, kafka_clients
from keystone.contracts.metrics import CONTROL_FRONTING_SWITCHES, ROUTER_QUERY_UP, ROUTER_UP
from keystone.contracts.names import dead_letter_topic, fronting_topic
from keystone.contracts.spec import load_spec
from keystone.ingest_proxy.client import DirectProducer, ProxyClient
from keystone.loadtest.run import await_key
from keystone.router.sinks.readback import reader_for
from keystone.router.topics import watermarks
from tests.support.api import Api, owner
from tests.support.browser import artifact, chromium, overflowing
from tests.support.stack import Stack
from tests.support.waiting import eventually

STREAM, OWNER, APP = "kong", "team-kong", "kong-app"
SPEC = {
    "name": STREAM,
    "owner": OWNER,
    "partitions": 2,
    "producers": [APP],
    "outputs": [
        {"name": "copy", "sink": {"type": "kafka"}, "start": "earliest"},
        {"name": "search", "sink": {"type": "elasticsearch"}, "start": "earliest"},
        {
            "name": "once",
            "sink": {"type": "kafka"},
            "delivery": {"mode": "microbatch", "trigger": "2 seconds", "guarantee": "exactly_once"},
            "start": "earliest",
        },
    ],
    "archive": {"enabled": False},
}
ROUTER_SECONDS = 240


@pytest.fixture(scope="module")
def kong(stack: Stack, admin: Api) -> Iterator[tuple[Api, str]]:
    team = owner(admin, OWNER)
    key = team.ok("POST", "/v1/apps", {"name": APP})["key"]
    team.ok("POST", "/v1/streams", SPEC)
    try:
        yield team, key
    finally:
        admin.call("POST", "/v1/fronting/switch", {"to": None, "stream": STREAM})
        admin.call("DELETE", f"/v1/streams/{STREAM}")


def ends(stack: Stack, cluster: str) -> int:
    """Records the stream's fronting topic holds on a cluster."""
    found = fronting.cluster(stack.settings, cluster)
    marks = watermarks(found.connect(stack.settings), fronting_topic(STREAM))
    return sum(end for _, end in marks.values())


def test_only_the_admin_switches_and_an_owner_sees_only_their_own_streams(
    stack: Stack, admin: Api, kong: tuple[Api, str]
) -> None:
    team, _ = kong
    view = team.ok("GET", "/v1/fronting")
    assert [(c["name"], c["home"], c["problem"]) for c in view["clusters"]] == [
        ("east", True, None),
        ("west", False, None),
    ]
    assert view["active"] == "east" and view["switches"] == []
    refused = team.call("POST", "/v1/fronting/switch", {"to": "west", "stream": STREAM})
    assert refused.status_code == 403, refused.text
    unknown = admin.call("POST", "/v1/fronting/switch", {"to": "north"})
    assert unknown.status_code == 404 and "no fronting cluster 'north'" in unknown.text
    nowhere = admin.call("POST", "/v1/fronting/switch", {"to": "west", "stream": "no_such"})
    assert nowhere.status_code == 404
    other = owner(admin, "team-kong-other")
    admin.ok("POST", "/v1/fronting/switch", {"to": "west", "stream": STREAM})
    try:
        assert team.ok("GET", "/v1/fronting")["streams"] == {STREAM: "west"}
        assert other.ok("GET", "/v1/fronting")["streams"] == {}  # not theirs to know
    finally:
        admin.ok("POST", "/v1/fronting/switch", {"to": None, "stream": STREAM})


def test_a_streams_writes_move_to_the_standby_and_back_and_each_is_routed(
    stack: Stack, admin: Api, kong: tuple[Api, str]
) -> None:
    team, key = kong
    settings = stack.settings
    for cluster in ("east", "west"):  # provisioned on both
        connection = fronting.cluster(settings, cluster).connect(settings)
        assert watermarks(connection, dead_letter_topic(STREAM))
    eventually(
        "the router to run",
        lambda: team.ok("GET", f"/v1/streams/{STREAM}/status")["router"]["state"] == "running",
        ROUTER_SECONDS,
    )
    await_key(stack.address("ingest_proxy"), key, STREAM)
    sent: list[str] = []
    with ProxyClient(stack.address("ingest_proxy"), key) as proxy:

        def batch(n: int) -> list[str]:
            guids = proxy.send(STREAM, [{"n": i} for i in range(n)]).guids
            sent.extend(guids)
            return guids

        batch(20)
        east, west = ends(stack, "east"), ends(stack, "west")
        switched = time.monotonic()
        admin.ok("POST", "/v1/fronting/switch", {"to": "west", "stream": STREAM})
        stack.proxy_current()  # every proxy process has read the switch
        followed = time.monotonic() - switched
        batch(30)
        assert (ends(stack, "east"), ends(stack, "west")) == (east, west + 30)
        # An app's own Kafka user writes to west too: its credential is on every cluster.
        credential = team.ok("POST", f"/v1/apps/{APP}/kafka-credential")
        west_connection = kafka_clients.librdkafka(settings) | {
            "bootstrap.servers": credential["clusters"]["west"],
            "sasl.username": credential["username"],
            "sasl.password": credential["password"],
        }
        sent.extend(DirectProducer(west_connection, APP).send(STREAM, [{"n": 99}]).guids)
        admin.ok("POST", "/v1/fronting/switch", {"to": None, "stream": STREAM})
        stack.proxy_current()
        batch(20)
    assert ends(stack, "west") == west + 31 and ends(stack, "east") == east + 20
    assert followed < 10, f"the proxy followed the switch in {followed:.1f} s"

    spec = load_spec(SPEC)
    readers = {o.name: reader_for(settings, spec, o, None) for o in spec.outputs}

    def delivered() -> bool:
        return all(set(sent) <= set(r.copies()) for r in readers.values())

    eventually("every event at every output", delivered, ROUTER_SECONDS)
    for exact in ("search", "once"):
        copies = readers[exact].copies()
        assert {copies[g] for g in sent} == {1}, exact

    # West's queries held once they have read what it took; the router up all along.
    prometheus = stack.address("prometheus")

    def held() -> bool:
        west_up = _query(prometheus, f'{ROUTER_QUERY_UP}{{stream="{STREAM}",cluster="west"}}')
        router_up = _query(prometheus, f'{ROUTER_UP}{{stream="{STREAM}"}}')
        return bool(west_up) and set(west_up) == {0.0} and router_up == [1.0]

    eventually("west's queries held again", held, 120)
    switches = [e for e in admin.audit() if e["action"] == "fronting.switch"]
    assert [(e["target"], e["detail"]["to"]) for e in switches[:2]] == [
        (STREAM, "east"),
        (STREAM, "west"),
    ]
    control = http.client().get(f"{admin.url}/metrics", timeout=10).text
    assert f'{CONTROL_FRONTING_SWITCHES}{{from="east",reason="command",to="west"}}' in control

    # The stream's live dashboard marks the switches on its charts (the last two: this test's).
    with chromium() as browser:
        tab = _signed_in(browser, admin)
        tab.goto(f"{admin.url}/ui/streams/{STREAM}/dashboard")
        expect(tab.locator("#charts")).to_have_attribute("data-loaded", "true", timeout=30_000)
        data = tab.evaluate("fetch(location.pathname + '/data').then((r) => r.json())")
        times, marks = data["times"], data["switches"]
        assert [m["to"] for m in marks[-2:]] == ["west", "east"], marks
        # A chart draws those within its times (from the stream's first figure on): this
        # test's two at least, and those of the module's other tests made after its first.
        drawn = [m for m in marks if times and times[0] <= m["time"] <= times[-1]]
        assert drawn[-2:] == marks[-2:], (times[:1], marks)
        ingest = tab.locator('figure[data-key="ingest-by-app"]')
        expect(ingest).to_have_attribute("data-switches", str(len(drawn)))
        tab.screenshot(path=artifact("dashboard-fronting.png"), full_page=True)


def _signed_in(browser: Browser, admin: Api) -> Page:
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    tab.set_default_timeout(30_000)
    tab.goto(f"{admin.url}/ui/login")
    tab.fill("#token", admin.token or "")
    tab.click("button[type=submit]")
    return tab


def _query(prometheus: str, expression: str) -> list[float]:
    answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": expression}, timeout=10)
    return [float(r["value"][1]) for r in answer.json()["data"]["result"]]


def test_the_admin_fails_a_stream_back_on_the_fronting_page_and_its_page_says_where(
    admin: Api, kong: tuple[Api, str]
) -> None:
    admin.ok("POST", "/v1/fronting/switch", {"to": "west", "stream": STREAM})
    ui = f"{admin.url}/ui"
    with chromium() as browser:
        tab = _signed_in(browser, admin)
        tab.goto(f"{ui}/streams/{STREAM}")
        expect(tab.locator("#fronting")).to_have_attribute("data-cluster", "west")
        expect(tab.locator("#fronting")).to_contain_text("this stream alone")
        tab.click("#fronting >> text=clusters")
        expect(tab).to_have_url(f"{ui}/fronting")
        expect(tab.locator('tr[data-cluster="west"] [data-takes]')).to_have_text(STREAM)
        expect(tab.locator('tr[data-cluster="east"] [data-takes]')).to_have_text(
            f"every stream but {STREAM}"
        )
        assert overflowing(tab) == []
        tab.screenshot(path=artifact("ui-fronting.png"), full_page=True)
        tab.locator(f'#alone tr[data-stream="{STREAM}"] >> text=fail back').click()
        expect(tab).to_have_url(f"{ui}/fronting")
        expect(tab.locator("#alone")).to_have_count(0)
        tab.goto(f"{ui}/streams/{STREAM}")
        expect(tab.locator("#fronting")).to_have_attribute("data-cluster", "east")
    assert admin.ok("GET", "/v1/fronting")["streams"] == {}
