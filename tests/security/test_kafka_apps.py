"""Direct producers' own Kafka users (issue 44, decision 0038), on the suite's secured Kafka:
an app's credential writes exactly the fronting topics of the streams it is granted, follows
its grants, its key and its life, and control (its fleet leader's pass, or any change of apps'
access) puts right what is changed behind its back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from keystone.contracts import kafka_clients
from keystone.contracts.errors import BadRequest
from keystone.contracts.names import dead_letter_topic, fronting_topic
from keystone.ingest_proxy.client import DirectProducer
from keystone.router.topics import read_topic
from tests.security.test_kafka import OUTPUT_TOPIC
from tests.support.api import Api, owner
from tests.support.good_tenant import Good
from tests.support.kafka_users import as_user, login_errors, refused, write
from tests.support.secrets import leaks
from tests.support.stack import Stack
from tests.support.waiting import eventually

OWNER, MINE, THEIRS = "team-direct", "direct_mine", "direct_theirs"
ACCESS_WAIT = 30  # the fleet leader's pass over apps' access is every 10 s


@pytest.fixture(scope="module")
def team(admin: Api) -> Iterator[Api]:
    team = owner(admin, OWNER)
    for stream in (MINE, THEIRS):
        spec = {"name": stream, "owner": OWNER, "partitions": 1, "archive": {"enabled": False}}
        team.ok("POST", "/v1/streams", spec)
    yield team
    for stream in (MINE, THEIRS):
        team.call("DELETE", f"/v1/streams/{stream}")


def app_with_credential(team: Api, app: str, *streams: str) -> dict:
    team.ok("POST", "/v1/apps", {"name": app})
    for stream in streams:
        team.ok("PUT", f"/v1/streams/{stream}/producers/{app}")
    return team.ok("POST", f"/v1/apps/{app}/kafka-credential")


def login(stack: Stack, credential: dict) -> dict:
    return as_user(stack, credential["username"], credential["password"])


def test_an_apps_kafka_user_writes_the_streams_it_is_granted_and_nothing_else(
    stack: Stack, team: Api, good: Good
) -> None:
    credential = app_with_credential(team, "direct-writer", MINE)
    assert credential["username"] == "keystone-app-direct-writer"
    assert credential["topics"] == [fronting_topic(MINE)]
    assert credential["mechanism"] == "SCRAM-SHA-512"
    connection = login(stack, credential)

    sent = DirectProducer(connection, "direct-writer").send(MINE, [{"n": 1}, {"n": 2}])
    written = read_topic(stack.kafka(), fronting_topic(MINE))  # the module's other writes too
    found = {m.key().decode(): m for m in written if m.key() is not None}
    assert set(sent.guids) <= set(found)
    assert dict(found[sent.guids[0]].headers())["ks_app"] == b"direct-writer"

    for topic in (fronting_topic(THEIRS), dead_letter_topic(MINE), OUTPUT_TOPIC):
        assert refused(connection, topic), topic
    with pytest.raises(BadRequest, match="as that app only"):
        DirectProducer(connection, "good-app")  # the honest client names its own app only
    [listed] = [a for a in team.ok("GET", "/v1/apps") if a["name"] == "direct-writer"]
    assert listed["kafka_user"] == "keystone-app-direct-writer"
    assert credential["password"] not in str(team.ok("GET", "/v1/apps"))
    assert leaks(stack, {"the app's Kafka password": credential["password"]}) == []
    good.works()


def test_an_apps_kafka_access_follows_its_grants_its_key_and_its_life(
    stack: Stack, team: Api
) -> None:
    app = "direct-follower"
    first = app_with_credential(team, app, MINE)
    connection = login(stack, first)
    assert write(connection, fronting_topic(MINE)) is None

    team.ok("DELETE", f"/v1/streams/{MINE}/producers/{app}")
    team.ok("PUT", f"/v1/streams/{THEIRS}/producers/{app}")
    eventually("the ungranted stream refused", lambda: refused(connection, fronting_topic(MINE)))
    eventually("the granted one taken", lambda: write(connection, fronting_topic(THEIRS)) is None)

    rotated = team.ok("POST", f"/v1/apps/{app}/key")
    assert rotated["kafka_password"] not in (None, first["password"])
    eventually(
        "the old password refused",
        lambda: KafkaError._AUTHENTICATION in login_errors(connection),
    )
    connection = as_user(stack, first["username"], rotated["kafka_password"])
    assert write(connection, fronting_topic(THEIRS)) is None

    assert team.call("DELETE", f"/v1/apps/{app}/kafka-credential").status_code == 204
    eventually("the revoked login refused", lambda: bool(login_errors(connection)))
    [listed] = [a for a in team.ok("GET", "/v1/apps") if a["name"] == app]
    assert listed["kafka_user"] is None
    assert team.call("DELETE", f"/v1/apps/{app}/kafka-credential").status_code == 404

    again = login(stack, team.ok("POST", f"/v1/apps/{app}/kafka-credential"))
    assert write(again, fronting_topic(THEIRS)) is None
    team.ok("DELETE", f"/v1/apps/{app}")
    eventually("a deleted app's login refused", lambda: bool(login_errors(again)))


def test_control_puts_right_apps_kafka_access_changed_behind_its_back(
    stack: Stack, team: Api
) -> None:
    connection = login(stack, app_with_credential(team, "direct-repaired", MINE))
    super_user = AdminClient(stack.kafka())
    # Someone with the cluster's keys deletes the app's ACLs, and makes an app's user that
    # control never issued.
    its_acls = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        "User:keystone-app-direct-repaired",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    for future in super_user.delete_acls([its_acls], request_timeout=20).values():
        assert future.result()
    ghost = kafka_clients.app_user("direct-ghost")
    upsert = UserScramCredentialUpsertion(
        ghost, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"not-issued"
    )
    for future in super_user.alter_user_scram_credentials([upsert]).values():
        future.result()
    assert refused(connection, fronting_topic(MINE))

    def known_users() -> set[str]:
        return set(super_user.describe_user_scram_credentials(request_timeout=20).result())

    eventually(
        "the app's ACLs back",
        lambda: write(connection, fronting_topic(MINE)) is None,
        timeout=ACCESS_WAIT,
    )
    eventually("the ghost user gone", lambda: ghost not in known_users(), timeout=ACCESS_WAIT)
    assert "keystone-app-direct-repaired" in known_users()
