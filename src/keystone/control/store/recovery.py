"""Recovery in the registry, outside its version: each output's restore points and the mark of
the last one collected, and the latest operation of each kind (`contracts.recovery.Operation`)
per output, or per stream, where `contracts.registry.slot` says. Every kind starts through one
guarded transaction (`start`) and changes through another (`update`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import redis
from pydantic import ValidationError

from keystone.contracts.errors import Conflict, NotFound
from keystone.contracts.fronting import split_key
from keystone.contracts.names import valid_name
from keystone.contracts.recovery import (
    OPERATIONS,
    Operation,
    RestorePoint,
    Rewind,
    check_free,
)
from keystone.contracts.registry import (
    key,
    operations_key,
    read_spec,
    restore_points_key,
    slot,
)
from keystone.contracts.spec import OutputSpec
from keystone.control.store.base import Repository

log = logging.getLogger(__name__)
Op = TypeVar("Op", bound=Operation)


@dataclass(frozen=True)
class Planned:
    """What an operation's plan was made on, checked again in the transaction that records
    it: the stream, its output as it was (None: an operation of the stream's), and the id of
    the latest operation of the kind there then."""

    stream: str
    output: OutputSpec | None
    previous: str | None


class RecoveryRecords(Repository):
    def start(
        self,
        record: Operation,
        planned: Planned,
        audit: dict[str, Any],
        keeps: Callable[[RestorePoint], bool] | None = None,
    ) -> None:
        """Records the operation as the latest of its kind where it goes, with the audit entry,
        unless something its plan was made on changed: the output (404, or 409), the latest of
        its kind (409: asked again meanwhile), or one of its kind, or of a kind it excludes, is
        under way there (409). `keeps`: the output's restore points that outlive it (a
        rewind's); the others go in the same step, read as they are then."""
        kind, stream = type(record), planned.stream
        output = _output_of(record)
        hash_name, field = slot(kind, stream, output)
        excluded = [slot(OPERATIONS[k], stream, output) for k in kind.excludes]
        points = restore_points_key(stream, output) if keeps is not None and output else None

        def write(tx: redis.client.Pipeline) -> None:
            tx.watch(hash_name, *(h for h, _ in excluded), *([points] if points else []))
            if planned.output is not None:
                raw = tx.get(key("stream", stream))
                now = read_spec(stream, raw).output(planned.output.name) if raw else None
                if now is None:
                    raise NotFound(f"stream {stream!r} has no output {planned.output.name!r}")
                if now != planned.output:
                    raise Conflict(f"output {planned.output.name!r} changed meanwhile: ask again")
            current = _record_or_none(kind, tx.hget(hash_name, field), output)
            others = [
                _record_or_none(OPERATIONS[k], tx.hget(h, f), output)
                for k, (h, f) in zip(kind.excludes, excluded, strict=True)
            ]
            check_free(kind, stream, output, [current, *others])
            if (current.id if current is not None else None) != planned.previous:
                where = f"output {output!r}" if output is not None else f"stream {stream!r}"
                raise Conflict(f"{where} was given another {kind.noun()} meanwhile: ask again")
            dropped = []
            if points is not None and keeps is not None:
                dropped = [m for m in tx.zrange(points, 0, -1) if not _kept(m, keeps)]
            tx.multi()
            tx.hset(hash_name, field, record.model_dump_json())
            if points is not None and dropped:
                tx.zrem(points, *dropped)

        self.tx.versioned(write, audit)

    def update(
        self,
        stream: str,
        record: Op,
        holds: Callable[[Op], bool] = lambda _: True,
        audit: dict[str, Any] | None = None,
    ) -> bool:
        """Replaces the latest operation of its kind with `record` (its next phase, say) if it
        is still the same operation, `holds` of it as it is, and nobody changes it meanwhile;
        whether it was (the audit entry with it)."""
        kind = type(record)
        hash_name, field = slot(kind, stream, _output_of(record))

        def write(tx: redis.client.Pipeline) -> bool:
            current = _record_or_none(kind, tx.hget(hash_name, field), _output_of(record))
            if current is None or current.id != record.id or not holds(current):
                return False
            tx.multi()
            tx.hset(hash_name, field, record.model_dump_json())
            return True

        return self.tx.once([hash_name], write, audit)

    def harvested(self, stream: str) -> dict[str, tuple[int, int]]:
        """Per output's query (`add_restore_points`), the generation and batch of its last
        restore point collected."""
        raw = self._call(self.redis.hgetall, key("harvested", stream))
        found = {}
        for output, mark in raw.items():
            generation, _, batch = mark.decode(errors="replace").partition(":")
            try:
                found[output.decode(errors="replace")] = (int(generation), int(batch))
            except ValueError:
                log.warning("ignoring the harvest mark %r of %s", mark, stream)
        return found

    def add_restore_points(
        self, stream: str, query: str, points: list[RestorePoint], mark: tuple[int, int]
    ) -> bool:
        """Adds the points of an output's query (its key on its fronting cluster,
        `contracts.fronting.query_key`) in generation `mark[0]`, and marks them collected, if
        that is still the query's generation: points a rewind has just undone are not brought
        back. Whether they were added."""
        output, cluster = split_key(query)
        rewinds, _ = slot(Rewind, stream, output)

        def write(tx: redis.client.Pipeline) -> bool:
            now = _record_or_none(Rewind, tx.hget(rewinds, output), output)
            view = now.on(cluster) if now is not None else None
            if (view.generation if view is not None else 0) != mark[0]:
                return False
            tx.multi()
            if points:
                tx.zadd(
                    restore_points_key(stream, output),
                    {p.model_dump_json(): p.time for p in points},
                )
            tx.hset(key("harvested", stream), query, f"{mark[0]}:{mark[1]}")
            return True

        return self.tx.once([rewinds], write)

    def drop_restore_points(self, stream: str, output: str, points: list[RestorePoint]) -> None:
        if points:
            self._call(
                self.redis.zrem,
                restore_points_key(stream, output),
                *(p.model_dump_json() for p in points),
            )

    def forget(self, stream: str, output: str | None = None) -> None:
        """The output's (or every output's) restore points, harvest marks (one per fronting
        cluster's query) and operations: its checkpoints went, so its history did (and a
        stream's own operations with the stream). One transaction over the marks: one a harvest
        writes meanwhile goes too."""
        per_output = [k for k in OPERATIONS.values() if k.per_output]
        marks = key("harvested", stream)
        hashes = [operations_key(k, stream) for k in per_output]

        def write(tx: redis.client.Pipeline) -> None:
            queries = [q.decode(errors="replace") for q in tx.hkeys(marks)]
            outputs = {output} if output is not None else {split_key(q)[0] for q in queries}
            if output is None:
                outputs |= {o.decode(errors="replace") for h in hashes for o in tx.hkeys(h)}
            tx.multi()
            for name in outputs:
                if valid_name(name):
                    tx.delete(restore_points_key(stream, name))
                for query in [q for q in queries if split_key(q)[0] == name] or [name]:
                    tx.hdel(marks, query)
                for kind in per_output:
                    tx.hdel(*slot(kind, stream, name))
            if output is None:
                for kind in OPERATIONS.values():
                    if not kind.per_output:
                        tx.hdel(*slot(kind, stream, None))

        self.tx.run(write, watch=[marks, *hashes])


def _output_of(record: Operation) -> str | None:
    """The output an operation repairs (None: one of the stream's)."""
    return getattr(record, "output", None) if record.per_output else None


def _record_or_none(model: type[Op], raw: bytes | None, output: str | None = None) -> Op | None:
    """A stored operation, or None when there is none or it does not read as the readers read
    it (`RegistryReader.read_operations`: of the output where it is kept): a stranger's write,
    which is replaced."""
    try:
        record = model.model_validate_json(raw) if raw is not None else None
    except ValidationError:
        record = None
    if raw is not None and (record is None or _output_of(record) != output):
        log.warning("replacing a %s record that does not read", model.noun())
        return None
    return record


def _kept(member: bytes, keeps: Callable[[RestorePoint], bool]) -> bool:
    try:
        return keeps(RestorePoint.model_validate_json(member))
    except ValidationError:
        return False  # a point that does not read is no point to keep
