"""The delivery audit's counting without a stack: records read back from Kafka and Keystone
outputs counted per delivery (the first, or a rewind's by its `ks_replay` header), and per
output what is delivered, lost, duplicated, replayed and unexpected. Elasticsearch and Hive
never hold a replay, so every second copy there stays a duplicate."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest

from keystone.contracts import elasticsearch, envelope
from keystone.contracts.elasticsearch import Connection
from keystone.contracts.errors import SinkError
from keystone.contracts.settings import Settings
from keystone.contracts.spec import load_spec
from keystone.loadtest.audit import Route, check
from keystone.router.sinks.elasticsearch import readback as es_readback
from keystone.router.sinks.kafka import readback as kafka_readback
from keystone.router.sinks.kafka.readback import KafkaReader
from keystone.router.sinks.readback import Copy, count_records, reader_for

SPEC = load_spec(
    {
        "name": "lt_audit",
        "owner": "team",
        "outputs": [
            {"name": "clicks", "sink": {"type": "kafka"}},
            {"name": "onwards", "sink": {"type": "keystone", "stream": "lt_side"}},
            {"name": "search", "sink": {"type": "elasticsearch"}},
        ],
    }
)


class Message:
    """A record as confluent-kafka hands it over: key and headers as bytes."""

    def __init__(self, key: str | None, **headers: str) -> None:
        self._key = key.encode() if key is not None else None
        self._headers = [(k, v.encode()) for k, v in headers.items()] or None

    def key(self) -> bytes | None:
        return self._key

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self._headers


def replayed(by: str) -> dict[str, str]:
    return {envelope.REPLAY: by}


def test_kafka_records_are_counted_by_key_and_by_the_rewind_that_wrote_them() -> None:
    records = [
        Message("g1", **{envelope.GUID: "g1"}),
        Message("g1", **{envelope.GUID: "g1"}, **replayed("rw-a")),
        Message("g2"),
        Message("g2"),
        Message("g3", **replayed("rw-a")),
        Message("g3", **replayed("rw-b")),
        Message(None, **{envelope.GUID: "g4"}),  # no key: not an output record
    ]
    assert count_records(records) == Counter(
        {("g1", None): 1, ("g1", "rw-a"): 1, ("g2", None): 2, ("g3", "rw-a"): 1, ("g3", "rw-b"): 1}
    )


def test_keystone_records_are_counted_by_their_guid_header_replays_included() -> None:
    """The target stream's fronting topic, and its Kafka outputs after it: the fronting record's
    headers are carried on, `ks_replay` with them."""
    records = [
        Message(None, **{envelope.GUID: "g1"}),
        Message("other-key", **{envelope.GUID: "g1"}, **replayed("rw-a")),
        Message("g2"),  # no guid header: not one of the stream's events
    ]
    assert count_records(records, by_header=True) == Counter({("g1", None): 1, ("g1", "rw-a"): 1})


def test_the_readers_of_kafka_and_keystone_outputs_count_replays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topics = {
        "lt_audit.clicks": [Message("g1"), Message("g1", **replayed("rw-a"))],
        "keystone.lt_side": [
            Message(None, **{envelope.GUID: "g1"}),
            Message(None, **{envelope.GUID: "g1"}, **replayed("rw-a")),
        ],
    }
    monkeypatch.setattr(kafka_readback, "read_topic", lambda _kafka, topic: topics[topic])
    settings = Settings()
    for name in ("clicks", "onwards"):
        output = SPEC.output(name)
        assert output is not None
        reader = reader_for(settings, SPEC, output, None)
        assert isinstance(reader, KafkaReader)
        assert reader.deliveries() == Counter({("g1", None): 1, ("g1", "rw-a"): 1}), name
        assert reader.copies() == Counter({"g1": 2}), name  # what the demo counts: every copy


class Held:
    """A sink's reader that holds the given copies."""

    where = "a fake sink"

    def __init__(self, deliveries: dict[Copy, int]) -> None:
        self._deliveries = Counter(deliveries)

    def deliveries(self) -> Counter[Copy]:
        return Counter(self._deliveries)

    def copies(self) -> Counter[str]:
        found: Counter[str] = Counter()
        for (guid, _), n in self._deliveries.items():
            found[guid] += n
        return found


def route(name: str, expected: set[str]) -> Route:
    output = SPEC.output(name)
    assert output is not None
    return Route(SPEC, output, set(expected))


def test_replayed_copies_are_counted_apart_from_duplicates() -> None:
    held = Held(
        {
            ("once", None): 1,  # delivered once: nothing else to say
            ("twice", None): 2,  # the first delivery twice (a crash, at least once): a duplicate
            ("and-replayed", None): 1,
            ("and-replayed", "rw-a"): 1,  # a replay, not a duplicate
            ("replay-only", "rw-a"): 1,  # the rewind delivered what the first had not yet
            ("replayed-twice", None): 1,
            ("replayed-twice", "rw-a"): 2,  # the replay's own crash: one replay, one duplicate
            ("two-rewinds", None): 1,
            ("two-rewinds", "rw-a"): 1,
            ("two-rewinds", "rw-b"): 1,  # two rewinds, two replays
            ("not-for-it", None): 1,  # acknowledged, but the output should not have it
            ("not-for-it", "rw-a"): 1,  # and its replay is none of the output's replays
            ("another-run", "rw-a"): 1,  # not acknowledged in this run: not counted
        }
    )
    expected = {"once", "twice", "and-replayed", "replay-only", "replayed-twice", "two-rewinds"}
    acked = {*expected, "lost", "not-for-it"}
    result = check(route("clicks", {*expected, "lost"}), held, acked)
    assert (result.expected, result.delivered, result.lost) == (7, 6, 1)
    assert result.lost_sample == ["lost"]
    assert result.duplicates == 2  # "twice" and "replayed-twice" once each
    assert result.replays == 5  # and-replayed, replay-only, replayed-twice, two-rewinds twice
    assert result.unexpected == 1
    assert result.to_dict()["replays"] == 5 and result.to_dict()["duplicates"] == 2


def test_without_replays_the_counts_are_as_before() -> None:
    held = Held({("a", None): 1, ("b", None): 3})
    result = check(route("clicks", {"a", "b", "c"}), held, {"a", "b", "c"})
    assert (result.delivered, result.lost, result.duplicates, result.replays) == (2, 1, 2, 0)
    assert result.delivery_rate == pytest.approx(2 / 3)


def test_a_second_copy_in_elasticsearch_or_hive_is_a_duplicate_even_after_a_rewind() -> None:
    """Their readers count every copy as the first delivery's: a rewind that added a copy there
    instead of rewriting in place (or resetting) shows as a duplicate, never as a replay."""
    held = Held({("a", None): 2, ("b", None): 1})
    result = check(route("search", {"a", "b"}), held, {"a", "b"})
    assert (result.sink, result.delivered, result.duplicates, result.replays) == (
        "elasticsearch",
        2,
        1,
        0,
    )


def test_elasticsearch_documents_are_all_first_deliveries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Documents carry no header: each is counted as the first delivery's, so an id in two
    indices is two copies of one delivery, a duplicate."""
    pages = [
        {"_scroll_id": "s1", "hits": {"hits": [{"_id": "a"}, {"_id": "b"}]}},
        {"_scroll_id": "s1", "hits": {"hits": [{"_id": "a"}]}},
        {"_scroll_id": "s1", "hits": {"hits": []}},
    ]
    searches = [httpx.Response(200, json=page) for page in pages]
    _serve(monkeypatch, searches)
    output = SPEC.output("search")
    assert output is not None
    reader = reader_for(Settings(), SPEC, output, None)
    assert reader.deliveries() == Counter({("a", None): 2, ("b", None): 1})
    assert not searches  # read to the last page


def _serve(monkeypatch: pytest.MonkeyPatch, searches: list[httpx.Response]) -> None:
    """Elasticsearch answering each search (or scroll) with the next of `searches`."""

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(("_search", "/_search/scroll")) and request.method == "POST":
            return searches.pop(0)
        return httpx.Response(200, json={})

    real = httpx.Client
    monkeypatch.setattr(
        elasticsearch.httpx,
        "Client",
        lambda **kw: real(**kw, transport=httpx.MockTransport(answer)),
    )


def test_an_index_not_yet_searchable_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A daily index the router has just created answers 503 until its shard has started."""
    unready = httpx.Response(503, json={"error": {"type": "search_phase_execution_exception"}})
    page = {"_scroll_id": "s", "hits": {"hits": [{"_id": "a", "_source": {"n": 1}}]}}
    last = {"_scroll_id": "s", "hits": {"hits": []}}
    searches = [unready, httpx.Response(200, json=page), httpx.Response(200, json=last)]
    _serve(monkeypatch, searches)
    monkeypatch.setattr(es_readback.time, "sleep", lambda _: None)
    assert es_readback.search_documents(Connection("http://es"), "s-o-*", source=True) == [
        ("a", {"n": 1})
    ]
    assert not searches


def test_a_refused_search_is_an_error_never_an_empty_sink(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Read as empty, a refusal would make an audit count every event lost."""
    refused = httpx.Response(400, json={"error": {"type": "query_shard_exception"}})
    _serve(monkeypatch, [refused])
    with pytest.raises(SinkError, match=r"400 .*query_shard_exception"):
        es_readback.search_documents(Connection("http://es"), "s-o-*")
