"""The Flink SQL job the deployed-router benchmark runs beside the router: the same routing as
its stream's one Kafka output (a filter keeping half, a projection of five fields, key = guid,
the fronting headers carried on), as a team that picked Flink instead would write it.

    FLINK_JOB_KAFKA=<the connection, JSON> <flink virtualenv>/bin/python flink_job.py
        --source TOPIC --sink TOPIC --jar flink-sql-connector-kafka.jar --state DIR
        [--parallelism 1] [--checkpoint-seconds 60] [--linger-ms 5] [--starting latest|earliest]

Run by PyFlink's own interpreter (`keystone.loadtest.flink`): it imports PyFlink and the
standard library only, never the project (PyFlink pins a py4j that pyspark does not take). It
runs until killed, in a local mini-cluster; checkpoints every `--checkpoint-seconds`, at least
once, as the router's at-least-once Kafka output. Its Kafka connection (kafka-clients'
properties: `keystone.contracts.kafka_clients.java`, secrets too) comes in `FLINK_JOB_KAFKA`.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

CONNECTION = "FLINK_JOB_KAFKA"

# The router's filter and projection (keystone.loadtest.router_bench's FILTER and PROJECTION,
# which tests/loadtest/test_bench.py holds these to), in Flink SQL. Flink's
# JSON format reads only the fields the table declares, as the router reads only the paths its
# outputs read. `headers` is the Kafka record's, `ks_guid` and `ks_ts` the proxy's.
SOURCE = """
CREATE TABLE events (
  `variant` STRING,
  `user` ROW<`id` BIGINT>,
  `device` ROW<`type` STRING>,
  `title` STRING,
  `headers` MAP<STRING, BYTES> METADATA
) WITH (
  'connector' = 'kafka',
  'topic' = '{source}',
{kafka}
  'properties.group.id' = 'flink-{source}',
  'scan.startup.mode' = '{starting}-offset',
  'format' = 'json',
  'json.ignore-parse-errors' = 'true'
)"""
SINK = """
CREATE TABLE routed (
  `guid` STRING,
  `timestamp` BIGINT,
  `user_id` BIGINT,
  `device` STRING,
  `title` STRING,
  `headers` MAP<STRING, BYTES> METADATA
) WITH (
  'connector' = 'kafka',
  'topic' = '{sink}',
{kafka}
  'sink.delivery-guarantee' = 'at-least-once',
  'properties.linger.ms' = '{linger_ms}',
  'key.format' = 'raw',
  'key.fields' = 'guid',
  'value.format' = 'json',
  'value.fields-include' = 'ALL'
)"""
ROUTE = """
INSERT INTO routed
SELECT
  CAST(`headers`['ks_guid'] AS STRING),
  CAST(CAST(`headers`['ks_ts'] AS STRING) AS BIGINT),
  `user`.`id`,
  `device`.`type`,
  `title`,
  `headers`
FROM events
WHERE `variant` = 'a'"""


def main() -> None:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True)
    parser.add_argument("--sink", required=True)
    parser.add_argument("--jar", type=Path, required=True)
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument("--checkpoint-seconds", type=int, default=60)
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--starting", choices=("latest", "earliest"), default="latest")
    args = parser.parse_args()
    tables = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = tables.get_config()
    for key, value in {
        "pipeline.jars": args.jar.resolve().as_uri(),
        "parallelism.default": str(args.parallelism),
        "execution.checkpointing.interval": f"{args.checkpoint_seconds}s",
        "execution.checkpointing.mode": "AT_LEAST_ONCE",
        "execution.checkpointing.dir": (args.state / "checkpoints").resolve().as_uri(),
        "rest.bind-address": "127.0.0.1",
        "rest.address": "127.0.0.1",
        "taskmanager.host": "127.0.0.1",
        "jobmanager.rpc.address": "127.0.0.1",
    }.items():
        conf.set(key, value)
    kafka = "\n".join(
        f"  'properties.{key}' = '{_sql(value)}',"
        for key, value in json.loads(os.environ[CONNECTION]).items()
    )
    tables.execute_sql(SOURCE.format(kafka=kafka, **vars(args)))
    tables.execute_sql(SINK.format(kafka=kafka, **vars(args)))
    tables.execute_sql(ROUTE).wait()


def _sql(value: str) -> str:
    """A value inside a SQL string literal."""
    return value.replace("'", "''")


if __name__ == "__main__":
    main()
