"""What every sink type is made of: its config (`Sink`, what a stream spec's `outputs[].sink`
says, checked without I/O) and its descriptor (`SinkKind`), which answers every question the
rest of the project asks of a type, so that nothing else switches on it.

A type's runtime parts live in its own package, `keystone.router.sinks.<type>`: a provisioner
that makes ready what it writes to without Spark (control and the router run it), the Spark
writer the router attaches to the output's query, and the reader that reads the sink back by
guid (the delivery audit, the demo, the tests). The descriptor names them by module and class
and they are imported only when asked for (`SinkKind.load`), so that control, which must never
load Spark, can ask a type everything else.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from enum import StrEnum
from importlib import import_module
from typing import Annotated, ClassVar, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, PrivateAttr

from keystone.contracts.names import check_stream_name

StreamName = Annotated[str, AfterValidator(check_stream_name)]
Mode = Literal["realtime", "microbatch"]


class Replay(StrEnum):
    """What a sink does with records written again (a rewind's replay, a backfill)."""

    IDEMPOTENT = "idempotent"  # the same record overwrites itself (by guid)
    RESETTABLE = "resettable"  # the replayed batches' earlier rows are removed, then rewritten
    APPEND_ONLY = "append-only"  # written again beside the first copies, labelled `ks_replay`


@dataclass(frozen=True)
class TargetField:
    """The one field of a type's config that the web form asks for beside the type."""

    name: str  # the config's field: `topic`, `stream`
    required: bool
    hint: str  # what to give, for the form's placeholder


@dataclass(frozen=True)
class SinkKind:
    """One sink type's facts, stated once."""

    label: str  # for people: "Kafka", "Elasticsearch"
    replay: Replay
    modes: tuple[Mode, ...]  # the delivery modes it takes, its default first
    realtime: bool  # Spark writes it itself, so a realtime output runs under Real-time Mode
    # Its runtime parts, "module:Class", imported only by `load`.
    provisioner: str
    writer: str
    reader: str
    reads_with_spark: bool = False  # its reader needs a Spark session
    target_field: TargetField | None = None
    exact_note: str = ""  # how it holds an event written again, where it holds it once

    @property
    def exact(self) -> bool:
        """Whether it holds each event once whatever is replayed into it (an append-only sink
        is exactly once only in Kafka transactions, when an output's delivery asks for it)."""
        return self.replay is not Replay.APPEND_ONLY

    @staticmethod
    def load(part: str) -> type:
        """A runtime part's class, imported now."""
        module, _, name = part.partition(":")
        return getattr(import_module(module), name)


class Sink(BaseModel):
    """A sink's config: a subclass per type, with a `type` literal and its `kind`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: ClassVar[SinkKind]
    # Set on the copy a shadow writes with (`shadowed`), never by a spec: its targets are then
    # the shadow's (`contracts.names.shadow_topic`...), each method below says which it gives.
    _shadow: bool = PrivateAttr(False)

    def shadowed(self) -> Self:
        """This config as a shadow of its output writes with: the same, into the shadow's
        targets."""
        copy = self.model_copy()
        copy._shadow = True
        return copy

    @property
    def shadow(self) -> bool:
        return self._shadow

    def problems(self, stream: str) -> list[str]:
        """What is wrong with this config in stream `stream`, beyond its model; no I/O."""
        return []

    @abstractmethod
    def target(self, stream: str, output: str) -> str:
        """Where the output's records go, for people: `topic playback.search`."""

    def owned_topic(self, stream: str, output: str) -> str | None:
        """The Kafka topic the output writes to and its owner holds (none: it writes none, or
        one that is another stream's)."""
        return None

    def record_topic(self, stream: str, output: str) -> str | None:
        """The Kafka topic the output's records go to, if they go to one."""
        return self.owned_topic(stream, output)

    def table(self, stream: str, output: str) -> str | None:
        """The Hive table (within `HIVE_DATABASE`) the output writes, if it writes one."""
        return None

    @property
    def into_stream(self) -> str | None:
        """The stream whose fronting topic the output delivers into, if any."""
        return None
