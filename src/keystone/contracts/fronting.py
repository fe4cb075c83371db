"""The fronting Kafka clusters ("Kafka Kong"): where producers write and routers read.

Settings name them (`fronting_clusters`) and say where each one's brokers are; the first is
home. Every stream's fronting and dead-letter topics exist on each. Which one takes a stream's
writes is a fact of the registry, `Active` (one for all streams, overridable per stream),
changed by control only: by an admin (`keystone fronting failover`, `failback`) or by the fleet
leader when the active cluster has been unreachable for `fronting_failover_after_seconds`.
Routers read every cluster (a query per output and cluster, `query_key`), so an event is
routed wherever it was written.

`FrontingCluster.connect(settings)` is the settings a Kafka client of that cluster is made
with (`contracts.kafka_clients` takes them as it takes any): the same security, that cluster's
brokers.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field

from keystone.contracts.errors import NotFound
from keystone.contracts.settings import Settings

CLUSTER_PORT_STEP = 100  # the embedded cluster n (from 0) listens on kafka_port + 100n


@dataclass(frozen=True)
class FrontingCluster:
    name: str
    index: int  # 0: home

    @property
    def home(self) -> bool:
        return self.index == 0

    def connect(self, settings: Settings) -> Settings:
        """`settings` as a client of this cluster has them: its brokers (and, embedded, its
        ports). Assigned as derived values, so the copy's embedded services stay embedded."""
        if self.home and self.name not in settings.fronting_bootstrap:
            return settings
        copy = settings.model_copy()
        if self.name in settings.fronting_bootstrap:
            object.__setattr__(copy, "kafka_bootstrap", settings.fronting_bootstrap[self.name])
            return copy
        step = CLUSTER_PORT_STEP * self.index
        object.__setattr__(copy, "kafka_port", settings.kafka_port + step)
        object.__setattr__(copy, "kafka_controller_port", settings.kafka_controller_port + step)
        object.__setattr__(
            copy,
            "kafka_bootstrap",
            ",".join(
                f"{settings.bind_host}:{copy.kafka_broker_ports(n)[0]}"
                for n in range(1, settings.kafka_brokers + 1)
            ),
        )
        return copy


def clusters(settings: Settings) -> list[FrontingCluster]:
    """Every fronting cluster, home first."""
    return [FrontingCluster(n, i) for i, n in enumerate(settings.fronting_clusters)]


def home(settings: Settings) -> FrontingCluster:
    return clusters(settings)[0]


def cluster(settings: Settings, name: str) -> FrontingCluster:
    for found in clusters(settings):
        if found.name == name:
            return found
    raise NotFound(f"no fronting cluster {name!r}: the clusters are {settings.fronting_clusters}")


def query_key(name: str, cluster: FrontingCluster | None) -> str:
    """How a router's query of `name` (an output, `_stream`, `_archive`) on `cluster` is known:
    in its query's name, checkpoint folder and metrics. Home keeps the bare name (a router
    made before there were several clusters goes on with its checkpoints); another cluster's
    is `name@cluster` (`@` is in no name)."""
    return name if cluster is None or cluster.home else f"{name}@{cluster.name}"


def split_key(key: str) -> tuple[str, str | None]:
    """A query key's name and cluster (None: home)."""
    name, at, cluster = key.partition("@")
    return name, (cluster if at else None)


def query_keys(settings: Settings, name: str) -> list[str]:
    """The keys of `name`'s queries on every fronting cluster, home's first."""
    return [query_key(name, c) for c in clusters(settings)]


class Active(BaseModel):
    """Which fronting cluster takes writes: `cluster` for every stream but those `streams`
    names (stream -> cluster). Kept in the registry (`RegistryReader.fronting`); absent means
    home for all. `since`: when it last changed (epoch seconds), `reason`: why ("command",
    "unreachable", "recovered")."""

    cluster: str
    streams: dict[str, str] = Field(default_factory=dict)
    since: float = 0.0
    reason: str = ""

    def of(self, stream: str) -> str:
        return self.streams.get(stream, self.cluster)

    def within(self, names: list[str]) -> Active:
        """This record with any cluster the settings do not name given to home (names[0])."""
        known = set(names)
        cluster = self.cluster if self.cluster in known else names[0]
        streams = {s: c for s, c in self.streams.items() if c in known and c != cluster}
        return self.model_copy(update={"cluster": cluster, "streams": streams})


class Switch(BaseModel):
    """One switch, as the registry's log of them keeps it (`RegistryReader.fronting_log`):
    when, whose writes (`stream`; None: every stream's without an override), from where to
    where, and why."""

    at: float
    stream: str | None
    was: str
    to: str
    reason: str

    def concerns(self, stream: str) -> bool:
        """Whether it may have moved `stream`'s writes."""
        return self.stream in (None, stream)
