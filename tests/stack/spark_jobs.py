"""Spark applications the stack tests run as separate processes, each through the project's
session builder (router.spark) with the test stack's KEYSTONE_* settings.

    python -m tests.stack.spark_jobs kafka-copy SOURCE_TOPIC TARGET_TOPIC
    python -m tests.stack.spark_jobs hive-write DATABASE TABLE ROWS
    python -m tests.stack.spark_jobs local-files FOLDER
    python -m tests.stack.spark_jobs quiet

Each prints one JSON line with what it did.
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import functions as F

from keystone.contracts import kafka_clients
from keystone.contracts.settings import Settings
from keystone.router.spark import end_session, jvm_log, spark_session


def kafka_copy(source: str, target: str) -> dict:
    """Reads a topic with Spark's Kafka source (headers too) and writes it with its sink."""
    settings = Settings()
    spark = spark_session(settings, "test-kafka-copy")
    frame = (
        spark.read.format("kafka")
        .options(**kafka_clients.spark_options(settings))
        .option("subscribe", source)
        .option("includeHeaders", "true")
        .load()
    )
    rows = frame.select(
        F.col("value").cast("string").alias("value"),
        F.transform("headers", lambda h: F.struct(h.key, h.value.cast("string"))).alias("headers"),
    ).collect()
    (
        frame.select("key", "value", "headers")
        .write.format("kafka")
        .options(**kafka_clients.spark_options(settings))
        .option("topic", target)
        .save()
    )
    spark.stop()
    return {
        "values": sorted(r["value"] for r in rows),
        "headers": [[list(h) for h in r["headers"]] for r in rows],
    }


def hive_write(database: str, table: str, rows: int) -> dict:
    """Creates a partitioned (dateint, hour) Parquet table and appends `rows` rows to it."""
    spark = spark_session(Settings(), f"test-hive-{table}")
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {database}.{table} (id BIGINT, writer STRING) "
        "PARTITIONED BY (dateint INT, hour INT) STORED AS PARQUET"
    )
    data = spark.range(rows).select(
        "id",
        F.lit(table).alias("writer"),
        F.lit(20261121).alias("dateint"),
        (F.col("id") % 2).cast("int").alias("hour"),
    )
    data.write.insertInto(f"{database}.{table}")
    count = spark.table(f"{database}.{table}").count()
    spark.stop()
    return {"table": f"{database}.{table}", "count": count}


def local_files(folder: str) -> dict:
    """Spark's local file system at work: a streaming query's checkpoint (FileContext), files
    and folders made with permissions and a symlink looked at (FileSystem); then one file made
    through Hadoop's own LocalFileSystem, to compare. Reports the classes and what it found."""
    spark = spark_session(Settings(), "test-local-files")
    jvm = spark._jvm
    hadoop = jvm.org.apache.hadoop.fs
    conf = spark._jsc.hadoopConfiguration()
    os.makedirs(f"{folder}/in")
    with open(f"{folder}/in/lines.txt", "w") as f:
        f.write("one\ntwo\n")
    query = (
        spark.readStream.text(f"{folder}/in")
        .writeStream.format("noop")
        .option("checkpointLocation", f"{folder}/checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)

    fs = hadoop.FileSystem.get(jvm.java.net.URI("file:///"), conf)
    fs.mkdirs(hadoop.Path(f"{folder}/made"), hadoop.permission.FsPermission("750"))
    made = f"{folder}/made/file"
    fs.create(
        hadoop.Path(made), hadoop.permission.FsPermission("640"), True, 4096, 1, 1 << 20, None
    ).close()
    modes = {
        "folder": os.stat(f"{folder}/made").st_mode & 0o777,
        "file": os.stat(made).st_mode & 0o777,
    }
    fs.setPermission(hadoop.Path(made), hadoop.permission.FsPermission("600"))
    modes["changed"] = os.stat(made).st_mode & 0o777
    os.symlink(made, f"{folder}/link")
    context = hadoop.FileContext.getLocalFSFileContext(conf)
    links = {
        name: context.getFileLinkStatus(hadoop.Path(f"{folder}/{name}")).isSymlink()
        for name in ("link", "made/file")
    }

    hadoops = hadoop.LocalFileSystem()
    hadoops.initialize(jvm.java.net.URI("file:///"), conf)
    hadoops.create(
        hadoop.Path(f"{folder}/by-hadoop"),
        hadoop.permission.FsPermission("640"),
        True,
        4096,
        1,
        1 << 20,
        None,
    ).close()
    result = {
        "committed": os.listdir(f"{folder}/checkpoint/commits"),
        "file_system": fs.getClass().getName(),
        "file_context": context.getDefaultFileSystem().getClass().getName(),
        "modes": {k: oct(v) for k, v in modes.items()},
        "symlink": links,
        "archives": _mapped_archives(jvm.java.lang.ProcessHandle.current().pid()),
        "archive_pages": _archive_pages(jvm.java.lang.ProcessHandle.current().pid()),
    }
    spark.stop()
    return result


def _mapped_archives(pid: int) -> list[str]:
    """The class-data archives a JVM has mapped: one it refused is not among them."""
    with open(f"/proc/{pid}/maps") as maps:
        return sorted({line.split()[-1] for line in maps if line.rstrip().endswith(".jsa")})


def _archive_pages(pid: int) -> dict[str, dict[str, int]]:
    """Of each class-data archive a JVM maps, its resident kB and how many of them are the
    JVM's own (anonymous: written since mapped) rather than the file's."""
    pages: dict[str, dict[str, int]] = {}
    current = None
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):  # a mapping's first line
                current = head[-1] if head[-1].endswith(".jsa") else None
                continue
            if current is not None and head[0] in ("Rss:", "Anonymous:"):
                found = pages.setdefault(current, {"Rss": 0, "Anonymous": 0})
                found[head[0].rstrip(":")] += int(head[1])
    return pages


def quiet() -> dict:
    """A session whose JVM writes to its log, not to this process' output: a count, then
    where its log is."""
    settings = Settings()
    spark = spark_session(settings, "test-quiet", "local[1]", quiet=True)
    count = spark.range(5).count()
    end_session(spark)
    return {"count": count, "log": str(jvm_log(settings, "test-quiet"))}


if __name__ == "__main__":
    job, *args = sys.argv[1:]
    if job == "kafka-copy":
        result = kafka_copy(*args)
    elif job == "hive-write":
        result = hive_write(args[0], args[1], int(args[2]))
    elif job == "local-files":
        result = local_files(args[0])
    elif job == "quiet":
        result = quiet()
    else:
        sys.exit(f"unknown job {job!r}")
    print(json.dumps(result))
