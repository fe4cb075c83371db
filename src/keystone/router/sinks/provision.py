"""What each sink writes to, made ready without Spark: a Kafka output's topic, the Hive
database, an Elasticsearch index template; a Keystone output's target topic checked. Control
runs a provisioner when it deploys an output, and the router again before its query starts;
each is idempotent and returns what it made, for the owner. Each type's is in its package
(`keystone.router.sinks.<type>.provision`), named by its descriptor."""

from __future__ import annotations

from keystone.router.sinks.route import Route


class Provisioner:
    """Nothing to make ready (the default)."""

    def __init__(self, route: Route) -> None:
        self.route = route

    def provision(self) -> list[str]:
        return []


def provisioner_for(route: Route) -> Provisioner:
    """The output's provisioner, of the class its sink type's descriptor names."""
    cls = route.output.sink.kind.load(route.output.sink.kind.provisioner)
    if not issubclass(cls, Provisioner):
        raise TypeError(f"{route.output.sink.type}'s provisioner {cls!r} is not a Provisioner")
    return cls(route)
