"""Who writes a stream's dead letters as outputs come and go (`router.deadletter.
DeadLetterWriter`), read from checkpoints and the position file alone: each hand-over starts
where the last writer had got to, so no event that cannot be read is left unwritten."""

from __future__ import annotations

import json
from pathlib import Path

from keystone.contracts.checkpoints import checkpoint_dir, read_position
from keystone.contracts.names import STREAM_LEVEL
from keystone.contracts.settings import Settings
from keystone.contracts.spec import load_spec
from keystone.router.deadletter import DeadLetterWriter

TOPIC = "keystone.plays"
KAFKA = {"name": "kk", "sink": {"type": "kafka"}}  # realtime: can write them beside its records
OTHER = {"name": "k2", "sink": {"type": "kafka"}}
SEARCH = {"name": "es", "sink": {"type": "elasticsearch"}}


def writer(settings: Settings, *outputs: dict) -> DeadLetterWriter:
    spec = load_spec({"name": "plays", "owner": "team", "partitions": 2, "outputs": outputs})
    return DeadLetterWriter(settings, spec, lambda output: 0)


def committed(settings: Settings, query: str, offsets: dict[int, int], batch: int = 0) -> Path:
    """A checkpoint whose batch `batch` committed with these end offsets (Spark's v1 logs)."""
    path = checkpoint_dir(settings, "plays", query)
    (path / "offsets").mkdir(parents=True, exist_ok=True)
    (path / "commits").mkdir(exist_ok=True)
    ends = json.dumps({TOPIC: {str(p): o for p, o in offsets.items()}})
    (path / "offsets" / str(batch)).write_text(f"v1\n{{}}\n{ends}\n")
    (path / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    return path


def test_each_writer_of_a_streams_dead_letters_starts_where_the_last_one_got_to(
    tmp_path: Path,
) -> None:
    settings = Settings(state_dir=tmp_path)
    # A new stream: its realtime Kafka output writes them from its own start.
    first = writer(settings, KAFKA, SEARCH)
    assert (first.plan.host, first.written()) == ("kk", None)
    committed(settings, "kk", {0: 50, 1: 40})
    first.note()
    assert read_position(first.position) == ("kk", {0: 50, 1: 40})

    # That output removed, and its checkpoints with it: the stream's own query takes over
    # from where the removed one had got to.
    checkpoint_dir(settings, "plays", "kk").joinpath("commits", "0").unlink()
    second = writer(settings, SEARCH)
    assert (second.plan.host, second.plan.generation) == (None, 0)
    assert json.loads(second.plan.starting) == {TOPIC: {"0": 50, "1": 40}}

    # It went on to 60 and 55. An output that resumes behind that may take them over, and
    # writes those past where they are written; one that resumes past it may not.
    committed(settings, STREAM_LEVEL, {0: 60, 1: 55})
    second.note()
    committed(settings, "k2", {0: 45, 1: 40})
    third = writer(settings, OTHER, SEARCH)
    assert (third.plan.host, third.plan.written) == ("k2", {0: 60, 1: 55})
    committed(settings, "k2", {0: 70, 1: 56}, batch=1)
    ahead = writer(settings, OTHER, SEARCH)
    assert (ahead.plan.host, ahead.plan.generation, ahead.plan.starting) == (None, 0, "latest")

    # A host that read on: the position follows it, never back (a rewind reads again).
    third.note()
    assert read_position(third.position) == ("k2", {0: 70, 1: 56})
    committed(settings, STREAM_LEVEL, {0: 60, 1: 55}, batch=1)
    later = writer(settings, SEARCH)  # then no output can: the stream's own, afresh
    assert (later.plan.generation, json.loads(later.plan.starting)) == (
        1,
        {TOPIC: {"0": 70, "1": 56}},
    )
