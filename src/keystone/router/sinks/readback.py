"""Reading an output's sink back, by guid, with every copy counted: what the delivery audit, the
demo and the tests compare with what should have arrived. Each type's reader is in its package
(`keystone.router.sinks.<type>.readback`), named by its descriptor.

Each copy is counted by which delivery wrote it: the first (None), or a rewind's replay (its
id, from the `ks_replay` header; Kafka topics only, the others are rewritten in place or reset
and so never hold a replay beside the first copy).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable
from typing import Protocol

from pyspark.sql import SparkSession

from keystone.contracts import envelope
from keystone.contracts.settings import Settings
from keystone.contracts.spec import OutputSpec, StreamSpec

# A copy of an event: its guid, and the rewind that wrote it again (None: the first delivery).
Copy = tuple[str, str | None]


class SinkReader(ABC):
    """One output's sink, read back whole."""

    def __init__(
        self,
        settings: Settings,
        spec: StreamSpec,
        output: OutputSpec,
        spark: SparkSession | None = None,
    ) -> None:
        """`spark`: for a type whose descriptor says it reads with one (`reads_with_spark`)."""
        self.settings, self.spec, self.output, self.spark = settings, spec, output, spark

    @property
    @abstractmethod
    def where(self) -> str:
        """For people: the topic, index or table."""

    @abstractmethod
    def deliveries(self) -> Counter[Copy]:
        """How many times each guid is in the sink now, per delivery that wrote it."""

    def copies(self) -> Counter[str]:
        """How many times each guid is in the sink now, replays included."""
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


def reader_for(
    settings: Settings, spec: StreamSpec, output: OutputSpec, spark: SparkSession | None
) -> SinkReader:
    """The reader of an output's sink, of the class its type's descriptor names (a type that
    reads with Spark needs `spark`)."""
    kind = output.sink.kind
    if kind.reads_with_spark and spark is None:
        raise ValueError(f"reading a {kind.label} output needs a Spark session")
    cls = kind.load(kind.reader)
    if not issubclass(cls, SinkReader):
        raise TypeError(f"the {kind.label} sink's reader {cls!r} is not a SinkReader")
    return cls(settings, spec, output, spark)
