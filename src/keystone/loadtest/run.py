"""`keystone loadtest`: drive a stream at a set rate (faults injected on schedule), audit every
acknowledged guid at every sink, and report.

    keystone loadtest --stream S --rate R --duration D [--event-size B] [--producers N]
                      [--direct APP] [--fault NAME[:OUTPUT][@AT][+FOR] ...]
                      [--bad-events N [--fix-at S]] [--report DIR]
"""

from __future__ import annotations

import asyncio
import hashlib
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from keystone.contracts import kafka_clients
from keystone.contracts.errors import BadRequest, Unavailable
from keystone.contracts.registry import RouterPhase
from keystone.contracts.settings import Settings
from keystone.contracts.spec import PRINCIPAL_MAX, StreamSpec
from keystone.control.client import ControlClient, ControlError
from keystone.loadtest import audit as auditing
from keystone.loadtest import bad_events
from keystone.loadtest import faults as faulting
from keystone.loadtest.bad_events import BadEvents
from keystone.loadtest.bench import machine
from keystone.loadtest.driver import Load, Plan, drive_direct, drive_proxy
from keystone.loadtest.faults import BAD_EVENTS, Fault
from keystone.loadtest.report import Run, summary, write

APP_PREFIX = "loadtest-"


def loadtest_app(stream: str) -> str:
    """The app a load test of `stream` posts as: one per stream, since a run gives its app a
    new key, which revokes the old one, and so would fail a run on another stream meanwhile.
    A name too long for an app ends in a digest of the stream's."""
    name = APP_PREFIX + stream
    if len(name) <= PRINCIPAL_MAX:
        return name
    digest = hashlib.sha256(stream.encode()).hexdigest()[:8]
    return f"{name[: PRINCIPAL_MAX - len(digest) - 1]}-{digest}"


ROUTER_WAIT_SECONDS = 300


@dataclass
class Options:
    plan: Plan
    faults: list[Fault] = field(default_factory=list)
    direct: str | None = None  # write straight to Kafka as this app
    bad_events: int = 0  # events that dead-letter until a fix, then are redriven
    fix_at: float | None = None  # seconds into the run (default half of it)
    key: str | None = None  # the app key to post with; default: `loadtest_app`'s
    report: Path | None = None
    drain_timeout: float = 300.0
    command: str = field(
        default_factory=lambda: "keystone " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    )


def app_key(control: ControlClient, app: str, stream: str) -> str:
    """A key of `app`, allowed to post to `stream`: a new app's, or a new key for it."""
    try:
        key = control.create_app(app).key
    except ControlError as e:
        if e.status != 409:
            raise
        key = control.rotate_app(app).key
    control.grant(stream, app)
    return key


def streams_reached(control: ControlClient, spec: StreamSpec) -> dict[str, StreamSpec]:
    """The stream and every stream its Keystone sinks deliver to, onwards."""
    found = {spec.name: spec}
    pending = [spec]
    while pending:
        for output in pending.pop().outputs:
            target = output.sink.into_stream
            if target and target not in found:
                found[target] = control.stream(target).spec
                pending.append(found[target])
    return found


def await_key(proxy_url: str, key: str, stream: str) -> None:
    """Until the proxy knows a new key: each proxy process reloads the registry within a
    second or so, so the probe (refused for its media type, 415, once past authentication and
    authorization) must pass for two seconds on end, whichever process answers it."""
    deadline, passing_since = time.monotonic() + 30, None
    while True:
        answer = httpx.post(
            f"{proxy_url}/v1/streams/{stream}/events",
            content=b"",
            headers={"Authorization": f"Bearer {key}", "Content-Type": "text/plain"},
            timeout=10,
        )
        now = time.monotonic()
        if answer.status_code != 415:
            passing_since = None
        elif passing_since is None:
            passing_since = now
        elif now - passing_since >= 2:
            return
        if now > deadline:
            raise Unavailable(
                f"the proxy still answers {answer.status_code} to the key after 30 s",
                retry_after=5,
            )
        time.sleep(0.1)


def await_routers(control: ControlClient, streams: list[str], console: Console) -> None:
    """Until every router runs its queries: a new output that starts at the latest offsets
    would miss what was sent before."""
    deadline = time.monotonic() + ROUTER_WAIT_SECONDS
    with console.status(f"waiting for the routers of {', '.join(streams)}…"):
        for stream in streams:
            while (router := control.status(stream).router).state != RouterPhase.RUNNING:
                if time.monotonic() > deadline:
                    raise Unavailable(
                        f"the {stream} router is {router.state} after "
                        f"{ROUTER_WAIT_SECONDS} s: {router.last_error or 'see its log'}",
                        retry_after=10,
                    )
                time.sleep(1)


def run(settings: Settings, options: Options, console: Console) -> dict[str, Any]:
    plan = options.plan
    faulting.check(settings, options.faults)
    with ControlClient.from_settings(settings) as control:
        spec = control.stream(plan.stream).spec
        if not spec.outputs:
            raise BadRequest(f"stream {plan.stream!r} has no outputs: nothing to audit")
        faulting.choose_outputs(spec, options.faults)
        bad = _bad_events(settings, options, spec)
        streams = streams_reached(control, spec)
        key = options.key
        if options.direct is None and key is None:
            key = app_key(control, loadtest_app(plan.stream), plan.stream)
        await_routers(control, [s.name for s in streams.values() if s.outputs], console)
    try:
        if bad is not None:
            with (
                ControlClient.from_settings(settings) as control,
                console.status("putting a too strict schema for the bad events…"),
            ):
                bad.spoil(control)
        if key is not None:
            await_key(settings.proxy_url, key, plan.stream)
        folder = options.report or Path.cwd() / "build" / "loadtest" / (
            f"{plan.stream}-{time.strftime('%Y%m%d-%H%M%S')}"
        )
        load = _drive(settings, options, key, bad, console)
    finally:
        if bad is not None:
            with ControlClient.from_settings(settings) as control:
                bad.undo(control)
    # The bad events were acknowledged by Kafka: audited like the load's, not counted as its.
    acked = load.guids + (bad.guids if bad is not None else [])
    console.print(f"auditing {len(acked):,} acknowledged events at every sink…")
    result = _audit(settings, spec, streams, acked, options.drain_timeout, console)
    run_ = Run(
        plan=plan,
        mode="direct" if options.direct else "proxy",
        command=options.command,
        machine=machine(),
        load=load,
        faults=options.faults + ([bad.fault] if bad is not None else []),
        audit=result,
        ended=time.time(),
    )
    figures = write(settings, run_, folder)
    summary(figures, console)
    console.print(f"report: {folder / 'report.md'}")
    figures["report"] = str(folder)
    return figures


def _bad_events(settings: Settings, options: Options, spec: StreamSpec) -> BadEvents | None:
    """The run's bad events, if it asked for some: written as the app the load posts as."""
    if not options.bad_events:
        return None
    fix_at = options.fix_at if options.fix_at is not None else options.plan.duration / 2
    if not 0 < fix_at < options.plan.duration:
        raise BadRequest(f"--fix-at {fix_at:g}: within the run (0 to {options.plan.duration:g} s)")
    bad_events.check(spec)
    fault = Fault(BAD_EVENTS, at=fix_at, hold=0.0, count=options.bad_events)
    return BadEvents(settings, spec, options.direct or loadtest_app(spec.name), fault)


def _drive(
    settings: Settings,
    options: Options,
    key: str | None,
    bad: BadEvents | None,
    console: Console,
) -> Load:
    plan = options.plan
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[figures]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(f"{plan.rate:,.0f} events/s", total=plan.duration, figures="")

        def tick(load: Load) -> None:
            elapsed = time.time() - load.started
            recent = [
                load.seconds[s].acked
                for s in range(int(elapsed) - 5, int(elapsed))
                if s in load.seconds
            ]
            now = [
                f.name
                for f in options.faults + ([bad.fault] if bad is not None else [])
                if f.began is not None and f.began <= elapsed and f.ended is None
            ]
            progress.update(
                task,
                completed=min(elapsed, plan.duration),
                figures=f"{len(load.guids):,} acked, {sum(recent) / 5:,.0f}/s, "
                f"{load.abandoned + load.rejected:,} lost to the load"
                + (f"  [yellow]{', '.join(now)}[/]" if now else ""),
            )

        async def drive() -> Load:
            started = time.time()
            loop = asyncio.get_running_loop()
            # A thread for each fault, each waiting for its time: in the loop's default pool
            # (as many as the cores and four) the ninth fault of a run would wait its turn.
            threads = len(options.faults) + (bad is not None)
            pool = ThreadPoolExecutor(max(threads, 1), thread_name_prefix="fault")
            injected = [
                loop.run_in_executor(pool, _at, settings, plan.stream, f, started)
                for f in options.faults
            ]
            if bad is not None:
                injected.append(loop.run_in_executor(pool, bad.run, started))
            try:
                if options.direct:
                    load = await loop.run_in_executor(
                        None,
                        drive_direct,
                        plan,
                        kafka_clients.librdkafka(settings),
                        options.direct,
                        tick,
                    )
                else:
                    assert key is not None
                    load = await drive_proxy(plan, settings.proxy_url, key, tick)
                await asyncio.gather(*injected)
            finally:
                pool.shutdown(wait=False)
                if any(f.began is not None and f.ended is None for f in options.faults):
                    faulting.restart(settings)  # whatever happened, the stack comes back
            return load

        return asyncio.run(drive())


def _at(settings: Settings, stream: str, fault: Fault, started: float) -> None:
    time.sleep(max(0.0, started + fault.at - time.time()))
    faulting.inject(settings, stream, fault, started)


def _audit(
    settings: Settings,
    spec: StreamSpec,
    streams: dict[str, StreamSpec],
    acked: list[str],
    drain_timeout: float,
    console: Console,
) -> auditing.Audit:
    columns = (
        TextColumn("{task.description:<34}"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        tasks: dict[str, Any] = {}

        def show(results: list[auditing.OutputAudit]) -> None:
            for o in results:
                if o.output not in tasks:
                    tasks[o.output] = progress.add_task(f"{o.output} ({o.sink})", total=o.expected)
                progress.update(tasks[o.output], completed=o.delivered)

        return auditing.audit(settings, spec, streams, acked, drain_timeout, show)
