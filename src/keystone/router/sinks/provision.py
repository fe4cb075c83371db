"""What each sink writes to, made ready without Spark: a Kafka output's topic, the Hive
database, an Elasticsearch index template; a Keystone output's target topic checked. Control
runs a provisioner when it deploys an output, and the router again before its query starts;
each is idempotent and returns what it made, for the owner. Each type's is in its package
(`keystone.router.sinks.<type>.provision`), named by its descriptor.

A shadow's targets (`contracts.shadows`) are made the same way, with its dead-letter topic
besides, and removed when the shadow ends (`remove`): a live output's never are (an owner's
topics, tables and indices keep their data when the output or stream goes)."""

from __future__ import annotations

from keystone.contracts.checkpoints import query_id
from keystone.contracts.names import transactional_group
from keystone.router.sinks.route import Route
from keystone.router.topics import create_topics, delete_groups, delete_topics


class Provisioner:
    """Nothing to make ready (the default)."""

    def __init__(self, route: Route) -> None:
        self.route = route

    def provision(self) -> list[str]:
        """Makes ready what the route writes to; what it made."""
        made = self.make()
        if self.route.shadow:
            partitions = {self.route.dead_letter_topic: self.route.stream.partitions}
            made += [f"topic {t}" for t in create_topics(self.route.settings, partitions)]
        return made

    def make(self) -> list[str]:
        """What the type makes ready for its output (or its shadow, `Route.shadow`)."""
        return []

    def remove(self) -> list[str]:
        """Removes a shadow's targets and all they hold, those already gone no error; what was
        there to remove. An exactly-once shadow's consumer group goes too (its transactional
        ids are Kafka's to expire: `transactional.id.expiration.ms`)."""
        route = self.route
        assert route.shadow, "only a shadow's targets are ever removed"
        gone = [*self.unmake(), f"topic {route.dead_letter_topic}"]
        delete_topics(route.settings, [route.dead_letter_topic])
        query = query_id(route.checkpoint)
        if route.output.transactional and query is not None:
            group = transactional_group(route.stream.name, route.output.name, query)
            delete_groups(route.settings, [group])
            gone.append(f"consumer group {group}")
        return gone

    def unmake(self) -> list[str]:
        """What the type removes of a shadow's targets (`remove`)."""
        return []


def provisioner_for(route: Route) -> Provisioner:
    """The output's provisioner, of the class its sink type's descriptor names."""
    cls = route.output.sink.kind.load(route.output.sink.kind.provisioner)
    if not issubclass(cls, Provisioner):
        raise TypeError(f"{route.output.sink.type}'s provisioner {cls!r} is not a Provisioner")
    return cls(route)
