"""The dead-letter topic `keystone.<stream>.dlq`: events no output can deliver, with the reason.

A record there is the fronting record unchanged (key, value, headers) plus `ks_dlq_reason` and,
when an output rather than the stream refused it, `ks_dlq_output`. Written by Spark's Kafka sink
with `dead_letter_headers`, for the events the stream's own query cannot read (in the job) and a
Kafka or Keystone output's records too large to deliver (`RecordWriter`); and by
`DeadLetters` for a sink's refusals (an Elasticsearch mapping conflict), which runs inside Spark
tasks.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Producer
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from keystone.contracts import envelope
from keystone.contracts.errors import SinkError
from keystone.contracts.names import dead_letter_topic
from keystone.router.source import HEADERS, record_headers


def dead_letter_headers(reason: Column, output: str | Column | None = None) -> Column:
    """The fronting record's `headers` plus `ks_dlq_reason` and, when an output refused it,
    `ks_dlq_output` (a column: where it is not null): the headers of a dead letter Spark's
    Kafka sink writes."""

    def header(name: str, value: Column) -> Column:
        return F.struct(F.lit(name).alias("key"), value.cast("binary").alias("value"))

    added = F.array(header(envelope.DLQ_REASON, reason))
    if output is not None:
        named = F.lit(output) if isinstance(output, str) else output
        by = F.when(named.isNotNull(), F.array(header(envelope.DLQ_OUTPUT, named)))
        added = F.concat(added, by.otherwise(F.array().cast(HEADERS)))
    return F.concat(record_headers(), added)


def unreadable(source: DataFrame, stream: str, output: str | Column | None = None) -> DataFrame:
    """The enveloped `source`'s events that cannot be read (`problem`), as dead letters of
    `stream` for Spark's Kafka sink: refused by `output` (a column: where it is not null) when
    one alone is missing them (a redrive of its dead letters), else by the stream (the router's
    dead-letter query)."""
    return source.where(F.col("problem").isNotNull()).select(
        "key",
        "value",
        dead_letter_headers(F.col("problem"), output).alias("headers"),
        F.lit(dead_letter_topic(stream)).alias("topic"),
    )


@dataclass(frozen=True)
class DeadLetters:
    bootstrap: str
    topic: str
    output: str
    max_record_bytes: int

    def send(self, records: list[tuple[bytes | None, bytes, list, str]]) -> None:
        """Writes (key, value, headers, reason) records and returns once Kafka has them all."""
        if not records:
            return
        failures: list[str] = []

        def delivered(error, _message) -> None:
            if error is not None:
                failures.append(str(error))

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "message.max.bytes": self.max_record_bytes,
            }
        )
        for key, value, headers, reason in records:
            carried = [(h["key"], h["value"]) for h in headers or []]
            carried += [
                (envelope.DLQ_REASON, reason.encode()),
                (envelope.DLQ_OUTPUT, self.output.encode()),
            ]
            while True:
                try:
                    producer.produce(
                        self.topic, value=value, key=key, headers=carried, on_delivery=delivered
                    )
                    break
                except BufferError:  # the local queue is full: let it drain
                    producer.poll(1)
        if producer.flush(60) or failures:
            # The batch fails and Spark runs it again: a dead letter is never lost.
            raise SinkError(f"dead letters to {self.topic} not acknowledged: {failures[:3]}")
