"""`kafka`: the projected records to a Kafka topic, key = guid, the fronting headers carried."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from keystone.router.sinks.base import RecordWriter


class KafkaWriter(RecordWriter):
    def carried(self) -> tuple[Column, Column]:
        return F.col("guid").cast("binary"), F.col("headers")
