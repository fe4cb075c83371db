"""Shadows of outputs (`contracts.shadows`), as owners ask for them and the fleet ends them.

`Shadows` starts one (checked as the output it would become, from where the live output has
got to), shows it with its comparison, drops it, or promotes it: its version becomes the live
output's in the same registry step that ends it (`control.store.specs.Specs.change`), so the
live output's query, started again by its router's redeploy, goes on from its checkpoint with
the new version (`docs/shadows.md` says what each sink then holds). `ShadowUpkeep`, a step of
the fleet's every pass, ends the shadows that expired and, once the router says it runs no
query of an ended one, removes its targets and checkpoint.
"""

from __future__ import annotations

import logging
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass

from keystone.contracts.checkpoints import Offsets, checkpoint_dir, latest
from keystone.contracts.errors import Conflict, InvalidSpec, KeystoneError, NotFound
from keystone.contracts.limits import check_limit, check_replay_rate
from keystone.contracts.names import fronting_topic, topic_key
from keystone.contracts.settings import Settings
from keystone.contracts.shadows import (
    Comparison,
    Shadow,
    ShadowEnd,
    ShadowPhase,
    comparison_path,
    stopped_path,
)
from keystone.contracts.spec import OutputSpec, StreamSpec, duration_seconds
from keystone.control.operations import Operations
from keystone.control.recovery import committed
from keystone.control.store import Planned, Store, audit
from keystone.control.streams import replaced
from keystone.control.tenancy import Caller
from keystone.router.sinks.provision import provisioner_for
from keystone.router.sinks.route import Route

log = logging.getLogger(__name__)

CONTROL = "control"  # who ends an expired shadow, in the audit log


@dataclass(frozen=True)
class ShadowView:
    """A shadow, how it compares so far, and where its query has got to."""

    shadow: Shadow
    comparison: Comparison
    position: Offsets | None  # where the shadow's query has committed to (None: not yet)
    targets: list[str]  # where it writes, for people


def targets_of(settings: Settings, spec: StreamSpec, shadow: Shadow) -> list[str]:
    route = Route.of_shadow(settings, spec, shadow)
    return [route.output.sink.target(spec.name, shadow.output), f"topic {route.dead_letter_topic}"]


def view_of(settings: Settings, spec: StreamSpec, shadow: Shadow) -> ShadowView:
    path = comparison_path(settings.state_dir, spec.name, shadow.id)
    commit = latest(checkpoint_dir(settings, spec.name, shadow.id), fronting_topic(spec.name))
    return ShadowView(
        shadow,
        Comparison.load(path),
        commit.offsets if commit is not None else None,
        targets_of(settings, spec, shadow),
    )


class Shadows(Operations[Shadow]):
    kind = Shadow

    def start(
        self,
        caller: Caller,
        stream: str,
        output: str,
        version: OutputSpec,
        expires_in: str | None = None,
        rate: int | None = None,
    ) -> ShadowView:
        """Runs `version` as a shadow of `output` (its name must be the output's), for
        `expires_in` (a duration; the settings' `shadow_hours` by default) reading at most
        `rate` events a second (the stream's recovery rate by default)."""
        if version.name != output:
            raise InvalidSpec(
                "the shadow's output is named as the output it shadows",
                problems=[{"field": "output.name", "message": f"expected {output!r}"}],
            )
        spec, live = self.output_of(caller, stream, version.name)
        current = self.latest(stream, version.name)
        self.check_free(stream, version.name)
        if version.sink != live.sink:
            raise InvalidSpec(
                "a shadow writes with its output's sink, into targets of its own: change the "
                "sink by changing the output",
                problems=[{"field": "sink", "message": "must be the output's"}],
            )
        if version == live:
            raise InvalidSpec("the shadow is the output as it is: nothing to compare")
        # Checked as the output it would become, as a change to the output is.
        self.streams.check(caller, replaced(spec, version), spec)
        running = [s for s in self.store.operations(Shadow, stream).values() if s.running]
        check_limit(
            self.settings,
            "max_outputs_per_stream",
            len(spec.outputs) + len(running) + 1,
            "outputs and shadows running",
            "outputs",
        )
        seconds = (
            duration_seconds(expires_in)
            if expires_in is not None
            else self.settings.shadow_hours * 3600
        )
        hours = math.ceil(seconds / 3600)
        check_limit(self.settings, "max_shadow_hours", hours, "hours", "expires_in")
        check_replay_rate(self.settings, rate)
        now = self.clock()
        # An output's topic of that name, claimed before shadows were: never written, nor removed.
        topic = version.sink.shadowed().owned_topic(stream, version.name)
        if topic is not None and topic_key(topic) in self.store.specs.topic_owners():
            raise Conflict(f"the shadow's topic {topic} is an output's: rename that output's topic")
        shadow = Shadow(
            id=Shadow.new_id(),
            output=version.name,
            version=version,
            live=live,
            start=self._start(spec, live),
            expires_at=now + seconds,
            rate=rate or spec.recovery.max_events_per_second,
            requested_at=now,
            by=caller.name,
        )
        self.record(
            caller,
            shadow,
            Planned(stream, live, current.id if current is not None else None),
            seconds=seconds,
            rate=shadow.rate,
            start=shadow.start,
        )
        if current is not None:  # what the output's last shadow left for its owner to read
            forget_files(self.settings, stream, current)
        return view_of(self.settings, spec, shadow)

    def _start(self, spec: StreamSpec, live: OutputSpec) -> Offsets:
        """Where the live output's query has committed to on home's fronting topic (a
        partition it has not yet read: where the topic ends now)."""
        rewind = self.store.rewinds(spec.name).get(live.name)
        position = committed(self.settings, spec.name, live.name, rewind)
        ends = self.positions.extent(fronting_topic(spec.name)).end
        delivered = position.offsets if position is not None else {}
        return {p: delivered.get(p, end) for p, end in ends.items()}

    def versions_running(self, stream: str) -> list[OutputSpec]:
        """The versions of the stream's running shadows (readers of its fields too)."""
        return [s.version for s in self.store.operations(Shadow, stream).values() if s.running]

    def version_running(self, caller: Caller, stream: str, output: str) -> OutputSpec:
        """The version of the output's running shadow (404 if it has had none, 409 if it has
        ended)."""
        return self._running(caller, stream, output).version

    def view(self, caller: Caller, stream: str, output: str) -> ShadowView:
        """The output's latest shadow and its comparison (404 if it has had none)."""
        spec = self.streams.get(caller, stream)
        return view_of(self.settings, spec, self._current(caller, stream, output))

    def drop(self, caller: Caller, stream: str, output: str) -> ShadowView:
        """Ends the running shadow: its query stops, then its targets go."""
        shadow = self._running(caller, stream, output)
        spec = self.streams.get(caller, stream)
        ending = shadow.model_copy(update={"phase": ShadowPhase.ENDING, "end": ShadowEnd.DROPPED})
        entry = audit(
            caller.name,
            "output.shadow.drop",
            stream,
            owner=spec.owner,
            output=output,
            shadow=shadow.id,
        )
        if not self.store.recovery.update(stream, ending, lambda s: s.running, entry):
            raise Conflict(f"shadow {shadow.id} changed meanwhile: ask again")
        return view_of(self.settings, spec, ending)

    def promote(self, caller: Caller, stream: str, output: str) -> ShadowView:
        """Makes the running shadow's version the output's, and ends the shadow, in one step."""
        shadow = self._running(caller, stream, output)
        applied = self.streams.promote(caller, stream, shadow)
        assert applied.spec is not None, "a promotion keeps the stream"
        return view_of(self.settings, applied.spec, self._current(caller, stream, output))

    def _running(self, caller: Caller, stream: str, output: str) -> Shadow:
        shadow = self._current(caller, stream, output)
        if not shadow.running:
            raise Conflict(
                f"shadow {shadow.id} of output {stream}.{output} is {shadow.phase.value}"
                + (f" ({shadow.end.value})" if shadow.end is not None else ""),
                shadow=shadow.id,
            )
        return shadow

    def _current(self, caller: Caller, stream: str, output: str) -> Shadow:
        self.streams.get(caller, stream)  # 404 unless the caller's
        current = self.latest(stream, output)
        if current is None:
            raise NotFound(f"output {stream}.{output} {Shadow.never}")
        return current


def forget_files(settings: Settings, stream: str, shadow: Shadow) -> None:
    """What control kept of an ended shadow: its comparison, its query's checkpoint, the
    router's word that it stopped."""
    shutil.rmtree(checkpoint_dir(settings, stream, shadow.id), ignore_errors=True)
    for path in (
        comparison_path(settings.state_dir, stream, shadow.id),
        stopped_path(settings.state_dir, stream, shadow.id),
    ):
        path.unlink(missing_ok=True)


def remove_targets(route: Route) -> list[str]:
    """A shadow's targets removed (`router.sinks.provision.Provisioner.remove`)."""
    return provisioner_for(route).remove()


class ShadowUpkeep:
    """The fleet's step for a stream's shadows, every pass."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        clock: Callable[[], float] = time.time,
        remove: Callable[[Route], list[str]] = remove_targets,
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.remove = remove

    def step(self, spec: StreamSpec, deployed: bool) -> None:
        """`deployed`: whether the stream's router was deployed as the pass began (one started
        since reads the registry before any query starts: it runs no ended shadow's)."""
        now = self.clock()
        for shadow in self.store.operations(Shadow, spec.name).values():
            if shadow.expired(now):
                self._expire(spec, shadow)
            elif shadow.phase is ShadowPhase.ENDING:
                self._finish(spec, shadow, deployed)

    def _expire(self, spec: StreamSpec, shadow: Shadow) -> None:
        ending = shadow.model_copy(update={"phase": ShadowPhase.ENDING, "end": ShadowEnd.EXPIRED})
        entry = audit(
            CONTROL, "output.shadow.expire", spec.name, owner=spec.owner, output=shadow.output
        )
        if self.store.recovery.update(spec.name, ending, lambda s: s.running, entry):
            log.info("shadow %s of %s.%s expired", shadow.id, spec.name, shadow.output)

    def _finish(self, spec: StreamSpec, shadow: Shadow, deployed: bool) -> None:
        """Once the router runs no query of it (it said so, or none runs): its targets
        removed, then it has ended (its comparison is kept for its owner to read, until the
        output's next shadow)."""
        stopped = stopped_path(self.settings.state_dir, spec.name, shadow.id).exists()
        if deployed and not stopped:
            return
        try:
            removed = self.remove(Route.of_shadow(self.settings, spec, shadow))
        except KeystoneError as e:  # tried again next pass
            log.warning("shadow %s's targets not removed yet: %s", shadow.id, e.message)
            return
        shutil.rmtree(checkpoint_dir(self.settings, spec.name, shadow.id), ignore_errors=True)
        ended = shadow.model_copy(update={"phase": ShadowPhase.ENDED})
        if self.store.recovery.update(spec.name, ended, lambda s: s.phase is ShadowPhase.ENDING):
            log.info("shadow %s ended (%s): removed %s", shadow.id, shadow.end, ", ".join(removed))
