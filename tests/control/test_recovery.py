"""The fleet's side of recovery against the real registry (Redis), over checkpoints written
here in Spark's format (tests/router/test_recovery.py has Spark write them): restore points
collected once each, thinned past an hour, dropped past the stream's retention and kept whatever
the router does; a rewind followed to its end, the checkpoint it left behind deleted once the
new one has committed."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from keystone.contracts.checkpoints import checkpoint_dir, generations
from keystone.contracts.errors import Conflict
from keystone.contracts.recovery import Backfill, JobPhase, RestorePoint, RewindPhase, Span
from keystone.contracts.registry import key
from keystone.contracts.spec import StreamSpec, load_spec
from keystone.control.recovery import Recovery
from keystone.control.store import Planned, Store, audit
from tests.contracts.test_recovery import rewind as a_rewind
from tests.contracts.test_recovery import spark_checkpoint
from tests.support.stack import Stack

T0 = 1_800_000_000.0
TOPIC = "keystone.rc_plays"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world(stack: Stack, tmp_path: Path) -> Iterator[tuple[Store, Recovery, Clock, StreamSpec]]:
    store = Store.connect(stack.settings)
    # Checkpoints of its own: the stream is never stored, so no router of the stack's fleet
    # writes them (the fleet is not what is tested here).
    settings = stack.settings.model_copy(update={"state_dir": tmp_path})
    spec = load_spec(
        {
            "name": "rc_plays",
            "owner": "team-rc",
            "partitions": 2,
            "outputs": [{"name": "search", "sink": {"type": "elasticsearch"}}],
            "recovery": {"keep": "3 hours"},
        }
    )
    clock = Clock()
    yield store, Recovery(settings, store, clock), clock, spec
    store.recovery.forget(spec.name)
    store.close()


def test_restore_points_are_collected_once_thinned_and_dropped_past_retention(
    world: tuple[Store, Recovery, Clock, StreamSpec],
) -> None:
    store, recovery, clock, spec = world
    path = checkpoint_dir(recovery.settings, spec.name, "search")
    offsets = {b: {"0": 10 * b, "1": 5 * b} for b in range(40)}
    spark_checkpoint(path, offsets, committed=38, topic=TOPIC)
    os.utime(path / "sources" / "0" / "0", (T0 - 60, T0 - 60))
    for batch in range(39):  # as if each batch committed a minute after the last
        stamp = T0 + 60 * batch
        os.utime(path / "commits" / str(batch), (stamp, stamp))
    clock.now = T0 + 60 * 40
    recovery.step(spec)
    recovery.step(spec)  # nothing new: nothing added twice
    points = store.restore_points(spec.name, "search")
    assert [p.id for p in points][:3] == ["0-38", "0-37", "0-36"]  # newest first
    assert len(points) == 39 + 1  # batches 0..38 and where it started
    assert points[0].offsets == {0: 380, 1: 190} and points[0].query == "5a0c"
    assert len({p.id for p in points}) == len(points)

    clock.now = T0 + 60 * 40 + 2 * 3600  # two hours on: one per five minutes is left
    recovery.step(spec)
    thinned = store.restore_points(spec.name, "search")
    assert 8 <= len(thinned) <= 10  # 40 minutes of points, in five-minute buckets
    assert thinned[0].id == "0-38"  # the newest of each bucket stays

    clock.now = T0 + 60 * 40 + 4 * 3600  # past the stream's 3 hours: only the newest is left,
    recovery.step(spec)  # where the idle output still is
    assert [p.id for p in store.restore_points(spec.name, "search")] == ["0-38"]


def test_a_rewind_is_caught_up_once_committed_and_the_old_checkpoint_goes(
    world: tuple[Store, Recovery, Clock, StreamSpec],
) -> None:
    store, recovery, clock, spec = world
    clock.now = time.time()  # the checkpoints below are written now
    settings = recovery.settings
    spark_checkpoint(
        checkpoint_dir(settings, spec.name, "search"), {0: {"0": 50, "1": 50}}, 0, topic=TOPIC
    )
    rewind = a_rewind(start={0: 0, 1: 0}, until={0: 50, 1: 50}, total=100)
    # As control's API records it (its checks are the end-to-end test's).
    store.redis.hset(key("rewinds", spec.name), "search", rewind.model_dump_json())
    new = checkpoint_dir(settings, spec.name, "search", 1)
    late = RestorePoint(id="0-9", time=clock.now, generation=0, batch=9, offsets={0: 60, 1: 60})
    assert not store.recovery.add_restore_points(
        spec.name, "search", [late], (0, 9)
    )  # undone history
    recovery.step(spec)  # the router has not started the new generation yet
    assert store.rewinds(spec.name)["search"].replaying
    assert set(generations(settings, spec.name, "search")) == {0}
    spark_checkpoint(new, {0: {"0": 30, "1": 20}, 1: {"0": 50, "1": 50}}, 0, topic=TOPIC)
    recovery.step(spec)  # committed once: half way, the old checkpoint is no longer needed
    assert store.rewinds(spec.name)["search"].replaying
    assert set(generations(settings, spec.name, "search")) == {1}
    spark_checkpoint_commit(new, 1)
    recovery.step(spec)
    done = store.rewinds(spec.name)["search"]
    assert done.phase is RewindPhase.CAUGHT_UP and done.finished_at == clock.now
    ids = [p.id for p in store.restore_points(spec.name, "search")]
    assert ids[:3] == ["1-1", "1-0", "1-start"]  # the new generation's points follow


def test_a_rewind_on_two_fronting_clusters_catches_up_once_both_have(
    world: tuple[Store, Recovery, Clock, StreamSpec],
) -> None:
    store, recovery, clock, spec = world
    clock.now = time.time()
    settings = recovery.settings
    assert settings.fronting_clusters[1] == "west"  # the suite's stack runs two
    west = a_rewind(
        start={0: 0, 1: 0},
        until={0: 50, 1: 50},
        total=130,
        clusters={"west": Span(start={0: 0, 1: 0}, until={0: 20, 1: 10})},
    )
    store.redis.hset(key("rewinds", spec.name), "search", west.model_dump_json())
    spark_checkpoint(checkpoint_dir(settings, spec.name, "search@west"), {}, -1, topic=TOPIC)
    home = checkpoint_dir(settings, spec.name, "search", 1)
    spark_checkpoint(home, {0: {"0": 50, "1": 50}}, 0, topic=TOPIC)
    recovery.step(spec)  # home has caught up, west's new generation has not started
    halfway = store.rewinds(spec.name)["search"]
    assert halfway.replaying and halfway.caught_up_on == [""]
    assert not halfway.on(None).replaying  # type: ignore[union-attr]  # home runs as usual
    assert set(generations(settings, spec.name, "search@west")) == {0}
    there = checkpoint_dir(settings, spec.name, "search@west", 1)
    spark_checkpoint(there, {0: {"0": 20, "1": 5}, 1: {"0": 20, "1": 10}}, 0, topic=TOPIC)
    recovery.step(spec)
    assert store.rewinds(spec.name)["search"].replaying  # west half way: its old one gone
    assert set(generations(settings, spec.name, "search@west")) == {1}
    spark_checkpoint_commit(there, 1)
    recovery.step(spec)
    assert store.rewinds(spec.name)["search"].phase is RewindPhase.CAUGHT_UP
    points = store.restore_points(spec.name, "search")
    assert {p.id for p in points if p.cluster == "west"} == {"1-start@west", "1-0@west", "1-1@west"}
    assert {p.id for p in points if not p.cluster} == {"1-start", "1-0"}
    store.recovery.forget(spec.name, "search")  # west's harvest mark goes with the output's
    assert store.recovery.harvested(spec.name) == {}


def spark_checkpoint_commit(path: Path, batch: int) -> None:
    (path / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')


def test_a_rewind_and_a_backfill_of_one_output_exclude_each_other_when_recorded(
    stack: Stack,
) -> None:
    """Each plan refuses the other while it runs; two asked at once, each planned before the
    other was recorded, are told apart by the transaction that records them (409)."""
    # A database of its own: no fleet reads it, so the stream stored here runs no router.
    settings = stack.settings
    base, password = settings.redis_url.rsplit("/", 1)[0], settings.redis_auth()
    apart = {"redis_url": f"{base}/7", "redis_password": SecretStr(password or "")}
    store = Store.connect(settings.model_copy(update=apart))
    spec = load_spec(
        {
            "name": "rc_both",
            "owner": "team-rc",
            "outputs": [{"name": "search", "sink": {"type": "elasticsearch"}}],
        }
    )
    output = spec.output("search")
    assert output is not None
    entry = audit("team-rc", "test", "rc_both.search", owner="team-rc")
    backfill = Backfill(
        id="bf-0123456789ab", output="search", start=0, end=1, rate=1, requested_at=T0, by="x"
    )
    try:
        store.redis.flushdb()
        store.specs.put(spec)
        replaying = a_rewind()  # of search, replaying
        recovery = store.recovery
        recovery.start(replaying, Planned(spec.name, output, None), entry, lambda _: True)
        with pytest.raises(Conflict, match=replaying.id):
            recovery.start(backfill, Planned(spec.name, output, None), entry)
        recovery.update(spec.name, replaying.model_copy(update={"phase": RewindPhase.CAUGHT_UP}))
        recovery.start(backfill, Planned(spec.name, output, None), entry)
        second = a_rewind(id="rw-0123456789ac")
        with pytest.raises(Conflict, match=backfill.id):
            recovery.start(second, Planned(spec.name, output, replaying.id), entry, lambda _: True)
        done = backfill.model_copy(update={"phase": JobPhase.DONE})
        assert recovery.update(spec.name, done)
        recovery.start(second, Planned(spec.name, output, replaying.id), entry, lambda _: True)
    finally:
        store.redis.flushdb()
        store.close()
