"""One output of one stream, as its sink's parts see it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from keystone.contracts.settings import Settings
from keystone.contracts.spec import OutputSpec, StreamSpec


@dataclass(frozen=True)
class Route:
    settings: Settings
    stream: StreamSpec
    output: OutputSpec

    @property
    def name(self) -> str:
        return f"{self.stream.name}.{self.output.name}"

    @property
    def checkpoint(self) -> Path:
        return self.settings.checkpoints_dir / self.stream.name / self.output.name
