"""Reading a Kafka topic back whole, for benchmarks, the delivery audit and tests."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition


def read_topic(bootstrap: str, topic: str, timeout: float = 60) -> list[Message]:
    """Everything the topic holds now: reads each partition from the start to its end."""
    return list(iter_topic(bootstrap, topic, timeout))


def iter_topic(bootstrap: str, topic: str, timeout: float = 60) -> Iterator[Message]:
    """The same, one message at a time (a big topic need not fit in memory); `timeout` bounds
    each wait for the next message, not the whole read."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
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
