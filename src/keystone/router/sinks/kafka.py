"""`kafka`: the projected records to a Kafka topic, key = guid, the fronting headers carried."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from keystone.router.sinks.base import RecordWriter


class KafkaWriter(RecordWriter):
    @property
    def topic(self) -> str:
        return self.route.stream.kafka_topics()[self.route.output.name]

    def carried(self) -> tuple[Column, Column]:
        return F.col("guid").cast("binary"), F.col("headers")
