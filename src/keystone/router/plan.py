"""How the router's queries run, decided without Spark: its size (task slots, records per
micro-batch), and each output's query plan (where it starts reading, how much a trigger reads,
its trigger) and a rewind's replay bound.

Pure: the facts come in as arguments (what `router.job` read from the output's checkpoints
and the fronting topic) or from the spec, so every decision here is tested without Spark,
Kafka or a file. `router.job.Router` applies the plan to Spark as it is.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass

from keystone.contracts.checkpoints import Offsets
from keystone.contracts.recovery import Rewind
from keystone.contracts.shadows import Shadow
from keystone.contracts.spec import OutputSpec, StreamSpec

BATCH_LIMIT = 100_000  # records per micro-batch at least, so catching up comes in bounded steps
BATCH_SECONDS = 30  # ...and at most this many seconds of the rate the router is sized for
# Events per second one task of a micro-batch keeps up with, reading, routing and writing to
# the slowest sink: set from what the backfill and router benchmarks measured of the sinks'
# pace (docs/benchmarks.md). A router sized for more gives each micro-batch query more tasks
# at once, up to one per partition.
EVENTS_PER_TASK = 4_000
REPLAY_TRIGGER = "1 second"  # a replay reads its rate's worth of events a second
BACK_TO_BACK = "0 seconds"  # a processing-time trigger that starts each batch as one ends
SHADOW_SECONDS = 10  # a shadow's batches start this far apart at the closest (`shadow_plan`)


def sized(spec: StreamSpec, sized_for: int | None) -> int:
    """The events per second the router is sized for: the fleet's figure, within the spec's
    bounds (its smallest when the fleet gave none)."""
    bounds = spec.sizing
    wanted = sized_for if sized_for is not None else bounds.min_events_per_second
    return max(bounds.min_events_per_second, min(bounds.max_events_per_second, wanted))


def runs_realtime(output: OutputSpec) -> bool:
    """Under Real-time Mode: realtime outputs whose sink Spark writes itself (its descriptor
    says). Elasticsearch is written from Python, which Real-time Mode feeds only at its
    checkpoints, so a realtime Elasticsearch output runs micro-batches back to back instead."""
    assert output.delivery is not None, "set when the spec is read"
    return output.delivery.mode == "realtime" and output.sink.kind.realtime


def router_slots(spec: StreamSpec, sized_for: int | None = None) -> int:
    """Real-time Mode keeps one task running per topic partition for each realtime query; the
    router needs that many task slots, and for each micro-batch query (the outputs', the dead
    letters', the archive's) as many as its batches need at once at the rate it is sized for
    (one per `EVENTS_PER_TASK`, up to one per partition), so that none waits for a slot while
    another's batch waits on its sink. A standby fronting cluster's queries run in micro-batches
    (`router.job.Router.start_output`) and take turns with these."""
    return _slots(spec, math.ceil(sized(spec, sized_for) / EVENTS_PER_TASK))


def _slots(spec: StreamSpec, per_query: int) -> int:
    realtime = sum(spec.partitions for o in spec.outputs if runs_realtime(o))
    queries = sum(1 for o in spec.outputs if not runs_realtime(o)) + 1 + spec.archive.enabled
    return realtime + queries * min(spec.partitions, per_query)


def resizes_in_place(master: str) -> bool:
    """Whether a router on `master` changes size while it runs. On a local master its task
    slots are threads, which cost nothing while idle: it gets as many as any size could use
    (`started_slots`), and only its micro-batches' size follows the fleet's figure, the queries
    that read in micro-batches starting again with the new one while those under Real-time Mode
    run on. On a cluster its slots are the cores the master gives it when it starts
    (`spark.cores.max`), so a new size starts it again."""
    return master.startswith("local")


def started_slots(spec: StreamSpec, sized_for: int | None, master: str) -> int:
    """The task slots a router starts with on `master`: where it resizes in place, a task per
    partition for every query at once (whatever its bounds, which the owner may move while it
    runs); else those of its size."""
    if resizes_in_place(master):
        return _slots(spec, spec.partitions)
    return router_slots(spec, sized_for)


def batch_limit(spec: StreamSpec, sized_for: int | None = None) -> int:
    """Records a micro-batch reads at most (`records_per_batch`) at the router's size."""
    return records_per_batch(sized(spec, sized_for))


def records_per_batch(size: int) -> int:
    """Records a micro-batch reads at most at `size` events per second: `BATCH_SECONDS` of it,
    and never fewer than `BATCH_LIMIT`."""
    return max(BATCH_LIMIT, BATCH_SECONDS * size)


@dataclass(frozen=True)
class QueryPlan:
    """How one output's streaming query runs: Spark's Kafka source reads from `starting`
    (`startingOffsets`: `latest`, `earliest` or offsets as JSON), at most `max_per_trigger`
    records a trigger (none: no limit), and the query triggers every `trigger`, as Real-time
    Mode's checkpoint interval when `real_time`, else as a processing time."""

    starting: str
    max_per_trigger: int | None
    trigger: str
    real_time: bool


def query_plan(
    output: OutputSpec, rewind: Rewind | None, *, topic: str, batch_limit: int
) -> QueryPlan:
    """The output's query plan, rewound by `rewind` (none: never rewound). `topic`: the
    fronting topic; `batch_limit`: the router's (`batch_limit`)."""
    delivery = output.delivery
    assert delivery is not None and delivery.trigger is not None, "set when the spec is read"
    starting = output.start
    if rewind is not None:  # read by a new checkpoint only: a started one goes on from its own
        offsets = {str(p): o for p, o in sorted(rewind.start.items())}
        starting = json.dumps({topic: offsets})
    if rewind is not None and rewind.replaying:
        # Rate limited, whatever the output's mode, until it has caught up: a second's worth
        # of events a second.
        return QueryPlan(starting, min(batch_limit, rewind.rate), REPLAY_TRIGGER, real_time=False)
    if runs_realtime(output):
        return QueryPlan(starting, None, delivery.trigger, real_time=True)
    if delivery.mode == "realtime":  # a sink Real-time Mode cannot feed: back to back
        return QueryPlan(starting, batch_limit, BACK_TO_BACK, real_time=False)
    return QueryPlan(starting, batch_limit, delivery.trigger, real_time=False)


def shadow_plan(shadow: Shadow, *, topic: str, partitions: int, batch_limit: int) -> QueryPlan:
    """How a shadow's query runs: from where the live output had got to (`Shadow.start`; a
    partition it names not, from its earliest), in micro-batches at its version's trigger, and
    no closer than `SHADOW_SECONDS` apart (a realtime version's too: a batch's comparison and write
    cost the router about as much for ten events as for a thousand, and every second they
    cost it six times its own CPU at 1,000 events/s), each reading at most the shadow's rate's
    worth of events a second: a shadow costs the router no more than that, whatever the
    traffic (and falls behind a busier stream, as its lag says)."""
    offsets = {str(p): shadow.start.get(p, -2) for p in range(partitions)}
    delivery = shadow.version.delivery
    assert delivery is not None, "set when the spec is read"
    seconds = max(delivery.seconds if delivery.mode == "microbatch" else 0, SHADOW_SECONDS)
    trigger = f"{seconds} seconds"
    return QueryPlan(
        json.dumps({topic: offsets}),
        min(batch_limit, shadow.rate * seconds),
        trigger,
        real_time=False,
    )


def replay_bound(
    rewind: Rewind,
    *,
    earlier: bool,
    realtime: bool,
    planned: Callable[[], Offsets | None],
    topic_end: Callable[[], Offsets],
) -> Offsets:
    """Where the output's earlier generation had got to, bounding what the rewind writes
    again (`router.job.Router.replay_bound`). `earlier`: whether an earlier generation's
    checkpoint is there; `realtime`: whether it ran under Real-time Mode (home's query of a
    realtime output: another cluster's runs in micro-batches); then, read only when the answer
    depends on it, `planned`: the end offsets of the newest batch the earlier generation
    planned (`contracts.checkpoints.planned`), and `topic_end`: where the fronting topic ends
    now.

    With no earlier generation nothing was written, and the bound is the rewind's start. A
    micro-batch query wrote nothing past its last planned batch (the start if it planned none);
    a Real-time Mode query logs an epoch's offsets only as the epoch ends, so its running
    epoch's are not in the checkpoint: nothing past the topic's end, then."""
    if not earlier:
        return dict(rewind.start)
    if realtime:
        return topic_end()
    return planned() or dict(rewind.start)


def hosts_dead_letters(output: OutputSpec) -> bool:
    """Whether the output's query can write the stream's dead letters beside its records: a
    realtime output Spark's Kafka sink writes (`runs_realtime`), which reads every event as it
    comes and sends records to any topic."""
    return runs_realtime(output)


def covers(resume: Offsets, written: Offsets) -> bool:
    """Whether a query resuming from `resume` reads again every event past `written`: it
    resumes nowhere past it. A partition `written` does not name was never read there."""
    return all(offset <= written.get(p, 0) for p, offset in resume.items())


@dataclass(frozen=True)
class DeadLetterPlan:
    """Who writes the stream's dead letters (the events no output can read) this run.

    `host`: an output whose query writes them beside its records, those at or past `written`
    (none: every one it reads). Else the stream's own query, in checkpoint `generation`, from
    `starting` when that generation is new (`startingOffsets`)."""

    host: str | None
    written: Offsets | None
    generation: int
    starting: str


def dead_letter_plan(
    spec: StreamSpec,
    *,
    topic: str,
    written: Offsets | None,
    resumes: Callable[[str], Offsets | None],
    generation: int | None,
    resumed: bool,
    held: Collection[str] = (),
) -> DeadLetterPlan:
    """Who writes the stream's dead letters (`DeadLetterPlan`), decided at the router's start.

    `written`: where they are written up to (none: nothing says, a new stream); `resumes`:
    where an output's query resumes from its checkpoint (none: it has none yet);
    `generation`: the stream's own query's newest checkpoint generation (none: it never ran);
    `resumed`: whether that query wrote them last; `held`: outputs that do not start.

    An output's query writes them when that loses none, saving a second read of every event:
    it must read again every event past `written`, or on a new stream start where the stream's
    own query would. Else the stream's own query does: from its checkpoint when it wrote them
    last, else in a new generation from `written` (an output that wrote them was removed or
    rewound, say), or on a new stream from the earliest the outputs start at."""
    starting = "earliest" if any(o.start == "earliest" for o in spec.outputs) else "latest"
    for output in spec.outputs:
        if not hosts_dead_letters(output) or output.name in held:
            continue
        resume = resumes(output.name)
        if written is None and resume is None and output.start == starting:
            return DeadLetterPlan(output.name, None, generation or 0, starting)
        if written is not None and resume is not None and covers(resume, written):
            return DeadLetterPlan(output.name, written, generation or 0, starting)
    if generation is not None and resumed:
        return DeadLetterPlan(None, written, generation, starting)
    after = 0 if generation is None else generation + 1
    if written is None:
        return DeadLetterPlan(None, None, after, starting)
    # Every partition named, as Spark asks: one the writer never read from its earliest (-2).
    offsets = {str(p): written.get(p, -2) for p in range(spec.partitions)}
    return DeadLetterPlan(None, written, after, json.dumps({topic: offsets}))
