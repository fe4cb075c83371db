"""The fronting clusters as control sees and switches them ("Kafka Kong").

`Fronting` answers which cluster takes each stream's writes and whether each cluster answers,
and switches: the admin's failover and failback (`keystone fronting`, the API, the UI).
`FrontingWatch`, run by the fleet's leader, probes the clusters taking writes and fails over
on its own when one has been lost for `fronting_failover_after_seconds`, never twice within
`fronting_switch_hold_seconds` (a flapping cluster does not make writes ping-pong), and fails
back to home only where `fronting_auto_failback` says so, once home has answered for
`fronting_failback_after_seconds`.

A cluster is lost when it does not answer a metadata request within `fronting_probe_seconds`,
or answers without a leader for a partition of a stream's fronting topic: it would refuse those
writes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from keystone.contracts import fronting, kafka_clients
from keystone.contracts.errors import KeystoneError, NotFound
from keystone.contracts.fronting import Active, FrontingCluster
from keystone.contracts.names import dead_letter_topic, fronting_topic
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.control.store import Store
from keystone.control.tenancy import Caller
from keystone.router.topics import create_topics

log = logging.getLogger(__name__)

COMMAND, UNREACHABLE, RECOVERED = "command", "unreachable", "recovered"  # why it switched
STALE_SECONDS = 10.0  # a watch that has not stepped for this long forgets what it saw


def admin_client(settings: Settings, cluster: FrontingCluster) -> AdminClient:
    return AdminClient(kafka_clients.librdkafka(cluster.connect(settings)) | {"log_level": 0})


def probe(admin: AdminClient, timeout: float, streams: list[str]) -> tuple[str | None, list[str]]:
    """Why the cluster cannot take writes now (None when it can), and which of `streams` lack
    their fronting topic there (it would refuse their writes; the watch makes them). Every
    partition of the others' must have a leader."""
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as e:
        return f"it did not answer: {e.args[0].str()}", []
    if not metadata.brokers:
        return "it answered with no broker", []
    missing = [s for s in streams if fronting_topic(s) not in metadata.topics]
    for stream in streams:
        topic = metadata.topics.get(fronting_topic(stream))
        if topic is not None and any(p.leader < 0 for p in topic.partitions.values()):
            return f"{fronting_topic(stream)} has a partition without a leader", missing
    if missing:
        return f"{len(missing)} stream(s) have no fronting topic there", missing
    return None, []


@dataclass(frozen=True)
class ClusterView:
    name: str
    home: bool
    brokers: str
    problem: str | None  # why it cannot take writes, or None


@dataclass(frozen=True)
class View:
    clusters: list[ClusterView]
    active: Active
    switches: dict[tuple[str, str, str], int]


class Fronting:
    def __init__(self, settings: Settings, store: Store, clock: Callable[[], float] = time.time):
        self.settings = settings
        self.store = store
        self.clock = clock
        self._admins: dict[str, AdminClient] = {}  # one a cluster, kept: each view logs in once

    def _admin(self, cluster: FrontingCluster) -> AdminClient:
        if cluster.name not in self._admins:
            self._admins[cluster.name] = admin_client(self.settings, cluster)
        return self._admins[cluster.name]

    def view(self, caller: Caller) -> View:
        """Each cluster and whether it can take writes, which takes whose, the switches so far.
        An owner sees the overrides of their own streams only."""
        active = self.store.fronting(self.settings)
        if not caller.admin:
            mine = {s.name for s in self.store.streams() if caller.owns(s.owner)}
            active = active.model_copy(
                update={"streams": {s: c for s, c in active.streams.items() if s in mine}}
            )
        clusters = [
            ClusterView(
                c.name,
                c.home,
                c.connect(self.settings).kafka_bootstrap,
                probe(self._admin(c), self.settings.fronting_probe_seconds, [])[0],
            )
            for c in fronting.clusters(self.settings)
        ]
        return View(clusters, active, self.store.fronting_switches() if caller.admin else {})

    def switch(self, caller: Caller, to: str | None, stream: str | None) -> View:
        """Makes `to` (home when None: a failback) take the writes of `stream`, or of every
        stream without an override; the admin's alone. A no-op when it does already."""
        caller.require_admin()
        target = fronting.home(self.settings) if to is None else fronting.cluster(self.settings, to)
        if stream is not None and stream not in {s.name for s in self.store.streams()}:
            raise NotFound(f"no stream {stream!r}")
        switched = self.store.fronting_records.switch(
            self.settings, caller.name, target.name, stream, COMMAND, self.clock()
        )
        if switched is not None:
            log.warning(
                "fronting: %s now takes the writes of %s (by %s)",
                target.name,
                stream or "every stream",
                caller.name,
            )
        return self.view(caller)


class FrontingWatch:
    """The fleet leader's automatic failover and failback, one `step` per probe."""

    def __init__(self, settings: Settings, store: Store, clock: Callable[[], float] = time.time):
        self.settings = settings
        self.store = store
        self.clock = clock
        self.lost_since: dict[str, float] = {}  # cluster -> when it was first seen lost
        self.up_since: dict[str, float] = {}  # cluster -> since when it has answered
        self._admins: dict[str, AdminClient] = {}
        self._stepped = float("-inf")  # when it last stepped

    def step(self) -> None:
        """Probes every cluster, then fails over everything taking writes on a lost cluster
        (the global choice first, then each stream's own), or fails back."""
        if len(self.settings.fronting_clusters) < 2:
            return
        now = self.clock()
        if now - self._stepped > STALE_SECONDS:  # not leading meanwhile: what it saw is old
            self.lost_since.clear()
            self.up_since.clear()
        self._stepped = now
        active = self.store.fronting(self.settings)
        specs = {s.name: s for s in self.store.streams()}
        health = {name: self._probe(name, specs) for name in self.settings.fronting_clusters}
        for name, problem in health.items():
            if problem is None:
                self.lost_since.pop(name, None)
                self.up_since.setdefault(name, now)
            else:
                self.up_since.pop(name, None)
                self.lost_since.setdefault(name, now)
        if now - active.since < self.settings.fronting_switch_hold_seconds:
            return
        taking = [(active.cluster, None), *sorted((c, s) for s, c in active.streams.items())]
        switched = False
        for cluster, stream in taking:
            lost = self.lost_since.get(cluster)
            if lost is None or now - lost < self.settings.fronting_failover_after_seconds:
                continue
            standby = next((n for n, p in health.items() if p is None and n != cluster), None)
            if standby is None:
                log.error("fronting: %s is lost and no other cluster answers", cluster)
                return
            self._switch(standby, stream, UNREACHABLE, cluster, health[cluster] or "")
            switched = True
        if not switched:
            self._fail_back(active, now)

    def _probe(self, name: str, specs: dict[str, StreamSpec]) -> str | None:
        """Why the cluster cannot take writes; a cluster that answers but lacks streams'
        topics (one added to the settings later, or one that was lost while a stream was made)
        gets them made, and counts as lost until it has them."""
        admin = self._admins.get(name)
        if admin is None:  # one client a cluster, kept: a probe a second logs in once
            admin = self._admins[name] = admin_client(
                self.settings, fronting.cluster(self.settings, name)
            )
        problem, missing = probe(admin, self.settings.fronting_probe_seconds, list(specs))
        if missing:
            connection = fronting.cluster(self.settings, name).connect(self.settings)
            topics = {
                t: specs[s].partitions
                for s in missing
                for t in (fronting_topic(s), dead_letter_topic(s))
            }
            try:
                made = create_topics(connection, topics)
                log.info("fronting: made %s on %s", ", ".join(made) or "nothing", name)
            except KeystoneError as e:
                log.warning("fronting: %s's missing topics not made: %s", name, e)
        return problem

    def _fail_back(self, active: Active, now: float) -> None:
        home = fronting.home(self.settings).name
        if not self.settings.fronting_auto_failback or active.cluster == home:
            return
        up = self.up_since.get(home)
        if up is not None and now - up >= self.settings.fronting_failback_after_seconds:
            self._switch(home, None, RECOVERED, active.cluster, "home answers again")

    def _switch(self, to: str, stream: str | None, reason: str, lost: str, why: str) -> None:
        switched = self.store.fronting_records.switch(
            self.settings, "fleet", to, stream, reason, self.clock(), only_from=lost
        )
        if switched is not None:
            log.warning(
                "fronting: %s takes the writes of %s from %s: %s",
                to,
                stream or "every stream",
                lost,
                why,
            )
