"""The Spark part of every sink: the writer the router attaches to an output's query.

A writer is a small class over `Writer`, its live interface: `prepare()` makes ready what the
query needs before it starts (its provisioner's work, then whatever needs Spark, idempotently),
and `attach()` points a streaming writer at the sink. Two families:

- `RecordWriter` (kafka, keystone): the routed frame becomes Kafka records written by Spark's
  own Kafka sink, so these can run under Real-time Mode; or, exactly once, each micro-batch in
  Kafka transactions (`router.sinks.transactions`). A record too large for Kafka goes to the
  dead-letter topic instead (see `RecordWriter`).
- `BatchWriter` (hive, elasticsearch): `write_batch()` delivers one micro-batch and says what
  became of it. Spark replays a batch id after a crash, and a replay must leave no duplicates.

Apart from the live query, a writer may take records written again (`Replays`: a backfill's
slices, a redrive's), take out records of events its output now leaves out (`TakesOut`:
Elasticsearch), or replace a backfill's range whole (`ReplacesRanges`: Hive).

The routed frame every writer receives has the columns of `ROUTED`: the fronting record's `key`,
`value` and `headers` (for dead letters and for carrying headers on), its `partition` and
`offset` (where it was read: an exactly-once output commits them), the event's `guid`,
`timestamp` (ingest, epoch ms) and `hops`, `replay` (the rewind's id when a rewind writes the
event again, else null), `record`, the projected output as JSON text, and `dead_letter`: on a
row that is one of the stream's dead letters, the reason (its `record` is null), else null. Only
a record writer's live query gets such rows (`router.plan.dead_letter_plan`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TypeVar

from pyspark.sql import Column, DataFrame, DataFrameWriter, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from keystone.contracts import envelope, kafka_clients
from keystone.contracts.errors import SinkError
from keystone.contracts.settings import Settings
from keystone.contracts.sinks import SinkKind
from keystone.router.counts import Outcome
from keystone.router.deadletter import dead_letter_headers
from keystone.router.meter import Meter
from keystone.router.sinks.provision import provisioner_for
from keystone.router.sinks.route import Route
from keystone.router.sinks.transactions import Transactions

ROUTED = (
    "key",
    "value",
    "headers",
    "partition",
    "offset",
    "guid",
    "timestamp",
    "hops",
    "replay",
    "record",
    "dead_letter",
)


class Writer(ABC):
    """The live interface every sink's writer has."""

    def __init__(self, route: Route, meter: Meter | None = None) -> None:
        self.route = route
        self.meter = meter  # the router's live counts of a record writer's output

    def prepare(self, spark: SparkSession) -> None:
        """Everything the query needs before it starts, idempotent (the router runs it)."""
        provisioner_for(self.route).provision()

    def frame(self, routed: DataFrame) -> DataFrame:
        """The frame the streaming query writes."""
        return routed

    @abstractmethod
    def attach(self, writer: DataStreamWriter, report: Callable[[Outcome], None]) -> None:
        """Points the writer at the sink; `report` receives each batch's outcome when the sink
        knows it (Spark's Kafka sink reports through query progress instead)."""

    @abstractmethod
    def deliver(self, frame: DataFrame, batch_id: int) -> Outcome | None:
        """One micro-batch of `frame()`'s rows delivered, all of it, before returning, as the
        attached query would deliver it (a query whose batches pass through Python first, a
        shadow's, calls it): its outcome, or None where the writer's meter counted it."""


class Replays(Writer):
    """A writer that also takes records written again apart from the live query (a backfill's,
    a redrive's), as slices of a frame of `ROUTED` columns, every row a replay. Each returns its
    outcome, or None where the writer's meter counted it."""

    @abstractmethod
    def write_replay(self, routed: DataFrame, tag: str) -> Outcome | None:
        """Writes one slice of a backfill, all of it, before returning; `tag` names the slice,
        the same if it is written again."""

    def write_again(self, routed: DataFrame, tag: str) -> Outcome | None:
        """Adds these records (a redrive's slice of dead letters) to what the sink holds,
        replacing whatever an earlier attempt of the same `tag` added."""
        return self.write_replay(routed, tag)


class TakesOut(Replays):
    """A sink that can take records out: a backfill's slice leaves it as the output gives the
    slice now, without the records of events the output leaves out now."""

    @abstractmethod
    def write_replay_taking_out(
        self, routed: DataFrame, left_out: DataFrame, tag: str
    ) -> Outcome | None:
        """`write_replay`, and the records of `left_out`'s events (`guid`, `timestamp`) taken
        out."""


class ReplacesRanges(Replays):
    """A sink that takes a backfill's range whole (Hive): its slices are staged, then replace
    the range's rows at once. The live output must have passed the range first, or it would
    write some of them again after."""

    @abstractmethod
    def end_replay(
        self, spark: SparkSession, window: tuple[int, int], tags: list[str], keep: bool
    ) -> None:
        """After the slices (`tags`) of a backfill's hour, `window` its [start, end) in epoch
        ms: replaces the window's rows with them (`keep`) or discards them (a cancelled
        backfill)."""

    @abstractmethod
    def settle_replays(self, spark: SparkSession, keep: str | None) -> None:
        """Finishes what earlier backfills of the output left halfway, and forgets what they
        left behind, but the backfill `keep`'s (the one running; None: none is)."""


class RecordWriter(Replays):
    """Spark's Kafka sink, or for an exactly-once output (`transactional`) the project's
    transactional writer: `frame()` yields key, value, headers and topic (and the record's
    source partition and offset when transactional).

    One record over the writer's limit fails the query, and again each time it is started, so
    the output would stall for good. A projected record larger than an event may be (a
    projection repeating a large field, say) goes to the dead-letter topic instead, as the
    fronting record with the reason; the route's meter counts it as dead-lettered, the rest as
    delivered (a transactional output counts what its transactions commit instead)."""

    _transactions: Transactions | None = None

    @property
    def topic(self) -> str:
        """Where the records go: the topic the sink's config names for them."""
        route = self.route
        topic = route.output.sink.record_topic(route.stream.name, route.output.name)
        assert topic is not None, "a record writer's sink writes to a topic"
        return topic

    @abstractmethod
    def carried(self) -> tuple[Column, Column]:
        """A delivered record's key and headers, from the routed columns (its value is the
        projected record)."""

    @property
    def transactional(self) -> bool:
        return self.route.output.transactional

    def frame(self, routed: DataFrame) -> DataFrame:
        return self.records(routed, self.transactional)

    def records(self, routed: DataFrame, transactional: bool) -> DataFrame:
        """The Kafka records: metered as they are handed to Spark's sink, or with where they
        were read, for the transactions, which count what they commit."""
        limit = self.route.settings.max_event_bytes
        size = F.octet_length("record")
        meter = self.meter
        assert meter is not None, "the router gives a record writer its meter"
        fits = size <= limit
        # The stream's dead letters pass unmetered (lazily: a branch not taken is not counted).
        ours = F.col("dead_letter").isNull()
        metered = F.when(ours, meter.sent(fits))
        checked = routed.withColumn("fits", fits if transactional else metered)
        key, headers = self.carried()
        # A record a rewind writes again says so, with the rewind's id.
        replay = F.col("replay")
        labelled = F.concat(
            F.filter(headers, lambda h: h["key"] != envelope.REPLAY),
            F.array(
                F.struct(F.lit(envelope.REPLAY).alias("key"), replay.cast("binary").alias("value"))
            ),
        )
        headers = F.when(replay.isNull(), headers).otherwise(labelled)
        reason = F.format_string(f"the output record is %d bytes, over the limit of {limit}", size)
        fits = F.col("fits")
        # Named apart from `partition`, which Spark's Kafka sink would take as the target's.
        source = [
            F.col("partition").alias("source_partition"),
            F.col("offset").alias("source_offset"),
        ]
        dead = F.col("dead_letter")  # the stream's: the fronting record, the stream's reason
        return checked.select(
            F.when(fits, key).otherwise(F.col("key")).alias("key"),
            F.when(fits, F.col("record").cast("binary")).otherwise(F.col("value")).alias("value"),
            F.when(fits, headers)
            .when(dead.isNotNull(), dead_letter_headers(dead))
            .otherwise(dead_letter_headers(reason, self.route.output.name))
            .alias("headers"),
            F.when(fits, F.lit(self.topic))
            .otherwise(F.lit(self.route.dead_letter_topic))
            .alias("topic"),
            *(source if transactional else []),
        )

    def attach(self, writer: DataStreamWriter, report: Callable[[Outcome], None]) -> None:
        if not self.transactional:
            to_kafka(writer, self.route.settings)
            return

        def deliver(frame: DataFrame, batch_id: int) -> None:
            try:
                outcome = self.deliver(frame, batch_id)
            except Exception:
                report(Outcome(aborted=1))
                raise
            assert outcome is not None, "transactions count what they commit"
            report(outcome)

        writer.foreachBatch(deliver)

    def deliver(self, frame: DataFrame, batch_id: int) -> Outcome | None:
        if self.transactional:
            if self._transactions is None:  # one a query: made once it has started
                self._transactions = Transactions(self.route)
            return self._transactions.write(frame, batch_id)
        to_kafka(frame.write, self.route.settings).save()
        return None

    def write_replay(self, routed: DataFrame, tag: str) -> Outcome | None:
        # Append-only: what the output took before stays there. A backfill's or redrive's
        # slices are written at least once, transactional output or not: each is labelled
        # (`ks_replay`), and its own repeats are told by that label and the guid.
        to_kafka(self.records(routed, False).write, self.route.settings).save()
        return None


W = TypeVar("W", DataStreamWriter, DataFrameWriter)


def to_kafka(writer: W, settings: Settings) -> W:
    """The writer pointed at Spark's Kafka sink, taking records as large as the project's."""
    return (
        writer.format("kafka")
        .options(**kafka_clients.spark_options(settings))
        .option("kafka.max.request.size", settings.max_record_bytes)
        .option("kafka.linger.ms", settings.router_kafka_linger_ms)
    )


class BatchWriter(Replays):
    @abstractmethod
    def write_batch(self, frame: DataFrame, batch_id: int) -> Outcome:
        """Delivers one batch, all of it, before returning (or raises: Spark retries it)."""

    def attach(self, writer: DataStreamWriter, report: Callable[[Outcome], None]) -> None:
        def deliver(frame: DataFrame, batch_id: int) -> None:
            report(self.write_batch(frame, batch_id))

        writer.foreachBatch(deliver)

    def deliver(self, frame: DataFrame, batch_id: int) -> Outcome | None:
        return self.write_batch(frame, batch_id)

    def write_replay(self, routed: DataFrame, tag: str) -> Outcome | None:
        return self.write_batch(self.frame(routed), -1)


def writer_for(route: Route, meter: Meter | None = None) -> Writer:
    """The output's Spark writer, of the class its sink type's descriptor names."""
    return writer_class(route.output.sink.kind)(route, meter)


def replayer_for(route: Route, meter: Meter | None = None) -> Replays:
    """The output's writer, to write records again apart from its live query."""
    writer = writer_for(route, meter)
    if not isinstance(writer, Replays):
        raise SinkError(f"the {route.output.sink.kind.label} sink takes no records written again")
    return writer


def writer_class(kind: SinkKind) -> type[Writer]:
    cls = kind.load(kind.writer)
    if not issubclass(cls, Writer):
        raise TypeError(f"the {kind.label} sink's writer {cls!r} is not a Writer")
    return cls
