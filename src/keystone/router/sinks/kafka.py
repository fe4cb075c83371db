"""`kafka`: the projected records to a Kafka topic, key = guid, the fronting headers carried."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from keystone.router.sinks.base import RecordSink
from keystone.router.topics import create_topics


class KafkaSink(RecordSink):
    type = "kafka"

    @property
    def topic(self) -> str:
        return self.route.stream.kafka_topics()[self.route.output.name]

    def provision(self) -> list[str]:
        created = create_topics(self.route.settings, {self.topic: self.route.stream.partitions})
        return [f"topic {t}" for t in created]

    def carried(self) -> tuple[Column, Column]:
        return F.col("guid").cast("binary"), F.col("headers")
