"""Positions in a Kafka topic, as a rewind needs them: each partition's first and next offsets,
the first offset at or after a time (Kafka's offsets-for-times), and a record's timestamp."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from keystone.contracts import kafka_clients
from keystone.contracts.checkpoints import Offsets
from keystone.contracts.errors import Unavailable
from keystone.contracts.fronting import FrontingCluster
from keystone.contracts.settings import Settings
from keystone.router.topics import offsets_at, watermarks

TIMEOUT = 10.0


@dataclass(frozen=True)
class Extent:
    """What a topic holds now: per partition, its earliest offset (older records are past the
    topic's retention) and the offset its next record will get."""

    earliest: Offsets
    end: Offsets


class Positions:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def _consumer(self) -> Consumer:
        return Consumer(
            kafka_clients.librdkafka(self.settings)
            | {
                "group.id": "keystone-control-positions",  # never commits: only assigns
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )

    def on(self, cluster: FrontingCluster) -> Positions:
        """Positions in that fronting cluster's topics."""
        return Positions(cluster.connect(self.settings))

    def extent(self, topic: str) -> Extent:
        marks = watermarks(self.settings, topic)
        return Extent(
            {p: low for p, (low, _) in marks.items()}, {p: end for p, (_, end) in marks.items()}
        )

    def at_time(self, topic: str, epoch_ms: int) -> Offsets:
        """Per partition, the first offset whose record's timestamp is at or after `epoch_ms`
        (the partition's end when none is)."""
        return offsets_at(self.settings, topic, epoch_ms)

    def first_timestamp(self, topic: str, offsets: Offsets) -> float | None:
        """The earliest timestamp (epoch seconds) of the records at `offsets`, one per
        partition; None when no partition has a record there."""
        consumer = self._consumer()
        try:
            wanted = [TopicPartition(topic, p, o) for p, o in offsets.items()]
            end = {
                tp.partition: consumer.get_watermark_offsets(tp, timeout=TIMEOUT)[1]
                for tp in wanted
            }
            wanted = [tp for tp in wanted if tp.offset < end[tp.partition]]
            if not wanted:
                return None
            consumer.assign(wanted)
            stamps: dict[int, float] = {}
            for _ in range(10 * len(wanted)):
                message = consumer.poll(1.0)
                if message is None or message.error() is not None:
                    continue
                stamps.setdefault(message.partition(), message.timestamp()[1] / 1000)
                consumer.pause([TopicPartition(topic, message.partition())])
                if len(stamps) == len(wanted):
                    break
            return min(stamps.values()) if stamps else None
        except KafkaException as e:
            raise Unavailable(f"Kafka did not answer for {topic}: {e}", retry_after=5) from e
        finally:
            consumer.close()
