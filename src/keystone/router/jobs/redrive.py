"""A redrive: a stream's dead letters sent again through its current spec, each only to the
outputs it failed in, as a job's application (`keystone.router.jobs`).

It reads the dead-letter topic up to where it ended when the redrive was asked, keeps the dead
letters its selection names (reason, output, time) that no other redrive has sent again, and
takes them in slices of at most `SLICE_SECONDS` of its rate, paced. Per slice, each record
(its dead-letter headers taken off, `ks_redrives` counted up) goes through the same
`envelope()`, filter, projection and sink classes as live: an event the stream could not read
goes to every output, one an output refused only to that output. An event that fails again is
a dead letter again, with its new reason and its redrive count. The slice's dead letters are
then marked redriven, by position, in a compacted topic (`names.redriven_topic`): another
redrive of the same ones sends nothing. A redrive started again after a crash goes on at the
slice it was writing; its own marks do not change what it selected.

The dead-letter topic is written at least once: a router killed after writing a dead letter
and before committing writes it again when it restarts. Of the copies of one event's dead
letter (by guid and where it failed) a redrive's selection sends the first only, and marks all
of them, so a Hive output does not hold the event twice.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from keystone.contracts import envelope as names
from keystone.contracts import kafka_clients
from keystone.contracts.names import (
    STREAM_LEVEL,
    dead_letter_topic,
    fronting_topic,
    redriven_topic,
)
from keystone.contracts.recovery import Redrive, RedriveProgress
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.router.deadletter import unreadable
from keystone.router.job import dead_letter_paths, routed
from keystone.router.jobs import SLICE_SECONDS, JobRunner
from keystone.router.meter import Meter
from keystone.router.sinks.base import replayer_for, to_kafka
from keystone.router.sinks.route import Route
from keystone.router.source import envelope, first_headers, record_headers
from keystone.router.topics import topic_config

log = logging.getLogger(__name__)

_DEAD_LETTER_HEADERS = (names.DLQ_REASON, names.DLQ_OUTPUT, names.REDRIVES)


def ensure_redriven_topic(settings: Settings, stream: str) -> None:
    """The compacted topic of redriven positions, made if it is not there."""
    admin = AdminClient(kafka_clients.librdkafka(settings))
    topic = NewTopic(
        redriven_topic(stream),
        num_partitions=1,
        replication_factor=settings.kafka_replication,
        config=topic_config(settings, **{"cleanup.policy": "compact"}),
    )
    for future in admin.create_topics([topic], operation_timeout=30).values():
        try:
            future.result()
        except KafkaException as e:
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise


HEADERS_READ = (names.DLQ_REASON, names.DLQ_OUTPUT, names.REDRIVES, names.GUID)


def _header(name: str) -> Column:
    """A dead letter's first header of `name`, one of `HEADERS_READ`, as text. Each is read
    from the same expression over all of them, which Spark evaluates once per record."""
    return first_headers(SparkSession.active(), HEADERS_READ)[name].cast("string")


def selected(
    spark: SparkSession, settings: Settings, stream: str, redrive: Redrive
) -> DataFrame | None:
    """The dead letters the redrive sends again: up to where the topic ended when it was asked,
    matching its selection, not sent again by another redrive before (None: the topic held
    none)."""
    topic = dead_letter_topic(stream)
    ends = dict(redrive.until)  # every partition: Spark asks for all of them
    if not any(ends.values()):
        return None
    letters = (
        spark.read.format("kafka")
        .options(**kafka_clients.spark_options(settings))
        # An exactly-once output dead-letters in its transactions: an aborted one's are not.
        .option("kafka.isolation.level", "read_committed")
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .option("startingOffsets", "earliest")
        .option("endingOffsets", json.dumps({topic: {str(p): o for p, o in ends.items()}}))
        .load()
        .withColumn("reason", _header(names.DLQ_REASON))
        .withColumn("failed_in", _header(names.DLQ_OUTPUT))
    )
    choice = redrive.selection
    if choice.reason is not None:
        letters = letters.where(F.col("reason") == choice.reason)
    if choice.output == STREAM_LEVEL:
        letters = letters.where(F.col("failed_in").isNull())
    elif choice.output is not None:
        letters = letters.where(F.col("failed_in") == choice.output)
    stamp = F.unix_millis("timestamp")
    if choice.start is not None:
        letters = letters.where(stamp >= choice.start)
    if choice.end is not None:
        letters = letters.where(stamp < choice.end)
    marks = (
        spark.read.format("kafka")
        .options(**kafka_clients.spark_options(settings))
        .option("kafka.isolation.level", "read_committed")
        .option("subscribe", redriven_topic(stream))
        .option("startingOffsets", "earliest")
        .load()
        .select(F.col("key").cast("string").alias("at"), F.col("value").cast("string").alias("by"))
        # Its own marks do not count: what it selected stays the same when it starts again.
        .where(F.col("by") != redrive.id)
        .select(
            F.split("at", ":").getItem(0).cast("int").alias("partition"),
            F.split("at", ":").getItem(1).cast("long").alias("offset"),
        )
        .distinct()
    )
    return letters.join(marks, ["partition", "offset"], "left_anti")


def as_fronting(letters: DataFrame, stream: str) -> DataFrame:
    """Dead letters as the fronting topic's records, `ks_redrives` counted up (their
    dead-letter headers are taken off by `redriven`, once they are read)."""
    count = F.coalesce(_header(names.REDRIVES).try_cast("int"), F.lit(0)) + 1
    redrives = F.struct(
        F.lit(names.REDRIVES).alias("key"), count.cast("string").cast("binary").alias("value")
    )
    headers = record_headers()
    return letters.select(
        "key",
        "value",
        F.concat(headers, F.array(redrives)).alias("headers"),
        F.lit(fronting_topic(stream)).alias("topic"),
        "partition",
        "offset",
    )


def first_copies(letters: DataFrame) -> DataFrame:
    """`letters` with `copy`: true for every dead letter but the first (by position) of one
    event (its guid) refused by the same output or the stream (`failed_in`), and for one an
    output refused when the stream's own is selected too (that one goes to every output: an
    event one output's paths could read and the stream's dead-letter query could not, which
    an output's sink then refused too)."""
    guid = F.coalesce(_header(names.GUID), F.concat_ws(":", "partition", "offset"))
    where = Window.partitionBy(guid, F.coalesce("failed_in", F.lit(""))).orderBy(
        "partition", "offset"
    )
    streams = F.max(F.col("failed_in").isNull().cast("int")).over(Window.partitionBy(guid))
    covered = F.col("failed_in").isNotNull() & (streams == 1)
    return letters.withColumn("copy", (F.row_number().over(where) > 1) | covered)


def redriven(source: DataFrame) -> DataFrame:
    """The enveloped dead letters with where each failed (`failed_in`: an output, or null for
    the stream) and their headers as the event had them (and its redrive count): the
    dead-letter headers off, the last `ks_redrives` the one that counts."""
    entries = source["headers"]
    last = F.element_at(F.filter(entries, lambda h: h["key"] == names.REDRIVES), -1)
    kept = F.filter(entries, lambda h: ~h["key"].isin(*_DEAD_LETTER_HEADERS))
    return source.withColumn("failed_in", _header(names.DLQ_OUTPUT)).withColumn(
        "headers", F.concat(kept, F.array(last))
    )


class Redriver(JobRunner[Redrive, RedriveProgress]):
    kind = Redrive

    def __init__(
        self,
        spark: SparkSession,
        settings: Settings,
        spec: StreamSpec,
        job: Redrive,
        key: bytes | None,
    ) -> None:
        super().__init__(spark, settings, spec, job, key)
        self.meters = {o.name: Meter(spark, f"redrive.{spec.name}.{o.name}") for o in spec.outputs}
        self.writers = {
            o.name: replayer_for(Route(settings, spec, o), self.meters[o.name])
            for o in spec.outputs
        }

    def run(self, stop: threading.Event) -> bool:
        redrive, progress = self.job, self.progress
        ensure_redriven_topic(self.settings, self.spec.name)
        for writer in self.writers.values():
            writer.prepare(self.spark)
        found = selected(self.spark, self.settings, self.spec.name, redrive)
        if found is None:
            progress.total = 0
            return self.done("the dead-letter topic held none")
        letters = first_copies(found).persist()
        try:
            if progress.total is None or progress.slices is None:
                progress.total = letters.where(~F.col("copy")).count()
                progress.slices = max(1, math.ceil(progress.total / (redrive.rate * SLICE_SECONDS)))
                progress.save(self.path)
            place = F.pmod(F.xxhash64("partition", "offset"), F.lit(progress.slices))
            for n in range(progress.slices_done, progress.slices):
                if stop.is_set():
                    return False
                began = time.monotonic()
                self.paced(stop, self.slice(letters.where(place == n), n), began)
        finally:
            letters.unpersist()
        return self.done(
            f"{progress.read} dead letters, delivered {progress.delivered}, "
            f"{progress.dead_lettered} dead-lettered again"
        )

    def slice(self, letters: DataFrame, n: int) -> int:
        """Sends one slice again; returns how many dead letters it sent (copies not counted)."""
        redrive, progress = self.job, self.progress
        part = letters.persist()
        try:
            copies = part.where("copy").count()
            read = part.count() - copies
            paths = dead_letter_paths(self.spec.outputs)
            fronting = as_fronting(part.where(~F.col("copy")), self.spec.name)
            source = redriven(envelope(fronting, self.schema, paths)).persist()
            failed_in = F.col("failed_in")
            for name, writer in self.writers.items():
                output = self.spec.output(name)
                assert output is not None
                mine = source.where(failed_in.isNull() | (failed_in == name))
                frame = routed(mine, output, self.meters[name], F.lit(redrive.id), key=self.key)
                outcome = writer.write_again(frame, f"{redrive.id}-{n:05d}")
                counts = self.meters[name].take_settled()
                delivered = outcome.delivered if outcome is not None else counts.delivered
                again = outcome.dead_lettered if outcome is not None else counts.dead_lettered
                progress.delivered[name] = progress.delivered.get(name, 0) + delivered
                progress.dead_lettered += again
            # Still unreadable: a dead letter again, with its new reason, of where it had failed
            # (an output's stays that output's: the others have it); one of an output the
            # stream no longer has is skipped, never written again.
            outputs = {o.name for o in self.spec.outputs}
            gone = failed_in.isNotNull() & ~failed_in.isin(*outputs)
            letters = unreadable(source.where(~gone), self.spec.name, failed_in)
            to_kafka(letters.write, self.settings).save()
            progress.dead_lettered += letters.count()
            progress.skipped += source.where(gone).count()
            # Marked redriven once sent, copies too: another redrive leaves them be.
            marks = part.select(
                F.concat_ws(":", "partition", "offset").alias("key"),
                F.lit(redrive.id).alias("value"),
                F.lit(redriven_topic(self.spec.name)).alias("topic"),
            )
            to_kafka(marks.write, self.settings).save()
            source.unpersist()
        finally:
            part.unpersist()
        progress.read += read
        progress.copies += copies
        progress.slices_done = n + 1
        progress.save(self.path)
        return read
