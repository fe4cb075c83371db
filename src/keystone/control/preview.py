"""Preview: an output's filter and projection run over the last events of the stream's fronting
topic, with the Python evaluator (which agrees with the router's Spark compiler on every input),
so an owner sees what an output would deliver before deploying it."""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from keystone.contracts import envelope, kafka_clients
from keystone.contracts.errors import ExpressionError, InvalidSpec, Unavailable
from keystone.contracts.limits import Limits
from keystone.contracts.names import fronting_topic
from keystone.contracts.schema import check_budget, parse_schema, schema_problems
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.control.validation import expression_problem
from keystone.router.lang.ast import Call
from keystone.router.lang.evaluate import matches, project, read_event
from keystone.router.lang.parser import parse_filter, parse_projection


@dataclass(frozen=True)
class Event:
    value: bytes
    headers: dict[str, str]


@dataclass
class Preview:
    scanned: int = 0  # events read from the topic
    matched: int = 0
    unreadable: int = 0  # events the router would dead-letter instead
    # {guid, timestamp, event, record}: the payload before, the output's record after
    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[dict[str, Any]] = field(default_factory=list)  # why events were unreadable
    computed: list[str] = field(default_factory=list)  # record fields a function made


def preview(
    settings: Settings,
    spec: StreamSpec,
    filter_text: str | None,
    projection_text: list[str],
    limit: int,
    limits: Limits | None,
    key: bytes,
) -> Preview:
    """What the output would deliver of the stream's last `limit` events (at most), each event
    beside its record (hashed, masked and computed fields as the router writes them, with the
    stream's `key`). A draft is parsed with `limits`, as a new output would be; an output's
    stored filter and projection with None (they passed when stored: lowering a limit leaves
    them previewable)."""
    expression, projection = _compiled(filter_text, projection_text, limits)
    schema = parse_schema(spec.avro_schema) if spec.avro_schema else None
    result = Preview(computed=[c.name for c in projection.columns if isinstance(c.source, Call)])
    for event in recent_events(settings, spec.name, limit):
        result.scanned += 1
        why, payload = _readable(event, schema)
        if why is not None:
            result.unreadable += 1
            if len(result.problems) < 20:
                result.problems.append({"guid": event.headers.get(envelope.GUID), "reason": why})
            continue
        meta = _metadata(event.headers)
        if matches(expression, payload, meta, key):
            result.matched += 1
            result.records.append(
                {
                    "guid": meta["guid"],
                    "timestamp": meta["timestamp"],
                    "event": _shown(payload),
                    "record": _shown(project(projection, payload, meta, key)),
                }
            )
    return result


def _shown(value: Any) -> Any:
    """A value as JSON can answer it: a number beyond a double (`1e400`, which Python reads as
    infinite) as the string "Infinity" (the router writes the event's own text for it)."""
    if isinstance(value, float) and math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {k: _shown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shown(v) for v in value]
    return value


def _compiled(filter_text: str | None, projection_text: list[str], limits: Limits | None):
    problems = []
    expression = projection = None
    try:
        expression = parse_filter(filter_text, limits=limits) if filter_text else None
    except ExpressionError as e:
        problems.append(expression_problem("filter", e))
    try:
        projection = parse_projection(projection_text, limits=limits)
    except ExpressionError as e:
        problems.append(expression_problem("projection", e))
    if problems:
        raise InvalidSpec("the filter or projection does not parse", problems=problems)
    return expression, projection


def _readable(event: Event, schema: Any) -> tuple[str | None, dict]:
    """Why the router would dead-letter the event (as the router says it), or its payload."""
    try:
        payload = read_event(event.value)
    except ValueError:
        return "not JSON", {}
    if not isinstance(payload, dict):
        return "not a JSON object", {}
    if envelope.GUID not in event.headers:
        return f"no {envelope.GUID} header", {}
    if not event.headers.get(envelope.TIMESTAMP, "").isdigit():
        return f"no {envelope.TIMESTAMP} header of epoch milliseconds", {}
    budget = check_budget(len(event.value))
    if schema is not None and (problems := schema_problems(payload, schema, budget)):
        return f"does not match the stream's schema at {problems[0]['path']}", {}
    return None, payload


def _metadata(headers: dict[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {
        name: headers[header] for name, header in envelope.METADATA.items() if header in headers
    }
    meta["timestamp"] = int(meta["timestamp"])
    return meta


def recent_events(settings: Settings, stream: str, limit: int, timeout: float = 10) -> list[Event]:
    """The last `limit` events of the fronting topic, oldest first: the newest `limit` of each
    partition, merged by ingest time."""
    topic = fronting_topic(stream)
    consumer = Consumer(
        kafka_clients.librdkafka(settings)
        | {
            "group.id": f"keystone-preview-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            # librdkafka's default, said: an exactly-once output's aborted records unseen.
            "isolation.level": "read_committed",
        }
    )
    try:
        try:
            meta = consumer.list_topics(topic, timeout=5).topics[topic]
            if meta.error is not None:
                raise KafkaException(meta.error)
            assigned = []
            for p in meta.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
                if high > low:
                    assigned.append(TopicPartition(topic, p, max(low, high - limit)))
        except KafkaException as e:
            raise Unavailable(f"Kafka did not answer for {topic}: {e}", retry_after=2) from e
        if not assigned:
            return []
        consumer.assign(assigned)
        events, pending = [], {tp.partition for tp in assigned}
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(message.partition())
                continue
            headers: dict[str, str] = {}
            for key, value in message.headers() or []:  # the first of a repeated header wins
                headers.setdefault(key, (value or b"").decode(errors="replace"))
            events.append((message.timestamp()[1], Event(message.value() or b"", headers)))
        events.sort(key=lambda pair: pair[0])
        return [e for _, e in events[-limit:]]
    finally:
        consumer.close()
