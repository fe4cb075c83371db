"""The dead-letter topic `keystone.<stream>.dlq`: events no output can deliver, with the reason.

A record there is the fronting record unchanged (key, value, headers) plus `ks_dlq_reason` and,
when an output rather than the stream refused it, `ks_dlq_output`. Written by Spark's Kafka sink
with `dead_letter_headers`, for the events the stream's own query cannot read (in the job) and a
Kafka or Keystone output's records too large to deliver (`RecordWriter`); and by
`DeadLetters` for a sink's refusals (an Elasticsearch mapping conflict), which runs inside Spark
tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from keystone.contracts import envelope
from keystone.contracts.checkpoints import (
    Offsets,
    checkpoint_dir,
    dead_letters_position_path,
    generations,
    latest,
    read_position,
    write_position,
)
from keystone.contracts.errors import SinkError
from keystone.contracts.fronting import FrontingCluster, query_key
from keystone.contracts.names import STREAM_LEVEL, dead_letter_topic, fronting_topic
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.router.plan import dead_letter_plan
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


class DeadLetterWriter:
    """Who writes the stream's dead letters this run (`plan`, `router.plan.dead_letter_plan`)
    and where they are written up to, from the queries' checkpoints and the position file the
    router keeps (`note`), which outlives the output whose query wrote them. No Spark.

    One per fronting cluster: the events read from each are its own queries' to dead-letter,
    their positions its own (`cluster`; None: home). `generation(output)`: the checkpoint
    generation the output's query on that cluster runs in now; `held`: the outputs that do
    not start."""

    def __init__(
        self,
        settings: Settings,
        spec: StreamSpec,
        generation: Callable[[str], int],
        held: Collection[str] = (),
        cluster: FrontingCluster | None = None,
    ) -> None:
        self.settings = settings
        self.spec = spec
        self.generation = generation
        self.cluster = cluster
        self.topic = fronting_topic(spec.name)
        self.key = query_key(STREAM_LEVEL, cluster)
        self.position = dead_letters_position_path(settings, spec.name, self.key)
        noted = read_position(self.position)
        own = generations(settings, spec.name, self.key)
        last = max(own, default=None)
        ours = own[last] if last is not None else None
        self.plan = dead_letter_plan(
            spec,
            topic=self.topic,
            written=self.written(ours),
            resumes=lambda name: self._resumes(self._checkpoint(name)),
            generation=last,
            resumed=ours is not None and (noted is None or noted[0] == ours.name),
            held=held,
        )

    def _checkpoint(self, output: str) -> Path:
        key = query_key(output, self.cluster)
        return checkpoint_dir(self.settings, self.spec.name, key, self.generation(output))

    def _resumes(self, checkpoint: Path) -> Offsets | None:
        """Where a query resumes from this checkpoint: its last committed batch's end."""
        commit = latest(checkpoint, self.topic)
        return commit.offsets if commit is not None else None

    def written(self, writer: Path | None = None) -> Offsets | None:
        """Where the stream's dead letters are written up to, at least: the furthest of what
        the position file says and where `writer`'s checkpoint (a query that wrote them)
        resumes."""
        noted = read_position(self.position)
        found = [noted[1]] if noted is not None else []
        if writer is not None and (resume := self._resumes(writer)) is not None:
            found.append(resume)
        if not found:
            return None
        return {p: max(f.get(p, 0) for f in found) for p in {p for f in found for p in f}}

    def writer(self) -> Path:
        """The checkpoint of the query that writes them this run."""
        if self.plan.host is not None:
            return self._checkpoint(self.plan.host)
        return checkpoint_dir(self.settings, self.spec.name, self.key, self.plan.generation)

    def note(self) -> None:
        """Keeps the position file at where the writer's checkpoint resumes, never moving it
        back (a rewound host reads events again whose dead letters are written)."""
        writer = self.writer()
        written = self.written(writer)
        if written is not None and read_position(self.position) != (writer.name, written):
            write_position(self.position, writer.name, written)


@dataclass(frozen=True)
class DeadLetters:
    kafka: dict[str, Any] = field(repr=False)  # the connection (`kafka_clients.librdkafka`)
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
            self.kafka
            | {
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
