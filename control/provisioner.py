"""Creates what a stream needs outside Redis, idempotently: for now its Kafka topics."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from contracts.errors import Unavailable
from contracts.names import dead_letter_topic, fronting_topic
from contracts.settings import Settings
from contracts.spec import StreamSpec


def ensure_topics(settings: Settings, spec: StreamSpec) -> list[str]:
    """Creates the fronting and dead-letter topics if missing; returns the ones it created."""
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    wanted = [fronting_topic(spec.name), dead_letter_topic(spec.name)]
    futures = admin.create_topics(
        [NewTopic(t, spec.partitions, settings.kafka_replication) for t in wanted],
        request_timeout=15,
    )
    created = []
    for topic, future in futures.items():
        try:
            future.result(timeout=30)
            created.append(topic)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise Unavailable(f"creating topic {topic} failed: {e}", retry_after=5) from e
    return created
