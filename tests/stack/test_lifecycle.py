"""`down` stops exactly what `up` started and keeps the data; a taken port fails fast."""

from __future__ import annotations

import json
import shutil
import socket
import time
import uuid

import pytest

from keystone.contracts.processes import PidFile, spawn
from keystone.contracts.settings import Settings
from keystone.stack import lifecycle
from tests.support.kafka import consume_all, produce
from tests.support.processes import alive, groups_alive, processes_mentioning, this_runs_own
from tests.support.stack import Stack, checked, private_state_dir, stack_env


@pytest.mark.exclusive  # it stops or restarts a service every test uses
def test_down_stops_everything_and_up_keeps_the_data(stack: Stack) -> None:
    topic = f"durable-{uuid.uuid4().hex[:8]}"
    produce(stack.settings, topic, [(b'{"kept": true}', {"ks_guid": "g-kept"})])
    database = f"durable_{uuid.uuid4().hex[:8]}"
    writer = stack.python("-m", "tests.stack.spark_jobs", "hive-write", database, "t", "4")
    _, errors = writer.communicate(timeout=300)
    assert writer.returncode == 0, errors[-3000:]
    pids = [s["pid"] for s in stack.status()["services"].values()]
    router = _a_running_router(stack)
    pids.append(router)
    # The stack's processes live outside the test run's own (left out of the last check below).
    assert not set(pids) & this_runs_own()

    try:
        checked(stack.keystone("stack", "down"))

        assert not [pid for pid in pids if alive(pid)]
        assert groups_alive(pids) == []
        # The stack's own: a module on the other worker may be running a process of its own
        # against the stack (`tests.support.tables.Tables`), which is not the stack's to stop.
        assert processes_mentioning(str(stack.state_dir), but=this_runs_own()) == {}
        down = stack.keystone("stack", "status", "--json")
        assert down.returncode == 1
        assert {s["health"] for s in json.loads(down.stdout)["services"].values()} == {"stopped"}
    finally:  # the stack up again for the tests after this one, whatever failed
        checked(stack.keystone("stack", "up", timeout=600))

    [message] = consume_all(stack.settings, topic, expected=1)
    assert message.value() == b'{"kept": true}'
    rows = checked(stack.keystone("sql", f"SELECT id, writer, hour FROM {database}.t", "--json"))
    assert sorted(json.loads(line)["id"] for line in rows.stdout.splitlines()) == [0, 1, 2, 3]
    checked(stack.keystone("stream", "delete", "lifecycle"))  # its router, started again by up


def _a_running_router(stack: Stack) -> int:
    """A stream with an output, whose router the fleet starts; its pid once it runs."""
    spec = {
        "name": "lifecycle",
        "owner": "team-stack",
        "partitions": 1,
        "outputs": [{"name": "copy", "sink": {"type": "kafka"}}],
    }
    checked(stack.keystone("stream", "create", "-f", "-", stdin=json.dumps(spec)))
    record = PidFile(stack.state_dir / "run" / "routers" / "lifecycle.json")
    deadline = time.monotonic() + 120
    while (pid := record.running_pid()) is None or not _router_up(stack):
        assert time.monotonic() < deadline, "the router did not start"
        time.sleep(1)
    return pid


def _router_up(stack: Stack) -> bool:
    shown = stack.keystone("stream", "show", "lifecycle", "--json")
    return (
        shown.returncode == 0 and json.loads(shown.stdout)["status"]["router"]["state"] == "running"
    )


def test_up_is_idempotent(stack: Stack) -> None:
    before = {name: s["pid"] for name, s in stack.status()["services"].items()}
    checked(stack.keystone("stack", "up"))
    after = {name: s["pid"] for name, s in stack.status()["services"].items()}
    assert after == before


def test_a_taken_port_fails_fast_naming_the_port() -> None:
    state_dir = private_state_dir()
    env = stack_env(state_dir, port_offset=5000)
    kafka_port = int(env["KEYSTONE_KAFKA_PORT"])
    holder = Stack(env=env, state_dir=state_dir)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", kafka_port))
        squatter.listen()
        result = holder.keystone("stack", "up", timeout=120)
    try:
        assert result.returncode == 1
        assert f"port {kafka_port} on 127.0.0.1 is already in use" in result.stderr
        assert "KEYSTONE_KAFKA_PORT" in result.stderr
        # Nothing was started: no pid file, no process of that stack.
        assert not list((state_dir / "run").glob("*.pid"))
        assert processes_mentioning(str(state_dir)) == {}
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def test_a_stack_its_kafka_refuses_starts_nothing() -> None:
    """The state directory's Kafka was made with one broker: a start with three is refused
    before any service starts (PostgreSQL once started first and was left running)."""
    state_dir = private_state_dir()
    (state_dir / "data" / "kafka").mkdir(parents=True)
    (state_dir / "data" / "kafka" / "brokers").write_text("1 plaintext")
    env = stack_env(state_dir, port_offset=5000) | {"KEYSTONE_KAFKA_BROKERS": "3"}
    try:
        result = Stack(env=env, state_dir=state_dir).keystone("stack", "up", timeout=120)
        assert result.returncode == 1
        assert "Keep KEYSTONE_KAFKA_BROKERS=1" in result.stderr
        assert not list((state_dir / "run").glob("*.pid"))
        assert processes_mentioning(str(state_dir)) == {}
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.mark.stack  # it starts services of a stack of its own: a minute of the suite's time
def test_a_service_that_fails_to_start_takes_the_ones_started_before_it_down() -> None:
    state_dir = private_state_dir()
    # Elasticsearch's JVM refuses the heap at once, after Redis, PostgreSQL and Kafka started.
    env = stack_env(state_dir, port_offset=5000) | {"KEYSTONE_ELASTICSEARCH_HEAP": "not-a-size"}
    try:
        result = Stack(env=env, state_dir=state_dir).keystone("stack", "up", timeout=300)
        assert result.returncode == 1
        assert "elasticsearch exited while starting" in result.stderr
        assert "stopped" in result.stdout + result.stderr  # what it had started, said
        assert not [p for p in (state_dir / "run").glob("*.pid") if PidFile(p).running_pid()]
        assert processes_mentioning(str(state_dir)) == {}
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def test_down_stops_a_service_of_other_settings_whose_pid_file_is_there(tmp_path) -> None:
    """A fronting cluster (or broker) since removed from the settings: `down` stops it too,
    or it would keep its ports, and a purge would delete the state it runs on."""
    settings = Settings(state_dir=tmp_path)
    pidfile = PidFile(settings.run_dir / "kafka-west.pid")
    pid = spawn(["sleep", "300"], settings.logs_dir / "kafka-west.log", pidfile, cwd=tmp_path)
    said: list[tuple[str, str]] = []
    lifecycle.down(settings, False, lambda what, state: said.append((what, state)))
    assert pidfile.running_pid() is None and not alive(pid)
    assert ("kafka-west", "stopped (not of these settings)") in said
