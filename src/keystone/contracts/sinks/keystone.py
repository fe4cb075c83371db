"""A Keystone output: its records become another stream's events, on that stream's fronting
topic, keeping the event's guid and one more hop (`ks_hops`); control refuses a cycle."""

from __future__ import annotations

from typing import ClassVar, Literal

from keystone.contracts.names import fronting_topic, shadow_topic
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
        if self.shadow:
            return f"topic {shadow_topic(stream, output)}"
        return f"stream {self.stream}"

    def owned_topic(self, stream: str, output: str) -> str | None:
        # A shadow's records go to a topic of its own, never into the target stream.
        return shadow_topic(stream, output) if self.shadow else None

    def record_topic(self, stream: str, output: str) -> str:
        return shadow_topic(stream, output) if self.shadow else fronting_topic(self.stream)

    @property
    def into_stream(self) -> str:
        return self.stream
