"""A backfill of a Hive output whose live query has not yet passed the backfilled range (its
router redeployed with a fix, say, and behind): the backfill says it waits for the live output,
and reads and replaces the rows only once the live output has committed past them, so the
table holds each event once. Replaced before, the rows would be written again by the
live output when it caught up (the load test's race). On the real stack; the swap's own
pieces: tests/router/test_backfill.py."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from keystone.contracts.checkpoints import checkpoint_dir, latest
from keystone.contracts.names import fronting_topic
from keystone.control.launcher import Deployment
from keystone.ingest_proxy.client import DirectProducer
from tests.support.api import Api, owner
from tests.support.stack import Stack
from tests.support.tables import Tables
from tests.support.waiting import eventually

STREAM, OWNER, APP = "bl_main", "team-behind", "bl_app"
MINUTE_MS = 60_000


def quiet_trigger(now_ms: int, quiet_minutes: int = 20) -> str:
    """A micro-batch interval whose next batch is at least `quiet_minutes` away: Spark runs a
    query's batches at multiples of its interval since the epoch (a 30-minute query started at
    :29 runs its second batch a minute later), not an interval after it started."""
    minute = now_ms // MINUTE_MS
    interval = next(m for m in range(30, 24 * 60) if m - minute % m >= quiet_minutes)
    return f"{interval} minutes"


def spec(trigger: str) -> dict:
    """One Hive output under `trigger` (the live query's pace) and the archive every 5 s."""
    delivery = {"mode": "microbatch", "trigger": trigger}
    warehouse = {"type": "hive"}
    return {
        "name": STREAM,
        "owner": OWNER,
        "partitions": 2,
        "producers": [APP],
        "outputs": [
            {"name": "warehouse", "sink": warehouse, "delivery": delivery, "start": "earliest"}
        ],
        "archive": {"trigger": "5 seconds", "keep_days": 2},
    }


def _iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def test_a_hive_backfill_waits_for_the_live_output_to_pass_its_range(
    stack: Stack, admin: Api
) -> None:
    team = owner(admin, OWNER)
    team.ok("POST", "/v1/apps", {"name": APP})
    tables = Tables(stack)
    producer = DirectProducer(stack.kafka(), APP)
    path = f"/v1/streams/{STREAM}/outputs/warehouse/backfill"
    now = int(time.time() * 1000)
    try:
        # A live query that runs a batch when it starts, then not for the rest of the test: the
        # events sent before it starts are in its first batch, those sent after wait.
        team.ok("POST", "/v1/streams", spec(quiet_trigger(now)))
        first = producer.send(STREAM, [{"n": n} for n in range(20)], at=now - 90 * MINUTE_MS).guids

        def warehouse() -> list[str]:
            return sorted(r["guid"] for r in tables.read(f"keystone.{STREAM}__warehouse"))

        eventually("the live output's first batch", lambda: warehouse() == sorted(first), 240)
        at = now - 20 * MINUTE_MS
        behind = producer.send(STREAM, [{"n": n} for n in range(50)], at=at).guids
        window = {"from": _iso(at - MINUTE_MS), "to": _iso(at + MINUTE_MS)}
        started: dict = {}

        def accepted() -> bool:
            """Asked until the archive has committed the later events (its rows are in the
            table a moment before its checkpoint says so): till then control says to wait."""
            answer = team.call("POST", path, {**window, "max_events_per_second": 1000})
            if answer.status_code == 422 and "wait for its next write" in answer.text:
                return False
            assert answer.status_code < 300, answer.text
            started.update(answer.json())
            return True

        eventually("the archive to pass the range, the backfill accepted", accepted, 120)
        assert set(behind) <= {r["guid"] for r in tables.read(f"keystone.{STREAM}__archive")}

        def waiting() -> str:
            state = team.ok("GET", path)
            assert state["id"] == started["id"] and state["state"] == "running", state
            return state.get("waiting") or ""

        eventually("the backfill to wait for the live output", lambda: "live" in waiting(), 240)
        assert warehouse() == sorted(first)  # nothing replaced yet
        topic = fronting_topic(STREAM)
        committed = latest(checkpoint_dir(stack.settings, STREAM, "warehouse"), topic)
        assert committed is not None and sum(committed.offsets.values()) == len(first)

        # The live output catches up (redeployed at a 5 s pace); the backfill then swaps.
        before = Deployment.load(stack.settings, STREAM)
        team.ok("PUT", f"/v1/streams/{STREAM}", spec("5 seconds"))
        eventually(
            "the backfill to be done",
            lambda: team.ok("GET", path)["state"] == "done",
            timeout=300,
        )
        assert before is not None and Deployment.load(stack.settings, STREAM).pid != before.pid
        final = team.ok("GET", path)
        assert (final["events"], final["read"], final["delivered"]) == (50, 50, 50)
        assert not final.get("waiting")
        eventually(
            "each event once in the table",
            lambda: warehouse() == sorted(first + behind),
            timeout=60,
        )
        # The live output had passed them: it writes none of them again.
        committed = latest(checkpoint_dir(stack.settings, STREAM, "warehouse"), topic)
        assert committed is not None and sum(committed.offsets.values()) == len(first + behind)
    finally:
        tables.close()
        team.call("DELETE", f"/v1/streams/{STREAM}")
