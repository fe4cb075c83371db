"""The Elasticsearch sink's pure parts: which answers are retried, and the bulk lines."""

from __future__ import annotations

import itertools
import json

from pyspark.sql import Row

from keystone.router.sinks.elasticsearch.writer import RetryPolicy, _doc, _reason


def test_429_and_5xx_are_retried_other_4xx_are_not() -> None:
    policy = RetryPolicy()
    assert [s for s in (200, 400, 404, 409, 429, 500, 503) if policy.retries(s)] == [429, 500, 503]


def test_backoff_grows_to_its_cap() -> None:
    delays = list(itertools.islice(RetryPolicy(first=1, most=8).delays(), 6))
    assert all(0.5 * d <= delays[i] for i, d in enumerate([1, 2, 4, 8, 8, 8]))
    assert max(delays) <= 8


def test_a_document_is_indexed_by_guid_in_its_days_index_on_one_line() -> None:
    row = Row(guid="g-1", timestamp=1_700_000_000_000, record='{\n "a": 1\n}')
    action, source, end = _doc("plays-search-", row).lines.split(b"\n")
    assert json.loads(action) == {"index": {"_index": "plays-search-2023.11.14", "_id": "g-1"}}
    assert json.loads(source) == {"a": 1} and end == b""


def test_a_multiline_record_is_put_on_one_line_as_written() -> None:
    big = "1" + "0" * 350  # beyond a double, as the proxy and Python accept it
    record = '{\r\n "n": ' + big + ',\n "s": "a\\nb",\n "i": 18446744073709551617\n}'
    _, source, end = _doc("plays-search-", Row(guid="g", timestamp=0, record=record)).lines.split(
        b"\n"
    )
    assert json.loads(source) == json.loads(record) and end == b""
    assert big.encode() in source and b"18446744073709551617" in source


def test_a_refusal_keeps_elasticsearchs_reason() -> None:
    result = {"status": 400, "error": {"type": "mapper_parsing_exception", "reason": "bad"}}
    assert _reason(result) == (
        "elasticsearch refused the document (400): mapper_parsing_exception: bad"
    )


def test_documents_refused_alike_have_one_reason() -> None:
    def refused(guid: str, value: str) -> dict:
        why = (
            f"failed to parse field [code] of type [long] in document with id '{guid}'. "
            f"Preview of field's value: '{value}'"
        )
        return {"status": 400, "error": {"type": "mapper_parsing_exception", "reason": why}}

    reasons = {_reason(refused(g, v)) for g, v in (("g-1", "c1"), ("g-2", "it's 'x'"))}
    assert reasons == {
        "elasticsearch refused the document (400): mapper_parsing_exception: "
        "failed to parse field [code] of type [long]"
    }


def test_a_deleted_documents_line_is_its_action_alone() -> None:
    row = Row(guid="g-1", timestamp=1_700_000_000_000, record=None)
    doc = _doc("plays-search-", row)
    assert doc.action == "delete"
    assert json.loads(doc.lines) == {"delete": {"_index": "plays-search-2023.11.14", "_id": "g-1"}}
