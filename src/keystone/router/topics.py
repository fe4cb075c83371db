"""Kafka topics through the admin API: created with their partition counts, or checked; and
read back whole, for benchmarks, the delivery audit and tests."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from keystone.contracts import kafka_clients
from keystone.contracts.errors import Unavailable
from keystone.contracts.settings import Settings


def topic_config(settings: Settings, **more: str) -> dict[str, str]:
    """Every topic the project creates: it takes records of the settings' largest (whatever
    the broker's default), and acknowledges a record once `kafka_min_insync_replicas` have it."""
    return {
        "max.message.bytes": str(settings.max_record_bytes),
        "min.insync.replicas": str(settings.kafka_min_insync_replicas),
        **more,
    }


def create_topics(settings: Settings, partitions: dict[str, int]) -> list[str]:
    """Creates each topic with its partition count (`topic_config`, `kafka_replication`
    replicas) unless it exists; returns those created."""
    admin = AdminClient(kafka_clients.librdkafka(settings))
    config = topic_config(settings)
    futures = admin.create_topics(
        [NewTopic(t, n, settings.kafka_replication, config=config) for t, n in partitions.items()],
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


def delete_topics(settings: Settings, topics: list[str]) -> None:
    """Deletes the topics and their data (a benchmark's, after it); missing ones are no error."""
    admin = AdminClient(kafka_clients.librdkafka(settings))
    futures = admin.delete_topics(topics, request_timeout=15)
    _deleted(futures, KafkaError.UNKNOWN_TOPIC_OR_PART, "topic")


def delete_groups(settings: Settings, groups: list[str]) -> None:
    """Deletes the consumer groups and their committed offsets; missing ones are no error."""
    admin = AdminClient(kafka_clients.librdkafka(settings))
    futures = admin.delete_consumer_groups(groups, request_timeout=15)
    _deleted(futures, KafkaError.GROUP_ID_NOT_FOUND, "group")


def _deleted(futures: dict[str, Any], gone: int, what: str) -> None:
    """Waits for each deletion; one of what is gone already (the `gone` error) is no error."""
    for name, future in futures.items():
        try:
            future.result(timeout=30)
        except KafkaException as e:
            if e.args[0].code() != gone:
                raise Unavailable(f"deleting {what} {name} failed: {e}", retry_after=5) from e


def missing_topics(settings: Settings, topics: list[str]) -> list[str]:
    existing = set(all_topics(settings))
    return [t for t in topics if t not in existing]


def all_topics(settings: Settings) -> list[str]:
    admin = AdminClient(kafka_clients.librdkafka(settings))
    try:
        return list(admin.list_topics(timeout=15).topics)
    except KafkaException as e:
        raise Unavailable(f"Kafka at {settings.kafka_bootstrap} did not answer: {e}", 5) from e


def watermarks(settings: Settings, topic: str) -> dict[int, tuple[int, int]]:
    """Per partition, its earliest offset (older records are past the topic's retention) and
    the offset its next record will get."""
    consumer = watermark_reader(settings)
    try:
        return read_watermarks(consumer, topic)
    finally:
        consumer.close()


def watermark_reader(settings: Settings) -> Consumer:
    """A consumer that only reads watermarks (`read_watermarks`): one kept for repeated reads
    logs in once."""
    return Consumer(kafka_clients.librdkafka(settings) | {"group.id": "keystone-watermarks"})


def read_watermarks(
    consumer: Consumer, topic: str, timeout: float = 15
) -> dict[int, tuple[int, int]]:
    """`watermarks`, through a consumer the caller keeps."""
    try:
        metadata = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if metadata is None or metadata.error is not None:
            raise Unavailable(f"topic {topic} is not readable", retry_after=5)
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            for p in sorted(metadata.partitions)
        }
    except KafkaException as e:
        raise Unavailable(f"Kafka did not answer for {topic}: {e}", retry_after=5) from e


def offsets_at(settings: Settings, topic: str, epoch_ms: int) -> dict[int, int]:
    """Per partition, the first offset whose record's timestamp is at or after `epoch_ms`
    (Kafka's offsets-for-times; the partition's end when none is)."""
    consumer = Consumer(
        kafka_clients.librdkafka(settings)
        | {
            "group.id": "keystone-positions",  # never commits: only asks
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=15).topics.get(topic)
        if metadata is None or metadata.error is not None:
            raise Unavailable(f"topic {topic} is not readable", retry_after=5)
        found = consumer.offsets_for_times(
            [TopicPartition(topic, p, epoch_ms) for p in sorted(metadata.partitions)], timeout=15
        )
        offsets = {}
        for tp in found:
            if tp.offset < 0:
                _, tp.offset = consumer.get_watermark_offsets(tp, timeout=15)
            offsets[tp.partition] = tp.offset
        return offsets
    except KafkaException as e:
        raise Unavailable(f"Kafka did not answer for {topic}: {e}", retry_after=5) from e
    finally:
        consumer.close()


def read_topic(kafka: dict[str, Any], topic: str, timeout: float = 60) -> list[Message]:
    """Everything the topic holds now: reads each partition from the start to its end.
    `kafka`: the connection (`contracts.kafka_clients.librdkafka`)."""
    return list(iter_topic(kafka, topic, timeout))


def iter_topic(kafka: dict[str, Any], topic: str, timeout: float = 60) -> Iterator[Message]:
    """The same, one message at a time (a big topic need not fit in memory); `timeout` bounds
    each wait for the next message, not the whole read."""
    consumer = Consumer(
        kafka
        | {
            "group.id": f"test-{uuid.uuid4()}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            # librdkafka's default, said: an exactly-once output's aborted records unseen.
            "isolation.level": "read_committed",
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        at_end, deadline = set(), time.monotonic() + timeout
        while len(at_end) < len(partitions):
            assert time.monotonic() < deadline, f"{topic} not read to its end in {timeout} s"
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error() is None:
                deadline = time.monotonic() + timeout
                yield message
            elif message.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(message.partition())
    finally:
        consumer.close()
