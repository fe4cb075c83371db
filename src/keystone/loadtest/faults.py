"""Faults a load test injects, each bounded in time: into the embedded stack, undone afterwards, a
router killed (the fleet restarts it), Kafka restarted, Elasticsearch or the control service
stopped for a while; through the control API, on any cluster, one output rewound.
`--fault NAME[:OUTPUT][@AT][+FOR]`: at AT seconds into the run (default a third of it), for FOR
seconds (each fault has its default).

`rewind-output[:OUTPUT][@AT][+BACK]` rewinds one output of the stream to BACK seconds before AT
(default 30; asked again while another repair of the output runs), and holds until its replay
has caught up: the audit then shows that a rewind loses nothing, adds nothing to Elasticsearch
or Hive, and that Kafka's extra copies are replays. `backfill-output[:OUTPUT][@AT][+BACK]`
backfills one output from the stream's archive over the BACK seconds before AT (default 30;
asked again until the archive holds them, and while another repair of the output runs), and
holds until it is done: the same proof for the archive's path. The output is OUTPUT if given,
else the stream's first Kafka output (where replays are visible as copies), else its first
output.
`resize[@AT][+FOR]` sizes the router up a step under load, as a rise of its traffic would, and
notes whether it kept its process and each realtime output's longest pause meanwhile.
`kill-fronting-cluster[:NAME][@AT][+FOR]` SIGKILLs every broker of the fronting cluster taking
the stream's writes (or NAME's), notes when control moved the writes and when the first event
reached another cluster, starts the brokers again FOR seconds later, and moves the writes back
by command (a failback), noting when.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar, TypeVar

import httpx
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from keystone.contracts import fronting, kafka_clients
from keystone.contracts import metrics as names
from keystone.contracts.errors import BadRequest, KeystoneError, StackError
from keystone.contracts.fronting import FrontingCluster
from keystone.contracts.names import fronting_topic, valid_name
from keystone.contracts.processes import PidFile, stop
from keystone.contracts.recovery import OPERATIONS
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.control.client import ControlClient
from keystone.control.launcher import Deployment, router_log, router_metric
from keystone.router.plan import runs_realtime
from keystone.router.topics import watermarks
from keystone.stack import lifecycle
from keystone.stack.services import broker_service, control_service

T = TypeVar("T")
REWIND = "rewind-output"
BACKFILL = "backfill-output"
BAD_EVENTS = "bad-events"  # not a --fault: --bad-events N (loadtest.bad_events)
NAMES_AN_OUTPUT = (REWIND, BACKFILL)
ALIASES = {"rewind": REWIND, "backfill": BACKFILL}  # the short names the issues used
# How long a rewind may take to catch up, beyond its own estimate, before the fault gives up
# waiting (the audit still runs: a replay that has not caught up shows as lost events).
REWIND_WAIT_SECONDS = 300.0
KILL_BROKER = "kill-broker"
KILL_WORKER = "kill-spark-worker"
KILL_LEADER = "kill-control-leader"
KILL_FRONTING = "kill-fronting-cluster"
RESIZE = "resize"
RESIZE_WAIT_SECONDS = 60.0  # for the fleet to size the router up, and the router to follow
FLEET_PASSES_SECONDS = 10.0  # a few of the fleet's passes: a size not changed by then stays
STALL_SAMPLE_SECONDS = 0.2  # how often the realtime outputs' topics are looked at meanwhile
NAMES_A_NODE = (KILL_BROKER, KILL_WORKER)  # `:N`: which broker or worker
_SYNTAX = re.compile(
    r"(?P<name>[a-z-]+)(?::(?P<output>[a-z0-9_]+))?"
    r"(?:@(?P<at>\d+(?:\.\d+)?))?(?:\+(?P<for>\d+(?:\.\d+)?))?"
)


@dataclass
class Fault:
    """One fault of a run: when it began and ended (seconds into the run), and what it did."""

    name: str
    at: float
    hold: float  # seconds it lasts; for rewind-output, seconds back the output is rewound
    output: str | None = None  # rewind-output: the output (None: chosen from the stream)
    node: int | None = None  # kill-broker, kill-spark-worker: which (None: chosen)
    cluster: str | None = None  # kill-fronting-cluster: which (None: the one taking writes)
    count: int = 0  # bad-events: how many
    began: float | None = None
    ended: float | None = None
    switched: float | None = None  # kill-fronting-cluster: when control moved the writes
    notes: list[str] = field(default_factory=list)

    kinds: ClassVar[dict[str, tuple[str, float]]] = {
        # name: (what it does, default seconds it lasts)
        "kill-router": ("SIGKILL to the stream's router and its JVM", 0.0),
        "restart-kafka": ("Kafka (its first broker) stopped, then started again", 20.0),
        KILL_BROKER: ("SIGKILL to one Kafka broker, started again FOR s later", 15.0),
        KILL_WORKER: ("SIGKILL to a Spark worker and its executors, started again later", 30.0),
        KILL_LEADER: ("SIGKILL to the control process leading the fleet, started later", 30.0),
        KILL_FRONTING: (
            "SIGKILL to every broker of the fronting cluster taking the stream's writes, "
            "started again FOR s later, then the writes moved back to it by command",
            30.0,
        ),
        "stop-elasticsearch": ("Elasticsearch stopped, then started again", 60.0),
        "stop-control": ("the control service stopped, then started again", 30.0),
        REWIND: ("one output rewound FOR seconds back, until its replay caught up", 30.0),
        BACKFILL: ("one output backfilled from the archive over FOR seconds, until done", 30.0),
        RESIZE: (
            "the router sized up a step through the stream's bounds, which are put back FOR s "
            "after it runs at that size (and it is sized for its traffic again)",
            20.0,
        ),
    }

    @classmethod
    def help(cls) -> str:
        """The `--fault` option's help (rich markup), from the kinds above."""
        aliases = {full: short for short, full in ALIASES.items()}
        kinds = "; ".join(
            f"{name}{f' ({aliases[name]})' if name in aliases else ''}: {what}"
            + (f" (FOR {hold:g} s unless given)" if hold else "")
            for name, (what, hold) in cls.kinds.items()
        )
        return (
            "NAME\\[:OUTPUT]\\[@AT]\\[+FOR], at AT s (default a third in), for FOR s. "
            f"NAME is one of: {kinds}. {' and '.join(NAMES_AN_OUTPUT)} name an OUTPUT (default "
            "the first Kafka output, else the first) and go FOR s back; "
            f"{' and '.join(f'{n}:N' for n in NAMES_A_NODE)} name a node by number (default "
            f"the leader of the stream's first partition; worker 1); {KILL_FRONTING}:NAME a "
            "fronting cluster. Repeatable."
        )

    @classmethod
    def parse(cls, text: str, duration: float) -> Fault:
        """`NAME[:OUTPUT][@AT][+FOR]`; only rewind-output and backfill-output name an OUTPUT,
        and their FOR is how many seconds back they go."""
        found = _SYNTAX.fullmatch(text)
        name = ALIASES.get(found["name"], found["name"]) if found else None
        if found is None or name not in cls.kinds:
            raise BadRequest(
                f"--fault {text!r}: expected NAME[:OUTPUT][@AT][+FOR], NAME one of "
                f"{', '.join(cls.kinds)} (or {', '.join(ALIASES)})"
            )
        output = found["output"]
        node = None
        if name in NAMES_A_NODE and output is not None:
            if not output.isdigit() or int(output) < 1:
                raise BadRequest(
                    f"--fault {text!r}: {output!r} is not a broker's or worker's number"
                )
            node, output = int(output), None
        cluster = None
        if name == KILL_FRONTING and output is not None:
            cluster, output = output, None
        if output is not None and name not in NAMES_AN_OUTPUT:
            raise BadRequest(
                f"--fault {text!r}: only {' and '.join(NAMES_AN_OUTPUT)} name an output "
                f"({' and '.join(NAMES_A_NODE)} a number)"
            )
        if output is not None and not valid_name(output):
            raise BadRequest(f"--fault {text!r}: {output!r} is not an output's name")
        at = float(found["at"]) if found["at"] else duration / 3
        hold = float(found["for"]) if found["for"] else cls.kinds[name][1]
        if at >= duration:
            raise BadRequest(f"--fault {text!r}: at {at:.0f} s, after the run ({duration:.0f} s)")
        if name in NAMES_AN_OUTPUT and hold <= 0:
            raise BadRequest(f"--fault {text!r}: it goes back more than 0 seconds")
        return cls(name, at, hold, output, node, cluster)

    @property
    def what(self) -> str:
        if self.name == REWIND:
            return f"output {self.output or '?'} rewound {self.hold:g} s back, until caught up"
        if self.name == BACKFILL:
            return f"output {self.output or '?'} backfilled over {self.hold:g} s, until done"
        if self.name == KILL_BROKER:
            which = f"broker {self.node}" if self.node else "the stream's first partition's leader"
            return f"SIGKILL to {which}, started again {self.hold:g} s later"
        if self.name == KILL_WORKER:
            which = f"Spark worker {self.node or 1}"
            return f"SIGKILL to {which} and its executors, started again {self.hold:g} s later"
        if self.name == KILL_LEADER:
            return (
                f"SIGKILL to the control process leading the fleet, started {self.hold:g} s later"
            )
        if self.name == KILL_FRONTING:
            which = f"fronting cluster {self.cluster}" if self.cluster else "the fronting cluster"
            return (
                f"SIGKILL to every broker of {which} taking the writes, started again "
                f"{self.hold:g} s later, then failed back"
            )
        if self.name == BAD_EVENTS:
            return f"{self.count} events dead-lettered until a fix at {self.at:g} s, redriven"
        return self.kinds[self.name][0].replace("FOR s", f"{self.hold:g} s")


SERVICE = {
    "restart-kafka": "kafka",
    KILL_BROKER: "kafka",
    "stop-elasticsearch": "elasticsearch",
    "stop-control": "control",
    KILL_LEADER: "control",
    KILL_FRONTING: "kafka",
}


def check(settings: Settings, faults: list[Fault]) -> None:
    """Faults that stop a service are injected into the embedded stack only: a cluster of one's
    own is not ours to break (a rewind goes through its control API, as an owner's would)."""
    for fault in faults:
        service = SERVICE.get(fault.name)
        if service is not None and not settings.is_embedded(service):
            raise BadRequest(f"--fault {fault.name}: {service} is not the embedded one")
        if fault.name == KILL_BROKER and (fault.node or 0) > settings.kafka_brokers:
            raise BadRequest(
                f"--fault {fault.name}:{fault.node}: the embedded Kafka has "
                f"{settings.kafka_brokers} broker(s) (KEYSTONE_KAFKA_BROKERS)"
            )
        if fault.name == KILL_FRONTING and len(settings.fronting_clusters) < 2:
            raise BadRequest(
                f"--fault {fault.name}: there is one fronting cluster, no other to take the "
                "writes (KEYSTONE_FRONTING_CLUSTERS)"
            )
        if fault.name == KILL_FRONTING and fault.cluster not in (None, *settings.fronting_clusters):
            raise BadRequest(
                f"--fault {fault.name}:{fault.cluster}: the fronting clusters are "
                f"{', '.join(settings.fronting_clusters)}"
            )
        if fault.name == KILL_WORKER and settings.spark_cluster != "standalone":
            raise BadRequest(
                f"--fault {fault.name}: the routers run in local mode, on no Spark worker "
                "(KEYSTONE_SPARK_CLUSTER=standalone runs them on the stack's cluster)"
            )
        if fault.name == KILL_WORKER and (fault.node or 1) > settings.spark_workers:
            raise BadRequest(
                f"--fault {fault.name}:{fault.node}: the cluster has {settings.spark_workers} "
                "worker(s) (KEYSTONE_SPARK_WORKERS)"
            )


def choose_outputs(spec: StreamSpec, faults: list[Fault]) -> None:
    """Names the output of each rewind-output fault, before the run: the one asked for (which
    the stream must have), else the first Kafka output (its replays show as extra copies), else
    the first output."""
    names = [o.name for o in spec.outputs]
    for fault in faults:
        if fault.name not in NAMES_AN_OUTPUT:
            continue
        if fault.output is None and names:
            # Its own topic: a Keystone output's replays land in another stream's.
            kafka = [o.name for o in spec.outputs if o.sink.owned_topic(spec.name, o.name)]
            fault.output = (kafka or names)[0]
        if fault.output not in names:
            raise BadRequest(
                f"--fault {fault.name}: stream {spec.name!r} has no output {fault.output!r}: "
                f"it has {', '.join(names) or 'none'}"
            )


def inject(settings: Settings, stream: str, fault: Fault, started: float) -> None:
    """Runs one fault to its end: begin, hold, undo (blocking; a load test runs it in a
    thread beside the producers)."""
    if fault.name == REWIND:
        rewind(settings, stream, fault, started)
        return
    if fault.name == BACKFILL:
        backfill(settings, stream, fault, started)
        return
    if fault.name == "kill-router":
        deployed = Deployment.load(settings, stream)
        if deployed is None or not deployed.alive():
            fault.notes.append("no router was running")
            return
        fault.began = time.time() - started
        # As a crash would: the fleet must notice by itself (its record stays).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(deployed.pid, signal.SIGKILL)
        fault.notes.append(f"router pid {deployed.pid} killed")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            again = Deployment.load(settings, stream)
            if again is not None and again.pid != deployed.pid and again.alive():
                fault.ended = time.time() - started
                fault.notes.append(
                    f"the fleet started it again (pid {again.pid}) "
                    f"{fault.ended - fault.began:.1f} s later"
                )
                return
            time.sleep(0.2)
        fault.notes.append("the fleet had not started it again after 120 s")
        return
    if fault.name == KILL_BROKER:
        node = fault.node or leader(settings, fronting_topic(stream), 0)
        kill_node(settings, f"broker {node}", broker_service(node), fault, started)
        return
    if fault.name == KILL_WORKER:
        # The worker's process group: its executors die with it, as on a machine that died.
        node = fault.node or 1
        kill_node(settings, f"Spark worker {node}", f"spark-worker-{node}", fault, started)
        return
    if fault.name == KILL_LEADER:
        kill_control_leader(settings, fault, started)
        return
    if fault.name == KILL_FRONTING:
        kill_fronting_cluster(settings, stream, fault, started)
        return
    if fault.name == RESIZE:
        resize(settings, stream, fault, started)
        return
    service = SERVICE[fault.name]
    pidfile = PidFile(settings.run_dir / f"{service}.pid")
    fault.began = time.time() - started
    if not stop(pidfile, signal.SIGTERM, timeout=60):
        raise StackError(f"{service} was not running: cannot inject {fault.name}")
    fault.notes.append(f"{service} stopped at {fault.began:.1f} s")
    time.sleep(fault.hold)
    restart(settings, service)
    fault.ended = time.time() - started
    fault.notes.append(f"{service} healthy again at {fault.ended:.1f} s")


def kill_node(settings: Settings, what: str, service: str, fault: Fault, started: float) -> None:
    """SIGKILL to a service's process group, as a crash of its machine would (no controlled
    shutdown), started again `fault.hold` s later."""
    pid = sigkill(settings, service, what)
    fault.began = time.time() - started
    fault.notes.append(f"{what} (pid {pid}) killed at {fault.began:.1f} s")
    time.sleep(fault.hold)
    restart(settings, service)
    fault.ended = time.time() - started
    fault.notes.append(f"{what} healthy again at {fault.ended:.1f} s")


def sigkill(settings: Settings, service: str, what: str) -> int:
    """SIGKILL to an embedded service's process group, by its pid file; its pid."""
    pid = PidFile(settings.run_dir / f"{service}.pid").running_pid()
    if pid is None:
        raise StackError(f"{what} ({service}) was not running: cannot kill it")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    return pid


def kill_fronting_cluster(settings: Settings, stream: str, fault: Fault, started: float) -> None:
    """SIGKILL to every broker of the fronting cluster taking the stream's writes (or the one
    named), as the loss of its machines would; notes when control moved the writes, and when
    the first event reached another cluster; starts the brokers again `fault.hold` s after the
    kill and, once they answer, moves the writes back by command, noting when."""
    with ControlClient.from_settings(settings) as control:
        view = control.fronting()
        lost = fault.cluster or view.streams.get(stream, view.active)
        alone = stream in view.streams  # switched alone: failed back alone
        fault.cluster = lost
        cluster = fronting.cluster(settings, lost)
        others = [c for c in fronting.clusters(settings) if c.name != lost]
        before = {c.name: _held(settings, c, stream) for c in others}
        services = [broker_service(n, cluster) for n in range(1, settings.kafka_brokers + 1)]
        for service in services:
            sigkill(settings, service, f"broker {service}")
        fault.began = time.time() - started
        fault.notes.append(
            f"every broker of {lost} ({', '.join(services)}) killed at {fault.began:.1f} s"
        )
        moved = wrote = False
        deadline = time.monotonic() + fault.hold
        while time.monotonic() < deadline and not (moved and wrote):
            elapsed = time.time() - started - fault.began
            if not moved:
                now = control.fronting()
                taking = now.streams.get(stream, now.active)
                if taking != lost:
                    moved = True
                    fault.switched = time.time() - started
                    fault.notes.append(
                        f"control moved the writes to {taking} {elapsed:.1f} s after"
                    )
            if not wrote:
                for other in others:
                    if _held(settings, other, stream) > before[other.name]:
                        wrote = True
                        fault.notes.append(
                            f"the first event reached {other.name} {elapsed:.1f} s after the kill"
                        )
                        break
            time.sleep(STALL_SAMPLE_SECONDS)
        if not moved:
            fault.notes.append(f"the writes were not moved within {fault.hold:g} s")
        time.sleep(max(0.0, deadline - time.monotonic()))
        lifecycle.up(settings, lambda _service, _state: None, set(services))
        fault.notes.append(f"{lost} healthy again at {time.time() - started:.1f} s")
        # Its brokers answer before its replicas have caught up: until then a partition's
        # readable end is short of what it acknowledged, and the audit would read too little.
        _await_in_sync(cluster.connect(settings), fronting_topic(stream))
        fault.notes.append(f"{lost}'s replicas in sync at {time.time() - started:.1f} s")
        control.switch_fronting(lost, stream if alone else None)
        fault.ended = time.time() - started
        fault.notes.append(f"failed back to {lost} by command at {fault.ended:.1f} s")


def _await_in_sync(connection: Settings, topic: str, timeout: float = 120.0) -> None:
    """Until every replica of every partition of `topic` is in sync (or `timeout`)."""
    admin = AdminClient(kafka_clients.librdkafka(connection) | {"log_level": 0})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(KafkaException, KeyError):
            partitions = admin.list_topics(topic, timeout=5).topics[topic].partitions.values()
            if partitions and all(set(p.isrs) == set(p.replicas) for p in partitions):
                return
        time.sleep(STALL_SAMPLE_SECONDS)


def _held(settings: Settings, cluster: FrontingCluster, stream: str) -> int:
    """Records the stream's fronting topic holds on the cluster (-1: it did not answer)."""
    try:
        ends = watermarks(cluster.connect(settings), fronting_topic(stream))
    except KeystoneError:
        return -1
    return sum(end for _, end in ends.values())


def kill_control_leader(settings: Settings, fault: Fault, started: float) -> None:
    """SIGKILL to the control process that leads the fleet; notes which replica leads next and
    when; started again `fault.hold` s later."""
    leading = fleet_leader(settings)
    if leading is None:
        raise StackError("no control process leads the fleet: cannot kill its leader")
    service = control_service(leading + 1)
    pid = sigkill(settings, service, "the fleet's leader")
    fault.began = time.time() - started
    fault.notes.append(f"{service} (pid {pid}), the fleet's leader, killed at {fault.began:.1f} s")
    deadline = time.monotonic() + fault.hold
    while time.monotonic() < deadline:
        now = fleet_leader(settings)
        if now is not None and now != leading:
            taken = time.time() - started - fault.began
            fault.notes.append(f"control replica {now + 1} leads the fleet {taken:.1f} s later")
            break
        time.sleep(0.5)
    else:
        fault.notes.append(f"no other control process led the fleet within {fault.hold:g} s")
    time.sleep(max(0.0, deadline - time.monotonic()))
    restart(settings, service)
    fault.ended = time.time() - started
    fault.notes.append(f"{service} healthy again at {fault.ended:.1f} s")


def fleet_leader(settings: Settings) -> int | None:
    """Which control process (its index in `control_urls`) says it leads the fleet now."""
    for index, url in enumerate(settings.control_urls):
        try:
            answer = httpx.get(f"{url}/readyz", timeout=2)
        except httpx.HTTPError:
            continue
        if answer.headers.get("content-type", "").startswith("application/json") and (
            answer.json().get("fleet_leader")
        ):
            return index
    return None


def leader(settings: Settings, topic: str, partition: int) -> int:
    """The broker leading one partition of a topic now."""
    admin = AdminClient(kafka_clients.librdkafka(settings))
    found = admin.list_topics(topic, timeout=10).topics.get(topic)
    if found is None or partition not in found.partitions:
        raise StackError(f"topic {topic} has no partition {partition}")
    node = found.partitions[partition].leader
    if node < 0:
        raise StackError(f"partition {partition} of {topic} has no leader now")
    return node


def another_repair(error: KeystoneError) -> bool:
    """Whether control refused because another repair of the output (or the stream's redrive)
    is under way: one that ends by itself, so that asking again later is what an owner does."""
    return error.status == 409 and any(kind.noun() in error.details for kind in OPERATIONS.values())


def asked_until(
    ask: Callable[[], T], passing: Callable[[KeystoneError], bool]
) -> tuple[T, float | None]:
    """`ask()`'s answer, asked again every 2 s while control refuses it for a reason that ends
    by itself (`passing`), as an owner would, for at most `REWIND_WAIT_SECONDS`; and the
    seconds it waited (None: taken at once). Another refusal, or one past the wait, is
    raised."""
    began = time.monotonic()
    refused = False
    while True:
        try:
            return ask(), (time.monotonic() - began if refused else None)
        except KeystoneError as e:
            if not passing(e) or time.monotonic() - began > REWIND_WAIT_SECONDS:
                raise
            refused = True
            time.sleep(2)


def restart(settings: Settings, service: str | None = None) -> None:
    """Starts whatever of the stack is stopped (or only `service`), and waits until it is
    healthy."""
    lifecycle.up(settings, lambda _service, _state: None, None if service is None else {service})


def rewind(settings: Settings, stream: str, fault: Fault, started: float) -> None:
    """Rewinds the output `fault.hold` seconds back through the control API (asked again while
    another repair of the output runs), then waits until its replay has caught up (or
    `REWIND_WAIT_SECONDS` past its own estimate). A rewind control refuses otherwise is noted
    and not begun: the report says why."""
    with ControlClient.from_settings(settings) as control:
        if fault.output is None:
            choose_outputs(control.stream(stream).spec, [fault])
        output = fault.output
        assert output is not None, "choose_outputs names one or refuses"
        to = datetime.fromtimestamp(time.time() - fault.hold, UTC).isoformat()
        try:  # for the same moment, once another repair of the output has ended
            plan, waited = asked_until(
                lambda: control.rewind(stream, output, {"to": to}), another_repair
            )
        except KeystoneError as e:
            fault.notes.append(f"control refused to rewind {output} to {to}: {e}")
            return
        if waited is not None:
            fault.notes.append(f"waited {waited:.0f} s for the output's other repair to end")
        fault.began = time.time() - started
        held = plan.sink.records_in_period
        fault.notes.append(
            f"{output} rewound to {to} ({fault.hold:g} s back) at {fault.began:.1f} s: rewind "
            f"{plan.id}, {plan.events:,} events to replay ({plan.sink.kind}"
            + (f", about {held:,} records written again" if held is not None else "")
            + ")"
        )
        deadline = time.monotonic() + REWIND_WAIT_SECONDS + (plan.eta_seconds or 0)
        state, replayed, trouble = plan.state, 0, ""
        try:
            while time.monotonic() < deadline:
                try:
                    now = control.rewind_progress(stream, output)
                except KeystoneError as e:
                    trouble = str(e)  # control stopped by another fault, say: ask again
                else:
                    if now.id != plan.id:
                        fault.notes.append(f"rewind {now.id} replaced {plan.id}")
                        return
                    state, replayed = now.state, now.replayed
                    if state != "replaying":
                        break
                time.sleep(1)
        finally:
            fault.ended = time.time() - started
        took = fault.ended - fault.began
        if state == "replaying":
            fault.notes.append(
                f"still replaying after {took:.0f} s: {replayed:,} of {plan.events:,} events"
                + (f" (last error: {trouble})" if trouble else "")
            )
        else:
            fault.notes.append(f"{state} after {took:.1f} s: {replayed:,} events replayed")


def backfill(settings: Settings, stream: str, fault: Fault, started: float) -> None:
    """Backfills the output over the `fault.hold` seconds before now through the control API,
    asked again while the archive has yet to hold them or another repair of the output runs,
    then waits until it is done (or `REWIND_WAIT_SECONDS` past its own estimate). A backfill
    control refuses otherwise is noted and not begun."""
    with ControlClient.from_settings(settings) as control:
        if fault.output is None:
            choose_outputs(control.stream(stream).spec, [fault])
        output = fault.output
        assert output is not None, "choose_outputs names one or refuses"
        now = time.time()
        span = {
            "from": datetime.fromtimestamp(now - fault.hold, UTC).isoformat(),
            "to": datetime.fromtimestamp(now, UTC).isoformat(),
        }
        try:  # the archive writes what arrived since every so often
            plan, waited = asked_until(
                lambda: control.backfill(stream, output, span),
                lambda e: "not yet to" in str(e) or another_repair(e),
            )
        except KeystoneError as e:
            fault.notes.append(f"control refused to backfill {output} over {span}: {e}")
            return
        if waited is not None:
            fault.notes.append(f"waited {waited:.0f} s for the archive or another repair")
        fault.began = time.time() - started
        fault.notes.append(
            f"{output} backfilled from {span['from']} to {span['to']} at {fault.began:.1f} s: "
            f"backfill {plan.id} ({plan.sink.kind})"
        )
        deadline = time.monotonic() + REWIND_WAIT_SECONDS
        state, read, trouble = plan.state, 0, ""
        try:
            while time.monotonic() < deadline:
                try:
                    progress = control.backfill_progress(stream, output)
                except KeystoneError as e:
                    trouble = str(e)  # control stopped by another fault, say: ask again
                else:
                    if progress.id != plan.id:
                        fault.notes.append(f"backfill {progress.id} replaced {plan.id}")
                        return
                    state, read = progress.state, progress.read
                    if state not in ("running", "cancelling"):
                        break
                time.sleep(1)
        finally:
            fault.ended = time.time() - started
        took = fault.ended - fault.began
        fault.notes.append(
            f"{state} after {took:.1f} s: {read:,} archived events routed again"
            + (f" (last error: {trouble})" if trouble else "")
        )


def resize(settings: Settings, stream: str, fault: Fault, started: float) -> None:
    """Sizes the router up under load and back, through the control API, as a rise and a fall
    of its traffic would: the stream's least size set to twice the size the router runs at (the
    fleet's rule sizes it up at once), and, `fault.hold` seconds after the router's metrics say
    it runs at that size, its bounds put back as they were (the rule then sizes it for its
    traffic again). Notes whether the router's process is the one it was (a router that resizes
    in place keeps it), which of its queries started again (its log says), and the longest
    pause meanwhile of each realtime output with a topic of its own: its topic not growing
    while the load runs (a restart would show there)."""
    log_path = router_log(settings, stream)
    with ControlClient.from_settings(settings) as control:
        spec = control.stream(stream).spec
        before = Deployment.load(settings, stream)
        size = control.status(stream).router.sized_for
        if before is None or not before.alive() or not size:
            fault.notes.append("no router running at a size")
            return
        bigger, bounds = 2 * size, spec.sizing.model_dump()
        wider = {
            "min_events_per_second": bigger,
            "max_events_per_second": max(bigger, spec.sizing.max_events_per_second),
        }
        owned = [o.sink.owned_topic(stream, o.name) for o in spec.outputs if runs_realtime(o)]
        topics = [t for t in owned if t is not None]
        logged = log_path.stat().st_size if log_path.exists() else 0
        with StallWatch(settings, topics) as stalls:
            fault.began = time.time() - started
            try:
                _put_sizing(control, stream, wider)
                up = _await_size(settings, stream, lambda: bigger)
                if up is not None:
                    time.sleep(fault.hold)
            finally:  # the owner's bounds back, whatever happened
                put_back = time.monotonic()
                _put_sizing(control, stream, bounds)
            settled = _await_fleet(lambda: control.status(stream).router.sized_for != bigger)
            final = control.status(stream).router.sized_for
            down = None
            if _await_size(settings, stream, lambda: final) is not None:
                down = time.monotonic() - put_back
            fault.ended = time.time() - started
        after = Deployment.load(settings, stream)
    if up is None:
        fault.notes.append(f"the router did not run at {bigger:,} events/s within 60 s")
        return
    fault.notes.append(f"resized from {size:,} to {bigger:,} events/s in {up:.1f} s")
    if not settled:
        fault.notes.append(
            f"then kept at {bigger:,} events/s by the fleet's rule (its traffic, or a change "
            "by traffic within 10 minutes)"
        )
    elif down is None:
        fault.notes.append(f"then the router did not run at {final:,} events/s within 60 s")
    else:
        fault.notes.append(f"then to {final:,} events/s, its traffic's size, in {down:.1f} s")
    same = after is not None and after.pid == before.pid and after.alive()
    fault.notes.append(
        f"router pid {before.pid} kept"
        if same
        else f"router restarted: pid {before.pid} → {after.pid if after else 'none'}"
    )
    again = sorted(set(_restarted_queries(log_path, logged)))
    fault.notes.append(f"queries started again: {', '.join(again) or 'none'}")
    for topic, pause in stalls.longest.items():
        fault.notes.append(f"longest pause of realtime output topic {topic}: {pause:.1f} s")


def _put_sizing(control: ControlClient, stream: str, sizing: dict[str, int]) -> None:
    """The stream as it is now with these bounds, asked again while control does not answer
    (another fault may have stopped it) for at most `RESIZE_WAIT_SECONDS`."""
    deadline = time.monotonic() + RESIZE_WAIT_SECONDS
    while True:
        try:
            spec = control.stream(stream).spec
            control.put_stream({**json.loads(spec.to_json()), "sizing": sizing})
            return
        except KeystoneError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def _restarted_queries(path: Path, offset: int) -> list[str]:
    """The queries the router's log says it stopped for a new plan since `offset`."""
    if not path.exists():
        return []
    with path.open("rb") as log:
        log.seek(offset)
        text = log.read().decode(errors="replace")
    return re.findall(r"query (\S+) stopping for its new plan", text)


def _await_fleet(done: Callable[[], bool]) -> bool:
    """Whether `done` within `FLEET_PASSES_SECONDS`: the fleet decides a router's size each pass
    (every second), so a size it has not changed by then stays."""
    deadline = time.monotonic() + FLEET_PASSES_SECONDS
    while time.monotonic() < deadline:
        with contextlib.suppress(KeystoneError):
            if done():
                return True
        time.sleep(0.5)
    return False


def _await_size(settings: Settings, stream: str, wanted: Callable[[], int | None]) -> float | None:
    """Seconds until the router says it runs at the size `wanted` gives (asked each time: the
    fleet's figure may move meanwhile); None after `RESIZE_WAIT_SECONDS`."""
    began = time.monotonic()
    while time.monotonic() - began < RESIZE_WAIT_SECONDS:
        with contextlib.suppress(KeystoneError):
            if router_size(settings, stream) == wanted():
                return time.monotonic() - began
        time.sleep(0.5)
    return None


def router_size(settings: Settings, stream: str) -> int | None:
    """The size the stream's router says it runs its micro-batches at (its metrics), if it
    answers."""
    deployed = Deployment.load(settings, stream)
    if deployed is None:
        return None
    values = router_metric(settings.bind_host, deployed.port, names.ROUTER_SIZE, stream)
    return int(values[0]) if values else None


class StallWatch:
    """While the `with` block runs, the longest time each topic did not grow (its partitions'
    end offsets, summed), looked at every `STALL_SAMPLE_SECONDS`."""

    def __init__(self, settings: Settings, topics: list[str]) -> None:
        self.settings = settings
        self.topics = topics
        self.longest: dict[str, float] = dict.fromkeys(topics, 0.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="stall-watch", daemon=True)

    def __enter__(self) -> StallWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        consumer = Consumer(
            kafka_clients.librdkafka(self.settings) | {"group.id": "keystone-stalls"}
        )
        try:
            listed = consumer.list_topics(timeout=15).topics
            partitions = {
                t: [TopicPartition(t, p) for p in listed[t].partitions]
                for t in self.topics
                if t in listed
            }
            last: dict[str, tuple[int, float]] = {}
            while not self._stop.wait(STALL_SAMPLE_SECONDS):
                now = time.monotonic()
                for topic, parts in partitions.items():
                    try:
                        size = sum(consumer.get_watermark_offsets(p, timeout=2)[1] for p in parts)
                    except KafkaException:
                        continue  # asked again next time; the pause then shows as longer
                    count, since = last.get(topic, (-1, now))
                    if size != count:
                        last[topic] = (size, now)
                    else:
                        self.longest[topic] = max(self.longest[topic], now - since)
        finally:
            consumer.close()
