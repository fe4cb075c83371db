"""Dead letters as the router and a redrive make and read them, on a local Spark
session: which events become dead letters and whose, and which of a selection a redrive sends
once."""

from __future__ import annotations

import json

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from keystone.contracts import envelope as names
from keystone.contracts.settings import Settings
from keystone.contracts.spec import load_spec
from keystone.router.deadletter import unreadable
from keystone.router.job import dead_letter_paths, paths_read_by, routed
from keystone.router.jobs.redrive import first_copies
from keystone.router.meter import Meter
from keystone.router.sinks.base import RecordWriter, writer_for
from keystone.router.sinks.route import Route
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


def test_an_output_writing_the_stream_s_dead_letters_sends_each_once_beside_its_records(
    spark: SparkSession,
) -> None:
    """The query that writes the stream's dead letters beside its records (router.plan's
    dead_letter_plan): every event the stream cannot read at or past where they are written,
    once, as the stream's; an event the output reads but another output cannot, both."""
    records = _records(
        spark,
        [
            ('{"note": "old", "other": 1}', None, {}),  # not stamped, before `written`: done
            (json.dumps({"note": "kept", "other": 1}), None, _stamped("a")),
            (json.dumps({"note": "dropped", "other": 1}), None, _stamped("b")),
            ('{"note": "kept", "other": "\\udc00"}', None, _stamped("c")),  # others' problem
            ('{"note": "kept\\udc00", "other": 1}', None, _stamped("d")),  # its own too
            ("not json", None, _stamped("e")),
        ],
    )
    spec = load_spec(
        {
            "name": "s1",
            "owner": "team",
            "outputs": [
                {"name": "kk", "sink": {"type": "kafka"}, "filter": "note = 'kept'"},
                {"name": "other", "sink": {"type": "kafka"}, "projection": ["other"]},
            ],
        }
    )
    output = spec.outputs[0]
    own, every = paths_read_by([output]), dead_letter_paths(spec.outputs)
    source = envelope(records, None, own, every)
    meter, stream_meter = Meter(spark, "s1.kk.host"), Meter(spark, "s1._stream.host")
    past = F.col("stream_problem").isNotNull() & (F.col("offset") >= 1)
    frame = routed(
        source,
        output,
        meter,
        key=None,
        dead_letters=stream_meter.dead_lettered(past),
        both=not every <= own,
    )
    writer = writer_for(Route(Settings(), spec, output), meter)
    assert isinstance(writer, RecordWriter)
    rows = writer.frame(frame).collect()

    def said(row: Row) -> dict[str, str]:
        return {h["key"]: h["value"].decode() for h in row["headers"]}

    delivered = sorted(said(r)[names.GUID] for r in rows if r["topic"] == writer.topic)
    letters = {said(r)[names.GUID]: said(r) for r in rows if r["topic"] == "keystone.s1.dlq"}
    assert delivered == ["a", "c"]  # c: its own paths read; the stream cannot read another
    assert sorted(letters) == ["c", "d", "e"]
    assert all(names.DLQ_OUTPUT not in h and h[names.DLQ_REASON] for h in letters.values())
    assert letters["e"][names.DLQ_REASON] == "not JSON"
    counts, stream_counts = meter.take_settled(), stream_meter.take_settled()
    assert (counts.read, counts.matched, counts.delivered, counts.dead_lettered) == (6, 2, 2, 0)
    assert stream_counts.dead_lettered == 3
