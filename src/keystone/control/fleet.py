"""The fleet: every stream's dashboard and alert rules kept current, apps' Kafka access kept
what the registry says (`keystone.control.kafka_access`), the fronting clusters watched and
failed over (`keystone.control.fronting.FrontingWatch`), and one router application
per stream that has outputs (`python -m keystone.router`, whose Spark session pyspark launches
through spark-submit, with the master from settings), watched, restarted with backoff when it
dies, redeployed when its spec changes, and stopped gracefully when its stream is deleted.

One control process at a time runs the fleet (a lease in Redis). Routers run in sessions of
their own and are recorded by pid file under `<state>/run/routers/`, so a restarted control
service adopts the routers it finds running instead of starting second ones. What the fleet
knows of each router (state, restarts, last error) is kept in Redis for the API.

Every step is non-blocking: a router asked to stop is looked at again on the next pass, so a
slow stop never delays another stream's restart.

`Fleet` is the state machine only: the routers' processes, records, targets and checkpoints
are its launcher's (`keystone.control.launcher`), the time its clock's, the dashboards its
publisher's, restore points and rewinds its recovery's (`keystone.control.recovery`), and what
it knows of each router the store's; each can be given to it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Protocol

from keystone.alerts.client import Alertmanager
from keystone.alerts.publish import AlertPublisher
from keystone.contracts.backoff import Backoff
from keystone.contracts.errors import KeystoneError
from keystone.contracts.names import valid_name
from keystone.contracts.receivers import Receiver
from keystone.contracts.registry import RouterPhase, RouterState
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.control.fronting import FrontingWatch
from keystone.control.kafka_access import AppAccess
from keystone.control.launcher import Deployment, Launcher, ProcessLauncher
from keystone.control.recovery import Recovery
from keystone.control.shadows import ShadowUpkeep
from keystone.control.silences import OperationSilences
from keystone.control.sizing import Sizer
from keystone.control.store import Store
from keystone.dashboards.publish import Publisher
from keystone.router.plan import resizes_in_place

log = logging.getLogger(__name__)

LEASE = "fleet:leader"
LEASE_SECONDS = 15.0
PASS_SECONDS = 1.0
ALERTS_SECONDS = 10.0  # how often Alertmanager's configuration is made from the receivers
ACCESS_SECONDS = 10.0  # how often apps' Kafka credentials and ACLs are made what the registry says
HEALTHY_AFTER = 60.0  # a router up this long has recovered: its failure count starts again
FAILED_AFTER = 3  # deaths in a row that make a router "failed" (still retried, slowly)
MAX_BACKOFF = 300.0
# A router that died starts again after 1, 2, 4 ... s, at most MAX_BACKOFF.
RESTARTS = Backoff(first=1.0, factor=2.0, most=MAX_BACKOFF)


def fingerprint(spec: StreamSpec, sized_for: int = 0) -> str:
    """What the router runs: the spec without its producers, which only the proxy reads, and
    its recovery and sizing settings, which only control reads; and its size where a new size
    starts it again (0 where it resizes in place: `router.plan.resizes_in_place`)."""
    data = json.loads(spec.to_json())
    for control_only in ("producers", "recovery", "sizing"):
        data.pop(control_only, None)
    data["sized_for"] = sized_for
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


class Dashboards(Protocol):
    """What the fleet asks of the dashboards' publisher (`keystone.dashboards.publish`)."""

    def sync(self, specs: list[StreamSpec], keep: set[str] | None = None) -> list[str]: ...


class Alerts(Protocol):
    """What the fleet asks of the alerts' publisher (`keystone.alerts.publish`)."""

    def sync(self, receivers: list[Receiver]) -> bool: ...


class Quieting(Protocol):
    """What the fleet asks of control's own silences (`control.silences.OperationSilences`)."""

    def step(self, specs: list[StreamSpec]) -> None: ...


class Keeper(Protocol):
    """What the fleet asks of recovery (`keystone.control.recovery.Recovery`)."""

    def step(self, spec: StreamSpec) -> None: ...

    def forget(self, stream: str, output: str | None = None) -> None: ...


class ShadowKeeper(Protocol):
    """What the fleet asks of shadows (`keystone.control.shadows.ShadowUpkeep`)."""

    def step(self, spec: StreamSpec, deployed: bool) -> None: ...


class Fleet:
    """Brings each stream's router one step closer to its spec per pass (`reconcile`), run by
    its own thread (`start`, `stop`) while this process holds the fleet's lease.

    By default its routers are processes on this machine (`ProcessLauncher`), its dashboards
    published by a `Publisher` and its time `time.time`."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        *,
        launcher: Launcher | None = None,
        dashboards: Dashboards | None = None,
        recovery: Keeper | None = None,
        shadows: ShadowKeeper | None = None,
        sizer: Sizer | None = None,
        access: AppAccess | None = None,
        alerts: Alerts | None = None,
        quieting: Quieting | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.store = store
        self.launcher: Launcher = launcher if launcher is not None else ProcessLauncher(settings)
        self.dashboards: Dashboards = dashboards if dashboards is not None else Publisher(settings)
        self.clock = clock
        self.recovery: Keeper = (
            recovery if recovery is not None else Recovery(settings, store, clock)
        )
        self.sizer = sizer if sizer is not None else Sizer(settings, store, clock)
        self.shadows: ShadowKeeper = (
            shadows if shadows is not None else ShadowUpkeep(settings, store, clock)
        )
        self.access = access if access is not None else AppAccess(settings, store)
        self._access_synced = float("-inf")
        self._access_sync: threading.Thread | None = None
        self.alerts: Alerts = alerts if alerts is not None else AlertPublisher(settings)
        self.quieting: Quieting = (
            quieting
            if quieting is not None
            else OperationSilences(
                store, Alertmanager(settings), settings.alert_redeploy_settle_seconds, clock
            )
        )
        self._alerts_synced = float("-inf")
        self._alerts_sync: threading.Thread | None = None
        self.fronting = FrontingWatch(settings, store, clock)
        self._fronting_step: threading.Thread | None = None
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.leading = False
        self._unreadable: dict[str, str] = {}  # stream -> why, as last said
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleet", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stops watching; the routers go on running (a restarted control adopts them)."""
        self._stop.set()
        self._thread.join()
        if self.leading:
            with contextlib.suppress(KeystoneError):
                self.store.fleet.release_lease(LEASE, self.holder)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.leading = self.store.fleet.hold_lease(LEASE, self.holder, LEASE_SECONDS)
                if self.leading:
                    self.reconcile()
            except KeystoneError as e:  # Redis away: nothing can be decided; try again soon
                log.warning("fleet pass skipped: %s", e)
            except Exception:  # the fleet's boundary: a bug in one pass must not end the fleet
                log.exception("fleet pass failed")
            self._stop.wait(PASS_SECONDS)

    def reconcile(self) -> None:
        """One pass: every stream's router brought one step closer to its spec, and every
        stream's dashboard and alert rules made current."""
        specs, unreadable = self.store.read_streams()
        # A stored spec that does not read back is not a deleted stream: its router, checkpoints
        # and rules stay as they are until the admin replaces or deletes it.
        untouched = {u.stream for u in unreadable}
        for problem in unreadable:  # said once per reason, not every pass
            if self._unreadable.get(problem.stream) != problem.reason:
                log.error("stream %s left as it is: %s", problem.stream, problem.reason)
        self._unreadable = {u.stream: u.reason for u in unreadable}
        try:
            self.dashboards.sync(specs, keep=untouched)
        except (KeystoneError, ValueError, OSError) as e:  # retried next pass; routers first
            log.warning("dashboards not published: %s", e)
        try:
            self.sizer.observe(specs)
        except KeystoneError as e:  # sized as they were; sampled again next time
            log.warning("traffic not sampled: %s", e)
        self._sync_access()
        self._sync_alerts(specs)
        self._watch_fronting()
        desired = {s.name: s for s in specs if s.outputs}
        running = self.launcher.deployments()
        states = self.store.router_states()
        for stream in sorted((set(desired) | set(running) | set(states)) - untouched):
            state = states.get(stream) or RouterState()
            try:
                self._step(stream, desired.get(stream), running.get(stream), state)
                if stream in desired:
                    self.recovery.step(desired[stream])
            except KeystoneError as e:
                log.warning("router %s: %s", stream, e)
            except Exception:  # one stream's trouble must not hold back the others
                log.exception("router %s: fleet step failed", stream)
        running = self.launcher.deployments()  # again: a router deployed in this pass counts
        for spec in specs:
            try:
                self.shadows.step(spec, deployed=spec.name in running)
            except KeystoneError as e:
                log.warning("shadows of %s: %s", spec.name, e)
            except Exception:  # one stream's trouble must not hold back the others
                log.exception("shadows of %s: their step failed", spec.name)

    def _sync_access(self) -> None:
        """Apps' Kafka access made current every ACCESS_SECONDS, on a thread of its own: a
        Kafka that answers slowly must not hold the pass (and the lease) of every router."""
        running = self._access_sync is not None and self._access_sync.is_alive()
        if running or not self.access.enabled:
            return
        if self.clock() - self._access_synced < ACCESS_SECONDS:
            return

        def sync() -> None:
            try:
                self.access.sync()
            except Exception:  # its own boundary: it says what failed and the next pass retries
                log.exception("apps' Kafka access: sync failed")
            self._access_synced = self.clock()

        self._access_sync = threading.Thread(target=sync, name="kafka-access", daemon=True)
        self._access_sync.start()

    def _sync_alerts(self, specs: list[StreamSpec]) -> None:
        """Alertmanager's configuration made from the receivers, and control's own silences
        of streams under an operation, every ALERTS_SECONDS, on a thread of its own: checking a
        webhook's host asks DNS, and Alertmanager may not answer, neither of which may hold the
        pass."""
        if self._alerts_sync is not None and self._alerts_sync.is_alive():
            return
        if self.clock() - self._alerts_synced < ALERTS_SECONDS:
            return

        def sync() -> None:
            try:
                self.alerts.sync(self.store.receivers())
                self.quieting.step(specs)
            except (KeystoneError, ValueError, OSError) as e:  # said; retried next time
                log.warning("alerts not published: %s", e)
            except Exception:  # its own boundary
                log.exception("alerts: publishing failed")
            self._alerts_synced = self.clock()

        self._alerts_sync = threading.Thread(target=sync, name="alerts", daemon=True)
        self._alerts_sync.start()

    def _watch_fronting(self) -> None:
        """One probe of the fronting clusters a pass, on a thread of its own: a lost cluster
        answers nothing for a second, which must not hold the pass (and the lease)."""
        if self._fronting_step is not None and self._fronting_step.is_alive():
            return

        def step() -> None:
            try:
                self.fronting.step()
            except Exception:  # its own boundary: said, and the next pass probes again
                log.exception("fronting: watch step failed")

        self._fronting_step = threading.Thread(target=step, name="fronting", daemon=True)
        self._fronting_step.start()

    def _step(
        self,
        stream: str,
        spec: StreamSpec | None,
        deployed: Deployment | None,
        state: RouterState,
    ) -> None:
        now = self.clock()
        if deployed is not None and not self.launcher.alive(deployed):
            self._ended(deployed, state, now)
            deployed = None
        if spec is None:
            if deployed is not None:
                self._stopping(deployed, state, now)
                self.store.fleet.put_state(stream, state)
            else:
                self._undeploy(stream)
            return
        size = self.sizer.size(spec, state)
        if deployed is not None:
            changed = deployed.fingerprint != self._fingerprint(spec, size)
            if changed or state.state == RouterPhase.STOPPING:
                self._stopping(deployed, state, now)  # a redeploy begins with a stop
            else:
                self._watch(deployed, state, now)
        elif now >= state.retry_at:
            self._deploy(spec, state, now)
        self.store.fleet.put_state(stream, state)

    def _ended(self, deployed: Deployment, state: RouterState, now: float) -> None:
        """The router's process is gone: asked to (a stop) or not (a failure, retried later)."""
        # Its exit code (None for a router adopted from an earlier control); its JVM must not
        # outlive it, nor its record.
        code = self.launcher.reap(deployed)
        if state.state == RouterPhase.STOPPING:
            log.info("router %s stopped (exit %s)", deployed.stream, code)
            _enter(state, RouterPhase.PENDING, now)
            state.retry_at = 0.0
            return
        ran = now - deployed.started
        state.failures = state.failures + 1 if ran < HEALTHY_AFTER else 1
        error = self.launcher.last_error(deployed.stream)
        why = f"exited with {code}" if code is not None else "its process ended"
        state.last_error = f"{why}: {error}" if error else why
        delay = RESTARTS.delay(state.failures)
        state.retry_at = now + delay
        _enter(
            state,
            RouterPhase.FAILED if state.failures >= FAILED_AFTER else RouterPhase.RESTARTING,
            now,
        )
        log.error(
            "router %s ended after %.0f s (%s); starting it again in %.0f s",
            deployed.stream,
            ran,
            state.last_error,
            delay,
        )

    def _stopping(self, deployed: Deployment, state: RouterState, now: float) -> None:
        if state.state != RouterPhase.STOPPING:
            log.info("stopping router %s (pid %d)", deployed.stream, deployed.pid)
            _enter(state, RouterPhase.STOPPING, now)
            self.launcher.stop(deployed)  # SIGTERM: it stops its queries and then its JVM
        elif now - state.since > self.settings.router_stop_timeout_seconds:
            log.warning("router %s did not stop in time: killing it", deployed.stream)
            self.launcher.kill(deployed)

    def _watch(self, deployed: Deployment, state: RouterState, now: float) -> None:
        up = self.launcher.up(deployed)
        _enter(state, RouterPhase.RUNNING if up else RouterPhase.STARTING, now)
        error = self.launcher.last_error(deployed.stream)
        if error:
            state.last_error = error
        elif up and now - deployed.started > HEALTHY_AFTER:
            state.failures, state.last_error = 0, ""  # recovered: why it died is history

    def _deploy(self, spec: StreamSpec, state: RouterState, now: float) -> None:
        self._forget_checkpoints(spec, state)
        digest = self._fingerprint(spec, state.sized_for)
        deployed = self.launcher.start(
            spec, port=state.port, fingerprint=digest, started=now, sized_for=state.sized_for
        )
        pid, port = deployed.pid, deployed.port
        if state.state in (RouterPhase.RESTARTING, RouterPhase.FAILED):
            state.restarts += 1
        state.pid, state.port, state.started = pid, port, now
        state.fingerprint = digest
        state.extra = {"outputs": {o.name: _sink_key(o) for o in spec.outputs}}
        _enter(state, RouterPhase.STARTING, now)
        log.info("router %s started (pid %d, metrics on port %d)", spec.name, pid, port)

    def _fingerprint(self, spec: StreamSpec, size: int) -> str:
        """A router that resizes in place reads its size from its record as it runs."""
        in_place = resizes_in_place(self.settings.spark_master)
        return fingerprint(spec, 0 if in_place else size)

    def _forget_checkpoints(self, spec: StreamSpec, state: RouterState) -> None:
        """An output that was removed, or whose sink changed, starts afresh next time (from its
        `start`), rather than resuming another sink's progress."""
        before = state.extra.get("outputs", {})
        now = {o.name: _sink_key(o) for o in spec.outputs}
        for output, sink in before.items() if isinstance(before, dict) else ():
            # A name read from Redis: only a valid output name may become a path.
            if now.get(output) != sink and valid_name(output):
                self.launcher.remove_checkpoints(spec.name, output)
                self.recovery.forget(spec.name, output)

    def _undeploy(self, stream: str) -> None:
        """The stream (or its last output) is gone and so is its router: its target and
        checkpoints go too, so a stream made again later starts afresh."""
        self.launcher.remove_target(stream)
        self.launcher.remove_checkpoints(stream)
        self.recovery.forget(stream)
        self.store.fleet.forget(stream)
        log.info("router %s undeployed", stream)


def _sink_key(output) -> str:
    return output.sink.model_dump_json()


def _enter(state: RouterState, name: RouterPhase, now: float) -> None:
    if state.state != name:
        state.state, state.since = name, now
