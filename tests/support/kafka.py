"""Kafka helpers for tests: produce with acknowledgement, consume; `read_topic` reads a topic
back whole."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import (
    Consumer,
    Message,
    Producer,
)

from keystone.contracts import kafka_clients
from keystone.contracts.settings import Settings
from keystone.router.topics import create_topics


def produce(settings: Settings, topic: str, records: list[tuple[bytes, dict[str, str]]]) -> None:
    """Writes the records, creating the topic (one partition) first when it is missing: the
    broker creates none on its own."""
    create_topics(settings, {topic: 1})
    producer = Producer(
        kafka_clients.librdkafka(settings)
        | {
            "acks": "all",
            "enable.idempotence": True,
            "message.max.bytes": settings.max_record_bytes,
        }
    )
    for value, headers in records:
        producer.produce(topic, value, headers=headers)
    assert producer.flush(30) == 0, "records still unacknowledged after 30 s"


def consume_all(
    settings: Settings, topic: str, expected: int, timeout: float = 60
) -> list[Message]:
    """Reads from the start until `expected` messages arrived or `timeout` passed."""
    consumer = Consumer(
        kafka_clients.librdkafka(settings)
        | {
            "group.id": f"test-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    messages, deadline = [], time.monotonic() + timeout
    try:
        while len(messages) < expected and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                messages.append(message)
    finally:
        consumer.close()
    return messages
