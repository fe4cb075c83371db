"""Reading every sink of an output back, by guid, with every copy counted: what the delivery
audit and the demo compare with what should have arrived.

    kafka           the output's topic, by record key (the guid)
    keystone        the target stream's fronting topic, by its ks_guid header
    elasticsearch   the output's daily indices, by document _id (the guid)
    hive            the output's table, by its guid column (through Spark SQL)

Each copy is counted by which delivery wrote it: the first (None), or a rewind's replay (its
id, from the `ks_replay` header; Kafka topics only, the others are rewritten in place or reset
and so never hold a replay beside the first copy).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable
from typing import Protocol

import httpx
from pyspark.sql import SparkSession

from keystone.contracts import envelope
from keystone.contracts.errors import SinkError
from keystone.contracts.names import HIVE_DATABASE, fronting_topic, hive_table, index_prefix
from keystone.contracts.settings import Settings
from keystone.contracts.spec import OutputSpec, StreamSpec
from keystone.loadtest.topics import read_topic

_PAGE = 5000  # documents per scroll page

# A copy of an event: its guid, and the rewind that wrote it again (None: the first delivery).
Copy = tuple[str, str | None]


class SinkReader(Protocol):
    where: str  # for people: the topic, index or table

    def copies(self) -> Counter[str]:
        """How many times each guid is in the sink now, replays included."""
        ...

    def deliveries(self) -> Counter[Copy]:
        """How many times each guid is in the sink now, per delivery that wrote it."""
        ...


class _Counted(ABC):
    """`copies` from `deliveries`, for readers that only count the latter."""

    @abstractmethod
    def deliveries(self) -> Counter[Copy]: ...

    def copies(self) -> Counter[str]:
        found: Counter[str] = Counter()
        for (guid, _), n in self.deliveries().items():
            found[guid] += n
        return found


class _Message(Protocol):
    """What counting needs of a confluent-kafka message."""

    def key(self) -> bytes | None: ...

    def headers(self) -> list[tuple[str, bytes | None]] | None: ...


def count_records(messages: Iterable[_Message], by_header: bool = False) -> Counter[Copy]:
    """Each record's guid (its key, or its ks_guid header) and its ks_replay header, if any. A
    Keystone output's target stream carries the fronting record's headers on, so a replay
    reaches its Kafka outputs still labelled."""
    found: Counter[Copy] = Counter()
    for message in messages:
        headers = dict(message.headers() or [])
        raw = headers.get(envelope.GUID) if by_header else message.key()
        if raw is None:
            continue
        replay = headers.get(envelope.REPLAY)
        found[raw.decode(), replay.decode() if replay is not None else None] += 1
    return found


class KafkaReader(_Counted):
    def __init__(self, settings: Settings, topic: str, by_header: bool = False) -> None:
        self.settings, self.topic, self.by_header = settings, topic, by_header
        self.where = f"topic {topic}"

    def deliveries(self) -> Counter[Copy]:
        return count_records(read_topic(self.settings.kafka_bootstrap, self.topic), self.by_header)


class ElasticsearchReader(_Counted):
    def __init__(self, settings: Settings, prefix: str) -> None:
        self.url, self.pattern = settings.elasticsearch_url, f"{prefix}*"
        self.where = f"index {self.pattern}"

    def deliveries(self) -> Counter[Copy]:
        """Every document id (an id is unique within an index, and an event's index is fixed by
        its ingest day, so a copy is a duplicate)."""
        found: Counter[Copy] = Counter()
        found.update((doc_id, None) for doc_id, _ in search_documents(self.url, self.pattern))
        return found


def search_documents(
    url: str, pattern: str, source: bool = False, unready_for: float = 30
) -> list[tuple[str, dict]]:
    """Every document of the indices `pattern` names, refreshed first, through the scroll API:
    (id, source) pairs, the source empty unless asked for. An index the router created a moment
    ago may not be searchable yet (Elasticsearch answers 503 until its shard has started): asked
    again for `unready_for` seconds. Any other refusal raises with Elasticsearch's answer, never
    reads as an empty sink (an audit would count every event lost)."""
    deadline = time.monotonic() + unready_for
    with httpx.Client(base_url=url, timeout=60) as es:
        while True:
            es.post(f"/{pattern}/_refresh", params={"ignore_unavailable": "true"})
            answer = es.post(
                f"/{pattern}/_search",
                params={"scroll": "1m", "ignore_unavailable": "true"},
                json={"size": _PAGE, "_source": source, "sort": ["_doc"]},
            )
            if answer.status_code != 503 or time.monotonic() > deadline:
                break
            time.sleep(1)
        found: list[tuple[str, dict]] = []
        while True:
            if answer.status_code != 200:
                raise SinkError(f"searching {pattern}: {answer.status_code} {answer.text[:500]}")
            page = answer.json()
            hits = page["hits"]["hits"]
            found.extend((hit["_id"], hit.get("_source", {})) for hit in hits)
            if not hits:
                if "_scroll_id" in page:  # none when no index matched
                    es.request("DELETE", "/_search/scroll", json={"scroll_id": page["_scroll_id"]})
                return found
            answer = es.post(
                "/_search/scroll", json={"scroll": "1m", "scroll_id": page["_scroll_id"]}
            )


class HiveReader(_Counted):
    def __init__(self, spark: SparkSession, table: str) -> None:
        self.spark, self.table = spark, f"`{HIVE_DATABASE}`.`{table}`"
        self.where = f"table {HIVE_DATABASE}.{table}"

    def deliveries(self) -> Counter[Copy]:
        if not self.spark.catalog.tableExists(self.table.replace("`", "")):
            return Counter()  # the router has not made it yet
        self.spark.catalog.refreshTable(self.table)  # partitions added by the router meanwhile
        rows = self.spark.sql(f"SELECT guid, count(*) AS n FROM {self.table} GROUP BY guid")
        return Counter({(row.guid, None): row.n for row in rows.collect()})


def reader_for(
    settings: Settings, spec: StreamSpec, output: OutputSpec, spark: SparkSession | None
) -> SinkReader:
    """The reader of an output's sink; Hive needs a Spark session."""
    sink = output.sink
    if sink.type == "kafka":
        return KafkaReader(settings, spec.kafka_topics()[output.name])
    if sink.type == "keystone":
        return KafkaReader(settings, fronting_topic(sink.stream), by_header=True)
    if sink.type == "elasticsearch":
        return ElasticsearchReader(settings, index_prefix(spec.name, output.name))
    if spark is None:
        raise ValueError("reading a Hive output needs a Spark session")
    return HiveReader(spark, hive_table(spec.name, output.name))
