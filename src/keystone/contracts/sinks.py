"""Each sink's config, as a stream spec states it (`outputs[].sink`, a union on `type`), and
its checks beyond the model; pure, without I/O.

A sink has three parts, one per layer: this config (what control validates and stores), a
provisioner that makes ready what it writes to without Spark (`keystone.router.sinks.provision`,
run by control and by the router) and the Spark writer the router runs
(`keystone.router.sinks.<type>`). `keystone.router.sinks.registry` maps a type to the last two.
"""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from keystone.contracts.names import check_stream_name

StreamName = Annotated[str, AfterValidator(check_stream_name)]
_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class Sink(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    # How the sink holds each event once whatever is replayed into it; None where it appends
    # (an output's `delivery.guarantee` then decides).
    exact_by: ClassVar[str | None] = None

    def problems(self, stream: str) -> list[str]:
        """What is wrong with this config in stream `stream`, beyond its model; no I/O."""
        return []


class KafkaSink(Sink):
    type: Literal["kafka"] = "kafka"
    topic: str | None = Field(None, description="Default: <stream>.<output>.")

    @field_validator("topic")
    @classmethod
    def _legal_topic(cls, topic: str | None) -> str | None:
        # Kafka refuses a topic whose name differs from another's only in '.' against '_'.
        if topic is not None and (
            not _TOPIC.fullmatch(topic)
            or topic in (".", "..")  # Kafka's own refusal
            or topic.startswith(("keystone.", "keystone_"))
        ):
            raise ValueError(
                "a Kafka topic is 1 to 249 of [a-zA-Z0-9._-], not '.' or '..', and may not start "
                "with 'keystone.' or 'keystone_' (fronting topics are reached with a keystone "
                "sink)"
            )
        return topic


class HiveSink(Sink):
    type: Literal["hive"] = "hive"
    exact_by = "batch"  # a batch written again replaces its rows


class ElasticsearchSink(Sink):
    type: Literal["elasticsearch"] = "elasticsearch"
    exact_by = "guid"  # the document's id: written again, it is overwritten


class KeystoneSink(Sink):
    type: Literal["keystone"] = "keystone"
    stream: StreamName

    def problems(self, stream: str) -> list[str]:
        if self.stream == stream:
            return [f"a keystone sink cannot deliver to its own stream {stream!r}"]
        return []


SinkConfig = Annotated[
    KafkaSink | HiveSink | ElasticsearchSink | KeystoneSink, Field(discriminator="type")
]
