"""The suite's stack runs its Kafka secured (`KEYSTONE_KAFKA_SECURITY=sasl_ssl`, issue 44), so
every test of it routes over TLS with SCRAM users: here, what that security refuses, and that
no secret leaks into a log, a process' arguments or an API answer."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from keystone.contracts import kafka_clients
from keystone.contracts.names import fronting_topic
from keystone.contracts.settings import Settings
from tests.support.api import Api
from tests.support.good_tenant import GOOD_OUTPUT, GOOD_STREAM, Good
from tests.support.kafka_users import as_user, write
from tests.support.secrets import leaks, stack_processes
from tests.support.stack import Stack

OUTPUT_TOPIC = f"{GOOD_STREAM}.{GOOD_OUTPUT['name']}"


def test_the_stack_runs_kafka_over_tls_with_scram(stack: Stack) -> None:
    settings = stack.settings
    assert settings.kafka_security_protocol == "SASL_SSL"
    assert kafka_clients.librdkafka(settings)["sasl.mechanism"] == "SCRAM-SHA-512"
    assert AdminClient(stack.kafka()).list_topics(timeout=20).brokers


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        # No TLS, or TLS without a login: the broker answers no request, and drops the
        # connection; the client finds every broker down.
        ({"security.protocol": "PLAINTEXT"}, KafkaError._ALL_BROKERS_DOWN),
        ({"security.protocol": "SSL"}, KafkaError._ALL_BROKERS_DOWN),
        ({"sasl.password": "not-the-password"}, KafkaError._AUTHENTICATION),
        ({"sasl.username": "nobody"}, KafkaError._AUTHENTICATION),
        ({"ssl.ca.location": "probe"}, KafkaError._SSL),  # the system's CAs: not the broker's
    ],
    ids=["plaintext", "tls-without-login", "wrong-password", "unknown-user", "untrusted"],
)
def test_a_client_without_a_valid_login_gets_nothing(
    stack: Stack, change: dict, refusal: int
) -> None:
    seen: list[int] = []
    connection = (
        stack.kafka() | change | {"log_level": 0, "error_cb": lambda e: seen.append(e.code())}
    )
    admin = AdminClient(connection)
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
    admin.poll(1)  # its errors' callbacks served
    assert refusal in seen, [KafkaError(code).name() for code in seen]


def test_the_broker_has_no_plaintext_listener(stack: Stack) -> None:
    properties = (stack.state_dir / "conf" / "kafka" / "server.properties").read_text()
    [listeners] = [line for line in properties.splitlines() if line.startswith("listeners=")]
    assert "PLAINTEXT" not in listeners.replace("SASL_SSL", "")
    assert "listener.name.controller.ssl.client.auth=required" in properties


def test_the_proxys_user_writes_fronting_topics_only(stack: Stack, good: Good) -> None:
    proxy = as_user(stack, "proxy")
    assert write(proxy, fronting_topic(GOOD_STREAM)) is None
    refused = write(proxy, OUTPUT_TOPIC)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    good.works()


def test_controls_user_writes_no_topic_and_the_routers_deletes_none(
    stack: Stack, good: Good
) -> None:
    # Not idempotently: control's user may not do that either, which would refuse it first.
    refused = write(as_user(stack, "control"), fronting_topic(GOOD_STREAM), idempotent=False)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    router = AdminClient(as_user(stack, "router"))
    [future] = router.delete_topics([OUTPUT_TOPIC], operation_timeout=20).values()
    with pytest.raises(KafkaException) as caught:
        future.result()
    assert caught.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    good.works()  # its topics all there


def test_a_services_user_cannot_grant_itself_more(stack: Stack) -> None:
    for principal in ("proxy", "router"):
        admin = AdminClient(as_user(stack, principal))
        grant = AclBinding(
            ResourceType.TOPIC,
            "*",
            ResourcePatternType.LITERAL,
            f"User:{principal}",
            "*",
            AclOperation.ALL,
            AclPermissionType.ALLOW,
        )
        [future] = admin.create_acls([grant], request_timeout=20).values()
        with pytest.raises(KafkaException) as refused:
            future.result()
        assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def _secrets(settings: Settings) -> dict[str, str]:
    users = settings.kafka_password_file("admin").parent
    found = {f"kafka user {p.name}": p.read_text().strip() for p in users.iterdir()}
    found["redis"] = settings.redis_password_file.read_text().strip()
    found["metastore key store"] = (settings.metastore_tls_dir / "keystore-password").read_text()
    found["admin token"] = settings.admin_token_file.read_text().strip()
    return found


def test_the_secrets_files_are_their_owners_alone(stack: Stack) -> None:
    settings = stack.settings
    private = [
        settings.kafka_password_file("admin").parent,
        settings.kafka_tls_dir,
        *settings.kafka_password_file("admin").parent.iterdir(),
        settings.kafka_tls_dir / "broker-keystore.pem",
        stack.state_dir / "conf" / "kafka" / "server.properties",  # the broker's password
    ]
    for path in private:
        assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"
    assert not list(settings.kafka_tls_dir.glob("*.key")), "no CA key is left to sign with"


def test_no_secret_reaches_a_log_an_argument_list_or_an_answer(
    stack: Stack, good: Good, admin: Api
) -> None:
    good.works()  # a routing, through the proxy, the router and their Kafka clients
    secrets = _secrets(stack.settings)
    logs = [p for p in stack.settings.logs_dir.rglob("*") if p.is_file()]
    assert any("routers" in p.parts for p in logs), "a router's log among them"
    assert len(stack_processes(stack.state_dir)) > 5, "the stack's services and the router"
    assert leaks(stack, secrets) == []
    stream = f"/v1/streams/{GOOD_STREAM}"
    del secrets["admin token"]  # the caller's own, which the API is asked with
    for path in ("/v1/streams", stream, f"{stream}/status", f"{stream}/dead-letters", "/v1/apps"):
        answer = admin.call("GET", path)
        assert answer.status_code == 200, f"GET {path}: {answer.status_code}"
        leaked = [name for name, secret in secrets.items() if secret in answer.text]
        assert not leaked, f"GET {path} answered {leaked}"
