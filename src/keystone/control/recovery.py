"""The fleet's side of recovery, one stream at a time (`Recovery.step`, every pass):

- each output's **restore points**, collected from its current checkpoint generation (every
  batch Spark committed since the last pass, with its end offsets and when it committed), kept
  for the stream's `recovery.keep` and thinned past an hour (`contracts.recovery.thin`), since
  Spark itself keeps only its last hundred batches;
- each **rewind** brought along: caught up once the new generation has committed `until`, and
  the earlier generations' checkpoints deleted once the new one has committed a batch (until
  then a crash could still need them).

The router does the rest: it sees the rewind in the registry and restarts the output's query.

- each **job**'s application (a backfill's, a redrive's) kept running until it is done
  (`control.jobs`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from keystone.contracts.checkpoints import (
    START,
    Commit,
    checkpoint_dir,
    commits,
    generations,
    latest,
    query_id,
    remove_generations,
)
from keystone.contracts.fronting import FrontingCluster, clusters, query_key
from keystone.contracts.names import fronting_topic
from keystone.contracts.recovery import OPERATIONS, Job, RestorePoint, Rewind, RewindPhase, thin
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.control.jobs import JobRuns
from keystone.control.store import Store

log = logging.getLogger(__name__)

THIN_EVERY_SECONDS = 60.0


def generation_of(rewind: Rewind | None) -> int:
    return rewind.generation if rewind is not None else 0


def committed(
    settings: Settings,
    stream: str,
    output: str,
    rewind: Rewind | None,
    cluster: FrontingCluster | None = None,
) -> Commit | None:
    """The output's newest committed position on `cluster` (home by default), in the
    generation its query there runs in."""
    view = rewind.at(cluster) if rewind is not None and cluster is not None else rewind
    path = checkpoint_dir(settings, stream, query_key(output, cluster), generation_of(view))
    return latest(path, fronting_topic(stream))


class Recovery:
    def __init__(
        self, settings: Settings, store: Store, clock: Callable[[], float] = time.time
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self._thinned: dict[tuple[str, str], float] = {}
        self.jobs = [
            JobRuns(settings, store, kind, clock)
            for kind in OPERATIONS.values()
            if issubclass(kind, Job)
        ]

    def step(self, spec: StreamSpec) -> None:
        for runs in self.jobs:
            runs.step(spec)
        rewinds = self.store.rewinds(spec.name)
        marks = self.store.recovery.harvested(spec.name)
        now = self.clock()
        for output in spec.outputs:
            rewind = rewinds.get(output.name)
            added = False
            for cluster in clusters(self.settings):
                key = query_key(output.name, cluster)
                view = rewind.at(cluster) if rewind is not None else None
                path = checkpoint_dir(self.settings, spec.name, key, generation_of(view))
                added |= self._harvest(
                    spec.name, key, cluster, path, generation_of(view), marks, now
                )
            self._thin(spec, output.name, now, force=added)
            if rewind is not None:
                self._advance(spec.name, rewind, now)

    def forget(self, stream: str, output: str | None = None) -> None:
        for runs in self.jobs:
            if output is None or runs.kind.per_output:
                runs.forget(stream, output)
        self.store.recovery.forget(stream, output)
        for known in list(self._thinned):
            if known[0] == stream and output in (None, known[1]):
                del self._thinned[known]

    def _harvest(
        self,
        stream: str,
        key: str,
        cluster: FrontingCluster,
        path: Path,
        generation: int,
        marks: dict[str, tuple[int, int]],
        now: float,
    ) -> bool:
        """The restore points the output's query `key` on `cluster` committed since the last
        collected, added; whether any were."""
        mark = marks.get(key)
        after = mark[1] if mark is not None and mark[0] == generation else START - 1
        found = commits(path, fronting_topic(stream), after)
        if not found:
            return False
        query = query_id(path) or ""
        where = "" if cluster.home else cluster.name
        points = [
            RestorePoint(
                id=RestorePoint.make_id(generation, c.batch, where),
                time=c.time or now,
                generation=generation,
                batch=c.batch,
                query=query,
                offsets=c.offsets,
                cluster=where,
            )
            for c in found
        ]
        return self.store.recovery.add_restore_points(
            stream, key, points, (generation, found[-1].batch)
        )

    def _thin(self, spec: StreamSpec, output: str, now: float, force: bool) -> None:
        last = self._thinned.get((spec.name, output), 0.0)
        if not force and now - last < THIN_EVERY_SECONDS:
            return
        self._thinned[(spec.name, output)] = now
        points = self.store.restore_points(spec.name, output)
        self.store.recovery.drop_restore_points(
            spec.name, output, thin(points, now, spec.recovery.keep_seconds)
        )

    def _advance(self, stream: str, rewind: Rewind, now: float) -> None:
        """On each cluster the rewind reaches: its earlier generations deleted once its new one
        has committed a batch there; caught up there once that query has reached its `until`
        (nothing to replay: at once), after which it runs as usual again while the others
        replay; the rewind caught up once every cluster is."""
        caught_up = list(rewind.caught_up_on)
        reached = []
        for cluster in clusters(self.settings):
            view = rewind.at(cluster)
            if view is None:
                continue  # a cluster named since: not rewound
            reached.append("" if cluster.home else cluster.name)
            key = query_key(rewind.output, cluster)
            path = checkpoint_dir(self.settings, stream, key, rewind.generation)
            position = latest(path, fronting_topic(stream))
            moved = position is not None and position.batch != START
            if moved:
                older = [g for g in generations(self.settings, stream, key) if g < view.generation]
                if older:
                    log.info("rewind %s committed on %s: deleting %s", rewind.id, key, older)
                    remove_generations(self.settings, stream, key, below=view.generation)
            if view.replaying and (
                view.empty or (moved and position is not None and view.caught_up(position.offsets))
            ):
                caught_up.append(reached[-1])
        if not rewind.replaying or caught_up == rewind.caught_up_on:
            return
        update: dict[str, object] = {"caught_up_on": caught_up}
        if rewind.total == 0 or set(reached) <= set(caught_up):
            update |= {"phase": RewindPhase.CAUGHT_UP, "finished_at": now}
        if self.store.recovery.update(stream, rewind.model_copy(update=update)):
            where = ", ".join(c or "home" for c in caught_up if c not in rewind.caught_up_on)
            log.info("rewind %s of %s.%s caught up on %s", rewind.id, stream, rewind.output, where)
