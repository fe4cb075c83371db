"""A router's queries on the fronting clusters but home: run while their cluster takes the
stream's writes, or holds records they have not read; held (not running) otherwise.

A router reads its fronting topic on every fronting cluster, a query per output (and for the
dead letters and the archive) and cluster (`contracts.fronting.query_key`). Home's always run.
Another cluster's run while the registry says it takes the stream's writes (a failover) and
then until they have read everything it holds (a failback's drain); after that they are held,
so a standby costs a look at its topic's end every `CHECK_SECONDS`, not a query per output.
Looked at on a thread of its own: a cluster that does not answer holds only this thread, and
its queries stay as they were.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping

from confluent_kafka import Consumer

from keystone.contracts.checkpoints import Offsets
from keystone.contracts.fronting import FrontingCluster
from keystone.contracts.names import fronting_topic
from keystone.contracts.registry import RegistryReader
from keystone.contracts.settings import Settings
from keystone.router.topics import read_watermarks, watermark_reader

log = logging.getLogger(__name__)

CHECK_SECONDS = 5.0


def drained(ends: Mapping[int, tuple[int, int]], resumes: Collection[Offsets | None]) -> bool:
    """Whether queries resuming at `resumes` (None: one that never ran) have read every record
    of a topic whose partitions span `ends` (earliest, next offset)."""
    for resume in resumes:
        for partition, (earliest, end) in ends.items():
            at = earliest if resume is None else resume.get(partition, earliest)
            if end > at:
                return False
    return True


class Standby:
    """Which standby queries are idle now (`idle`), by query key, kept current by `start`'s
    thread until `stop`."""

    def __init__(
        self,
        settings: Settings,
        stream: str,
        clusters: list[FrontingCluster],
        resumes: Callable[[FrontingCluster], dict[str, Offsets | None]],
        registry: RegistryReader | None,
    ) -> None:
        """`clusters`: the standby ones (all but home); `resumes(cluster)`: its queries by
        key, and where each goes on from (None: the earliest record its topic holds);
        `registry`: where control says which cluster takes the stream's writes (none: home,
        always)."""
        self.settings = settings
        self.stream = stream
        self.topic = fronting_topic(stream)
        self.clusters = clusters
        self.resumes = resumes
        self.registry = registry
        # Held until looked at: a standby that never took writes has nothing to read.
        self.idle: frozenset[str] | set[str] = {k for c in clusters for k in resumes(c)}
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="standby", daemon=True)
        self._said: dict[str, str] = {}
        self._readers: dict[str, Consumer] = {}  # one a cluster, kept: it logs in once
        self._last_active: str | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.look()
                self.ready.set()
                self._stop.wait(CHECK_SECONDS)
        finally:
            for reader in self._readers.values():
                reader.close()

    def look(self) -> None:
        """One look at every standby cluster."""
        active = self._active()
        for cluster in self.clusters:
            keys = self.resumes(cluster)
            if cluster.name == active:
                self._run_all(cluster, keys, "it takes the stream's writes")
                continue
            try:
                ends = self._ends(cluster)
            except Exception as e:  # not reachable: its queries stay as they were
                self._say(cluster, f"not looked at: {e}")
                continue
            if drained(ends, keys.values()):
                if not set(keys) <= self.idle:
                    self._say(cluster, "everything it holds is read: its queries are held")
                self.idle = self.idle | set(keys)  # swapped whole: read by the supervisor
            else:
                self._run_all(cluster, keys, "it holds records not yet read")

    def _ends(self, cluster: FrontingCluster) -> dict[int, tuple[int, int]]:
        reader = self._readers.get(cluster.name)
        if reader is None:
            reader = self._readers[cluster.name] = watermark_reader(cluster.connect(self.settings))
        return read_watermarks(reader, self.topic, timeout=CHECK_SECONDS)

    def _run_all(self, cluster: FrontingCluster, keys: Collection[str], why: str) -> None:
        if set(keys) & self.idle:
            self._say(cluster, f"its queries run: {why}")
        self.idle = self.idle - set(keys)

    def _active(self) -> str | None:
        """The cluster taking the stream's writes: as last read while Redis does not answer
        (judged by its contents alone, a standby that keeps up would look drained)."""
        if self.registry is None:
            return None
        try:
            self._last_active = self.registry.fronting(self.settings).of(self.stream)
        except Exception as e:
            log.warning("fronting: which cluster takes writes not read (as it was): %s", e)
        return self._last_active

    def _say(self, cluster: FrontingCluster, what: str) -> None:
        if self._said.get(cluster.name) != what:
            log.info("fronting cluster %s: %s", cluster.name, what)
        self._said[cluster.name] = what
