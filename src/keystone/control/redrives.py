"""Redrives: a stream's dead letters sent again through its current spec, each only to the
outputs it failed in.

`Redrives` is what owners ask (API, CLI, UI): `plan` counts what a selection of dead letters
(`control.deadletters`) would send again and to which outputs, `start` records the redrive (one
per stream at a time, in the audit log); `cancel` and `view` are every job's
(`control.operations`). The fleet runs its application until it is done (`control.jobs`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from keystone.contracts.errors import NotFound
from keystone.contracts.limits import check_replay_rate
from keystone.contracts.names import STREAM_LEVEL
from keystone.contracts.recovery import JobPhase, Redrive, Rewind, Selection
from keystone.contracts.sinks import SINK_TYPES, Replay
from keystone.control.deadletters import (
    Count,
    Letter,
    letters_end,
    matches,
    read_letters,
    redriven_by,
)
from keystone.control.operations import Jobs
from keystone.control.store import Planned
from keystone.control.tenancy import Caller


@dataclass(frozen=True)
class RedrivePlan:
    redrive: Redrive
    events: int  # dead letters it would send again
    outputs: dict[str, int]  # of those, per output they would reach
    skipped: int  # dead letters of outputs the stream no longer has
    truncated: bool  # counted from the first max_dead_letters_scanned only
    copies: int  # a dead letter's copies (a restarted router wrote it again): not sent
    planned: Planned  # what it was planned on: the stream's redrive before


class Redrives(Jobs[Redrive]):
    kind = Redrive

    def plan(
        self, caller: Caller, stream: str, selection: Selection, rate: int | None
    ) -> RedrivePlan:
        spec = self.streams.get(caller, stream)
        current = self.latest(stream)
        self.check_free(stream)
        rewinds = self.store.operations(Rewind, stream)
        for output in spec.outputs:  # a Hive table's replay and redrive could both write one
            if SINK_TYPES[output.sink.type].replay is Replay.RESETTABLE:
                rewind = rewinds.get(output.name)
                refused = rewind.refusal(Redrive, stream, output.name) if rewind else None
                if refused is not None:
                    raise refused
        check_replay_rate(self.settings, rate)
        known = {o.name for o in spec.outputs} | {STREAM_LEVEL}
        if selection.output is not None and selection.output not in known:
            raise NotFound(f"stream {stream!r} has no output {selection.output!r}")
        until = letters_end(self.settings, spec.name)
        redriven = redriven_by(self.settings, spec.name)
        chosen: list[Letter] = []
        truncated = False
        for scanned, letter in enumerate(read_letters(self.settings, spec.name, until)):
            if scanned >= self.settings.max_dead_letters_scanned:
                truncated = True
                break
            if (letter.partition, letter.offset) not in redriven and matches(letter, selection):
                chosen.append(letter)
        count = Count.of(chosen, [o.name for o in spec.outputs])
        redrive = Redrive(
            id=Redrive.new_id(),
            selection=selection,
            until=until,
            rate=rate or spec.recovery.max_events_per_second,
            requested_at=self.clock(),
            by=caller.name,
        )
        planned = Planned(stream, None, current.id if current is not None else None)
        return RedrivePlan(
            redrive, count.events, count.outputs, count.skipped, truncated, count.copies, planned
        )

    def start(self, caller: Caller, plan: RedrivePlan) -> RedrivePlan:
        """Starts the redrive planned (unless another started meanwhile): one that sends
        nothing is done as it starts, and runs no application."""
        if plan.events == 0:  # nothing to send: done as it starts, no application run
            done = plan.redrive.model_copy(
                update={"phase": JobPhase.DONE, "finished_at": plan.redrive.requested_at}
            )
            plan = replace(plan, redrive=done)
        self.record(
            caller,
            plan.redrive,
            plan.planned,
            selection=json.loads(plan.redrive.selection.model_dump_json(exclude_none=True)),
            events=plan.events,
            rate=plan.redrive.rate,
        )
        return plan
