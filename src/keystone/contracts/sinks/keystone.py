"""A Keystone output: its records become another stream's events, on that stream's fronting
topic, keeping the event's guid and one more hop (`ks_hops`); control refuses a cycle."""

from __future__ import annotations

from typing import ClassVar, Literal

from keystone.contracts.names import fronting_topic
from keystone.contracts.sinks.base import Replay, Sink, SinkKind, StreamName, TargetField


class KeystoneSink(Sink):
    type: Literal["keystone"] = "keystone"
    stream: StreamName

    kind: ClassVar[SinkKind] = SinkKind(
        label="Keystone",
        replay=Replay.APPEND_ONLY,
        modes=("realtime", "microbatch"),
        realtime=True,
        provisioner="keystone.router.sinks.keystone.provision:KeystoneProvisioner",
        writer="keystone.router.sinks.keystone.writer:KeystoneWriter",
        reader="keystone.router.sinks.keystone.readback:KeystoneReader",
        target_field=TargetField("stream", required=True, hint="stream"),
    )

    def problems(self, stream: str) -> list[str]:
        if self.stream == stream:
            return [f"a keystone sink cannot deliver to its own stream {stream!r}"]
        return []

    def target(self, stream: str, output: str) -> str:
        return f"stream {self.stream}"

    def record_topic(self, stream: str, output: str) -> str:
        return fronting_topic(self.stream)

    @property
    def into_stream(self) -> str:
        return self.stream
