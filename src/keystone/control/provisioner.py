"""Creates what a stream needs outside Redis, idempotently: its fronting and dead-letter topics
on every fronting cluster, and whatever each output's sink writes to that needs no Spark (a Kafka
output's topic, an Elasticsearch index template, the Hive database, which the stream's archive
needs too). Routers' Prometheus targets are the fleet's."""

from __future__ import annotations

from keystone.contracts import fronting
from keystone.contracts.names import dead_letter_topic, fronting_topic
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.router.sinks.hive.provision import ensure_database
from keystone.router.sinks.provision import provisioner_for
from keystone.router.sinks.route import Route
from keystone.router.topics import create_topics


def provision(settings: Settings, spec: StreamSpec) -> list[str]:
    """Everything the stream and its outputs write to; returns what was created now."""
    created = [f"topic {t}" for t in ensure_topics(settings, spec)]
    for output in spec.outputs:
        created += provisioner_for(Route(settings, spec, output)).provision()
    if spec.archive.enabled:  # a table in the same database, whatever the outputs' sinks
        created += ensure_database(settings)  # [] when a Hive output made it just now
    return created


def ensure_topics(settings: Settings, spec: StreamSpec) -> list[str]:
    """Creates the fronting and dead-letter topics where missing, on every fronting cluster
    (a cluster that does not answer: 503, and a later apply makes them); returns the ones it
    created, each named with its cluster where there are several."""
    wanted = dict.fromkeys(
        [fronting_topic(spec.name), dead_letter_topic(spec.name)], spec.partitions
    )
    clusters = fronting.clusters(settings)
    created = []
    for cluster in clusters:
        made = create_topics(cluster.connect(settings), wanted)
        created += made if len(clusters) == 1 else [f"{t} on {cluster.name}" for t in made]
    return created
