"""The delivery audit: for every output of a stream (and, through Keystone sinks, of the streams
it routes into), which acknowledged events should have arrived, computed with the Python
evaluator from the events as the fronting topic holds them, and what every sink holds: per
output delivered, lost, duplicated, replayed and unexpected, and the delivery rate.

A rewind writes the events of its period again: Elasticsearch in place and Hive after removing
them, so a second copy there is a duplicate whatever caused it; Kafka and Keystone outputs beside
the first copies, each labelled with the rewind's id (`ks_replay`). Those are replays, counted
apart: a duplicate is a second copy from the same delivery (the first, or one rewind's).

It reads the fronting topic rather than trusting what was sent: an acknowledged event missing
there is lost at ingest, and the router routes exactly the bytes and headers it holds.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from keystone.contracts import envelope, fronting, kafka_clients
from keystone.contracts.names import fronting_topic
from keystone.contracts.registry import RegistryReader
from keystone.contracts.schema import parse_schema, schema_problems
from keystone.contracts.settings import Settings
from keystone.contracts.spec import OutputSpec, StreamSpec
from keystone.router.lang.evaluate import matches, project
from keystone.router.lang.parser import parse_filter, parse_projection
from keystone.router.sinks.readback import SinkReader, reader_for
from keystone.router.spark import spark_session
from keystone.router.topics import iter_topic


@dataclass
class Route:
    """One output to audit: of the stream loaded, or of a stream it routes into."""

    stream: StreamSpec
    output: OutputSpec
    expected: set[str] = field(default_factory=set)

    @property
    def name(self) -> str:
        return f"{self.stream.name}.{self.output.name}"


@dataclass
class OutputAudit:
    output: str  # stream.output
    sink: str
    guarantee: str  # what it runs under: at_least_once or exactly_once
    where: str
    expected: int
    delivered: int
    lost: int
    duplicates: int  # copies beyond the first of expected events, per delivery
    replays: int  # expected events a rewind wrote again, once per rewind (Kafka, Keystone)
    unexpected: int  # events of this run that the output should not have delivered
    lost_sample: list[str]
    duplicate_sample: list[str]  # guids of expected events held more than once

    @property
    def delivery_rate(self) -> float:
        return self.delivered / self.expected if self.expected else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "delivery_rate": round(self.delivery_rate, 6)}


@dataclass
class Audit:
    acknowledged: int
    missing_at_ingest: int  # acknowledged, but not in the fronting topic
    outputs: list[OutputAudit]
    drained: bool
    waited_seconds: float

    @property
    def lossless(self) -> bool:
        return self.missing_at_ingest == 0 and all(o.lost == 0 for o in self.outputs)


def routes(spec: StreamSpec, streams: dict[str, StreamSpec]) -> list[Route]:
    """Every output an event of `spec` can reach: its own, and the outputs of the streams its
    Keystone sinks deliver to (control refuses cycles, so this ends)."""
    found = []
    for output in spec.outputs:
        found.append(Route(spec, output))
        if output.sink.into_stream is not None:
            found += routes(streams[output.sink.into_stream], streams)
    return found


def hashing_keys(settings: Settings, names: set[str]) -> dict[str, bytes | None]:
    """The streams' keys for `hash`, from the registry (the audit sees what the router sees:
    a Keystone route's projection may hash what the next stream's filter reads)."""
    registry = RegistryReader.connect(settings)
    try:
        return {name: registry.hashing_key(name) for name in names}
    finally:
        registry.close()


def expect(settings: Settings, spec: StreamSpec, audited: list[Route], acked: set[str]) -> int:
    """Fills each route's expected guids from the fronting topic; returns how many acknowledged
    events are missing from it."""
    by_stream: dict[str, list[Route]] = {}
    for route in audited:
        by_stream.setdefault(route.stream.name, []).append(route)
    compiled = {
        id(r): (
            parse_filter(r.output.filter) if r.output.filter else None,
            parse_projection(r.output.projection),
        )
        for r in audited
    }
    schemas = {
        name: parse_schema(rs[0].stream.avro_schema)
        for name, rs in by_stream.items()
        if rs[0].stream.avro_schema
    }
    keys = hashing_keys(settings, set(by_stream))

    def arrive(stream: str, payload: dict, meta: dict[str, Any]) -> None:
        """An event arriving in `stream`: which of its outputs take it, and onwards."""
        schema = schemas.get(stream)
        if schema is not None and schema_problems(payload, schema):
            return  # that stream dead-letters it
        for route in by_stream.get(stream, []):
            expr, projection = compiled[id(route)]
            key = keys[stream]
            if matches(expr, payload, meta, key):
                route.expected.add(meta["guid"])
                target = route.output.sink.into_stream
                if target is not None:
                    record = project(projection, payload, meta, key)
                    arrive(target, record, meta)

    seen = set()
    records = (  # every fronting cluster's: an event is where it was written
        message
        for cluster in fronting.clusters(settings)
        for message in iter_topic(
            kafka_clients.librdkafka(cluster.connect(settings)), fronting_topic(spec.name)
        )
    )
    for message in records:
        headers: dict[str, str] = {}
        for key, value in message.headers() or []:
            headers.setdefault(key, (value or b"").decode())
        guid = headers.get(envelope.GUID)
        if guid not in acked or guid in seen:
            continue
        seen.add(guid)
        meta = {name: headers[h] for name, h in envelope.METADATA.items() if h in headers}
        meta["timestamp"] = int(meta["timestamp"])
        payload = json.loads(message.value())
        if isinstance(payload, dict):
            arrive(spec.name, payload, meta)
    return len(acked - seen)


def check(route: Route, reader: SinkReader, acked: set[str]) -> OutputAudit:
    """What the output holds of what it should: an event is delivered by any copy, the first or
    a replay (a rewind may deliver what the first delivery had not yet)."""
    copies: Counter[str] = Counter()
    duplicates = replays = 0
    repeated: set[str] = set()
    for (guid, rewind), n in reader.deliveries().items():
        copies[guid] += n
        if guid in route.expected:
            duplicates += n - 1
            replays += 1 if rewind is not None else 0
            if n > 1:
                repeated.add(guid)
    found = {g for g in route.expected if copies[g] > 0}
    lost = route.expected - found
    return OutputAudit(
        output=route.name,
        sink=route.output.sink.type,
        guarantee=route.output.guarantee,
        where=reader.where,
        expected=len(route.expected),
        delivered=len(found),
        lost=len(lost),
        duplicates=duplicates,
        replays=replays,
        unexpected=sum(1 for g in copies if g in acked and g not in route.expected),
        lost_sample=sorted(lost)[:10],
        duplicate_sample=sorted(repeated)[:10],
    )


Progress = Callable[[list[OutputAudit]], None]


def audit(
    settings: Settings,
    spec: StreamSpec,
    streams: dict[str, StreamSpec],
    acked: list[str],
    drain_timeout: float,
    progress: Progress,
) -> Audit:
    """Waits (at most `drain_timeout`) until every output holds every event it should, then
    says what each holds; `drained` is False if the wait ran out first."""
    acked_set = set(acked)
    audited = routes(spec, streams)
    missing = expect(settings, spec, audited, acked_set)
    with_spark = any(r.output.sink.kind.reads_with_spark for r in audited)
    spark = spark_session(settings, "keystone-audit", quiet=True) if with_spark else None
    try:
        readers = [reader_for(settings, r.stream, r.output, spark) for r in audited]
        started = time.monotonic()
        while True:
            results = [check(r, rd, acked_set) for r, rd in zip(audited, readers, strict=True)]
            progress(results)
            drained = all(o.lost == 0 for o in results)
            waited = time.monotonic() - started
            if drained or waited > drain_timeout:
                return Audit(len(acked_set), missing, results, drained, round(waited, 1))
            time.sleep(5)
    finally:
        if spark is not None:
            spark.stop()
