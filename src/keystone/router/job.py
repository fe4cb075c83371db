"""The router job: one Spark application per stream, one streaming query per output.

Each output's query reads the fronting topic through the source seam, keeps the events its
filter matches (compiled to Column expressions), projects them to JSON records and hands them
to its sink, with its own checkpoint under the state directory, so a slow or failing sink never
holds back another. The events no output can read go to the dead-letter topic: written by a
realtime Kafka output's query beside its records when one can without losing any (it reads every
event anyway), else by one more query, `<stream>._stream` (`router.plan.dead_letter_plan`,
decided as the router starts). Unless the stream turned it off, `<stream>._archive` keeps every
record in the stream's archive (`router.archive`). How each query runs (where it starts, how
much a trigger reads, its trigger) is decided without Spark in `router.plan`: `Router` reads the
facts those decisions need and applies them. `Router.run` hands the queries to the supervisor
(`router.supervisor`): a query that fails is logged and started again after a backoff, while
the others go on.

An output that control rewinds (`contracts.recovery.Rewind`, read from the registry every
second) has its query started again, alone, in the rewind's checkpoint generation: from the
rewind's start, in micro-batches of at most its rate's worth of events per second until it has
caught up, then as usual. What it writes of events its earlier generation had got to is a
replay (the `replay` column, `Router.replay_bound`: Kafka records get the `ks_replay` header,
latencies leave them out).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Collection
from functools import partial
from typing import TypeVar

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from keystone.contracts.checkpoints import (
    Offsets,
    checkpoint_dir,
    generations,
    latest,
    planned,
    remove_generations,
    replay_bound_path,
)
from keystone.contracts.errors import KeystoneError
from keystone.contracts.fronting import FrontingCluster, query_key, split_key
from keystone.contracts.fronting import clusters as fronting_clusters
from keystone.contracts.names import (
    ARCHIVE_QUERY,
    STREAM_LEVEL,
    fronting_topic,
)
from keystone.contracts.recovery import Rewind
from keystone.contracts.registry import RegistryReader
from keystone.contracts.schema import parse_schema
from keystone.contracts.settings import Settings
from keystone.contracts.shadows import (
    Shadow,
    ShadowBounds,
    ShadowPhase,
    comparison_path,
    stopped_path,
)
from keystone.contracts.spec import OutputSpec, StreamSpec
from keystone.router import compiled
from keystone.router.archive import ArchiveWriter, archive_checkpoint, archived
from keystone.router.deadletter import DeadLetterWriter, unreadable
from keystone.router.lang.ast import paths_read
from keystone.router.lang.parser import parse_filter, parse_projection
from keystone.router.meter import Meter
from keystone.router.metrics import ProgressListener, RouterMetrics, listen
from keystone.router.plan import (
    BACK_TO_BACK,
    QueryPlan,
    batch_limit,
    query_plan,
    records_per_batch,
    replay_bound,
    runs_realtime,
    shadow_plan,
)
from keystone.router.shadow import ShadowBatches, compared
from keystone.router.sinks.base import ROUTED, RecordWriter, to_kafka, writer_class, writer_for
from keystone.router.sinks.route import Route
from keystone.router.source import fronting, kafka_records
from keystone.router.standby import Standby
from keystone.router.supervisor import Supervisor
from keystone.router.topics import watermarks

T = TypeVar("T")

log = logging.getLogger(__name__)

DEAD_LETTER_TRIGGER = "10 seconds"
POSITION_EVERY = 10  # supervisor ticks (seconds) between notes of where dead letters are written


def paths_read_by(outputs: list[OutputSpec]) -> frozenset[tuple[str, ...]]:
    """The payload's field paths these outputs' filters and projections read."""
    return paths_read(
        *(parse_filter(o.filter) for o in outputs if o.filter),
        *(parse_projection(o.projection) for o in outputs),
    )


def dead_letter_paths(outputs: list[OutputSpec]) -> frozenset[tuple[str, ...]]:
    """Every path the outputs read: an event one output cannot read (`router.source.read_paths`)
    cannot be read at all of them either, so the dead-letter query finds every one."""
    return paths_read_by(outputs)


def replay_column(rewind: Rewind | None, bound: Offsets | None = None) -> Column:
    """The rewind's id for an event it writes again (before `bound`, where the output's earlier
    generation had got to), else null."""
    if rewind is None or not bound:
        return F.lit(None).cast("string")
    return F.when(F.col("offset") < at_partition(bound), F.lit(rewind.id))


def at_partition(offsets: Offsets) -> Column:
    """The offset `offsets` gives the record's partition (null where it names none)."""
    by = F.create_map(*(F.lit(x) for p, o in sorted(offsets.items()) for x in (p, o)))
    return by[F.col("partition")]


def routed(
    source: DataFrame,
    output: OutputSpec,
    meter: Meter | None,
    replay: Column | None = None,
    *,
    key: bytes | None,
    dead_letters: Column | None = None,
    both: bool = False,
) -> DataFrame:
    """The output's events from the source's columns, as the columns of `ROUTED`: those its
    filter matches, the record projected, a replay marked with its operation's id (`replay`,
    else none is). Counted on the way by the output's meter if it has one (a replayed event's
    latency left out), else observed per batch as `read` (in) and `matched`. `key`: the
    stream's, for `hash` (`RegistryReader.hashing_key`).

    `dead_letters`: for the query that writes the stream's dead letters too (its source
    enveloped with every path `checked`), which of the events the stream cannot read
    (`stream_problem`) it writes, counted. They come as rows with `dead_letter`, the reason
    (null on the output's records). `both`: an event may be the output's and a dead letter at
    once (a string the output does not read holds a lone surrogate): such an event then
    yields two rows."""
    if replay is None:
        replay = F.lit(None).cast("string")
    source = source.withColumn("replay", replay)
    record = compiled.record(output, key)
    keep = F.col("problem").isNull() & compiled.condition(output, key)
    dead_letter = F.lit(None).cast("string")
    if meter is not None:
        # Counted in a column, then filtered: a filter's condition is pushed below the source's
        # projection, with the parse inlined (and run again) for each field it reads.
        live = F.when(F.col("replay").isNull(), F.col("timestamp"))
        matched = source.withColumn("kept", meter.counted(keep, live))
        if dead_letters is None:
            matched = matched.where(F.col("kept"))
        else:
            kept, dead = F.col("kept"), F.col("dead")
            matched = matched.withColumn("dead", dead_letters).where(kept | dead)
            if both:  # one row each: a record, then a dead letter
                rows = F.when(kept & dead, F.array(F.lit(False), F.lit(True)))
                matched = matched.withColumn("dead", F.explode(rows.otherwise(F.array(dead))))
            dead_letter = F.when(dead, F.col("stream_problem"))
    else:
        assert dead_letters is None, "the stream's dead letters are metered"
        matched = (
            source.observe("read", F.count(F.lit(1)).alias("in"))
            .where(keep)
            .observe("matched", F.count(F.lit(1)).alias("matched"))
        )
    return matched.select(
        *ROUTED[:-2],
        F.when(dead_letter.isNull(), record).alias("record"),
        dead_letter.alias("dead_letter"),
    )


def left_out(source: DataFrame, output: OutputSpec, key: bytes | None) -> DataFrame:
    """The source's events the output leaves out now (`guid`, `timestamp`), for a backfill to
    take out of a sink that holds them from before a fix: those its filter leaves out, and
    those it cannot read now (dead letters instead) that have a guid and time to be found by."""
    kept = F.col("problem").isNull() & compiled.condition(output, key)
    found = F.col("guid").isNotNull() & F.col("timestamp").isNotNull()
    return source.where(found & ~kept).select("guid", "timestamp")


class RouterWatch:
    """The outputs' rewinds, and the router's size, as control last wrote them, read every
    second (`read`). Kept as they were while the registry is away (said once). An output whose
    record does not read keeps the rewind it had; with none known it is held (not started): run
    as if never rewound, it would start afresh, or in a checkpoint generation long gone.

    The size is followed only by a router that resizes in place (`router.plan.resizes_in_place`),
    and taken as the fleet gives it (within the stream's bounds as they are now, which the spec
    the router started with may no longer say). A query that reads in micro-batches runs with
    batches of the size's (`batch_limit`): a new limit starts it again, while a query under
    Real-time Mode, which reads no batches, runs on."""

    def __init__(
        self,
        registry: RegistryReader | None,
        stream: str,
        *,
        least: int,
        sized_for: int | None = None,
        follow_size: bool = False,
        realtime: Collection[str] = (),
        standby: Standby | None = None,
    ) -> None:
        """`registry`: where control keeps them (none: never rewound, never resized); `least`:
        the batch limit before any size is known; `sized_for`: the size the router started
        with; `realtime`: the queries that run under Real-time Mode unless replaying;
        `standby`: the queries of the fronting clusters but home (none: home is the only)."""
        self.registry = registry
        self.stream = stream
        self.rewinds: dict[str, Rewind] = {}
        self.shadows: dict[str, Shadow] = {}  # each output's latest
        self.unreadable: set[str] = set()  # outputs held: their rewind records do not read
        self.standby = standby
        self.least = least
        self.sized_for = sized_for or None
        self.follow_size = follow_size
        self.realtime = frozenset(realtime)
        self._read = registry is None  # read at least once
        self._errors: dict[str, str] = {}

    @property
    def held(self) -> set[str]:
        """The queries that must not run: an output's whose rewind does not read, and those of
        a standby cluster with nothing to read (`Standby`)."""
        idle = self.standby.idle if self.standby is not None else set()
        return self.unreadable | idle

    @property
    def batch_limit(self) -> int:
        """Records a micro-batch reads at most, at the size now."""
        return records_per_batch(self.sized_for) if self.sized_for else self.least

    @property
    def ready(self) -> bool:
        """Read at least once (the rewinds, and the standby clusters' queries looked at)."""
        return self._read and (self.standby is None or self.standby.ready.is_set())

    def read(self) -> None:
        if self.registry is None:
            return
        found = self._asked("rewinds", lambda: self.registry.read_rewinds(self.stream))
        if found is not None:
            rewinds, unreadable = found
            kept = {o: self.rewinds[o] for o in unreadable if o in self.rewinds}
            held = unreadable - set(kept)
            for output in held - self.unreadable:
                log.error("output %s held: its rewind record does not read", output)
            self.rewinds, self.unreadable, self._read = rewinds | kept, held, True
        shadows = self._asked("shadows", lambda: self.registry.operations(Shadow, self.stream))
        if shadows is not None:
            self.shadows = shadows
        if self.follow_size:
            state = self._asked("size", lambda: self.registry.router_state(self.stream))
            if state is not None and state.sized_for and state.sized_for != self.sized_for:
                log.info("resized from %s to %d events/s", self.sized_for, state.sized_for)
                self.sized_for = state.sized_for

    def _asked(self, what: str, ask: Callable[[], T]) -> T | None:
        """`ask()`, or None while the registry does not answer (said once per error)."""
        try:
            answer = ask()
        except KeystoneError as e:
            if self._errors.get(what) != e.message:
                log.warning("%s not read (kept as they were): %s", what, e.message)
            self._errors[what] = e.message
            return None
        self._errors.pop(what, None)
        return answer

    def plan(self, key: str) -> tuple[tuple[int, bool] | None, int | None]:
        """What a query runs as (a change starts it again): its rewind's checkpoint generation
        and whether it replays (on its cluster); and its batch limit, for a query that reads in
        micro-batches."""
        name, cluster = split_key(key)
        rewind = self.rewinds.get(name)
        rewind = rewind.on(cluster) if rewind is not None else None
        rewound = None if rewind is None else (rewind.generation, rewind.replaying)
        batched = key not in self.realtime or (rewind is not None and rewind.replaying)
        return rewound, self.batch_limit if batched else None


def check_home(settings: Settings, stream: str, home: str) -> None:
    """Home's queries keep the bare checkpoint names (`query_key`): settings that made another
    cluster home would resume its queries from this one's offsets. The router refuses to run,
    saying why, rather than skip or repeat events."""
    path = settings.checkpoints_dir / stream / "fronting-home"
    try:
        made = path.read_text().strip()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(home)
        return
    if made != home:
        raise KeystoneError(
            f"stream {stream}'s checkpoints were made with fronting cluster {made} as home, "
            f"not {home}: keep {made} first in fronting_clusters"
        )


class Router:
    def __init__(
        self,
        spark: SparkSession,
        settings: Settings,
        spec: StreamSpec,
        metrics: RouterMetrics,
        registry: RegistryReader | None = None,
        sized_for: int | None = None,
        resizes: bool = False,
    ) -> None:
        """`registry`: where control keeps the outputs' rewinds, the router's size and the
        stream's key for `hash` (none: never rewound, no output hashes); `sized_for`: the events
        per second the fleet sized the router for when it started; `resizes`: it follows the
        fleet's later figures as it runs (`router.plan.resizes_in_place`)."""
        self.spark = spark
        self.settings = settings
        self.spec = spec
        self.key = registry.hashing_key(spec.name) if registry is not None else None
        self.metrics = metrics
        self.clusters = fronting_clusters(settings)
        self.started_ms = int(time.time() * 1000)
        check_home(settings, spec.name, self.clusters[0].name)
        self.watch = RouterWatch(
            registry,
            spec.name,
            least=batch_limit(spec),
            sized_for=sized_for,
            follow_size=resizes,
            realtime=[o.name for o in spec.outputs if runs_realtime(o)],  # home's alone
        )
        self.watch.read()
        self.archive = ArchiveWriter(settings, spec) if spec.archive.enabled else None
        archive = [ARCHIVE_QUERY] if self.archive is not None else []
        metrics.declare(
            [o.name for o in spec.outputs] + archive,
            [o.name for o in spec.outputs if o.transactional],
        )
        # Spark's Kafka sink reports only as an epoch ends, a Real-time Mode checkpoint interval
        # apart: its outputs are metered as they run (delivered, or dead-lettered when too
        # large, as the sink is handed them). One meter an output, over its clusters' queries.
        self.meters = {
            o.name: Meter(spark, f"{spec.name}.{o.name}")
            for o in spec.outputs
            if issubclass(writer_class(o.sink.kind), RecordWriter)
        }
        # Who writes the dead letters of the events read from each cluster.
        # A standby's are written by its own `_stream@<cluster>` query: its outputs' queries,
        # in micro-batches, host none (`router.plan.hosts_dead_letters`).
        every_output = {o.name for o in spec.outputs}
        self.letters = {
            c.name: DeadLetterWriter(
                settings,
                spec,
                partial(self._generation_on, c),
                self.watch.unreadable if c.home else every_output,
                c,
            )
            for c in self.clusters
        }
        self.dead_letter_meter = Meter(spark, f"{spec.name}.{STREAM_LEVEL}")
        self.shadow_batches: dict[str, ShadowBatches] = {}  # each shadow's, as last started
        self.shadow_meters: dict[str, Meter] = {}  # a record writer's shadow's (its own counts)
        self._ticks = 0
        for cluster, letters in self.letters.items():
            if letters.plan.host is not None:
                log.info("dead letters read from %s: written by %s", cluster, letters.plan.host)
        standby = self.clusters[1:]
        if standby:
            self.watch.standby = Standby(settings, spec.name, standby, self._resumes, registry)
        listen(spark, ProgressListener(metrics))

    def _resumes(self, cluster: FrontingCluster) -> dict[str, Offsets | None]:
        """The cluster's queries by key, and where each goes on from (None: at the earliest
        its topic holds): its checkpoint's last commit, else where its rewind starts it."""
        topic = fronting_topic(self.spec.name)
        letters = self.letters[cluster.name]
        found: dict[str, Offsets | None] = {}
        for output in self.spec.outputs:
            rewind = self._rewind_on(output.name, cluster)
            checkpoint = Route(self.settings, self.spec, output, rewind, cluster).checkpoint
            commit = latest(checkpoint, topic)
            start = rewind.start if rewind is not None else None
            found[query_key(output.name, cluster)] = commit.offsets if commit else start
        paths = {}
        if letters.plan.host is None:
            paths[letters.key] = letters.writer()
        if self.archive is not None:
            paths[query_key(ARCHIVE_QUERY, cluster)] = archive_checkpoint(
                self.settings, self.spec.name, cluster
            )
        for key, path in paths.items():
            commit = latest(path, topic)
            found[key] = commit.offsets if commit is not None else None
        return found

    @property
    def batch_limit(self) -> int:
        """Records a micro-batch reads at most, at the router's size now."""
        return self.watch.batch_limit

    def wanted(self) -> dict[str, Callable[[], StreamingQuery]]:
        """The queries to run now: the stream's (`queries`), then each running shadow's."""
        shadows = {s.id: partial(self.start_shadow, s) for s in self.shadows_running()}
        return self.queries() | shadows

    def shadows_running(self) -> list[Shadow]:
        """The shadows whose queries run: those running and not yet expired (control ends
        them, but no later than this), of an output the router runs."""
        now = time.time()
        return [
            s
            for s in self.watch.shadows.values()
            if s.running and not s.expired(now) and self.spec.output(s.output) == s.live
        ]

    def queries(self) -> dict[str, Callable[[], StreamingQuery]]:
        """Every query of the stream by key (`query_key`: home's, then each other fronting
        cluster's), and how to start it."""
        starts: dict[str, Callable[[], StreamingQuery]] = {}
        for cluster in self.clusters:
            letters = self.letters[cluster.name]
            if letters.plan.host is None:
                starts[letters.key] = partial(self.start_dead_letters, cluster)
            for output in self.spec.outputs:
                starts[query_key(output.name, cluster)] = partial(
                    self.start_output, output, cluster
                )
            if self.archive is not None:  # last: the outputs deliver first after a (re)start
                starts[query_key(ARCHIVE_QUERY, cluster)] = partial(self.start_archive, cluster)
        return starts

    def _source(
        self,
        starting: str,
        max_per_trigger: int | None,
        paths: frozenset[tuple[str, ...]],
        checked: frozenset[tuple[str, ...]] | None = None,
        cluster: FrontingCluster | None = None,
        starting_at: int | None = None,
    ) -> DataFrame:
        schema = self.spec.avro_schema
        return fronting(
            self.spark,
            self.settings,
            self.spec.name,
            starting=starting,
            max_per_trigger=max_per_trigger,
            schema=parse_schema(schema) if schema is not None else None,
            paths=paths,
            checked=checked,
            cluster=cluster,
            starting_at=starting_at,
        )

    def _standby_start(self, output: OutputSpec) -> int | None:
        """Where the output's query on a standby cluster first starts (epoch ms; None: at the
        earliest record it holds): an output that starts at the latest events starts there at
        when it began, its home query's first start (this router's, if that has not yet run),
        so that it gets what the standby took since, and none of what came before it."""
        if output.start == "earliest":
            return None
        home = Route(self.settings, self.spec, output, None, self.clusters[0]).checkpoint
        began = home / "metadata"
        return int(began.stat().st_mtime * 1000) if began.exists() else self.started_ms

    def _rewind_on(self, output: str, cluster: FrontingCluster) -> Rewind | None:
        """The output's latest rewind as its query on `cluster` runs it, if it reaches there."""
        rewind = self.watch.rewinds.get(output)
        return rewind.at(cluster) if rewind is not None else None

    def _generation_on(self, cluster: FrontingCluster, output: str) -> int:
        """The checkpoint generation the output's query on `cluster` runs in now."""
        rewind = self._rewind_on(output, cluster)
        return rewind.generation if rewind is not None else 0

    def start_output(
        self, output: OutputSpec, cluster: FrontingCluster | None = None
    ) -> StreamingQuery:
        """The output's query on `cluster` (home by default). A standby's first starts where
        `_standby_start` says, unless a rewind starts it."""
        cluster = cluster or self.clusters[0]
        meter = self.meters.get(output.name)
        rewind = self._rewind_on(output.name, cluster)
        route = Route(self.settings, self.spec, output, rewind, cluster)
        writer = writer_for(route, meter)
        writer.prepare(self.spark)
        plan = query_plan(
            output,
            rewind,
            topic=fronting_topic(self.spec.name),
            batch_limit=self.batch_limit,
        )
        if not cluster.home and plan.real_time:
            # A standby's queries run in micro-batches back to back, taking turns with home's
            # for task slots: Real-time Mode would hold a task per partition of its own, which
            # a router on a cluster has not got spare (its cores are its size's).
            plan = QueryPlan(plan.starting, self.batch_limit, BACK_TO_BACK, real_time=False)
        starting_at = None if cluster.home or rewind else self._standby_start(output)
        bound = self.replay_bound(output, rewind, cluster) if rewind is not None else None
        paths = paths_read_by([output])
        letters = self.letters[cluster.name]
        hosts = letters.plan.host == output.name
        checked = dead_letter_paths(self.spec.outputs) if hosts else None
        dead = self._dead_letters_past(letters.written()) if hosts else None
        source = self._source(
            plan.starting if starting_at is None else "earliest",
            plan.max_per_trigger,
            paths,
            checked,
            cluster,
            starting_at,
        )
        frame = writer.frame(
            routed(
                source,
                output,
                meter,
                replay_column(rewind, bound),
                key=self.key,
                dead_letters=dead,
                both=checked is not None and not checked <= paths,
            )
        )
        stream_writer = self._writer(frame, route.name, route.checkpoint.as_posix())
        if plan.real_time:
            stream_writer = stream_writer.trigger(realTime=plan.trigger)
        else:
            stream_writer = stream_writer.trigger(processingTime=plan.trigger)
        writer.attach(stream_writer, lambda outcome: self.metrics.outcome(output.name, outcome))
        return stream_writer.start()

    def start_shadow(self, shadow: Shadow) -> StreamingQuery:
        """The query of an output's shadow (`router.shadow`): on home's fronting topic, from
        where the shadow starts, both versions applied to every event, the shadow's records
        written to its targets."""
        live = self.spec.output(shadow.output)
        assert live is not None, "started only for an output the router runs"
        route = Route.of_shadow(self.settings, self.spec, shadow)
        version = route.output
        recorded = issubclass(writer_class(version.sink.kind), RecordWriter)
        if recorded and shadow.id not in self.shadow_meters:
            # One for the shadow's life here: a query started again counts on into it.
            self.shadow_meters[shadow.id] = Meter(self.spark, route.name)
        meter = self.shadow_meters.get(shadow.id)
        writer = writer_for(route, meter)
        writer.prepare(self.spark)
        topic = fronting_topic(self.spec.name)
        plan = shadow_plan(
            shadow, topic=topic, partitions=self.spec.partitions, batch_limit=self.batch_limit
        )
        source = self._source(plan.starting, plan.max_per_trigger, paths_read_by([live, version]))
        batches = ShadowBatches(
            output=shadow.output,
            writer=writer,
            meter=meter,
            comparison=comparison_path(self.settings.state_dir, self.spec.name, shadow.id),
            bounds=ShadowBounds.of(self.settings),
            metrics=self.metrics,
        )
        self.shadow_batches[shadow.id] = batches
        frame = compared(source, live, version, self.key)
        stream_writer = self._writer(frame, route.name, route.checkpoint.as_posix())
        return stream_writer.trigger(processingTime=plan.trigger).foreachBatch(batches).start()

    def _stopped(self, shadow: Shadow) -> None:
        """Says the router runs no query of the ended (or expired) shadow, nor will: control
        may remove its targets (`contracts.shadows.stopped_path`)."""
        path = stopped_path(self.settings.state_dir, self.spec.name, shadow.id)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
            log.info("shadow %s of output %s stopped", shadow.id, shadow.output)

    def replay_bound(self, output: OutputSpec, rewind: Rewind, cluster: FrontingCluster) -> Offsets:
        """Where the output's earlier generation on `cluster` had got to when the rewind's
        generation first started there (`rewind`: as it runs there): its events are written
        again (labelled), those after it for the first time. Worked out once, before the
        generation's query first starts (its predecessor then stopped), and kept beside it.
        What bounds it is `router.plan.replay_bound`'s to say, from the earlier generation's
        checkpoint and the topic, read here."""
        key = query_key(output.name, cluster)
        path = replay_bound_path(self.settings, self.spec.name, key, rewind.generation)
        try:
            return {int(p): int(o) for p, o in json.loads(path.read_text()).items()}
        except (OSError, ValueError, AttributeError):
            pass  # not worked out yet (a file that does not read is worked out again)
        topic = fronting_topic(self.spec.name)
        earlier = [
            g for g in generations(self.settings, self.spec.name, key) if g < rewind.generation
        ]
        newest = max(earlier, default=0)  # the generation that ran before, if one did
        before = checkpoint_dir(self.settings, self.spec.name, key, newest)
        kafka = cluster.connect(self.settings)
        bound = replay_bound(
            rewind,
            earlier=bool(earlier),
            realtime=cluster.home and runs_realtime(output),
            planned=lambda: planned(before, topic),
            topic_end=lambda: {p: end for p, (_, end) in watermarks(kafka, topic).items()},
        )
        staging = path.with_suffix(".tmp")
        staging.write_text(json.dumps(bound))
        staging.replace(path)
        log.info("rewind %s of %s replays up to %s", rewind.id, key, bound)
        return bound

    def _dead_letters_past(self, written: Offsets | None) -> Column:
        """The host's dead letters: the events the stream cannot read at or past `written`
        (those before were written already), counted by the stream's meter."""
        dead = F.col("stream_problem").isNotNull()
        if written:
            dead = dead & (F.col("offset") >= F.coalesce(at_partition(written), F.lit(0)))
        return self.dead_letter_meter.dead_lettered(dead)

    def start_dead_letters(self, cluster: FrontingCluster | None = None) -> StreamingQuery:
        """The stream's own query on `cluster` (home by default): the dead letters of the
        events read there, to the dead-letter topic where Kafka outputs write."""
        cluster = cluster or self.clusters[0]
        letters = self.letters[cluster.name]
        plan = letters.plan
        # Earlier generations are those of a writer that has handed over.
        remove_generations(self.settings, self.spec.name, letters.key, below=plan.generation)
        # An event one output cannot read (a string it reads holds a lone surrogate, say) is
        # then a dead letter, never just skipped.
        starting = plan.starting if cluster.home else "earliest"
        source = self._source(
            starting, self.batch_limit, paths=dead_letter_paths(self.spec.outputs), cluster=cluster
        )
        frame = unreadable(source, self.spec.name)
        checkpoint = checkpoint_dir(self.settings, self.spec.name, letters.key, plan.generation)
        writer = self._writer(frame, f"{self.spec.name}.{letters.key}", checkpoint.as_posix())
        return to_kafka(writer.trigger(processingTime=DEAD_LETTER_TRIGGER), self.settings).start()

    def start_archive(self, cluster: FrontingCluster | None = None) -> StreamingQuery:
        """Every record of the fronting topic on `cluster` (home by default) into the stream's
        archive, from the earliest the topic still holds when the archive is first written."""
        cluster = cluster or self.clusters[0]
        archive = self.archive
        assert archive is not None, "queried only when the stream keeps one"
        archive.prepare(self.spark)
        records = kafka_records(
            self.spark,
            self.settings,
            self.spec.name,
            starting="earliest",
            max_per_trigger=self.batch_limit,
            cluster=cluster,
        )
        frame = (
            archived(records, cluster.name)
            .observe("read", F.count(F.lit(1)).alias("in"))
            .observe("matched", F.count(F.lit(1)).alias("matched"))
        )
        key = query_key(ARCHIVE_QUERY, cluster)
        checkpoint = archive_checkpoint(self.settings, self.spec.name, cluster)
        writer = self._writer(frame, f"{self.spec.name}.{key}", checkpoint.as_posix()).trigger(
            processingTime=self.spec.archive.trigger
        )

        def deliver(batch: DataFrame, batch_id: int) -> None:
            self.metrics.outcome(ARCHIVE_QUERY, archive.write_batch(batch, batch_id, cluster))

        return writer.foreachBatch(deliver).start()

    @staticmethod
    def _writer(frame: DataFrame, name: str, checkpoint: str) -> DataStreamWriter:
        return (
            frame.writeStream.queryName(name)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
        )

    def run(self, stop: threading.Event) -> None:
        """Starts every query and keeps them running until `stop` is set, then stops them
        (`router.supervisor.Supervisor`), reporting which run and what the meters counted each
        second."""
        if self.archive is not None:
            self.archive.keep_expiring(self.spark, stop)
        if self.watch.standby is not None:
            self.watch.standby.start()
        try:
            Supervisor(self.wanted, self.watch, self._report).run(stop)
        finally:
            if self.watch.standby is not None:
                self.watch.standby.stop()
        for letters in self.letters.values():
            letters.note()  # where the queries stopped

    def _report(self, running: dict[str, bool]) -> None:
        idle = self.watch.standby.idle if self.watch.standby is not None else ()
        ours = {k: v for k, v in running.items() if not Shadow.is_key(k)}
        self.metrics.running(ours, idle)
        shadows = {s.id: s.output for s in self.watch.shadows.values() if s.id in running}
        self.metrics.shadows_running(shadows, running)
        for shadow in self.watch.shadows.values():
            # Control removes an ending shadow's targets once told that no query of it runs
            # here, nor a batch of it is under way (a stop that timed out may leave one).
            batches = self.shadow_batches.get(shadow.id)
            busy = shadow.id in running or (batches is not None and batches.busy)
            if shadow.phase is ShadowPhase.ENDING and not busy:
                self._stopped(shadow)
        self.metrics.sized(self.watch.sized_for or self.spec.sizing.min_events_per_second)
        for name, meter in self.meters.items():
            self.metrics.metered(name, meter.take())
        self.metrics.count(STREAM_LEVEL, "dead_letter", self.dead_letter_meter.take().dead_lettered)
        self._ticks += 1
        if self._ticks % POSITION_EVERY == 0:
            for letters in self.letters.values():
                letters.note()
