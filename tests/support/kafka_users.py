"""Connecting to the suite's secured Kafka as one of its users, and what Kafka answers."""

from __future__ import annotations

import uuid

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from keystone.contracts import kafka_clients
from tests.support.stack import Stack


def as_user(stack: Stack, principal: str, password: str | None = None) -> dict:
    """A client's connection to the stack's Kafka as one of its users (a service's password
    from its file, unless given)."""
    settings = stack.settings
    secret = password or settings.kafka_password_file(principal).read_text().strip()
    return kafka_clients.librdkafka(settings) | {
        "sasl.username": principal,
        "sasl.password": secret,
    }


def write(connection: dict, topic: str, idempotent: bool = True) -> KafkaError | None:
    """One record written; the error Kafka answered, if any."""
    errors: list[KafkaError] = []
    config = {"message.timeout.ms": 10_000, "enable.idempotence": idempotent, "log_level": 0}
    producer = Producer(connection | config)
    producer.produce(
        topic,
        b'{"n": 1}',
        headers=[("ks_guid", uuid.uuid4().hex.encode())],
        on_delivery=lambda e, _m: errors.append(e) if e is not None else None,
    )
    producer.flush(15)
    return errors[0] if errors else None


def refused(connection: dict, topic: str) -> bool:
    """Kafka refused the connection's user a write to `topic`."""
    error = write(connection, topic)
    return error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def login_errors(connection: dict) -> list[int]:
    """The errors a client met connecting (none when its login was taken)."""
    seen: list[int] = []
    admin = AdminClient(connection | {"log_level": 0, "error_cb": lambda e: seen.append(e.code())})
    try:
        admin.list_topics(timeout=3)
    except KafkaException:
        admin.poll(1)  # its errors' callbacks served
        return seen or [KafkaError._TRANSPORT]
    return []
