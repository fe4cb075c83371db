"""One output of one stream, as its sink's parts see it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from keystone.contracts.checkpoints import checkpoint_dir
from keystone.contracts.fronting import FrontingCluster, query_key
from keystone.contracts.recovery import Rewind
from keystone.contracts.settings import Settings
from keystone.contracts.spec import OutputSpec, StreamSpec


@dataclass(frozen=True)
class Route:
    settings: Settings
    stream: StreamSpec
    output: OutputSpec
    rewind: Rewind | None = None  # the output's latest: its checkpoint generation and replay
    cluster: FrontingCluster | None = None  # the fronting cluster its query reads (None: home)

    @property
    def key(self) -> str:
        """Its query's key on its cluster (`contracts.fronting.query_key`)."""
        return query_key(self.output.name, self.cluster)

    @property
    def name(self) -> str:
        return f"{self.stream.name}.{self.key}"

    @property
    def generation(self) -> int:
        return self.rewind.generation if self.rewind is not None else 0

    @property
    def checkpoint(self) -> Path:
        return checkpoint_dir(self.settings, self.stream.name, self.key, self.generation)
