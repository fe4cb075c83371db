"""A class-data sharing archive for Spark drivers: the JVM maps the classes a driver loads at
start from one file instead of reading and verifying them from Spark's jars: a router's,
`keystone sql`'s or a test job's session and first query take 6 s instead of 9-10 s on the
reference machine.

Built once per classpath by `keystone stack fetch` (so by `make bootstrap`): a local job that
does what a router does at start runs with `-XX:ArchiveClassesAtExit`. A driver uses the
archive only when it exists for its own classpath; without it, Spark starts as before. Building
one removes the others that no driver has opened for `class_archive_unused_days` (a virtualenv
made again has jars of new times, so a new archive: they would pile up).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from keystone.contracts.errors import StackError
from keystone.contracts.settings import Settings
from keystone.router.jvm import class_archive, local_driver

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def build(settings: Settings) -> bool:
    """Builds the archive of local-mode drivers; False when it is there already."""
    target = class_archive(settings, local_driver(settings)["spark.driver.extraClassPath"])
    if target.exists():
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_suffix(".partial")
    staging.unlink(missing_ok=True)
    result = subprocess.run(
        [sys.executable, "-m", "keystone.stack.cds", str(staging)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0 or not staging.exists():
        raise StackError(f"building the Spark class archive failed:\n{result.stderr[-3000:]}")
    staging.rename(target)  # whole or not at all: a driver never maps half an archive
    unused_for = settings.class_archive_unused_days * 86_400
    prune(target.parent, keep=target, before=time.time() - unused_for)
    return True


def prune(folder: Path, keep: Path, before: float) -> list[Path]:
    """Removes the archives in `folder` but `keep` last opened before `before` (epoch seconds:
    a driver mapping one reads it, which sets its access time); those removed. One a driver
    has mapped meanwhile stays usable: the file goes when the last mapping does."""
    removed = []
    for archive in folder.glob("spark-driver-*.jsa"):
        if archive != keep and archive.stat().st_atime < before:
            archive.unlink(missing_ok=True)
            removed.append(archive)
    return removed


def _train(path: str) -> None:
    """Starts a local driver as a router would, routes a few events as a router does, runs a
    small streaming query, makes the Kafka clients a router makes (pointed nowhere), and exits
    so that the JVM writes the classes it loaded to `path`. No stack runs at fetch time: no
    broker and no metastore (the Hive client's classes load as a router first asks for it)."""
    from pyspark import SparkContext  # Spark only in the job that trains the archive

    from keystone.router.spark import session_builder, spark_conf

    # It reaches no metastore: no trust store of its CA (which the stack may not have made yet).
    settings = Settings().model_copy(update={"metastore_ssl_ca_file": ""})
    conf = spark_conf(settings, "keystone-class-archive", "local[1]")
    conf["spark.sql.catalogImplementation"] = "in-memory"
    conf["spark.driver.extraJavaOptions"] = f"-XX:ArchiveClassesAtExit={path} -Xlog:cds=off"
    spark = session_builder(settings, conf).getOrCreate()
    spark.range(1000).selectExpr("id % 7 AS k", "to_json(named_struct('id', id)) AS v").groupBy(
        "k"
    ).count().collect()
    with tempfile.TemporaryDirectory() as folder:
        _route(spark, Path(folder))
    _kafka_clients(spark)
    jvm = SparkContext._gateway.proc
    spark.stop()
    jvm.stdin.close()  # the gateway exits on end of input, writing the archive as it goes
    jvm.wait(timeout=300)


def _route(spark: SparkSession, folder: Path) -> None:
    """A stream's events, as Kafka records, through the router's own columns (its JSON paths,
    filter, projection and headers), once in a batch and once in a streaming query written as
    Parquet, its progress heard by the router's listener."""
    from pyspark.sql import functions as F

    from keystone.contracts.spec import load_spec
    from keystone.router.job import paths_read_by, routed
    from keystone.router.metrics import ProgressListener, RouterMetrics, listen
    from keystone.router.source import HEADERS, envelope

    spec = load_spec(
        {
            "name": "train",
            "owner": "keystone",
            "outputs": [
                {
                    "name": "out",
                    "filter": "kind = 'click' and n > 3 or user.id like 'a%'",
                    "projection": ["n", "kind as k", "upper(user.id) as u", "hash(kind) as h"],
                    "sink": {"type": "kafka"},
                }
            ],
        }
    )
    [output] = spec.outputs
    events = folder / "events"
    events.mkdir()
    headers = [{"key": k, "value": v} for k, v in (("ks_guid", "g"), ("ks_timestamp", "1"))]
    lines = [
        {"value": f'{{"n": {n}, "kind": "click", "user": {{"id": "a{n}"}}}}', "headers": headers}
        for n in range(100)
    ]
    (events / "records.json").write_text("\n".join(json.dumps(line) for line in lines))
    schema = "value string, headers array<struct<key:string,value:string>>"

    def as_records(frame: DataFrame) -> DataFrame:
        return frame.select(
            F.lit(None).cast("binary").alias("key"),
            F.col("value").cast("binary").alias("value"),
            F.col("headers").cast(HEADERS).alias("headers"),
            F.lit("keystone.train").alias("topic"),
            F.lit(0).alias("partition"),
            F.lit(0).cast("long").alias("offset"),
            F.current_timestamp().alias("timestamp"),
        )

    paths = paths_read_by([output])
    batch = as_records(spark.read.schema(schema).json(str(events)))
    routed(envelope(batch, None, paths), output, None, key=b"k" * 32).collect()
    registered = listen(spark, ProgressListener(RouterMetrics(spec.name)))
    stream = as_records(spark.readStream.schema(schema).json(str(events)))
    query = (
        routed(envelope(stream, None, paths), output, None, key=b"k" * 32)
        .writeStream.format("parquet")
        .option("path", str(folder / "out"))
        .option("checkpointLocation", str(folder / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    spark.streams._jsqm.removeListener(registered)


def _kafka_clients(spark: SparkSession) -> None:
    """Spark's Kafka source planned, and a consumer, a producer and an admin client made and
    closed, pointed at a port nothing listens on: the classes a router's Kafka work loads."""
    from keystone.contracts.names import fronting_topic

    nowhere = "127.0.0.1:9"
    planned = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", nowhere)
        .option("subscribe", fronting_topic("train"))
        .option("includeHeaders", "true")
        .load()
    )
    planned.selectExpr("CAST(value AS STRING)")._jdf.queryExecution().toString()  # planned
    jvm = spark.sparkContext._jvm
    props = jvm.java.util.Properties()
    for key, value in {
        "bootstrap.servers": nowhere,
        "key.serializer": "org.apache.kafka.common.serialization.ByteArraySerializer",
        "value.serializer": "org.apache.kafka.common.serialization.ByteArraySerializer",
        "key.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
        "value.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
        "enable.idempotence": "false",
    }.items():
        props.setProperty(key, value)
    clients = jvm.org.apache.kafka.clients
    now = jvm.java.time.Duration.ZERO
    clients.consumer.KafkaConsumer(props).close(now)
    clients.producer.KafkaProducer(props).close(now)
    clients.admin.AdminClient.create(props).close(now)


if __name__ == "__main__":
    _train(sys.argv[1])
