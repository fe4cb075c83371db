"""A hostile tenant against control, on the real stack (issue 28): each class of fault gets a
clear 4xx, naming the limit where one applies, and the well-behaved tenant (`good`) keeps
working meanwhile. "No stall" is proven by structure: the work is refused before it starts,
here; linear or bounded by construction in tests/router/lang and tests/contracts."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from confluent_kafka.admin import AdminClient

from keystone.contracts import http
from keystone.contracts.errors import Unavailable
from keystone.contracts.limits import MAX_OBJECTIVE_LAG_RECORDS, Limits
from keystone.contracts.registry import PREFIX, RETIRED, VERSION
from keystone.contracts.settings import Settings
from keystone.contracts.spec import Objectives, StreamSpec
from keystone.control.launcher import Deployment
from keystone.control.store import Store
from keystone.dashboards.publish import Publisher
from tests.support.api import Api, owner
from tests.support.good_tenant import GOOD_OUTPUT, GOOD_OWNER, GOOD_STREAM, Good, raw_request
from tests.support.stack import Stack
from tests.support.waiting import eventually

LIMITS = Limits()  # the test stack runs with the defaults


def spec(name: str, owner_name: str, **extra: object) -> dict:
    return {"name": name, "owner": owner_name, "partitions": 1, **extra}


def post_body(admin: Api, body: Any) -> httpx.Response:
    """A stream's creation with these very bytes (or chunks) as its body."""
    headers = {"Authorization": f"Bearer {admin.token}", "Content-Type": "application/json"}
    return http.client().post(f"{admin.url}/v1/streams", content=body, headers=headers, timeout=30)


def test_a_body_is_refused_by_its_size_and_token_before_it_is_read(admin: Api, good: Good) -> None:
    host = urlsplit(admin.url).netloc
    # 100 MB announced, none sent: refused at once by its announced length.
    answer = raw_request(
        admin.url,
        f"POST /v1/streams HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {admin.token}\r\nContent-Length: 100000000\r\n",
    )
    assert answer.startswith("HTTP/1.1 413"), answer
    body = json.loads(answer.split("\r\n\r\n", 1)[1])
    assert body["setting"] == "max_control_body_bytes"
    assert body["limit"] == LIMITS.max_control_body_bytes
    # A body of unknown length without a token: 401 before a byte of it is read.
    answer = raw_request(
        admin.url,
        f"POST /v1/streams HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n",
    )
    assert answer.startswith("HTTP/1.1 401"), answer
    # Streamed past the limit with a good token: 413 once the limit is passed.
    streamed = post_body(admin, iter([b"[" + b" " * (LIMITS.max_control_body_bytes + 1)]))
    assert streamed.status_code == 413, streamed.text
    good.works()


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ('{"name": "nan_x", "owner": "o", "objectives": {"delivery_rate": NaN}}', "NaN"),
        ('{"name": "inf_x", "owner": "o", "objectives": {"delivery_rate": 1e400}}', "beyond"),
        ("[" * 100_000, "nested too deeply"),
        (b'{"name": "\xff"}', "not UTF-8"),
    ],
)
def test_bodies_are_strict_json(admin: Api, body: str | bytes, words: str) -> None:
    answer = post_body(admin, body)
    assert answer.status_code == 422, answer.text
    assert words in answer.json()["problems"][0]["message"]


def test_a_stored_spec_that_does_not_read_back_hurts_no_one_else(
    stack: Stack, admin: Api, good: Good, unique: str
) -> None:
    evil = f"evil_{unique}"
    store = Store.connect(stack.settings)
    try:
        # What a bug, an old version or anyone with Redis's password could leave there.
        store.redis.set(f"{PREFIX}stream:{evil}", json.dumps({"name": evil, "owner": 5}))
        store.redis.sadd(f"{PREFIX}streams", evil)
        # And an app record and a retired name that no write of control's makes.
        store.redis.hset(f"{PREFIX}app:{evil}", mapping={"rate": "lots"})
        store.redis.sadd(f"{PREFIX}apps", evil)
        store.redis.hset(RETIRED, "Not.A.Name", "x")
        store.redis.incr(VERSION)  # every reader loads the registry again
        assert evil not in [a["name"] for a in admin.ok("GET", "/v1/apps")]
        fine = f"fine_{unique}"
        good.api.ok("POST", "/v1/streams", spec(fine, GOOD_OWNER))
        good.api.ok("DELETE", f"/v1/streams/{fine}")
        listed = [s["spec"]["name"] for s in admin.ok("GET", "/v1/streams")]
        assert "good_tenant" in listed and evil not in listed
        seen = admin.call("GET", f"/v1/streams/{evil}")
        assert seen.status_code == 409 and "cannot be read" in seen.json()["message"]
        assert good.api.call("GET", f"/v1/streams/{evil}").status_code == 404

        # The proxy still follows the registry: a rotated key takes effect, the old one stops.
        # (The session's tenant holds the new key at once: the tests after this one use it.)
        old_key, good.key = good.key, good.api.ok("POST", "/v1/apps/good-app/key")["key"]
        eventually(
            "the old key refused", lambda: good.post({"k": 1}, key=old_key).status_code == 401, 30
        )
        good.works()  # the fleet and the publisher go on too

        # The name is taken for an owner, as by any stream; the admin may replace or delete it.
        taken = good.api.call("POST", "/v1/streams", spec(evil, GOOD_OWNER))
        assert taken.status_code == 409 and "already exists" in taken.text
        store.redis.set(f"{PREFIX}stream:{evil}", b"[" * 100_000)  # nor JSON Python can read
        assert admin.call("PUT", f"/v1/streams/{evil}", spec(evil, "admin")).status_code == 201
        store.redis.set(f"{PREFIX}stream:{evil}", b"[" * 100_000)
        admin.ok("DELETE", f"/v1/streams/{evil}")
        assert store.redis.get(f"{PREFIX}stream:{evil}") is None
        assert store.specs.retired()[evil] == "admin"  # its topics' data stays nobody else's
    finally:
        store.redis.delete(f"{PREFIX}stream:{evil}", f"{PREFIX}app:{evil}")
        store.redis.srem(f"{PREFIX}streams", evil)
        store.redis.srem(f"{PREFIX}apps", evil)
        store.redis.hdel(RETIRED, "Not.A.Name")
        store.close()


def test_names_read_from_redis_never_become_paths(stack: Stack, good: Good, unique: str) -> None:
    victim = stack.state_dir / f"victim_{unique}"
    (victim / "keep").mkdir(parents=True)
    orphan = f"orphan_{unique}"
    store = Store.connect(stack.settings)
    try:
        # A router record named to reach out of the checkpoints folder, and a plain orphan
        # (a valid name, no stream) whose record the fleet removes in its pass.
        for name in (f"../victim_{unique}", orphan):
            store.redis.hset(f"{PREFIX}router:{name}", mapping={"state": '"failed"'})
        eventually(
            "the fleet passed over the records",
            lambda: not store.redis.exists(f"{PREFIX}router:{orphan}"),
            30,
        )
        assert (victim / "keep").is_dir()
        assert store.redis.exists(f"{PREFIX}router:../victim_{unique}")  # ignored, not acted on
    finally:
        store.redis.delete(f"{PREFIX}router:../victim_{unique}", f"{PREFIX}router:{orphan}")
        store.close()
        shutil.rmtree(victim, ignore_errors=True)
    good.works()


def test_spec_values_are_bounded(admin: Api, good: Good, unique: str) -> None:
    team = owner(admin, f"bounded-{unique}")
    name = f"bounded_{unique}"
    cases = [
        ({"objectives": {"lag_records": 10**400}}, "objectives.lag_records"),
        ({"objectives": {"lag_records": MAX_OBJECTIVE_LAG_RECORDS + 1}}, "objectives.lag_records"),
        ({"objectives": {"delivery_rate": 0}}, "objectives.delivery_rate"),
    ]
    for change, field in cases:
        answer = team.call("POST", "/v1/streams", {**spec(name, f"bounded-{unique}"), **change})
        assert answer.status_code == 422, answer.text
        assert [p["field"] for p in answer.json()["problems"]] == [field]
    answer = team.call(
        "POST", "/v1/streams", spec(name, f"bounded-{unique}", partitions=LIMITS.max_partitions + 1)
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["setting"] == "max_partitions" and answer.json()["field"] == "partitions"
    outputs = [
        {"name": f"o{i}", "sink": {"type": "kafka"}}
        for i in range(LIMITS.max_outputs_per_stream + 1)
    ]
    answer = team.call("POST", "/v1/streams", spec(name, f"bounded-{unique}", outputs=outputs))
    assert answer.status_code == 422 and answer.json()["setting"] == "max_outputs_per_stream"
    good.works()


def test_limits_per_owner(admin: Api, good: Good, unique: str) -> None:
    name = f"many-{unique}"
    team = owner(admin, name)
    for i in range(LIMITS.max_streams_per_owner):
        team.ok("POST", "/v1/streams", spec(f"many_{unique}_{i}", name))
    refused = team.call("POST", "/v1/streams", spec(f"many_{unique}_x", name))
    assert refused.status_code == 422 and refused.json()["setting"] == "max_streams_per_owner"
    for i in range(LIMITS.max_streams_per_owner):
        team.ok("DELETE", f"/v1/streams/many_{unique}_{i}")

    # At once, from many clients: the limit is checked in the write, so none slips past it.
    with ThreadPoolExecutor(16) as pool:
        answers = list(
            pool.map(
                lambda i: team.call("POST", "/v1/apps", {"name": f"many-{unique}-{i}"}),
                range(LIMITS.max_apps_per_owner + 10),
            )
        )
    statuses = Counter(a.status_code for a in answers)
    assert statuses == {201: LIMITS.max_apps_per_owner, 422: 10}, statuses
    refused = next(a for a in answers if a.status_code == 422)
    assert refused.json()["setting"] == "max_apps_per_owner"
    good.works()


def test_an_owner_s_apps_always_have_a_quota(admin: Api, good: Good, unique: str) -> None:
    team = owner(admin, f"quota-{unique}")
    made = team.ok("POST", "/v1/apps", {"name": f"quota-{unique}"})
    assert made["rate"] == LIMITS.max_app_rate  # the default for an owner's app
    for rate in (0, LIMITS.max_app_rate + 1):
        answer = team.call("POST", "/v1/apps", {"name": f"quota-{unique}-{rate}", "rate": rate})
        assert answer.status_code == 422, answer.text
        assert answer.json()["setting"] == "max_app_rate" and answer.json()["field"] == "rate"
    assert admin.ok("POST", "/v1/apps", {"name": f"admins-{unique}", "rate": 0})["rate"] == 0
    good.works()


def test_an_owner_sees_only_what_was_theirs(admin: Api, good: Good, unique: str) -> None:
    alice, bob = owner(admin, f"alice-{unique}"), owner(admin, f"bob-{unique}")
    bobs = f"bobs_{unique}"
    bob.ok("POST", "/v1/streams", spec(bobs, f"bob-{unique}"))
    # Alice names an app after Bob's stream; Bob lets it post to his stream.
    alice.ok("POST", "/v1/apps", {"name": f"bobs-{unique}"})
    alices_app = f"alice-app-{unique}"
    alice.ok("POST", "/v1/apps", {"name": alices_app})
    bob.ok("PUT", f"/v1/streams/{bobs}/producers/{alices_app}")

    audit = alice.audit()
    assert audit and {e["owner"] for e in audit} == {f"alice-{unique}"}
    assert not [e for e in audit if e["target"] == bobs]
    [app] = [a for a in alice.ok("GET", "/v1/apps") if a["name"] == alices_app]
    assert app["streams"] == []  # Bob's grant is Bob's to know of
    [app] = [a for a in admin.ok("GET", "/v1/apps") if a["name"] == alices_app]
    assert app["streams"] == [bobs]

    # Not Bob's or not there: the same answer.
    for path in (f"/v1/streams/{bobs}", f"/v1/streams/none_{unique}"):
        assert alice.call("GET", path).status_code == 404
    for app_name in (f"bobs-{unique}", f"none-{unique}"):
        assert bob.call("POST", f"/v1/apps/{app_name}/key").status_code == 404

    # An owner is removed only once they own nothing, and their name is never given again:
    # their deleted streams' names, kept for them, and their history would go with it.
    still = admin.call("DELETE", f"/v1/owners/bob-{unique}")
    assert still.status_code == 409 and bobs in still.json()["message"]
    bob.ok("DELETE", f"/v1/streams/{bobs}")
    admin.ok("DELETE", f"/v1/owners/bob-{unique}")
    again = admin.call("POST", "/v1/owners", {"name": f"bob-{unique}"})
    assert again.status_code == 409, again.text
    good.works()


def test_prometheus_has_no_lifecycle_api(stack: Stack, good: Good) -> None:
    prometheus = stack.address("prometheus")
    assert http.client().post(f"{prometheus}/-/quit", timeout=10).status_code >= 400
    assert http.client().get(f"{prometheus}/-/ready", timeout=10).status_code == 200
    good.works()  # its rules, written after Prometheus started, were loaded (by SIGHUP)


def test_a_web_session_ends_on_the_server(admin: Api, good: Good, unique: str) -> None:
    name = f"web-{unique}"
    team = owner(admin, name)
    with httpx.Client(base_url=admin.url, timeout=30, follow_redirects=False) as browser:
        signed_in = browser.post("/ui/login", data={"token": team.token})
        assert signed_in.status_code == 303
        cookie = browser.cookies["keystone_session"]
        assert cookie != team.token  # a session id, not the token
        assert browser.get("/ui/").status_code == 200
        admin.ok("POST", f"/v1/owners/{name}/token")  # the owner's token rotated: session ends
        assert browser.get("/ui/").status_code == 303

        new = admin.ok("POST", f"/v1/owners/{name}/token")["token"]
        browser.post("/ui/login", data={"token": new})
        kept = browser.cookies["keystone_session"]
        browser.post("/ui/logout")
        # A client of its own: the process's shared one keeps no cookie and sends none.
        replayed = httpx.get(f"{admin.url}/ui/", cookies={"keystone_session": kept}, timeout=30)
        assert replayed.status_code == 303  # signed out: the old cookie opens nothing
    good.works()


def test_one_stream_s_rules_never_stop_another_s(tmp_path: Path) -> None:
    """Rules promtool refuses (a value no spec can hold today, as an older version or a bug in
    the generator could make) keep that stream's last good file; the next stream's are
    published all the same. (Real promtool; no Prometheus to reload here.)"""
    nowhere = "http://127.0.0.1:9"  # the discard port: nothing answers
    settings = Settings(state_dir=tmp_path, prometheus_url=nowhere, cache_dir=tmp_path)
    good_spec = StreamSpec(name="fine_rules", owner="team-a")
    bad_spec = StreamSpec(name="bad_rules", owner="team-a").model_copy(
        update={"objectives": Objectives.model_construct(delivery_rate=0.9, lag_records=10**400)}
    )
    publisher = Publisher(settings)
    with pytest.raises(Unavailable, match="did not reload"):
        publisher.sync([bad_spec, good_spec])
    assert "promtool" in publisher.failures["bad_rules"]
    assert (settings.prometheus_rules_dir / "fine_rules.yml").exists()
    assert not (settings.prometheus_rules_dir / "bad_rules.yml").exists()


def test_names_kafka_counts_as_one_are_422s_before_anything_is_made(
    stack: Stack, admin: Api, good: Good, unique: str
) -> None:
    name = f"kn-{unique}"
    team = owner(admin, name)
    first = f"kn_{unique}"
    team.ok("POST", "/v1/streams", spec(first, name))
    # Its fronting topic would collide with the first stream's dead letters.
    clash = team.call("POST", "/v1/streams", spec(f"{first}_dlq", name))
    assert clash.status_code == 422, clash.text
    [problem] = clash.json()["problems"]
    assert problem["field"] == "name" and "collides with topic" in problem["message"]
    for topic in (".", ".."):
        output = {"name": "out", "sink": {"type": "kafka", "topic": topic}}
        answer = team.call("POST", "/v1/streams", spec(f"dots_{unique}", name, outputs=[output]))
        assert answer.status_code == 422, answer.text
        assert answer.json()["problems"][0]["field"] == "outputs.0.sink.kafka.topic"
    topics = AdminClient(stack.kafka()).list_topics(timeout=10)
    assert f"keystone.{first}_dlq" not in topics.topics  # nothing refused was provisioned
    team.ok("DELETE", f"/v1/streams/{first}")
    good.works()


def test_a_second_route_into_a_stream_is_refused(admin: Api, good: Good, unique: str) -> None:
    """Each copy would keep the event's guid, and the target's Elasticsearch output would keep
    one document for two events. (Routes through other streams: tests/control/test_validation.)"""
    name = f"routes-{unique}"
    team = owner(admin, name)
    target = f"target_{unique}"
    team.ok("POST", "/v1/streams", spec(target, name))
    into = {"sink": {"type": "keystone", "stream": target}}
    outputs = [{"name": "one", **into}, {"name": "two", **into}]
    answer = team.call("POST", "/v1/streams", spec(f"source_{unique}", name, outputs=outputs))
    assert answer.status_code == 422, answer.text
    [problem] = answer.json()["problems"]
    assert problem["field"] == "outputs.1.sink.stream" and "by 2 routes" in problem["message"]
    team.ok("DELETE", f"/v1/streams/{target}")
    good.works()


def test_a_stream_whose_spec_stops_reading_keeps_its_router(
    stack: Stack, good: Good, unique: str
) -> None:
    """Not taken for deleted: its router runs on and its checkpoints stay, until the admin
    replaces or deletes the spec."""
    good.works()  # its router up (a test of another module may have restarted the stack)
    settings = stack.settings
    before = Deployment.load(settings, GOOD_STREAM)
    assert before is not None and before.alive()
    key = f"{PREFIX}stream:{GOOD_STREAM}"
    orphan = f"{PREFIX}router:orphan_{unique}"
    store = Store.connect(settings)
    raw = store.redis.get(key)
    try:
        store.redis.set(key, raw.replace(b'"owner":', b'"owner":5,"was":'))
        store.redis.incr(VERSION)
        for _ in range(2):  # two whole passes of the fleet since the spec stopped reading
            store.redis.hset(orphan, mapping={"state": '"failed"'})  # gone once it passed
            eventually("the fleet passed", lambda: not store.redis.exists(orphan), 30)
        state = store.router_state(GOOD_STREAM)
        assert state is not None and state.state == "running"  # not "stopping"
        after = Deployment.load(settings, GOOD_STREAM)
        assert after is not None and after.pid == before.pid and after.alive()
        assert (settings.checkpoints_dir / GOOD_STREAM / GOOD_OUTPUT["name"]).is_dir()
        assert (settings.prometheus_rules_dir / f"{GOOD_STREAM}.yml").exists()
    finally:
        store.redis.set(key, raw)
        store.redis.incr(VERSION)
        store.redis.delete(orphan)
        store.close()
    good.works()


def test_grants_are_held_to_the_producers_limit(admin: Api, good: Good, unique: str) -> None:
    """An owner may grant any registered app, so grants are bounded too: each (stream, app) is
    a series of every proxy's metrics."""
    name = f"grants-{unique}"
    team = owner(admin, name)
    stream = f"grants_{unique}"
    team.ok("POST", "/v1/streams", spec(stream, name))
    apps = [f"grant-{unique}-{i}" for i in range(LIMITS.max_producers_per_stream + 1)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda app: admin.ok("POST", "/v1/apps", {"name": app}), apps))
    for app in apps[:-1]:
        team.ok("PUT", f"/v1/streams/{stream}/producers/{app}")
    refused = team.call("PUT", f"/v1/streams/{stream}/producers/{apps[-1]}")
    assert refused.status_code == 422, refused.text
    assert refused.json()["setting"] == "max_producers_per_stream"
    team.ok("DELETE", f"/v1/streams/{stream}")
    good.works()
