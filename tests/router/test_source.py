"""The source seam on the real stack: what a Spark application reads from a fronting topic,
and which records it sends to the dead letters, with why."""

from __future__ import annotations

import json
import uuid
from typing import cast

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from keystone.contracts import kafka_clients
from keystone.contracts.names import fronting_topic
from keystone.contracts.spec import StreamSpec
from keystone.control.provisioner import ensure_topics
from keystone.ingest_proxy.client import DirectProducer
from keystone.router.source import first_headers
from tests.support.stack import Stack


def test_records_become_routable_events_or_dead_letters_with_reasons(stack: Stack) -> None:
    settings = stack.settings
    stream = f"source_{uuid.uuid4().hex[:8]}"
    ensure_topics(settings, StreamSpec(name=stream, owner="team-test", partitions=2))
    sent = DirectProducer(kafka_clients.librdkafka(settings), "player").send(
        stream, [b'{"a": 1, "a": 2}', b'{"n": 5}']
    )
    stamped = {"ks_guid": "g-raw", "ks_ts": "1700000000000"}
    raw = Producer(kafka_clients.librdkafka(settings) | {"acks": "all"})
    for value, extra in (
        (b"[1]", {}),
        (b"nope", {}),
        (b'{"ok": 1}', {"ks_hops": "2"}),
        (b'{"y": 1}', {"ks_ts": "soon"}),
    ):
        raw.produce(fronting_topic(stream), value, headers={**stamped, **extra})
    raw.produce(fronting_topic(stream), b'{"x": 1}')  # no headers at all
    # Kafka keeps a repeated header: the first is the event's (the proxy's), later ones are not;
    # a header without a value is none.
    repeated = [("ks_guid", b"g-first"), ("ks_ts", b"1700000000001"), ("ks_guid", b"g-later")]
    repeated += [("ks_ts", b"1"), ("ks_app", None), ("ks_app", b"later")]
    raw.produce(fronting_topic(stream), b'{"twice": 1}', headers=repeated)
    assert raw.flush(30) == 0

    job = stack.python("-m", "tests.router.spark_jobs", "read-fronting", stream, "a")
    out, errors = job.communicate(timeout=300)
    assert job.returncode == 0, errors[-3000:]
    by_text = {row["text"]: row for row in json.loads(out.strip().splitlines()[-1])}

    first, second = by_text['{"a": 1, "a": 2}'], by_text['{"n": 5}']
    assert [first["guid"], second["guid"]] == sent.guids
    assert first["problem"] is None  # the last of a repeated key wins:
    assert json.loads(first["payload"]) == {"a": {"kind": "number", "json": "2"}}
    assert first["app"] == "player" and first["host"] and first["timestamp"] > 1700000000000
    assert first["hops"] == 0 and by_text['{"ok": 1}']["hops"] == 2
    assert by_text['{"ok": 1}']["problem"] is None
    twice = by_text['{"twice": 1}']
    assert (twice["guid"], twice["timestamp"], twice["app"]) == ("g-first", 1700000000001, None)
    assert twice["problem"] is None
    assert {text: row["problem"] for text, row in by_text.items() if row["problem"]} == {
        "[1]": "not a JSON object",
        "nope": "not JSON",
        '{"y": 1}': "no ks_ts header of epoch milliseconds",
        '{"x": 1}': "no ks_guid header",
    }


@pytest.mark.parametrize("names", [[], ["ks_guid", "ks_guid"], ["ks_guid", ""], ["a,b"]])
def test_header_names_that_cannot_reach_the_jvm_whole_are_refused(names: list[str]) -> None:
    # They reach FirstHeaders comma-separated, each the name of a field of its struct.
    with pytest.raises(ValueError, match="distinct, without commas"):
        first_headers(cast(SparkSession, None), names)
