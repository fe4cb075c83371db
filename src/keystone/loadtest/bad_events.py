"""`keystone loadtest --bad-events N`: events that dead-letter until a fix, then are redriven.

The cause is one an owner meets: a schema too strict for what producers send. Before the load,
the run gives the stream a schema of its own (`seq` a long: every load event has one) and waits
for the router to run it. Over the first half of the span before the fix, N load events whose
`seq` is text are written straight to the fronting topic (the proxy would refuse them with a
422; a producer that writes to Kafka itself is not checked until the router reads it), so the
router dead-letters them for the whole stream. At the fix (half the run, or `--fix-at`) the
stream's own spec is put back, and once the fixed router runs, a redrive of the stream's dead
letters of the run sends each of them to every output again, through the fixed spec.

The audit then expects the bad events like any other (it checks against the stream's own
spec): delivered everywhere the filters take them, once in Elasticsearch and Hive, and labelled
`ks_replay` in Kafka.

Before the fix the run waits until every output has committed past the last bad event (its
newest restore point): an event the old router's dead-letter query had read but an output had
not would otherwise be delivered by the fixed router and redriven too, a second copy in Hive
(the recovery concept's page says so of redeploys).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from keystone.contracts import kafka_clients
from keystone.contracts.errors import BadRequest, KeystoneError, Unavailable
from keystone.contracts.names import STREAM_LEVEL, fronting_topic
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.control.client import ControlClient
from keystone.ingest_proxy.client import DirectProducer
from keystone.loadtest.events import EventMaker
from keystone.loadtest.faults import Fault, another_repair, asked_until
from keystone.router.topics import watermarks

FIELD = "seq"  # every load event has one, a number (loadtest.events)
STRICT = {
    "type": "record",
    "name": "LoadtestStrict",
    "doc": "keystone loadtest --bad-events: too strict on purpose (a seq that is text fails)",
    "fields": [{"name": FIELD, "type": "long"}],
}
ACTIVE = ("running", "cancelling")  # a redrive not ended yet
WAIT_SECONDS = 300.0  # for each step: the router redeployed, dead letters, commits, the redrive


def check(spec: StreamSpec) -> None:
    """The run replaces the stream's schema for a while: only a stream without one."""
    if spec.avro_schema is not None:
        raise BadRequest(
            f"--bad-events: stream {spec.name!r} has a schema of its own; the run makes its bad "
            "events with one of its own for a while: run it on a stream without a schema"
        )


def bad_event(maker: EventMaker, n: int) -> dict[str, Any]:
    """A load event the strict schema refuses and the stream's own spec takes: `seq` as text."""
    return {**maker(n), FIELD: f"bad-{n}"}


def strict(spec: StreamSpec) -> dict[str, Any]:
    """The stream's spec with the too strict schema, as control takes it."""
    return spec.model_copy(update={"avro_schema": STRICT}).model_dump(mode="json", by_alias=True)


def own(spec: StreamSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json", by_alias=True)


def redeploy(control: ControlClient, spec: dict[str, Any]) -> str:
    """Puts the spec and waits until the router runs it (a new process, running); says how long
    that took."""
    before = control.status(spec["name"]).router.pid
    control.put_stream(spec)
    began = time.monotonic()
    while time.monotonic() < began + WAIT_SECONDS:
        router = control.status(spec["name"]).router
        if router.state == "running" and router.pid not in (None, before):
            return f"its router redeployed in {time.monotonic() - began:.0f} s"
        time.sleep(1)
    raise Unavailable(
        f"the router of {spec['name']} was not redeployed in {WAIT_SECONDS:.0f} s", retry_after=10
    )


def dead_lettered(control: ControlClient, stream: str) -> int:
    """How many events the stream itself dead-lettered, redriven or not."""
    groups = control.dead_letters(stream).groups
    return sum(g.count for g in groups if g.output == STREAM_LEVEL)


def committed_past(control: ControlClient, spec: StreamSpec, ends: dict[int, int]) -> bool:
    """Whether every output's newest restore point is at or past `ends` on every partition."""
    for output in spec.outputs:
        points = control.restore_points(spec.name, output.name)
        if not points or any(points[0].offsets.get(p, 0) < end for p, end in ends.items()):
            return False
    return True


@dataclass
class BadEvents:
    """The bad events of one run: `spoil` before the load, `run` beside it (a thread), `undo`
    after it, whatever happened; `fault` is what the report shows, `guids` what the audit
    expects besides the load's."""

    settings: Settings
    spec: StreamSpec  # the stream's own
    app: str  # writes them, as a producer of the stream
    fault: Fault
    guids: list[str] = field(default_factory=list)
    fixed: bool = False

    def spoil(self, control: ControlClient) -> None:
        """The too strict schema, running before the load begins. The spec is read again here:
        the run has granted its app the stream since, and the fix puts back what it read."""
        self.spec = control.stream(self.spec.name).spec
        check(self.spec)
        self.fault.notes.append("a too strict schema put: " + redeploy(control, strict(self.spec)))

    def undo(self, control: ControlClient) -> None:
        """The stream's own spec back, if the run ended before its fix."""
        if not self.fixed:
            control.put_stream(own(self.spec))
            self.fixed = True
            self.fault.notes.append("the stream's own spec put back after the run")

    def run(self, started: float) -> None:
        """Sends them, waits until they are dead letters every output has passed, applies the
        fix at its time, and redrives them (blocking: the load test runs it in a thread)."""
        fault, notes = self.fault, self.fault.notes
        stream = self.spec.name
        with ControlClient.from_settings(self.settings) as control:
            baseline = dead_lettered(control, stream)
            fault.began = time.time() - started
            try:
                self._send(started, fault.at / 2)
                notes.append(f"{len(self.guids)} sent straight to Kafka ({FIELD} as text)")
                topic = fronting_topic(stream)
                ends = {p: high for p, (_, high) in watermarks(self.settings, topic).items()}
                self._until(
                    "them to be dead letters",
                    lambda: dead_lettered(control, stream) - baseline >= len(self.guids),
                )
                self._until(
                    "every output to commit past them",
                    lambda: committed_past(control, self.spec, ends),
                )
                time.sleep(max(0.0, started + fault.at - time.time()))
                at = time.time() - started
                notes.append(f"the fix at {at:.1f} s: " + redeploy(control, own(self.spec)))
                self.fixed = True
                self._redrive(control, started)
            except KeystoneError as e:  # noted: the audit shows what it left undelivered
                notes.append(f"stopped: {e}")
            finally:
                fault.ended = time.time() - started

    def _send(self, started: float, seconds: float) -> None:
        maker = EventMaker(seed=4242, size=600)
        producer = DirectProducer(kafka_clients.librdkafka(self.settings), self.app)
        for n in range(self.fault.count):
            time.sleep(max(0.0, started + n * seconds / self.fault.count - time.time()))
            self.guids += producer.send(self.spec.name, [bad_event(maker, n)]).guids

    def _redrive(self, control: ControlClient, started: float) -> None:
        since = datetime.fromtimestamp(started, UTC).isoformat()
        selection = {"output": STREAM_LEVEL, "from": since}
        # A rewind of a Hive output replays: asked again once it has caught up.
        asked, waited = asked_until(
            lambda: control.redrive(self.spec.name, selection), another_repair
        )
        if waited is not None:
            self.fault.notes.append(f"waited {waited:.0f} s for a Hive output's rewind to end")
        self.fault.notes.append(f"redrive {asked.id}: {asked.events or 0} dead letters")
        self._until(
            f"redrive {asked.id} to end",
            lambda: control.redrive_progress(self.spec.name).state not in ACTIVE,
        )
        done = control.redrive_progress(self.spec.name)
        delivered = ", ".join(f"{o} {n}" for o, n in sorted(done.delivered.items()))
        self.fault.notes.append(
            f"redrive {done.state}: {done.read} sent again ({delivered or 'none delivered'}), "
            f"{done.dead_lettered} dead-lettered anew"
        )

    def _until(self, what: str, holds: Callable[[], bool]) -> None:
        """Polls every second for `WAIT_SECONDS`; notes it if it never held (the run goes on:
        the audit shows what is missing)."""
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            if holds():
                return
            time.sleep(1)
        self.fault.notes.append(f"gave up waiting {WAIT_SECONDS:.0f} s for {what}")
