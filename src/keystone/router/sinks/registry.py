"""Every sink type, registered explicitly: the spec's `sink.type` names one of these.

A type's config is `keystone.contracts.sinks`'; here are its other two parts: the provisioner
(no Spark: control imports this module) and its Spark writer, named by module and class and
imported only when the router asks for it, so that nothing else loads Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from importlib import import_module

from keystone.router.sinks.provision import (
    ElasticsearchProvisioner,
    HiveProvisioner,
    KafkaProvisioner,
    KeystoneProvisioner,
    Provisioner,
)
from keystone.router.sinks.route import Route


class Replay(StrEnum):
    """What a sink does with records written again (a rewind's replay)."""

    IDEMPOTENT = "idempotent"  # the same record overwrites itself (by guid)
    RESETTABLE = "resettable"  # the replayed batches' earlier rows are removed, then rewritten
    APPEND_ONLY = "append-only"  # written again beside the first copies, labelled `ks_replay`


@dataclass(frozen=True)
class SinkType:
    provisioner: type[Provisioner]
    writer: str  # "module:Class" of its Spark writer
    replay: Replay

    def writer_class(self) -> type:
        """The writer's class (a `keystone.router.sinks.base.Writer`), imported now."""
        module, _, name = self.writer.partition(":")
        return getattr(import_module(module), name)


SINKS: dict[str, SinkType] = {
    "kafka": SinkType(
        KafkaProvisioner, "keystone.router.sinks.kafka:KafkaWriter", Replay.APPEND_ONLY
    ),
    "keystone": SinkType(
        KeystoneProvisioner, "keystone.router.sinks.keystone:KeystoneWriter", Replay.APPEND_ONLY
    ),
    "hive": SinkType(HiveProvisioner, "keystone.router.sinks.hive:HiveWriter", Replay.RESETTABLE),
    "elasticsearch": SinkType(
        ElasticsearchProvisioner,
        "keystone.router.sinks.elasticsearch:ElasticsearchWriter",
        Replay.IDEMPOTENT,
    ),
}


def provisioner_for(route: Route) -> Provisioner:
    return SINKS[route.output.sink.type].provisioner(route)
