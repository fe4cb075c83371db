"""Dead letters as the router and a redrive make and read them, on a local Spark
session: which events become dead letters and whose, and which of a selection a redrive sends
once."""

from __future__ import annotations

import json

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from keystone.contracts import envelope as names
from keystone.router.deadletter import unreadable
from keystone.router.jobs.redrive import first_copies
from keystone.router.source import envelope

HEADERS = "array<struct<key:string,value:binary>>"


def _records(spark: SparkSession, rows: list[tuple[str, str | None, dict[str, str]]]) -> DataFrame:
    """Kafka-shaped records: (value, failed_in, headers) at partition 0, offsets in order."""
    data = []
    for offset, (value, failed_in, headers) in enumerate(rows):
        carried = dict(headers)
        if failed_in is not None:
            carried[names.DLQ_OUTPUT] = failed_in
        data.append(
            (
                b"k",
                value.encode(),
                [(k, v.encode()) for k, v in carried.items()],
                "t",
                0,
                offset,
            )
        )
    schema = (
        f"key binary, value binary, headers {HEADERS}, topic string, partition int, offset long"
    )
    return spark.createDataFrame(data, schema)


def _stamped(guid: str) -> dict[str, str]:
    return {names.GUID: guid, names.TIMESTAMP: "1700000000000"}


def test_an_event_read_by_one_output_alone_is_its_dead_letter_and_the_stream_s_otherwise(
    spark: SparkSession,
) -> None:
    records = _records(
        spark,
        [
            (json.dumps({"note": "fine"}), None, _stamped("a")),
            ('{"note": "\\ud800"}', None, _stamped("b")),  # a lone surrogate where it reads
            ("[1]", None, _stamped("c")),  # not an object
        ],
    )
    source = envelope(records, None, [("note",)])
    for output in ("search", None):
        letters = unreadable(source, "s1", output).collect()
        assert {r["topic"] for r in letters} == {"keystone.s1.dlq"}
        headers = [{h["key"]: h["value"].decode() for h in r["headers"]} for r in letters]
        assert sorted(h[names.GUID] for h in headers) == ["b", "c"]
        assert all((names.DLQ_OUTPUT in h) == (output is not None) for h in headers)
        assert all(h.get(names.DLQ_OUTPUT) == output for h in headers if output)
        assert all(h[names.DLQ_REASON] for h in headers)
    # Where each had failed, a column (a redrive's): an output's stays its own.
    failed_in = F.when(F.col("guid") == "b", F.lit("search"))
    letters = unreadable(source.withColumn("failed_in", failed_in), "s1", F.col("failed_in"))
    by = {
        h[names.GUID]: h.get(names.DLQ_OUTPUT)
        for h in ({x["key"]: x["value"].decode() for x in r["headers"]} for r in letters.collect())
    }
    assert by == {"b": "search", "c": None}


def test_a_redrive_sends_one_copy_per_event_and_place_and_none_the_stream_s_covers(
    spark: SparkSession,
) -> None:
    rows = [
        ("1", None, _stamped("a")),  # the stream's: goes to every output
        ("1", "search", _stamped("a")),  # search refused it too: covered by the stream's
        ("1", None, _stamped("a")),  # the stream's again: a copy
        ("2", "search", _stamped("b")),  # search's alone
        ("2", "search", _stamped("b")),  # a copy
        ("2", "hive", _stamped("b")),  # hive's: another output, sent too
    ]
    # As `selected` gives them: with where each failed.
    headers = F.map_from_entries("headers")
    letters = _records(spark, rows).withColumn(
        "failed_in", headers[names.DLQ_OUTPUT].cast("string")
    )
    marked = first_copies(letters).orderBy("offset")
    assert [r["copy"] for r in marked.collect()] == [False, True, True, False, True, False]
