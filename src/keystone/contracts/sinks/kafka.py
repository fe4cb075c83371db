"""A Kafka output: its records in a topic of the owner's (`<stream>.<output>` unless named),
keyed by guid, carrying the event's headers; append-only, exactly once in Kafka transactions
when its delivery asks for it."""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from keystone.contracts.names import SHADOW_TOPICS, output_topic, shadow_topic
from keystone.contracts.sinks.base import Replay, Sink, SinkKind, TargetField

_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class KafkaSink(Sink):
    type: Literal["kafka"] = "kafka"
    topic: str | None = Field(None, description="Default: <stream>.<output>.")

    kind: ClassVar[SinkKind] = SinkKind(
        label="Kafka",
        replay=Replay.APPEND_ONLY,
        modes=("realtime", "microbatch"),
        realtime=True,
        provisioner="keystone.router.sinks.kafka.provision:KafkaProvisioner",
        writer="keystone.router.sinks.kafka.writer:KafkaWriter",
        reader="keystone.router.sinks.kafka.readback:KafkaReader",
        target_field=TargetField("topic", required=False, hint="topic (default stream.output)"),
    )

    @field_validator("topic")
    @classmethod
    def _legal_topic(cls, topic: str | None) -> str | None:
        # Kafka refuses a topic whose name differs from another's only in '.' against '_'.
        if topic is not None and (
            not _TOPIC.fullmatch(topic)
            or topic in (".", "..")  # Kafka's own refusal
            or topic.startswith(("keystone.", "keystone_", SHADOW_TOPICS))
        ):
            raise ValueError(
                "a Kafka topic is 1 to 249 of [a-zA-Z0-9._-], not '.' or '..', and may not start "
                f"with 'keystone.', 'keystone_' or '{SHADOW_TOPICS}' (fronting topics are reached "
                "with a keystone sink; shadows' topics are theirs)"
            )
        return topic

    def target(self, stream: str, output: str) -> str:
        return f"topic {self.owned_topic(stream, output)}"

    def owned_topic(self, stream: str, output: str) -> str:
        if self.shadow:
            return shadow_topic(stream, output)
        return self.topic or output_topic(stream, output)
