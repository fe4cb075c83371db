"""Every sink type, registered here and nowhere else: the spec's `sink.type` names one of
`SINK_TYPES`, and `SinkConfig` is their union. Each type is one unit (`base`): its config and
descriptor in a module here, its runtime parts in `keystone.router.sinks.<type>`."""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from keystone.contracts.sinks.base import Replay, Sink, SinkKind, StreamName, TargetField
from keystone.contracts.sinks.elasticsearch import ElasticsearchSink
from keystone.contracts.sinks.hive import HiveSink
from keystone.contracts.sinks.kafka import KafkaSink
from keystone.contracts.sinks.keystone import KeystoneSink

# In the order the web form offers them.
SINKS: tuple[type[Sink], ...] = (KafkaSink, ElasticsearchSink, HiveSink, KeystoneSink)
SINK_TYPES: dict[str, SinkKind] = {s.model_fields["type"].default: s.kind for s in SINKS}

# The union of the same classes, for pydantic: registered once, above.
SinkConfig = Annotated[Union[SINKS], Field(discriminator="type")]  # noqa: UP007

__all__ = [
    "SINKS",
    "SINK_TYPES",
    "ElasticsearchSink",
    "HiveSink",
    "KafkaSink",
    "KeystoneSink",
    "Replay",
    "Sink",
    "SinkConfig",
    "SinkKind",
    "StreamName",
    "TargetField",
]
