"""An Elasticsearch output read back: its daily indices' document ids (the guids)."""

from __future__ import annotations

import time
from collections import Counter

from keystone.contracts.elasticsearch import Connection
from keystone.contracts.errors import SinkError
from keystone.contracts.sinks import ElasticsearchSink
from keystone.router.sinks.readback import Copy, SinkReader

_PAGE = 5000  # documents per scroll page


class ElasticsearchReader(SinkReader):
    @property
    def pattern(self) -> str:
        sink = self.output.sink
        assert isinstance(sink, ElasticsearchSink), "an Elasticsearch output's reader"
        return f"{sink.index_prefix(self.spec.name, self.output.name)}*"

    @property
    def where(self) -> str:
        return f"index {self.pattern}"

    def deliveries(self) -> Counter[Copy]:
        """Every document id (an id is unique within an index, and an event's index is fixed by
        its ingest day, so a copy is a duplicate)."""
        found: Counter[Copy] = Counter()
        found.update(
            (doc_id, None)
            for doc_id, _ in search_documents(Connection.of(self.settings), self.pattern)
        )
        return found


def search_documents(
    connection: Connection, pattern: str, source: bool = False, unready_for: float = 30
) -> list[tuple[str, dict]]:
    """Every document of the indices `pattern` names, refreshed first, through the scroll API:
    (id, source) pairs, the source empty unless asked for. An index the router created a moment
    ago may not be searchable yet (Elasticsearch answers 503, or some shards fail, until its
    shard has started): asked again for `unready_for` seconds. Any other refusal, or a later
    page some shards failed, raises with Elasticsearch's answer, never reads as an empty sink
    or a short one (an audit would count events lost)."""
    deadline = time.monotonic() + unready_for
    with connection.client() as es:

        def close(page: dict) -> None:
            if "_scroll_id" in page:  # none when no index matched
                es.request("DELETE", "/_search/scroll", json={"scroll_id": page["_scroll_id"]})

        while True:
            es.post(f"/{pattern}/_refresh", params={"ignore_unavailable": "true"})
            answer = es.post(
                f"/{pattern}/_search",
                params={"scroll": "1m", "ignore_unavailable": "true"},
                json={"size": _PAGE, "_source": source, "sort": ["_doc"]},
            )
            partial = answer.status_code == 200 and _failed_shards(answer.json())
            if (answer.status_code != 503 and not partial) or time.monotonic() > deadline:
                break
            if partial:
                close(answer.json())
            time.sleep(1)
        found: list[tuple[str, dict]] = []
        while True:
            if answer.status_code != 200:
                raise SinkError(f"searching {pattern}: {answer.status_code} {answer.text[:500]}")
            page = answer.json()
            if failures := _failed_shards(page):  # a partial answer would read as missing
                close(page)
                raise SinkError(f"searching {pattern}: shards failed: {failures}")
            hits = page["hits"]["hits"]
            found.extend((hit["_id"], hit.get("_source", {})) for hit in hits)
            if not hits:
                close(page)
                return found
            answer = es.post(
                "/_search/scroll", json={"scroll": "1m", "scroll_id": page["_scroll_id"]}
            )


def _failed_shards(page: dict) -> list | None:
    """What the shards that failed said, if any did."""
    shards = page.get("_shards", {})
    return (shards.get("failures") or ["(no reason given)"]) if shards.get("failed") else None
