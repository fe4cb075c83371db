"""`elasticsearch`: bulk index requests, `_id` = guid, one index per day of ingest time.

A replayed batch overwrites the same documents, so a crash (or a rewind) leaves no duplicates.
Spark tasks do the writes (`BulkWriter` is what each task runs): a request that fails as a
whole (Elasticsearch unreachable, 429, 5xx) and each document answered 429 or 5xx are retried
with backoff, for as long as it takes; a document Elasticsearch refuses for good (a mapping
conflict, any other 4xx) goes to the dead-letter topic with Elasticsearch's reason. Nothing is
given up silently.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
import orjson
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from keystone.contracts import kafka_clients
from keystone.contracts.elasticsearch import Connection
from keystone.contracts.errors import SinkError
from keystone.contracts.sinks import ElasticsearchSink
from keystone.router.counts import Outcome, latency_counts, merge_counts
from keystone.router.deadletter import DeadLetters
from keystone.router.sinks.base import BatchWriter, TakesOut

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """429 and 5xx are worth retrying, after a growing, jittered delay; other 4xx are not."""

    first: float = 0.25
    most: float = 30.0

    def retries(self, status: int) -> bool:
        return status == 429 or status >= 500

    def delays(self) -> Iterator[float]:
        delay = self.first
        while True:
            yield delay * random.uniform(0.5, 1.0)
            delay = min(self.most, delay * 2)


@dataclass(frozen=True)
class Doc:
    row: Row
    lines: bytes  # the action line and the source line of a bulk request
    action: str = "index"


def _doc(prefix: str, row: Row) -> Doc:
    day = datetime.fromtimestamp(row.timestamp / 1000, UTC).strftime("%Y.%m.%d")
    target = {"_index": f"{prefix}{day}", "_id": row.guid}
    if row.record is None:  # an event the output leaves out now: its document goes
        return Doc(row, orjson.dumps({"delete": target}) + b"\n", "delete")
    action = orjson.dumps({"index": target})
    source = row.record.encode()
    if b"\n" in source or b"\r" in source:  # a bulk source must be one line
        # A JSON string cannot hold a raw line break, so these are whitespace between tokens:
        # blanked, the text means exactly what it meant (numbers of any size kept as written).
        source = source.replace(b"\n", b" ").replace(b"\r", b" ")
    return Doc(row, action + b"\n" + source + b"\n")


# What Elasticsearch says of one document in particular: its id and a preview of its value.
_DOCUMENT_SPECIFIC = re.compile(r" in document with id '[^']*'|\. Preview of field's value: .*$")


def _reason(result: dict) -> str:
    """Elasticsearch's reason, without what names the document (its id, its value: the dead
    letter holds both): the same for every document refused alike, so dead letters group by
    it and a redrive can select them by it."""
    error = result.get("error") or {}
    if isinstance(error, dict):
        reason = _DOCUMENT_SPECIFIC.sub("", str(error.get("reason", "")))
        detail = f"{error.get('type', 'error')}: {reason}"
    else:
        detail = str(error)
    return f"elasticsearch refused the document ({result.get('status')}): {detail}"[:1000]


@dataclass(frozen=True)
class BulkWriter:
    """What one Spark task runs over its rows; yields one summary of what it did."""

    es: Connection
    prefix: str
    dead_letters: DeadLetters
    policy: RetryPolicy = RetryPolicy()
    max_docs: int = 2000
    max_bytes: int = 5 * 1024 * 1024

    def __call__(self, rows: Iterable[Row]) -> Iterator[dict]:
        summary: dict = {"delivered": 0, "dead_lettered": 0, "removed": 0}
        # The Python worker's one client, kept from task to task (Spark reuses its workers).
        client = self.es.shared()
        for chunk in self._chunks(rows):
            merge_counts(summary, self.write(client, chunk))
        yield summary

    def _chunks(self, rows: Iterable[Row]) -> Iterator[list[Doc]]:
        chunk: list[Doc] = []
        size = 0
        for row in rows:
            doc = _doc(self.prefix, row)
            chunk.append(doc)
            size += len(doc.lines)
            if len(chunk) >= self.max_docs or size >= self.max_bytes:
                yield chunk
                chunk, size = [], 0
        if chunk:
            yield chunk

    def write(self, client: httpx.Client, docs: list[Doc]) -> dict:
        pending, refused, delivered = docs, [], []
        removed = 0
        delays = self.policy.delays()
        while pending:
            try:
                response = client.post(
                    "/_bulk",
                    content=b"".join(d.lines for d in pending),
                    headers={"Content-Type": "application/x-ndjson"},
                    timeout=60,
                )
            except httpx.TransportError as e:
                self._wait(delays, f"Elasticsearch unreachable ({e})")
                continue
            if self.policy.retries(response.status_code):
                self._wait(delays, f"Elasticsearch answered {response.status_code}")
                continue
            if response.status_code >= 300:
                raise SinkError(
                    f"Elasticsearch refused a bulk request ({response.status_code}): "
                    f"{response.text[:500]}"
                )
            now = time.time()
            retry = []
            for doc, item in zip(pending, response.json()["items"], strict=True):
                result = item[doc.action]
                if doc.action == "delete" and result["status"] in (200, 404):
                    removed += 1  # gone, or never there
                elif result["status"] < 300:
                    # A replayed event's latency is the replay's, not delivery's: left out.
                    replayed = doc.row.replay is not None
                    delivered.append(None if replayed else now - doc.row.timestamp / 1000)
                elif self.policy.retries(result["status"]):
                    retry.append(doc)
                else:
                    refused.append((doc.row, _reason(result)))
            pending = retry
            if pending:
                self._wait(delays, f"{len(pending)} documents answered 429 or 5xx")
        self.dead_letters.send([(r.key, r.value, r.headers, reason) for r, reason in refused])
        latencies = [seconds for seconds in delivered if seconds is not None]
        return {
            "delivered": len(delivered),
            "dead_lettered": len(refused),
            "removed": removed,
            **latency_counts(latencies),
        }

    @staticmethod
    def _wait(delays: Iterator[float], why: str) -> None:
        delay = next(delays)
        log.warning("%s; retrying in %.1f s", why, delay)
        time.sleep(delay)


BULK_COLUMNS = ("key", "value", "headers", "guid", "timestamp", "replay", "record")


class ElasticsearchWriter(BatchWriter, TakesOut):
    @property
    def prefix(self) -> str:
        sink = self.route.output.sink
        assert isinstance(sink, ElasticsearchSink), "an Elasticsearch output's writer"
        return sink.index_prefix(self.route.stream.name, self.route.output.name)

    def write_batch(self, frame: DataFrame, batch_id: int) -> Outcome:
        return self._bulk(frame.select(*BULK_COLUMNS))

    def write_replay_taking_out(
        self, routed: DataFrame, left_out: DataFrame, tag: str
    ) -> Outcome | None:
        """The slice's documents written again by guid, and those of the events the output
        leaves out now deleted (a fixed filter's backfill leaves the range as the fixed
        output gives it), in the same bulk requests."""
        gone = left_out.select(
            *(F.lit(None).alias(c) for c in ("key", "value", "headers")),
            "guid",
            "timestamp",
            F.lit(None).cast("string").alias("replay"),
            F.lit(None).cast("string").alias("record"),
        )
        rows = self.frame(routed).select(*BULK_COLUMNS)
        return self._bulk(rows.unionByName(gone, allowMissingColumns=False))

    def _bulk(self, rows: DataFrame) -> Outcome:
        route = self.route
        writer = BulkWriter(
            es=Connection.of(route.settings),
            prefix=self.prefix,
            dead_letters=DeadLetters(
                kafka_clients.librdkafka(route.settings),
                route.dead_letter_topic,
                route.output.name,
                route.settings.max_record_bytes,
            ),
        )
        summary: dict = {"delivered": 0, "dead_lettered": 0, "removed": 0}
        for part in rows.rdd.mapPartitions(writer).collect():
            merge_counts(summary, part)
        return Outcome(
            delivered=summary.pop("delivered"),
            dead_lettered=summary.pop("dead_lettered"),
            removed=summary.pop("removed"),
            latency=summary,
        )
