"""A stream's dead letters, as owners see them and send them again.

`DeadLetters.groups` reads the dead-letter topic (`keystone.<stream>.dlq`) and groups its records
by the output that refused them (`_stream`: the stream itself could not read them) and reason,
with counts, first and last times, samples, and how many a redrive has sent again already (the
compacted `<dlq>.redriven` topic). Sending them again is a redrive's (`control.redrives`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from keystone.contracts import envelope, kafka_clients
from keystone.contracts.checkpoints import Offsets
from keystone.contracts.errors import KeystoneError, Unavailable
from keystone.contracts.names import STREAM_LEVEL, dead_letter_topic, redriven_topic
from keystone.contracts.recovery import Selection
from keystone.contracts.settings import Settings
from keystone.control.streams import Streams
from keystone.control.tenancy import Caller
from keystone.router.topics import watermarks

log = logging.getLogger(__name__)

SAMPLES = 3  # per group
PREVIEW_BYTES = 300  # of a sample's event
POLL_SECONDS = 5.0  # the longest wait for the next record of a topic being read to its end


@dataclass(frozen=True)
class Letter:
    """One record of the dead-letter topic."""

    partition: int
    offset: int
    time: float  # when it was dead-lettered (the record's timestamp), epoch s
    output: str  # the output that refused it, or STREAM_LEVEL
    reason: str
    guid: str | None
    preview: str  # the event's first bytes, as text


@dataclass
class Group:
    output: str
    reason: str
    count: int = 0
    redriven: int = 0  # of them, sent again by a redrive already
    first: float = 0.0
    last: float = 0.0
    samples: list[Letter] = field(default_factory=list)


@dataclass(frozen=True)
class Listing:
    groups: list[Group]
    scanned: int
    truncated: bool  # more were there than max_dead_letters_scanned


def read_letters(settings: Settings, stream: str, until: Offsets) -> Iterator[Letter]:
    """The dead-letter topic's records before `until`, partition by partition."""
    topic = dead_letter_topic(stream)
    wanted = {p: o for p, o in until.items() if o > 0}
    if not wanted:
        return
    consumer = _consumer(settings)
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in wanted])
        done: set[int] = set()
        while len(done) < len(wanted):
            message = consumer.poll(POLL_SECONDS)
            if message is None:
                raise Unavailable(f"{topic} was not read to its end", retry_after=5)
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    done.add(message.partition())
                    continue
                raise Unavailable(f"{topic} is not readable: {error}", retry_after=5)
            partition, offset = message.partition(), message.offset()
            if offset >= wanted[partition]:
                done.add(partition)
                consumer.pause([TopicPartition(topic, partition)])
                continue
            headers = {k: v for k, v in reversed(message.headers() or [])}  # the first wins
            yield Letter(
                partition=partition,
                offset=offset,
                time=message.timestamp()[1] / 1000,
                output=_text(headers.get(envelope.DLQ_OUTPUT)) or STREAM_LEVEL,
                reason=_text(headers.get(envelope.DLQ_REASON)) or "(no reason given)",
                guid=_text(headers.get(envelope.GUID)),
                preview=(message.value() or b"")[:PREVIEW_BYTES].decode(errors="replace"),
            )
            if offset + 1 >= wanted[partition]:
                done.add(partition)
                consumer.pause([TopicPartition(topic, partition)])
    except KafkaException as e:
        raise Unavailable(f"{topic} is not readable: {e}", retry_after=5) from e
    finally:
        consumer.close()


def redriven_by(settings: Settings, stream: str) -> dict[tuple[int, int], str]:
    """Per dead letter's position, the redrive that sent it again (none: the topic is empty or
    not there yet)."""
    topic = redriven_topic(stream)
    try:
        ends = {p: end for p, (_, end) in watermarks(settings, topic).items()}
    except KeystoneError:
        return {}  # no redrive yet: the topic is made by the first
    found: dict[tuple[int, int], str] = {}
    if not any(ends.values()):
        return found
    consumer = _consumer(settings)
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        left = {p for p, end in ends.items() if end > 0}
        while left:
            message = consumer.poll(POLL_SECONDS)
            if message is None:
                raise Unavailable(f"{topic} was not read to its end", retry_after=5)
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    left.discard(message.partition())
                continue
            partition, _, offset = (message.key() or b"").decode(errors="replace").partition(":")
            if partition.isdigit() and offset.isdigit():
                found[(int(partition), int(offset))] = (message.value() or b"").decode()
            if message.offset() + 1 >= ends[message.partition()]:
                left.discard(message.partition())
    except KafkaException as e:
        raise Unavailable(f"{topic} is not readable: {e}", retry_after=5) from e
    finally:
        consumer.close()
    return found


def matches(letter: Letter, selection: Selection) -> bool:
    """Whether a selection takes the dead letter (the application's own test is the Spark
    twin of this, `router.jobs.redrive.selected`)."""
    return (
        (selection.reason is None or letter.reason == selection.reason)
        and (selection.output is None or letter.output == selection.output)
        and (selection.start is None or letter.time * 1000 >= selection.start)
        and (selection.end is None or letter.time * 1000 < selection.end)
    )


@dataclass
class Count:
    """What a redrive of some dead letters sends: `events` sent again, per output how many,
    `skipped` (of outputs the stream no longer has), `copies` not sent (the application's
    twin: `router.jobs.redrive.first_copies`)."""

    events: int = 0
    outputs: dict[str, int] = field(default_factory=dict)
    skipped: int = 0
    copies: int = 0

    @classmethod
    def of(cls, letters: list[Letter], outputs: list[str]) -> Count:
        """Of one event (its guid), the first dead letter of each place it failed is sent; one
        of an output is not when the stream's own is among `letters` (that goes to every
        output)."""
        count = cls(outputs=dict.fromkeys(outputs, 0))
        streams = {x.guid for x in letters if x.output == STREAM_LEVEL and x.guid is not None}
        seen: set[tuple[str, str]] = set()  # (guid, output)
        for letter in letters:
            if letter.guid is not None:
                covered = letter.output != STREAM_LEVEL and letter.guid in streams
                if covered or (letter.guid, letter.output) in seen:
                    count.copies += 1
                    continue
                seen.add((letter.guid, letter.output))
            count.events += 1
            if letter.output == STREAM_LEVEL:
                for name in count.outputs:
                    count.outputs[name] += 1
            elif letter.output in count.outputs:
                count.outputs[letter.output] += 1
            else:
                count.skipped += 1
        return count


class DeadLetters:
    def __init__(self, settings: Settings, streams: Streams) -> None:
        self.settings = settings
        self.streams = streams

    def groups(self, caller: Caller, stream: str) -> Listing:
        spec = self.streams.get(caller, stream)
        until = letters_end(self.settings, spec.name)
        redriven = redriven_by(self.settings, spec.name)
        groups: dict[tuple[str, str], Group] = {}
        scanned, truncated = 0, False
        for letter in read_letters(self.settings, spec.name, until):
            if scanned >= self.settings.max_dead_letters_scanned:
                truncated = True
                break
            scanned += 1
            group = groups.setdefault(
                (letter.output, letter.reason),
                Group(letter.output, letter.reason, first=letter.time, last=letter.time),
            )
            group.count += 1
            group.redriven += (letter.partition, letter.offset) in redriven
            group.first, group.last = min(group.first, letter.time), max(group.last, letter.time)
            if len(group.samples) < SAMPLES:
                group.samples.append(letter)
        ordered = sorted(groups.values(), key=lambda g: (-g.count, g.output, g.reason))
        return Listing(ordered, scanned, truncated)


def letters_end(settings: Settings, stream: str) -> Offsets:
    """Where the stream's dead-letter topic ends now, per partition."""
    try:
        return {p: end for p, (_, end) in watermarks(settings, dead_letter_topic(stream)).items()}
    except KeystoneError as e:
        raise Unavailable(f"the dead-letter topic of {stream} is not readable: {e}") from e


def _consumer(settings: Settings) -> Consumer:
    return Consumer(
        kafka_clients.librdkafka(settings)
        | {
            "group.id": f"keystone-control-{uuid.uuid4()}",  # never commits: only assigns
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            # librdkafka's default, said: an exactly-once output's aborted records unseen.
            "isolation.level": "read_committed",
        }
    )


def _text(raw: bytes | None) -> str | None:
    return raw.decode(errors="replace") if raw is not None else None
