"""The load test's faults without a stack: `--fault` parsed (rewind-output with and without its
output and seconds back, and what is refused), the rewound output chosen from the stream, a
rewind-output fault accepted on a cluster of one's own, and the rewind and backfill faults
carried out against a control API that answers as the real one's models do."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from typer.testing import CliRunner

from keystone.cli import app as cli_app
from keystone.contracts.errors import BadRequest, Conflict, Unprocessable
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec, load_spec
from keystone.control.models import (
    BackfillPublic,
    BackfillRequest,
    RewindPublic,
    RewindRequest,
    SinkReplayPublic,
)
from keystone.loadtest import faults
from keystone.loadtest.faults import Fault, check, choose_outputs, inject


def test_a_rewind_output_fault_alone_rewinds_30_s_back_a_third_into_the_run() -> None:
    fault = Fault.parse("rewind-output", 90)
    assert (fault.name, fault.at, fault.hold, fault.output) == ("rewind-output", 30, 30, None)


@pytest.mark.parametrize(
    ("text", "at", "back", "output"),
    [
        ("rewind-output@20", 20, 30, None),
        ("rewind-output+45", 30, 45, None),
        ("rewind-output@20+12.5", 20, 12.5, None),
        ("rewind-output:hive_out@60+30", 60, 30, "hive_out"),
        ("rewind-output:clicks", 30, 30, "clicks"),
        ("rewind-output:clicks+5", 30, 5, "clicks"),
    ],
)
def test_a_rewind_output_fault_with_its_parts(
    text: str, at: float, back: float, output: str | None
) -> None:
    fault = Fault.parse(text, 90)
    assert (fault.name, fault.at, fault.hold, fault.output) == ("rewind-output", at, back, output)


@pytest.mark.parametrize(
    ("text", "name", "output"),
    [("backfill", "backfill-output", None), ("rewind:search@20", "rewind-output", "search")],
)
def test_a_recovery_fault_has_a_short_name_too(text: str, name: str, output: str | None) -> None:
    fault = Fault.parse(text, 90)
    assert (fault.name, fault.output) == (name, output)


def test_the_other_faults_parse_as_before() -> None:
    killed = Fault.parse("kill-router@20", 60)
    assert (killed.name, killed.at, killed.hold, killed.output) == ("kill-router", 20, 0, None)
    kafka = Fault.parse("restart-kafka@10+5", 60)
    assert (kafka.name, kafka.at, kafka.hold) == ("restart-kafka", 10, 5)
    assert Fault.parse("stop-control", 60).hold == 30
    resized = Fault.parse("resize@2+12", 60)
    assert (resized.name, resized.at, resized.hold) == ("resize", 2, 12)
    assert "put back 12 s after it runs at that size" in resized.what  # its own hold, said


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("rewind-outpt@5", "expected NAME[:OUTPUT][@AT][+FOR]"),
        ("rewind-output@", "expected NAME[:OUTPUT][@AT][+FOR]"),
        ("rewind-output:@5", "expected NAME[:OUTPUT][@AT][+FOR]"),
        ("rewind-output:Clicks@5", "expected NAME[:OUTPUT][@AT][+FOR]"),
        ("rewind-output@5+30:clicks", "expected NAME[:OUTPUT][@AT][+FOR]"),
        ("rewind-output+-5", "expected NAME[:OUTPUT][@AT][+FOR]"),
        ("rewind-output:a__b@5", "not an output's name"),
        ("rewind-output:9lives@5", "not an output's name"),
        ("kill-router:clicks@5", "only rewind-output and backfill-output name an output"),
        ("kill-control-leader:2", "only rewind-output and backfill-output name an output"),
        ("rewind-output@5+0", "more than 0 seconds"),
        ("rewind-output@60", "after the run"),
    ],
)
def test_bad_faults_are_refused_saying_why(text: str, says: str) -> None:
    with pytest.raises(BadRequest) as refused:
        Fault.parse(text, 60)
    assert says in str(refused.value)


def test_the_node_faults_name_a_broker_or_worker_by_number_and_fit_the_stack() -> None:
    leader = Fault.parse("kill-broker@10", 60)
    assert (leader.name, leader.node, leader.hold) == ("kill-broker", None, 15)
    assert "the stream's first partition's leader" in leader.what
    second = Fault.parse("kill-broker:2@10+5", 60)
    assert (second.node, second.hold, second.output) == (2, 5, None)
    worker = Fault.parse("kill-spark-worker:2", 60)
    assert (worker.node, worker.hold) == (2, 30)
    assert Fault.parse("kill-control-leader", 60).hold == 30
    with pytest.raises(BadRequest, match="not a broker's or worker's number"):
        Fault.parse("kill-broker:leader", 60)
    cluster = Settings(kafka_brokers=3, spark_cluster="standalone", spark_workers=2)
    check(cluster, [second, worker, Fault.parse("kill-control-leader", 60)])
    with pytest.raises(BadRequest, match="3 broker"):
        check(cluster, [Fault.parse("kill-broker:4", 60)])
    with pytest.raises(BadRequest, match="local mode"):
        check(Settings(), [worker])  # no worker to kill
    with pytest.raises(BadRequest, match="2 worker"):
        check(cluster, [Fault.parse("kill-spark-worker:3", 60)])


def test_the_refusal_lists_rewind_output_among_the_faults() -> None:
    with pytest.raises(BadRequest, match="rewind-output"):
        Fault.parse("nothing", 60)


def test_the_command_s_help_names_every_fault_from_their_one_list() -> None:
    """`keystone loadtest --help` says every kind `Fault.kinds` has (it once missed two)."""
    result = CliRunner().invoke(cli_app, ["loadtest", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    said = " ".join(re.sub("[│╭╮╰╯─]", " ", result.output).split())  # out of rich's boxes
    for name, (what, _) in Fault.kinds.items():
        assert name in said and " ".join(what.split()) in said, name


def test_a_rewind_is_injected_on_a_cluster_of_ones_own() -> None:
    """It goes through the control API; stopping a service is for the embedded stack only."""
    theirs = Settings(
        kafka_bootstrap="kafka.example:9092",
        elasticsearch_url="http://es.example:9200",
        control_url="http://control.example:8000",
    )
    check(theirs, [Fault.parse("rewind-output@10", 60), Fault.parse("kill-router@5", 60)])
    with pytest.raises(BadRequest, match="kafka is not the embedded one"):
        check(theirs, [Fault.parse("restart-kafka@10", 60)])


def _spec(*sinks: tuple[str, str]) -> StreamSpec:
    outputs = []
    for name, kind in sinks:
        sink: dict[str, Any] = {"type": kind}
        if kind == "keystone":
            sink["stream"] = "elsewhere"
        outputs.append({"name": name, "sink": sink})
    return load_spec({"name": "lt_faults", "owner": "team", "outputs": outputs})


def test_the_rewound_output_is_the_first_kafka_one_else_the_first() -> None:
    mixed = _spec(("search", "elasticsearch"), ("warehouse", "hive"), ("clicks", "kafka"))
    chosen = [Fault.parse("rewind-output@5", 60), Fault.parse("kill-router@5", 60)]
    choose_outputs(mixed, chosen)
    assert [f.output for f in chosen] == ["clicks", None]
    assert chosen[0].what.startswith("output clicks rewound 30 s back")
    no_kafka = Fault.parse("rewind-output@5", 60)
    choose_outputs(_spec(("search", "elasticsearch"), ("onwards", "keystone")), [no_kafka])
    assert no_kafka.output == "search"
    named = Fault.parse("rewind-output:warehouse@5", 60)
    choose_outputs(mixed, [named])
    assert named.output == "warehouse"


def test_a_rewind_of_an_output_the_stream_lacks_is_refused_before_the_run() -> None:
    fault = Fault.parse("rewind-output:nowhere@5", 60)
    with pytest.raises(BadRequest, match="no output 'nowhere': it has search, clicks"):
        choose_outputs(_spec(("search", "elasticsearch"), ("clicks", "kafka")), [fault])


class FakeControl:
    """The control API as the fault uses it: a rewind, then its progress, answered as the real
    routes' models."""

    def __init__(self, spec: StreamSpec, states: list[str], refuse: Exception | None = None):
        self.spec, self.states, self.refuse = spec, states, refuse
        self.asked: list[tuple[str, str, dict[str, Any]]] = []
        self.polled = 0

    def __enter__(self) -> FakeControl:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def stream(self, name: str) -> Any:
        return type("Public", (), {"spec": self.spec})()

    def backfill(self, stream: str, output: str, request: dict[str, Any]) -> BackfillPublic:
        self.asked.append((stream, output, request))
        if self.refuse is not None:
            refused, self.refuse = self.refuse, None  # refused once, then taken
            raise refused
        return self._backfilled(output, "running", 0)

    def backfill_progress(self, stream: str, output: str) -> BackfillPublic:
        state = self.states[min(self.polled, len(self.states) - 1)]
        self.polled += 1
        return self._backfilled(output, state, 400 if state == "done" else 150)

    @staticmethod
    def _backfilled(output: str, state: str, read: int) -> BackfillPublic:
        return BackfillPublic(
            id="bf-0123456789ab",
            stream="lt_faults",
            output=output,
            state=state,
            start=datetime.now(UTC),
            end=datetime.now(UTC),
            rate=5000,
            events=400,
            read=read,
            requested_at=datetime.now(UTC),
            by="admin",
            sink=SinkReplayPublic(kind="append-only"),
        )

    def rewind(self, stream: str, output: str, request: dict[str, Any]) -> RewindPublic:
        self.asked.append((stream, output, request))
        if self.refuse is not None:
            refused, self.refuse = self.refuse, None  # refused once, then taken
            raise refused
        return self._answer(output, "replaying", 0)

    def rewind_progress(self, stream: str, output: str) -> RewindPublic:
        state = self.states[min(self.polled, len(self.states) - 1)]
        self.polled += 1
        return self._answer(output, state, 400 if state == "caught_up" else 150)

    @staticmethod
    def _answer(output: str, state: str, replayed: int) -> RewindPublic:
        return RewindPublic(
            id="rw-0123456789ab",
            stream="lt_faults",
            output=output,
            state=state,
            target="a time",
            start={0: 100},
            until={0: 500},
            events=400,
            replayed=replayed,
            rate=5000,
            eta_seconds=0.1,
            requested_at=datetime.now(UTC),
            by="admin",
            sink=SinkReplayPublic(kind="append-only", records_in_period=380),
        )


@pytest.fixture
def control(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Installs a fake control (`control(states, refuse)`) and takes the waits out."""
    monkeypatch.setattr(faults.time, "sleep", lambda _s: None)

    def install(states: list[str], refuse: Exception | None = None) -> FakeControl:
        fake = FakeControl(_spec(("search", "elasticsearch"), ("clicks", "kafka")), states, refuse)
        monkeypatch.setattr(faults.ControlClient, "from_settings", lambda _settings: fake)
        return fake

    return install


def test_a_rewind_output_fault_rewinds_back_and_holds_until_caught_up(control: Any) -> None:
    fake = control(["replaying", "replaying", "caught_up"])
    fault = Fault.parse("rewind-output@5+45", 60)
    before = datetime.now(UTC).timestamp()
    inject(Settings(), "lt_faults", fault, started=before - 5)
    [(stream, output, request)] = fake.asked
    assert (stream, output) == ("lt_faults", "clicks")  # chosen when the run did not choose
    asked = RewindRequest.model_validate(request)  # as control reads it: a time with its zone
    assert asked.to is not None and asked.to.tzinfo is not None
    assert before - 46 <= asked.to.timestamp() <= datetime.now(UTC).timestamp() - 44
    assert fake.polled == 3  # until it was no longer replaying
    assert fault.began is not None and fault.ended is not None
    assert 5 <= fault.began <= fault.ended
    [started, ended] = fault.notes
    assert "clicks rewound to" in started and "(45 s back)" in started
    assert "rewind rw-0123456789ab, 400 events to replay (append-only" in started
    assert "about 380 records written again" in started
    assert ended.startswith("caught_up after") and "400 events replayed" in ended


def test_a_rewind_waits_for_another_repair_of_its_output_then_begins(control: Any) -> None:
    # Refused once because the output is being backfilled (the answer names the backfill).
    busy = Conflict("output lt_faults.clicks is being backfilled", backfill="bf-0123456789ab")
    fake = control(["caught_up"], refuse=busy)
    fault = Fault.parse("rewind-output@5+45", 60)
    inject(Settings(), "lt_faults", fault, started=datetime.now(UTC).timestamp())
    assert len(fake.asked) == 2 and fault.began is not None  # asked again, then begun
    waited, started, _ = fault.notes
    assert waited.endswith("for the output's other repair to end") and "clicks rewound" in started


def test_a_rewind_control_refuses_is_noted_and_never_begun(control: Any) -> None:
    control([], refuse=Unprocessable("2026-11-25T10:00:00+00:00 is before what it holds"))
    fault = Fault.parse("rewind-output:search@5+30", 60)
    inject(Settings(), "lt_faults", fault, started=datetime.now(UTC).timestamp())
    assert fault.began is None and fault.ended is None  # the report lists it with its notes
    [note] = fault.notes
    assert note.startswith("control refused to rewind search to ")
    assert "before what it holds" in note


def test_a_rewind_that_does_not_catch_up_in_time_says_so_and_ends(
    control: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    control(["replaying"])
    monkeypatch.setattr(faults, "REWIND_WAIT_SECONDS", -0.1)  # past the deadline at once
    fault = Fault.parse("rewind-output:clicks@5", 60)
    inject(Settings(), "lt_faults", fault, started=datetime.now(UTC).timestamp())
    # Ended, so the run does not take it for a stopped service to start again.
    assert fault.began is not None and fault.ended is not None
    assert fault.notes[-1].startswith("still replaying after")
    assert "0 of 400 events" in fault.notes[-1]


def test_a_backfill_output_fault_waits_for_the_archive_then_holds_until_done(
    control: Any,
) -> None:
    behind = Unprocessable("the archive holds every event ingested up to ... not yet to ...")
    fake = control(["running", "done"], refuse=behind)
    fault = Fault.parse("backfill-output@5+20", 60)
    assert fault.what == "output ? backfilled over 20 s, until done"
    before = datetime.now(UTC).timestamp()
    inject(Settings(), "lt_faults", fault, started=before - 5)
    [first, (stream, output, request)] = fake.asked  # asked again once the archive has it
    assert first == (stream, output, request) and (stream, output) == ("lt_faults", "clicks")
    asked = BackfillRequest.model_validate(request)
    assert 19 <= asked.end.timestamp() - asked.start.timestamp() <= 21
    assert asked.end.timestamp() >= before
    [waited, started, ended] = fault.notes
    assert waited.startswith("waited") and "for the archive or another repair" in waited
    assert "backfill bf-0123456789ab (append-only)" in started
    assert ended.startswith("done after") and "400 archived events" in ended


def test_a_backfill_control_refuses_for_another_reason_is_noted_and_never_begun(
    control: Any,
) -> None:
    control([], refuse=Conflict("stream 'lt_faults' keeps no archive to backfill from"))
    fault = Fault.parse("backfill-output:search@5", 60)
    inject(Settings(), "lt_faults", fault, started=datetime.now(UTC).timestamp())
    assert fault.began is None
    [note] = fault.notes
    assert note.startswith("control refused to backfill search") and "no archive" in note
