"""Every sink type, registered explicitly: the spec's `sink.type` names one of these."""

from __future__ import annotations

from keystone.contracts.spec import StreamSpec
from keystone.router.sinks.base import Route, Sink
from keystone.router.sinks.elasticsearch import ElasticsearchSink
from keystone.router.sinks.hive import HiveSink
from keystone.router.sinks.kafka import KafkaSink
from keystone.router.sinks.keystone import KeystoneSink

SINKS: dict[str, type[Sink]] = {
    sink.type: sink for sink in (KafkaSink, KeystoneSink, HiveSink, ElasticsearchSink)
}


def sink_for(route: Route) -> Sink:
    return SINKS[route.output.sink.type](route)


def validate_sinks(stream: StreamSpec) -> list[dict[str, str]]:
    """Each output's sink checked by its own type, without I/O: [{field, message}]."""
    return [
        {"field": f"outputs.{index}.sink", "message": message}
        for index, output in enumerate(stream.outputs)
        for message in SINKS[output.sink.type].validate(stream, output)
    ]
