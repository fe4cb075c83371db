"""`kafka`: the projected records to a Kafka topic, key = guid, the fronting headers carried."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from contracts.names import output_topic
from control.provisioner import create_topics
from router.sinks.base import RecordSink


class KafkaSink(RecordSink):
    type = "kafka"

    @property
    def topic(self) -> str:
        route = self.route
        return route.output.sink.topic or output_topic(route.stream.name, route.output.name)

    def prepare(self, spark: SparkSession) -> None:
        create_topics(self.route.settings, {self.topic: self.route.stream.partitions})

    def frame(self, routed: DataFrame) -> DataFrame:
        return routed.select(
            F.col("guid").cast("binary").alias("key"),
            F.col("record").alias("value"),
            "headers",
            F.lit(self.topic).alias("topic"),
        )
