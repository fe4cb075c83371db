"""Reading every sink of an output back, by guid, with every copy counted: what the delivery
audit and the demo compare with what should have arrived.

    kafka           the output's topic, by record key (the guid)
    keystone        the target stream's fronting topic, by its ks_guid header
    elasticsearch   the output's daily indices, by document _id (the guid)
    hive            the output's table, by its guid column (through Spark SQL)
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol

import httpx
from pyspark.sql import SparkSession

from keystone.contracts import envelope
from keystone.contracts.names import HIVE_DATABASE, fronting_topic, hive_table, index_prefix
from keystone.contracts.settings import Settings
from keystone.contracts.spec import OutputSpec, StreamSpec
from keystone.loadtest.topics import read_topic


class SinkReader(Protocol):
    where: str  # for people: the topic, index or table

    def copies(self) -> Counter[str]:
        """How many times each guid is in the sink now."""
        ...


class KafkaReader:
    def __init__(self, settings: Settings, topic: str, by_header: bool = False) -> None:
        self.settings, self.topic, self.by_header = settings, topic, by_header
        self.where = f"topic {topic}"

    def copies(self) -> Counter[str]:
        found: Counter[str] = Counter()
        for message in read_topic(self.settings.kafka_bootstrap, self.topic):
            if self.by_header:
                headers = dict(message.headers() or [])
                guid = headers.get(envelope.GUID)
                if guid is not None:
                    found[guid.decode()] += 1
            elif message.key() is not None:
                found[message.key().decode()] += 1
        return found


class ElasticsearchReader:
    PAGE = 5000

    def __init__(self, settings: Settings, prefix: str) -> None:
        self.url, self.pattern = settings.elasticsearch_url, f"{prefix}*"
        self.where = f"index {self.pattern}"

    def copies(self) -> Counter[str]:
        """Every document id, through the scroll API (an id is unique within an index, and an
        event's index is fixed by its ingest day, so a copy is a duplicate)."""
        found: Counter[str] = Counter()
        with httpx.Client(base_url=self.url, timeout=60) as es:
            es.post(f"/{self.pattern}/_refresh")
            page = es.post(
                f"/{self.pattern}/_search",
                params={"scroll": "1m", "ignore_unavailable": "true"},
                json={"size": self.PAGE, "_source": False, "sort": ["_doc"]},
            ).json()
            while page.get("hits", {}).get("hits"):
                found.update(hit["_id"] for hit in page["hits"]["hits"])
                page = es.post(
                    "/_search/scroll", json={"scroll": "1m", "scroll_id": page["_scroll_id"]}
                ).json()
            if "_scroll_id" in page:
                es.request("DELETE", "/_search/scroll", json={"scroll_id": page["_scroll_id"]})
        return found


class HiveReader:
    def __init__(self, spark: SparkSession, table: str) -> None:
        self.spark, self.table = spark, f"`{HIVE_DATABASE}`.`{table}`"
        self.where = f"table {HIVE_DATABASE}.{table}"

    def copies(self) -> Counter[str]:
        if not self.spark.catalog.tableExists(self.table.replace("`", "")):
            return Counter()  # the router has not made it yet
        self.spark.catalog.refreshTable(self.table)  # partitions added by the router meanwhile
        rows = self.spark.sql(f"SELECT guid, count(*) AS n FROM {self.table} GROUP BY guid")
        return Counter({row.guid: row.n for row in rows.collect()})


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
