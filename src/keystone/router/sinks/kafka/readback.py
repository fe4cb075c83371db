"""A Kafka output read back: its topic's records, by key (the guid)."""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

from keystone.contracts import kafka_clients
from keystone.router.sinks.readback import Copy, SinkReader, count_records
from keystone.router.topics import read_topic


class KafkaReader(SinkReader):
    """Records in the topic the output's sink names for them (`Sink.record_topic`), found by
    their key, or by their ks_guid header (`by_header`)."""

    by_header: ClassVar[bool] = False

    @property
    def topic(self) -> str:
        topic = self.output.sink.record_topic(self.spec.name, self.output.name)
        assert topic is not None, "a Kafka reader's sink writes to a topic"
        return topic

    @property
    def where(self) -> str:
        return f"topic {self.topic}"

    def deliveries(self) -> Counter[Copy]:
        return count_records(
            read_topic(kafka_clients.librdkafka(self.settings), self.topic), self.by_header
        )
