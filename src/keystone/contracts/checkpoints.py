"""An output's checkpoints: where each generation of one lives, and what its Spark offset and
commit logs say, read without Spark.

A rewind starts an output again from a fresh checkpoint, its next generation: generation 0 is
`<checkpoints>/<stream>/<output>`, generation n `<checkpoints>/<stream>/<output>.<n>` (an output's
name has no dot). The router writes them (Spark's `v1` logs: `offsets/<batch>` holds the end
offsets per source of a batch, `commits/<batch>` exists once the sink has the batch, under
micro-batches and Real-time Mode alike; `sources/0/0` holds where the query started); control
reads them for restore points and a rewind's progress.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from keystone.contracts.settings import Settings

Offsets = dict[int, int]  # the next offset to read, per partition of the fronting topic
START = -1  # the batch id of the position a checkpoint started at


def checkpoint_dir(settings: Settings, stream: str, output: str, generation: int = 0) -> Path:
    base = settings.checkpoints_dir / stream
    return base / output if generation == 0 else base / f"{output}.{generation}"


def generations(settings: Settings, stream: str, output: str) -> dict[int, Path]:
    """Every generation of the output's checkpoint on disk."""
    found = {}
    base = settings.checkpoints_dir / stream
    if (base / output).is_dir():
        found[0] = base / output
    for path in base.glob(f"{output}.*"):
        suffix = path.name.removeprefix(f"{output}.")
        if suffix.isdigit() and path.is_dir():
            found[int(suffix)] = path
    return found


def replay_bound_path(settings: Settings, stream: str, output: str, generation: int) -> Path:
    """Beside a rewind's generation: where its replay's labels end (the router's, written
    once, before the generation's query first starts)."""
    return settings.checkpoints_dir / stream / f"{output}.{generation}.replay.json"


def dead_letters_position_path(settings: Settings, stream: str, key: str = "_stream") -> Path:
    """Where the stream's dead letters are written up to, kept by its router as they are
    written (`router.plan.dead_letter_plan`), beside the queries' checkpoints: it outlives the
    output whose query wrote them, whose checkpoints go with it. `key`: the stream's own
    query's key on a fronting cluster (`contracts.fronting.query_key`): one file a cluster."""
    return settings.checkpoints_dir / stream / f"{key}.position.json"


def read_position(path: Path) -> tuple[str, Offsets] | None:
    """What a position file says: the checkpoint it was read from (its folder's name) and
    the offsets; none when it is missing or does not read."""
    try:
        data = json.loads(path.read_text())
        return str(data["from"]), {int(p): int(o) for p, o in data["offsets"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_position(path: Path, source: str, offsets: Offsets) -> None:
    """Replaces the position file whole (a crash leaves the old one or the new)."""
    staging = path.with_suffix(".tmp")
    staging.write_text(json.dumps({"from": source, "offsets": offsets}))
    staging.replace(path)


def remove_generations(
    settings: Settings, stream: str, output: str, below: int | None = None
) -> None:
    """Deletes the output's checkpoints (or those of generations below `below`)."""
    for generation, path in generations(settings, stream, output).items():
        if below is None or generation < below:
            shutil.rmtree(path, ignore_errors=True)
            replay_bound_path(settings, stream, output, generation).unlink(missing_ok=True)


@dataclass(frozen=True)
class Commit:
    """A position the output's sink has: every record before `offsets` was delivered when
    `batch` committed, at `time` (epoch seconds). Batch `START` is where the checkpoint began."""

    batch: int
    time: float
    offsets: Offsets


def query_id(path: Path) -> str | None:
    """The streaming query's id, stable across restarts from this checkpoint."""
    try:
        return str(json.loads((path / "metadata").read_text())["id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def commits(path: Path, topic: str, after: int = START - 1) -> list[Commit]:
    """The committed batches after batch `after` whose offsets Spark still keeps (it keeps the
    last hundred or so), oldest first; the starting position as batch `START` when `after` is
    below it."""
    found = []
    if after < START:
        start = _offsets(path / "sources" / "0" / "0", topic)
        if start is not None:
            found.append(Commit(START, _mtime(path / "sources" / "0" / "0"), start))
    for batch in _batches(path / "commits"):
        if batch <= after:
            continue
        offsets = _offsets(path / "offsets" / str(batch), topic)
        if offsets is not None:
            found.append(Commit(batch, _mtime(path / "commits" / str(batch)), offsets))
    return found


def planned(path: Path, topic: str) -> Offsets | None:
    """The end offsets of the newest batch Spark planned, committed or not: no record the
    query wrote comes from past them (a Real-time Mode epoch logs its offsets only as it
    ends, so its running epoch is not here)."""
    batches = _batches(path / "offsets")
    for batch in reversed(batches):
        offsets = _offsets(path / "offsets" / str(batch), topic)
        if offsets is not None:
            return offsets
    return None


def latest(path: Path, topic: str) -> Commit | None:
    """The newest committed position (the starting one if no batch has committed yet)."""
    batches = _batches(path / "commits")
    for batch in reversed(batches):
        offsets = _offsets(path / "offsets" / str(batch), topic)
        if offsets is not None:
            return Commit(batch, _mtime(path / "commits" / str(batch)), offsets)
    found = commits(path, topic, START - 1)
    return found[0] if found else None


def _batches(folder: Path) -> list[int]:
    try:
        return sorted(int(e.name) for e in os.scandir(folder) if e.name.isdigit())
    except OSError:
        return []


def _offsets(path: Path, topic: str) -> Offsets | None:
    """The offsets of `topic` in a Spark offset or source log file (its last line)."""
    try:
        lines = path.read_text().strip().splitlines()
        if len(lines) < 2 or not lines[0].strip().endswith("v1"):
            return None
        by_topic = json.loads(lines[-1])
        return {int(p): int(o) for p, o in by_topic[topic].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
