"""One output of one stream, as its sink's parts see it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from keystone.contracts.checkpoints import checkpoint_dir
from keystone.contracts.fronting import FrontingCluster, query_key
from keystone.contracts.names import dead_letter_topic, shadow_dead_letter_topic
from keystone.contracts.recovery import Rewind
from keystone.contracts.settings import Settings
from keystone.contracts.shadows import Shadow
from keystone.contracts.spec import OutputSpec, StreamSpec


@dataclass(frozen=True)
class Route:
    settings: Settings
    stream: StreamSpec
    output: OutputSpec
    rewind: Rewind | None = None  # the output's latest: its checkpoint generation and replay
    cluster: FrontingCluster | None = None  # the fronting cluster its query reads (None: home)
    # A shadow's id (`contracts.shadows.Shadow`), for the query writing the output's shadow:
    # its key, and its `output`'s sink config is `shadowed`.
    shadow: str | None = None

    @classmethod
    def of_shadow(cls, settings: Settings, stream: StreamSpec, shadow: Shadow) -> Route:
        """The route of an output's shadow: its version, into the shadow's targets."""
        version = shadow.version.model_copy(update={"sink": shadow.version.sink.shadowed()})
        return cls(settings, stream, version, shadow=shadow.id)

    @property
    def key(self) -> str:
        """Its query's key on its cluster (`contracts.fronting.query_key`); a shadow's, its id."""
        return self.shadow or query_key(self.output.name, self.cluster)

    @property
    def dead_letter_topic(self) -> str:
        """Where its sink puts the records it cannot take: the stream's dead-letter topic, or a
        shadow's own."""
        if self.shadow:
            return shadow_dead_letter_topic(self.stream.name, self.output.name)
        return dead_letter_topic(self.stream.name)

    @property
    def name(self) -> str:
        return f"{self.stream.name}.{self.key}"

    @property
    def generation(self) -> int:
        return self.rewind.generation if self.rewind is not None else 0

    @property
    def checkpoint(self) -> Path:
        return checkpoint_dir(self.settings, self.stream.name, self.key, self.generation)
