"""`up`, `down` and `status` of the embedded stack, as plain functions the CLI and tests call."""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Literal

from keystone.contracts.errors import StackError
from keystone.contracts.processes import PidFile, exited, port_in_use, spawn, stop
from keystone.contracts.settings import Settings
from keystone.router import jvm
from keystone.stack import jars
from keystone.stack.services import Service, all_services

OTHERS_STOP_SECONDS = 60.0  # a broker's controlled shutdown at most

Health = Literal["healthy", "unhealthy", "stopped"]
# (service name, what is happening) as `up` goes: "starting", "running", "healthy", "external".
Progress = Callable[[str, str], None]


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    address: str
    embedded: bool
    pid: int | None
    health: Health
    log: str | None


def status(settings: Settings) -> list[ServiceStatus]:
    result = []
    for service in all_services(settings):
        pid = service.pidfile.running_pid() if service.embedded else None
        if service.embedded and pid is None:
            health: Health = "stopped"
        else:
            health = "healthy" if service.healthy() else "unhealthy"
        result.append(
            ServiceStatus(
                name=service.name,
                address=service.address,
                embedded=service.embedded,
                pid=pid,
                health=health,
                log=str(service.log) if service.embedded else None,
            )
        )
    return result


def status_json(settings: Settings) -> dict:
    """What `keystone stack status --json` prints; tools and tests find the stack through it."""
    return {
        "state_dir": str(settings.state_dir),
        "spark": {
            "master": settings.spark_master,
            "warehouse": settings.warehouse_dir,
            "metastore": settings.metastore_uri,
        },
        "services": {s.name: asdict(s) for s in status(settings)},
    }


def up(settings: Settings, progress: Progress, only: set[str] | None = None) -> None:
    """Starts every embedded service that is not running and waits until all are healthy (or
    only the services named in `only`, the others taken as they are: a fault undone).

    Idempotent. Checks prerequisites, every port and what each service can refuse before
    starting anything, so that a refusal leaves nothing behind; and if a service fails later,
    stops every service this call started before saying why.
    """
    services = [s for s in all_services(settings) if only is None or s.name in only]
    to_start = [s for s in services if s.embedded and s.pidfile.running_pid() is None]
    _check_prerequisites(settings, to_start)
    started: list[Service] = []
    spawned: dict[str, int] = {}  # the pid of each service this call started
    try:
        pending = list(services)
        while pending:
            # Every service whose needs are met starts at once; then each is awaited in order.
            ready = {p.name for p in pending}
            wave = [s for s in pending if all(n not in ready for n in s.needs)]
            for service in wave:
                if service in to_start:
                    service.prepare()
                    started.append(service)  # before it spawns: a pid file may be left
                    spawned[service.name] = spawn(
                        service.argv(),
                        service.log,
                        service.pidfile,
                        cwd=service.data,
                        env=service.env,
                        user=service.user,
                    )
                    progress(service.name, "starting")
                else:
                    progress(service.name, "running" if service.embedded else "external")
            for service in wave:
                _await_healthy(service, spawned.get(service.name))
                service.on_healthy()
                progress(service.name, "healthy")
            pending = [s for s in pending if s not in wave]
    except BaseException:  # an interrupt too: no half stack is left running
        _stop(started, progress)
        raise


def _check_prerequisites(settings: Settings, to_start: list[Service]) -> None:
    for service in to_start:
        service.check_installed()
        service.check()
    for bundle in jars.BUNDLES:
        jvm.bundle_jars(settings, bundle)
    for name in jars.JAVA_CLASSES:
        jvm.compiled(settings, name)
    host = settings.bind_host
    for service in to_start:
        for port in service.ports:
            if port_in_use(host, port):
                variable = _port_variable(settings, port)
                raise StackError(
                    f"port {port} on {host} is already in use, so {service.name} cannot start: "
                    f"stop whatever listens there, or choose another port with {variable}"
                )


def _port_variable(settings: Settings, port: int) -> str:
    for field, value in settings.model_dump().items():
        if field.endswith("_port") and value == port:
            return f"KEYSTONE_{field.upper()}"
    return "the KEYSTONE_*_PORT settings"


def _await_healthy(service: Service, spawned: int | None) -> None:
    """Until the service answers; `spawned`: its pid, if this process started it (one that
    ended before it is awaited is told by its pid, its pid file then naming no live process)."""
    deadline = time.monotonic() + service.start_timeout
    pid = spawned or (service.pidfile.running_pid() if service.embedded else None)
    while not service.healthy():
        if pid is not None and exited(pid):
            service.pidfile.remove()
            raise StackError(
                f"{service.name} exited while starting; its log ({service.log}) ends with:\n"
                + _tail(service)
            )
        if time.monotonic() > deadline:
            where = f"; its log ({service.log}) ends with:\n{_tail(service)}" if pid else ""
            raise StackError(
                f"{service.name} at {service.address} was not healthy after "
                f"{service.start_timeout:.0f} s{where}"
            )
        time.sleep(0.5)


def _tail(service: Service, lines: int = 15) -> str:
    try:
        text = service.log.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text[-lines:])


def down(settings: Settings, purge: bool, progress: Progress) -> None:
    """Stops what the stack started (by pid file, in reverse start order), and then any other
    service whose pid file the state directory holds (one of other settings: a broker or a
    fronting cluster since removed, which would otherwise hold its ports); data stays unless
    `purge`, which also removes the state directory but keeps the download cache."""
    known = [s for s in all_services(settings) if s.embedded]
    _stop(known, progress)
    names = {s.name for s in known}
    for path in sorted(settings.run_dir.glob("*.pid")):
        if path.stem not in names and stop(PidFile(path), signal.SIGTERM, OTHERS_STOP_SECONDS):
            progress(path.stem, "stopped (not of these settings)")
    if purge and settings.state_dir.exists():
        for child in settings.state_dir.iterdir():
            if child == settings.cache_dir or child in settings.cache_dir.parents:
                continue
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()
        progress("state", f"removed {settings.state_dir} (kept {settings.cache_dir})")


def _stop(services: list[Service], progress: Progress) -> None:
    """Stops the services (by pid file), the last started first."""
    services = services[::-1]
    while services:
        # Brokers stop together: one by one, the last would wait out its timeout for a
        # controller quorum the others took with them.
        kind = type(services[0])
        group = [s for s in services if type(s) is kind] if kind.stop_together else services[:1]
        with ThreadPoolExecutor(len(group)) as pool:
            stopped = list(
                pool.map(lambda s: stop(s.pidfile, s.stop_signal, s.stop_timeout), group)
            )
        for service, was_running in zip(group, stopped, strict=True):
            service.after_stop()
            progress(service.name, "stopped" if was_running else "not running")
        services = [s for s in services if s not in group]
