"""Spark's floor, which the deployed-router benchmark runs beside the router and Flink: what
Spark costs a router before any routing, so that the benchmark can tell the router's own cost
from the engine's (issue 43 asks for "the floor of an empty query" if a goal proves out of
reach within Spark).

    python -m keystone.loadtest.spark_floor --stream NAME --sink TOPIC --slots N
        --checkpoint DIR [--checkpoint-seconds 60] [--starting latest|earliest]
        [--batches 'N seconds' --batch-limit N]

One Spark application as the router's (`router.spark.spark_session`: the same configuration and
class archive, `local[N]`), one Real-time Mode query at the router output's checkpoint interval,
reading the stream's fronting topic as the router does (`router.source.kafka_records`) and
writing with the router's Kafka sink options (`router.sinks.base.to_kafka`). It does the least a
routing can: no JSON read, no dead letters, no meter; it keeps the events whose bytes hold
`KEPT` (the half the router's filter keeps, as `loadtest.bench.make_event` writes them) and
writes each one's guid as the key and `{"timestamp": <ks_ts>}` as the value, which is all the
benchmark's read-back needs. With `--batches`, micro-batches of at most `--batch-limit`
records at that trigger instead, as a router's micro-batch output (catching up). Runs until
stopped.
"""

from __future__ import annotations

import argparse
import logging

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from keystone.contracts import envelope as headers
from keystone.contracts.settings import Settings
from keystone.router.plan import QueryPlan
from keystone.router.sinks.base import to_kafka
from keystone.router.source import first_headers, kafka_records
from keystone.router.spark import application_logging, spark_session

KEPT = '"variant":"a"'  # make_event's compact JSON, of the events `variant = 'a'` keeps

log = logging.getLogger("keystone.loadtest.spark_floor")


def least_query(
    spark: SparkSession,
    settings: Settings,
    stream: str,
    *,
    sink: str,
    name: str,
    checkpoint: str,
    plan: QueryPlan,
) -> StreamingQuery:
    """One query doing the least a routing can, run as `plan` says (`router.plan.query_plan`):
    the router's source and Kafka sink, the kept events' guids and timestamps."""
    records = kafka_records(
        spark, settings, stream, starting=plan.starting, max_per_trigger=plan.max_per_trigger
    )
    meta = first_headers(spark, (headers.GUID, headers.TIMESTAMP))
    kept = records.where(F.col("value").cast("string").contains(KEPT)).select(meta.alias("m"))
    frame = kept.select(
        F.col("m")[headers.GUID].alias("key"),
        F.concat(
            F.lit('{"timestamp":'), F.col("m")[headers.TIMESTAMP].cast("string"), F.lit("}")
        ).alias("value"),
    )
    writer = (
        frame.writeStream.queryName(name)
        .option("checkpointLocation", checkpoint)
        .option("topic", sink)
        .outputMode("update")
    )
    if plan.real_time:
        writer = writer.trigger(realTime=plan.trigger)
    else:
        writer = writer.trigger(processingTime=plan.trigger)
    return to_kafka(writer, settings).start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stream", required=True, help="whose fronting topic it reads")
    parser.add_argument("--sink", required=True, help="the topic it writes")
    parser.add_argument("--slots", type=int, required=True, help="task slots (local[N])")
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint folder")
    parser.add_argument("--checkpoint-seconds", type=int, default=60)
    parser.add_argument("--starting", choices=("latest", "earliest"), default="latest")
    parser.add_argument("--batches", help="micro-batches at this trigger, not Real-time Mode")
    parser.add_argument("--batch-limit", type=int, help="records a micro-batch reads at most")
    args = parser.parse_args()
    application_logging()
    settings = Settings()
    spark = spark_session(settings, f"keystone-floor-{args.stream}", slots=args.slots)
    plan = QueryPlan(
        args.starting,
        args.batch_limit,
        args.batches or f"{args.checkpoint_seconds} seconds",
        real_time=not args.batches,
    )
    query = least_query(
        spark,
        settings,
        args.stream,
        sink=args.sink,
        name=f"{args.stream}.floor",
        checkpoint=args.checkpoint,
        plan=plan,
    )
    log.info("routing %s to %s", args.stream, args.sink)
    query.awaitTermination()


if __name__ == "__main__":
    main()
