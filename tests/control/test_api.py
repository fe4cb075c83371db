"""The control API on the real stack (control, Redis, Kafka, the proxy): validation, tenancy,
apps and grants as the proxy enforces them, provisioning, preview, the audit log.

Streams here have no outputs unless a test needs one (a router, a Kafka output's topic), and
those are deleted at once, so no router runs for long."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import schemathesis
from confluent_kafka.admin import AdminClient
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

from keystone.contracts import http
from keystone.contracts.names import fronting_topic
from keystone.contracts.registry import TOPICS, RegistryReader
from keystone.control.store import Store
from keystone.router.lang.evaluate import matches, project
from keystone.router.lang.parser import parse_filter, parse_projection
from tests.support.api import Api, owner
from tests.support.kafka import produce
from tests.support.stack import Stack, checked
from tests.support.waiting import eventually


def spec(name: str, owner_name: str = "team-api", **extra: object) -> dict:
    return {"name": name, "owner": owner_name, "partitions": 2, **extra}


def kafka_output(name: str = "copy", **extra: object) -> dict:
    return {"name": name, "sink": {"type": "kafka"}, **extra}


INVALID = [
    # (what is changed, field named, words in the message)
    ({"name": "Bad"}, "name", "is not valid"),
    ({"partitions": 0}, "partitions", "greater than or equal to 1"),
    ({"colour": "red"}, "colour", "Extra inputs"),
    ({"schema": {"type": "string"}}, "schema", "record"),
    ({"producers": ["no-such-app"]}, "producers.0", "no app 'no-such-app'"),
    ({"outputs": [kafka_output("X")]}, "outputs.0.name", "is not valid"),
    ({"outputs": [kafka_output(filter="country = ")]}, "outputs.0.filter", "expected a value"),
    ({"outputs": [kafka_output(projection=["*", "*"])]}, "outputs.0.projection", "*"),
    ({"outputs": [kafka_output(projection=["hsh(a) as b"])]}, "outputs.0.projection", "hsh"),
    (
        {"outputs": [{"name": "copy", "sink": {"type": "s3"}}]},
        "outputs.0.sink",
        "does not match any of the expected tags",
    ),
    (
        {"outputs": [{"name": "copy", "sink": {"type": "kafka", "topic": "keystone.x"}}]},
        "outputs.0.sink.kafka.topic",
        "may not start with 'keystone.'",
    ),
    (
        {"outputs": [kafka_output(delivery={"mode": "realtime", "trigger": "soon"})]},
        "outputs.0.delivery.trigger",
        "an interval",
    ),
    (
        {"outputs": [kafka_output(delivery={"mode": "realtime", "trigger": "2 seconds"})]},
        "outputs.0.delivery",
        "at most every 5 seconds",
    ),
    (
        {"outputs": [{"name": "wh", "sink": {"type": "hive"}, "delivery": {"mode": "realtime"}}]},
        "outputs.0",
        "micro-batches",
    ),
    (
        {"outputs": [{"name": "fwd", "sink": {"type": "keystone", "stream": "nowhere"}}]},
        "outputs.0.sink.stream",
        "no stream 'nowhere'",
    ),
]


@pytest.mark.parametrize(("change", "field", "words"), INVALID)
def test_every_invalid_spec_is_a_422_naming_the_field(
    admin: Api, unique: str, change: dict, field: str, words: str
) -> None:
    name = f"bad_{unique}"
    answer = admin.call("POST", "/v1/streams", {**spec(name), **change})
    assert answer.status_code == 422, answer.text
    problems = answer.json()["problems"]
    assert any(p["field"] == field and words in p["message"] for p in problems), problems
    assert admin.call("GET", f"/v1/streams/{name}").status_code == 404  # nothing stored


def test_a_filter_error_says_where_and_bodies_that_are_not_json_are_422(admin: Api) -> None:
    answer = admin.call(
        "POST", "/v1/streams", spec("bad_filter", outputs=[kafka_output(filter="a = 1 and")])
    )
    [problem] = answer.json()["problems"]
    assert problem["column"] == 10 and "\n  a = 1 and\n           ^" in problem["message"]
    raw = http.client().post(
        f"{admin.url}/v1/streams",
        content=b"{not json",
        headers={"Authorization": f"Bearer {admin.token}", "Content-Type": "application/json"},
    )
    assert raw.status_code == 422 and raw.json()["error"] == "InvalidRequest"


def test_keystone_sinks_may_not_make_a_cycle_or_orphan_a_target(admin: Api, unique: str) -> None:
    first, second = f"ring_a_{unique}", f"ring_b_{unique}"
    admin.ok("POST", "/v1/streams", spec(first))
    forward = {"name": "fwd", "sink": {"type": "keystone", "stream": first}}
    admin.ok("POST", "/v1/streams", spec(second, outputs=[forward]))
    try:
        back = {"name": "back", "sink": {"type": "keystone", "stream": second}}
        answer = admin.call("PUT", f"/v1/streams/{first}/outputs/back", back)
        assert answer.status_code == 422
        [problem] = answer.json()["problems"]
        assert problem["field"] == "outputs.0.sink.stream"
        assert f"a cycle: {first} -> {second} -> {first}" in problem["message"]
        itself = {"name": "self", "sink": {"type": "keystone", "stream": first}}
        assert admin.call("PUT", f"/v1/streams/{first}/outputs/self", itself).status_code == 422
        refused = admin.call("DELETE", f"/v1/streams/{first}")
        assert refused.status_code == 409 and f"{second}.fwd" in refused.json()["message"]
    finally:
        admin.ok("DELETE", f"/v1/streams/{second}")
    admin.ok("DELETE", f"/v1/streams/{first}")


def test_owners_see_and_change_only_their_own_streams_and_apps(admin: Api, unique: str) -> None:
    alice, bob = owner(admin, f"alice-{unique}"), owner(admin, f"bob-{unique}")
    mine = f"alice_{unique}"
    app = f"alice-app-{unique}"
    alice.ok("POST", "/v1/apps", {"name": app})
    alice.ok("POST", "/v1/streams", spec(mine, f"alice-{unique}", producers=[app]))
    assert [s["spec"]["name"] for s in alice.ok("GET", "/v1/streams")] == [mine]

    assert mine not in [s["spec"]["name"] for s in bob.ok("GET", "/v1/streams")]
    hidden = [
        ("GET", f"/v1/streams/{mine}", None),
        ("GET", f"/v1/streams/{mine}/status", None),
        ("DELETE", f"/v1/streams/{mine}", None),
        ("PUT", f"/v1/streams/{mine}/outputs/copy", kafka_output()),
        ("DELETE", f"/v1/streams/{mine}/outputs/copy", None),
        ("POST", f"/v1/streams/{mine}/outputs/copy/preview", {"filter": "a = 1"}),
        ("PUT", f"/v1/streams/{mine}/producers/{app}", None),
        ("POST", f"/v1/apps/{app}/key", None),
        ("POST", f"/v1/apps/{app}/kafka-credential", None),
        ("DELETE", f"/v1/apps/{app}/kafka-credential", None),
        ("DELETE", f"/v1/apps/{app}", None),
    ]
    for method, path, body in hidden:
        answer = bob.call(method, path, body)
        assert answer.status_code == 404, (method, path, answer.text)
    # Alice may (a route that did not exist would have answered Bob 404 as well).
    assert alice.call("POST", f"/v1/apps/{app}/kafka-credential").status_code == 200
    # The name is taken, as POST says too; nothing tells whose it is.
    replaced = bob.call("PUT", f"/v1/streams/{mine}", spec(mine, f"bob-{unique}"))
    assert replaced.status_code == 409 and "already exists" in replaced.text
    for_alice = bob.call("POST", "/v1/streams", spec(f"gift_{unique}", f"alice-{unique}"))
    assert for_alice.status_code == 403
    assert bob.call("POST", "/v1/owners", {"name": f"eve-{unique}"}).status_code == 403
    assert app not in [a["name"] for a in bob.ok("GET", "/v1/apps")]
    assert not [e for e in bob.audit() if e["target"] in (mine, app)]

    # Nothing of Bob's attempts changed Alice's stream; she and the admin see it whole.
    assert alice.ok("GET", f"/v1/streams/{mine}")["spec"]["producers"] == [app]
    assert mine in [s["spec"]["name"] for s in admin.ok("GET", "/v1/streams")]
    actions = [(e["who"], e["action"]) for e in alice.audit()]
    assert actions == [
        (f"alice-{unique}", "app.kafka.issue"),
        (f"alice-{unique}", "stream.create"),
        (f"alice-{unique}", "app.create"),
    ]
    alice.ok("DELETE", f"/v1/streams/{mine}")

    # Its topics keep Alice's events: the name stays hers, never Bob's.
    for method, path in (("POST", "/v1/streams"), ("PUT", f"/v1/streams/{mine}")):
        taken = bob.call(method, path, spec(mine, f"bob-{unique}"))
        assert taken.status_code == 409 and "already exists" in taken.text, taken.text
    alice.ok("POST", "/v1/streams", spec(mine, f"alice-{unique}"))
    alice.ok("DELETE", f"/v1/streams/{mine}")


def test_a_kafka_topic_stays_the_owner_s_who_first_wrote_to_it(
    stack: Stack, admin: Api, unique: str
) -> None:
    alice, bob = owner(admin, f"alice-{unique}"), owner(admin, f"bob-{unique}")
    hers, named = f"hers_{unique}", kafka_output("named", sink={"type": "kafka", "topic": unique})
    alice.ok("POST", "/v1/streams", spec(hers, f"alice-{unique}", outputs=[kafka_output(), named]))
    alice.ok("DELETE", f"/v1/streams/{hers}")  # the topics keep her records, so they stay hers

    def refused(topic: str) -> str:
        output = kafka_output("out", sink={"type": "kafka", "topic": topic})
        answer = bob.call(
            "POST", "/v1/streams", spec(f"bobs_{unique}", f"bob-{unique}", outputs=[output])
        )
        assert answer.status_code == 422, (topic, answer.text)
        [problem] = answer.json()["problems"]
        assert problem["field"] == "outputs.0.sink.topic"
        return problem["message"]

    # Her topics as named and as Kafka counts them the same; her deleted stream's outputs-to-be.
    for topic in (f"{hers}.copy", f"{hers}_copy", unique):
        assert "is another owner's" in refused(topic), topic
    assert f"stream '{hers}''s outputs write to" in refused(f"{hers}.later")
    topics = AdminClient(stack.kafka()).list_topics(timeout=10)
    assert f"{hers}.later" not in topics.topics  # nothing refused was provisioned

    again = f"again_{unique}"
    alice.ok("POST", "/v1/streams", spec(again, f"alice-{unique}", outputs=[named]))
    # A stored spec's topic is its owner's even without a claim (a registry from before them).
    store = Store.connect(stack.settings)
    store.redis.hdel(TOPICS, unique)
    assert "is another owner's" in refused(unique)
    store.close()
    alice.ok("DELETE", f"/v1/streams/{again}")


def test_tokens_are_checked_and_rotation_and_removal_take_effect(admin: Api, unique: str) -> None:
    nobody = admin.as_(None).call("GET", "/v1/streams")
    assert nobody.status_code == 401 and nobody.headers["WWW-Authenticate"] == "Bearer"
    assert admin.as_("ko_wrong").call("GET", "/v1/streams").status_code == 401
    carol = owner(admin, f"carol-{unique}")
    rotated = admin.ok("POST", f"/v1/owners/carol-{unique}/token")["token"]
    assert carol.call("GET", "/v1/streams").status_code == 401
    assert carol.as_(rotated).call("GET", "/v1/streams").status_code == 200
    admin.ok("DELETE", f"/v1/owners/carol-{unique}")
    assert carol.as_(rotated).call("GET", "/v1/streams").status_code == 401
    assert f"carol-{unique}" not in admin.ok("GET", "/v1/owners")


def test_app_keys_and_grants_take_effect_at_the_proxy(
    stack: Stack, admin: Api, unique: str
) -> None:
    proxy = stack.address("ingest_proxy")
    stream, app = f"grants_{unique}", f"poster-{unique}"
    key = admin.ok("POST", "/v1/apps", {"name": app, "rate": 0})["key"]
    admin.ok("POST", "/v1/streams", spec(stream))

    def post(with_key: str) -> int:
        return (
            http.client()
            .post(
                f"{proxy}/v1/streams/{stream}/events",
                json={"n": 1},
                headers={"Authorization": f"Bearer {with_key}"},
                timeout=30,
            )
            .status_code
        )

    eventually("the proxy sees the stream", lambda: post(key) == 403)
    admin.ok("PUT", f"/v1/streams/{stream}/producers/{app}")
    eventually("the grant", lambda: post(key) == 202)
    new_key = admin.ok("POST", f"/v1/apps/{app}/key")["key"]
    eventually("the rotation", lambda: post(key) == 401 and post(new_key) == 202)
    admin.ok("DELETE", f"/v1/streams/{stream}/producers/{app}")
    eventually("the revocation", lambda: post(new_key) == 403)
    admin.ok("PUT", f"/v1/streams/{stream}/producers/{app}")
    admin.ok("DELETE", f"/v1/apps/{app}")
    eventually("the app's removal", lambda: post(new_key) == 401)
    assert admin.ok("GET", f"/v1/streams/{stream}")["spec"]["producers"] == []
    actions = [e["action"] for e in admin.audit() if e["target"] in (stream, app)]
    assert actions == [
        "app.delete",
        "producer.grant",
        "producer.revoke",
        "app.rotate",
        "producer.grant",
        "stream.create",
        "app.create",
    ]
    admin.ok("DELETE", f"/v1/streams/{stream}")


def test_creating_a_stream_provisions_its_topics_idempotently(stack: Stack, admin: Api) -> None:
    name = "provisioned"
    made = admin.call("PUT", f"/v1/streams/{name}", spec(name, partitions=3))
    assert made.status_code == 201
    # On each of the suite's two fronting clusters (and its archive's Hive database, unless a
    # stream made before this one made it).
    suffixes = (" on east", ".dlq on east", " on west", ".dlq on west")
    topics_made = [p for p in made.json()["provisioned"] if p.startswith("topic ")]
    assert topics_made == [f"topic keystone.{name}{on}" for on in suffixes]
    topics = AdminClient(stack.kafka()).list_topics(timeout=10)
    for topic in (f"keystone.{name}", f"keystone.{name}.dlq"):
        assert len(topics.topics[topic].partitions) == 3
    again = admin.call("PUT", f"/v1/streams/{name}", spec(name, partitions=3))
    assert again.status_code == 200 and again.json()["provisioned"] == []
    admin.ok("DELETE", f"/v1/streams/{name}")
    assert admin.call("GET", f"/v1/streams/{name}").status_code == 404


def test_preview_runs_a_draft_over_the_newest_events(stack: Stack, admin: Api) -> None:
    name = "previewed"
    admin.ok("POST", "/v1/streams", spec(name))
    headers = {"ks_ts": "1795000000000", "ks_app": "tests", "ks_host": "here"}
    events = [{"n": n, "kind": ("a", "b")[n % 2], "user": {"id": n}} for n in range(40)]
    produce(
        stack.settings,
        fronting_topic(name),
        [(json.dumps(e).encode(), {**headers, "ks_guid": f"g-{n}"}) for n, e in enumerate(events)]
        + [(b"not json", {**headers, "ks_guid": "g-bad"})],
    )
    draft = {"filter": "kind = 'a' and n >= 10", "projection": ["guid", "user.id as uid"]}
    result = admin.ok("POST", f"/v1/streams/{name}/outputs/draft/preview", {**draft, "limit": 1000})
    expr, projection = parse_filter(draft["filter"]), parse_projection(draft["projection"])
    expected = {
        f"g-{n}": project(projection, e, {"guid": f"g-{n}"})
        for n, e in enumerate(events)
        if matches(expr, e, {})
    }
    assert {r["guid"]: r["record"] for r in result["records"]} == expected
    assert (result["scanned"], result["matched"], result["unreadable"]) == (41, 15, 1)
    assert result["problems"] == [{"guid": "g-bad", "reason": "not JSON"}]
    # Hygiene: each record beside its event, hashed with the stream's key as the router would.
    hygiene = ["guid", "mask(kind, 0) as kind", "hash(user.id) as uid", "n * 2 as twice"]
    cleaned = admin.ok(
        "POST", f"/v1/streams/{name}/outputs/draft/preview", {"projection": hygiene, "limit": 5}
    )
    registry = RegistryReader.connect(stack.settings)
    key = registry.hashing_key(name)
    registry.close()
    assert key is not None and len(key) == 32
    by_guid = {f"g-{n}": e for n, e in enumerate(events)}
    for record in cleaned["records"]:
        event = by_guid[record["guid"]]
        assert record["event"] == event
        assert record["record"] == project(parse_projection(hygiene), event, record, key)
        assert record["record"]["kind"] == "*" and record["record"]["twice"] == event["n"] * 2.0
    # A number beyond a double: shown, not a failure (JSON has no infinity).
    huge = b'{"n": 1e400, "kind": "a"}'
    produce(stack.settings, fronting_topic(name), [(huge, {**headers, "ks_guid": "g-inf"})])
    [shown] = admin.ok(
        "POST",
        f"/v1/streams/{name}/outputs/draft/preview",
        {"projection": ["n", "n * 2 as twice"], "limit": 1},
    )["records"]
    assert shown["event"]["n"] == "Infinity" and shown["record"] == {"n": "Infinity", "twice": None}
    newest = admin.ok(
        "POST", f"/v1/streams/{name}/outputs/draft/preview", {"projection": ["n"], "limit": 3}
    )
    assert newest["scanned"] == 3
    undrafted = admin.call("POST", f"/v1/streams/{name}/outputs/draft/preview", {"limit": 3})
    assert undrafted.status_code == 404 and "give a filter or projection" in undrafted.text
    broken = admin.call(
        "POST",
        f"/v1/streams/{name}/outputs/draft/preview",
        {"filter": "n >", "projection": ["n", "n"]},
    )
    assert broken.status_code == 422
    assert {p["field"] for p in broken.json()["problems"]} == {"filter", "projection"}
    admin.ok("DELETE", f"/v1/streams/{name}")


def test_a_streams_hashing_key_lives_and_dies_with_it(stack: Stack, admin: Api) -> None:
    name = "keyed"
    registry = RegistryReader.connect(stack.settings)
    try:
        admin.ok("POST", "/v1/streams", spec(name))
        first = registry.hashing_key(name)
        assert first is not None and len(first) == 32
        admin.ok("PUT", f"/v1/streams/{name}", spec(name, partitions=2, producers=[]))
        assert registry.hashing_key(name) == first  # kept by every change
        answer = json.dumps(admin.ok("GET", f"/v1/streams/{name}"))
        assert first.hex() not in answer  # never shown
        admin.ok("DELETE", f"/v1/streams/{name}")
        assert registry.hashing_key(name) is None  # gone with it
        gone = admin.call(
            "POST", f"/v1/streams/{name}/outputs/draft/preview", {"projection": ["hash(a) as h"]}
        )
        assert gone.status_code == 404 and registry.hashing_key(name) is None
        admin.ok("POST", "/v1/streams", spec(name))  # the same name again: a new key
        assert registry.hashing_key(name) not in (None, first)
        admin.ok("DELETE", f"/v1/streams/{name}")
    finally:
        registry.close()


PLAY = {
    "type": "record",
    "name": "Play",
    "fields": [
        {"name": "title", "type": "string"},
        {"name": "country", "type": "string"},
        {
            "name": "user",
            "type": {"type": "record", "name": "U", "fields": [{"name": "id", "type": "long"}]},
        },
    ],
}


def test_a_schema_change_is_checked_against_the_fields_outputs_read(
    stack: Stack, admin: Api
) -> None:
    name = "schema_checked"
    search = kafka_output(
        "search", filter="country = 'US'", projection=["title", "hash(user.id) as uid", "extra"]
    )
    created = admin.ok("POST", "/v1/streams", spec(name, schema=PLAY, outputs=[search]))
    assert created["warnings"] == [
        "output search reads extra, which the stream's schema does not declare: it is always "
        "missing from events the proxy accepts, unless the schema allows more fields"
    ]
    lineage = admin.ok("GET", f"/v1/streams/{name}/lineage")
    assert {f["field"]: (f["declared"], f["outputs"]) for f in lineage["fields"]} == {
        "country": ("string", [{"output": "search", "reads_in": ["filter"]}]),
        "extra": (None, [{"output": "search", "reads_in": ["projection"]}]),
        "title": ("string", [{"output": "search", "reads_in": ["projection"]}]),
        "user": ("record U", []),
        "user.id": ("long", [{"output": "search", "reads_in": ["projection"]}]),
    }
    assert (lineage["unread"], lineage["undeclared"], lineage["whole"]) == (["user"], ["extra"], [])

    # Removing country and retyping user.id: refused, naming each output and field.
    fields = [
        {"name": "title", "type": "string"},
        {
            "name": "user",
            "type": {"type": "record", "name": "U", "fields": [{"name": "id", "type": "string"}]},
        },
    ]
    breaking = {**PLAY, "fields": fields}
    refused = admin.call(
        "PUT", f"/v1/streams/{name}", spec(name, schema=breaking, outputs=[search])
    )
    assert refused.status_code == 409
    assert refused.json()["problems"] == [
        {"output": "search", "field": "country", "was": "string", "now": None},
        {"output": "search", "field": "user.id", "was": "long", "now": "string"},
    ]
    assert "output search reads country, which it removes" in refused.json()["message"]
    assert admin.ok("GET", f"/v1/streams/{name}")["spec"]["schema"] == PLAY  # unchanged
    # Compatible evolution passes; the breaking one with force, in the audit as forced.
    optional = {"name": "device", "type": ["null", "string"], "default": None}
    evolved = {**PLAY, "fields": [*PLAY["fields"], optional]}
    admin.ok("PUT", f"/v1/streams/{name}", spec(name, schema=evolved, outputs=[search]))
    # The CLI: the lineage, the refusal and --force.
    shown = checked(stack.keystone("stream", "lineage", name))
    assert "user.id" in shown.stdout and "search (projection)" in shown.stdout
    assert "not declared" in shown.stdout
    spec_file = stack.state_dir / f"{name}.json"
    spec_file.write_text(json.dumps(spec(name, schema=breaking, outputs=[search])))
    said = stack.keystone("stream", "apply", "-f", str(spec_file))
    assert said.returncode != 0 and "output search reads country" in said.stdout + said.stderr
    forced = checked(stack.keystone("stream", "apply", "-f", str(spec_file), "--force", "--json"))
    assert json.loads(forced.stdout)["spec"]["schema"] == breaking
    entries = [e for e in admin.audit() if e["target"] == name]
    assert next(e["detail"].get("force") for e in entries if e["action"] == "stream.put") == "true"
    admin.ok("DELETE", f"/v1/streams/{name}")


def test_the_service_reports_its_health_and_metrics(admin: Api) -> None:
    ready = http.client().get(f"{admin.url}/readyz", timeout=10).json()
    assert ready == {"ready": True, "registry": True, "fleet_leader": True}
    text = http.client().get(f"{admin.url}/metrics", timeout=10).text
    assert 'keystone_control_routers{state="running"}' in text
    assert 'keystone_control_requests_total{method="GET",route="/readyz",status="200"}' in text


def test_generated_requests_never_get_a_server_error(admin: Api, unique: str) -> None:
    """Schemathesis, as an owner, over every operation: requests that conform to the OpenAPI
    schema and requests that violate it. Random streams are never theirs, so no router runs."""
    fuzzer = owner(admin, f"fuzz-{unique}")
    schema = schemathesis.openapi.from_url(f"{admin.url}/openapi.json")
    auth = {"Authorization": f"Bearer {fuzzer.token}"}
    server_errors, statuses = [], Counter()
    for result in schema.get_all_operations():
        for mode in schemathesis.GenerationMode:

            @settings(
                max_examples=25,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=result.ok().as_strategy(mode))
            def call(case) -> None:
                response = case.call(headers=auth)
                statuses[response.status_code] += 1
                if response.status_code >= 500:
                    server_errors.append(
                        (case.operation.label, response.status_code, response.text)
                    )

            try:
                call()
            except Unsatisfiable:
                assert mode is schemathesis.GenerationMode.NEGATIVE  # nothing to violate
    for stream in fuzzer.ok("GET", "/v1/streams"):
        fuzzer.ok("DELETE", f"/v1/streams/{stream['spec']['name']}")
    assert not server_errors, server_errors[:5]
    assert statuses[422] > 0 and statuses[404] > 0 and statuses[200] > 0, statuses
