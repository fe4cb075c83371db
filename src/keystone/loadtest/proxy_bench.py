"""Benchmark of the ingest proxy against its floor, on the running stack.

    python -m keystone.loadtest.proxy_bench [--duration 15] [--smoke] [--write-docs]

1. raw: confluent-kafka producing the same 1 KB events (same headers, acks=all, idempotent)
   straight to the broker from one Python process: the limit the proxy is measured against;
2. peak: `wrk` posting 1 KB events at batch sizes 1, 10 and 100 as fast as the proxy answers;
3. steady: an open-loop generator at half (and a quarter of) the batch-100 peak, latency
   measured from each request's scheduled send time (so a stall cannot hide itself by delaying
   later requests).

Beside events/s, each run's CPU seconds per million events: for the raw producer, this process
(the producer and its client's threads); for the proxy's runs, the proxy's processes (its
launcher and server processes, from its pid file, with their descendants), not the load
generator's, and in neither Kafka's. `--smoke` runs each step for a second, with no pauses
between them: it checks that the benchmark runs, its figures mean nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
from confluent_kafka import Producer

from keystone import terminal
from keystone.contracts import envelope, kafka_clients
from keystone.contracts.errors import NotFound, StackError
from keystone.contracts.names import fronting_topic
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.control.provisioner import ensure_topics
from keystone.control.store import Store, audit
from keystone.control.tenancy import ADMIN
from keystone.loadtest.bench import (
    CPU_COLUMN,
    DOCS,
    CpuMeter,
    Steadiness,
    cpu_steadiness,
    machine,
    make_event,
    parse_arguments,
    per_million,
    proxy_processes,
    save_figures,
    stream_topics,
    write_section,
)
from keystone.router.topics import delete_topics
from keystone.terminal import console

# Closed loop: enough connections to saturate the proxy at each batch size (more gave no more
# events/s on this machine; fewer measured the linger wait, not the proxy: 8 at batch 100 gave
# 66k events/s where 16 and 32 gave 80-94k).
CONNECTIONS = {1: 64, 10: 64, 100: 16}
COMMAND = "python -m keystone.loadtest.proxy_bench --write-docs"
CPU_COUNTS = (
    "for the raw producer, this process (the producer and its client's threads); for the "
    "proxy's runs, the proxy's processes (its launcher and its server processes), not the load "
    "generator; Kafka in neither"
)
Pids = Callable[[], list[int]]


@dataclass
class Result:
    name: str
    events_per_second: float
    requests_per_second: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    server_p99_ms: float | None = None  # the proxy's own histogram: an upper bucket bound
    errors: int = 0
    events: int = 0
    cpu_s_per_m_events: float | None = None  # see CPU_COUNTS


def raw_producer(settings: Settings, topic: str, duration: int) -> Result:
    """Produces for `duration` seconds, as long as each peak run of the proxy, so that both
    meet the broker alike (a burst of 300,000 events, 2 to 4 s, gave 83k to 149k events/s)."""
    producer = Producer(
        kafka_clients.librdkafka(settings)
        | {
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    value, failed = make_event(0), []
    common = envelope.common_headers(int(time.time() * 1000), platform.node(), "bench", "bench")

    def delivered(err, _msg) -> None:
        if err is not None:
            failed.append(err)

    events, started = 0, time.perf_counter()
    with CpuMeter(lambda: [os.getpid()], every=None) as meter:
        while time.perf_counter() - started < duration:
            events += 1
            guid = str(uuid.uuid4()).encode()
            while True:
                try:
                    producer.produce(
                        topic,
                        value,
                        guid,
                        headers=envelope.event_headers(guid, common),
                        on_delivery=delivered,
                    )
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
        producer.flush(60)
    elapsed = time.perf_counter() - started
    return Result(
        "raw confluent-kafka, 1 process",
        events / elapsed,
        errors=len(failed),
        events=events,
        cpu_s_per_m_events=per_million(meter.seconds, events),
    )


WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/x-ndjson"
wrk.headers["Authorization"] = "Bearer {key}"
local f = io.open("{body}", "rb")
wrk.body = f:read("*all")
f:close()
"""


def wrk_peak(
    url: str, key: str, batch: int, duration: int, folder: Path, proxy: Pids | None
) -> Result:
    if shutil.which("wrk") is None:
        raise StackError("wrk is missing: run `make bootstrap` (Debian's wrk)")
    body = folder / f"batch-{batch}.ndjson"
    body.write_bytes(b"\n".join(make_event(i) for i in range(batch)))
    script = folder / f"batch-{batch}.lua"
    script.write_text(WRK_SCRIPT.format(key=key, body=body))
    with CpuMeter(proxy or list, every=None) as meter:
        out = subprocess.run(
            [
                "wrk",
                "-t1",
                f"-c{CONNECTIONS[batch]}",
                f"-d{duration}s",
                "--latency",
                "-s",
                str(script),
                url,
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=duration + 60,
        ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    events = int(re.search(r"(\d+) requests in", out).group(1)) * batch
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    socket_errors = re.search(r"Socket errors:.*", out)
    return Result(
        f"proxy peak, batch {batch} ({CONNECTIONS[batch]} connections)",
        events_per_second=rps * batch,
        requests_per_second=rps,
        p50_ms=_wrk_ms(out, "50%"),
        p99_ms=_wrk_ms(out, "99%"),
        errors=(int(non_2xx.group(1)) if non_2xx else 0) + (1 if socket_errors else 0),
        events=events,
        cpu_s_per_m_events=per_million(meter.seconds, events) if proxy else None,
    )


def _wrk_ms(out: str, percentile: str) -> float:
    value, unit = re.search(rf"{percentile}\s+([\d.]+)(us|ms|s)\b", out).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


async def steady(url: str, key: str, batch: int, rate_rps: float, duration: int) -> Result:
    """Open loop: request i is due at start + i / rate, whatever happened to earlier ones, and
    its latency counts from then. Pre-built HTTP/1.1 bytes on keep-alive connections keep the
    generator's own CPU small beside the proxy and the broker."""
    target = httpx.URL(url)
    body = b"\n".join(make_event(i) for i in range(batch))
    request = (
        f"POST {target.raw_path.decode()} HTTP/1.1\r\nHost: {target.host}:{target.port}\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/x-ndjson\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    due: asyncio.Queue[float | None] = asyncio.Queue()
    latencies: list[float] = []
    errors = 0

    async def connection() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection(target.host, target.port)
        while (when := await due.get()) is not None:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - when)
            errors += not head.startswith(b"HTTP/1.1 202")
        writer.close()

    workers = [asyncio.create_task(connection()) for _ in range(32)]
    start = time.perf_counter() + 0.2
    for i in range(int(rate_rps * duration)):
        when = start + i / rate_rps
        await asyncio.sleep(max(0.0, when - time.perf_counter()))
        due.put_nowait(when)
    for _ in workers:
        due.put_nowait(None)
    await asyncio.gather(*workers)
    latencies.sort()
    return Result(
        f"proxy steady, batch {batch} at {rate_rps:.0f} req/s",
        events_per_second=rate_rps * batch,
        requests_per_second=rate_rps,
        p50_ms=latencies[len(latencies) // 2] * 1000,
        p99_ms=latencies[int(len(latencies) * 0.99)] * 1000,
        errors=errors,
        events=len(latencies) * batch,
    )


def server_buckets(proxy_url: str, stream: str) -> dict[float, float]:
    """The proxy's request-duration histogram for the stream: {upper bound s: count}."""
    text = httpx.get(f"{proxy_url}/metrics").text
    pattern = rf'keystone_ingest_request_seconds_bucket{{le="([^"]+)",stream="{stream}"}} (\S+)'
    return {float(le): float(count) for le, count in re.findall(pattern, text)}


def server_p99_ms(before: dict[float, float], after: dict[float, float]) -> float:
    delta = {le: after[le] - before.get(le, 0.0) for le in after}
    total = delta[float("inf")]
    return 1000 * next(le for le in sorted(delta) if delta[le] >= 0.99 * total)


def _cpu_cell(result: Result) -> str:
    value = result.cpu_s_per_m_events
    return "" if value is None else f"{value:.1f}"


def markdown(results: list[Result], command: str, workers: int, cpu: Steadiness) -> str:
    raw = results[0].events_per_second
    rows = "\n".join(
        f"| {r.name} | {r.events_per_second:,.0f} | "
        f"{'' if r.requests_per_second is None else f'{r.requests_per_second:,.0f}'} | "
        f"{'' if r.p50_ms is None else f'{r.p50_ms:.1f}'} | "
        f"{'' if r.p99_ms is None else f'{r.p99_ms:.1f}'} | "
        f"{'' if r.server_p99_ms is None else f'{r.server_p99_ms:.0f}'} | "
        f"{r.events_per_second / raw:.2f} | "
        f"{_cpu_cell(r)} | "
        f"{r.errors} |"
        for r in results
    )
    return (
        f"Command: `{command}`, {time.strftime('%Y-%m-%d')}, proxy with {workers} server "
        f"processes; Kafka, Redis and the load generator on the same machine.\n"
        f"Machine: {machine()}.\n"
        f"CPU steadiness, idle, just before the run: {cpu}.\n"
        f"{CPU_COLUMN}: the CPU time over each run of the processes doing the work: "
        f"{CPU_COUNTS}.\n\n"
        "| run | events/s | requests/s | p50 ms | p99 ms | server p99 ≤ ms | of raw | "
        f"{CPU_COLUMN} | errors |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n" + rows + "\n"
    )


def measure(
    settings: Settings, spec: StreamSpec, key: str, duration: int, smoke: bool = False
) -> list[Result]:
    url = f"{settings.proxy_url}/v1/streams/{spec.name}/events"
    proxy = proxy_processes(settings)
    if proxy is None:
        console.print("[yellow]the proxy is not the embedded one: no CPU figure for it[/]")
    results = []
    with console.status("raw producer…"):
        results.append(raw_producer(settings, fronting_topic(spec.name), duration))
    with tempfile.TemporaryDirectory() as folder:
        for batch in (1, 10, 100):
            with console.status(f"proxy peak at batch {batch} for {duration} s…"):
                results.append(wrk_peak(url, key, batch, duration, Path(folder), proxy))
    peak = results[-1].requests_per_second
    # Long enough for a stable 99th percentile (a smoke run's means nothing anyway).
    steady_seconds = duration if smoke else max(duration, 30)
    for share in (0.5, 0.25):  # the target is set at half the peak; a quarter shows the floor
        # The peak runs leave gigabytes of the broker's writes in the page cache; written back
        # during a steady run, they would stall it with I/O that its own load never causes.
        os.sync()
        time.sleep(0 if smoke else 10)  # let the broker and the proxy settle after running flat out
        rate = peak * share
        before = server_buckets(settings.proxy_url, spec.name)
        with (
            console.status(f"proxy steady at {rate:.0f} requests/s for {steady_seconds} s…"),
            CpuMeter(proxy or list, every=None) as meter,
        ):
            result = asyncio.run(steady(url, key, 100, rate, steady_seconds))
        if proxy is not None:
            result.cpu_s_per_m_events = per_million(meter.seconds, result.events)
        result.server_p99_ms = server_p99_ms(before, server_buckets(settings.proxy_url, spec.name))
        results.append(result)
    return results


@contextlib.contextmanager
def bench_stream(settings: Settings) -> Iterator[tuple[StreamSpec, str]]:
    """A stream of 6 partitions and an app that may post to it (its key), registered straight
    in the registry, until the block ends: then they go, and the run's gigabytes of events."""
    store = Store.connect(settings)
    suffix = uuid.uuid4().hex[:6]
    app = f"bench-{suffix}"
    spec = StreamSpec(name=f"bench_{suffix}", owner="bench", partitions=6, producers=[app])
    try:
        key = store.principals.create_app(app)
        ensure_topics(settings, spec)
        store.specs.put(spec)
        time.sleep(settings.registry_refresh_seconds * 2 + 0.5)  # the proxy reloads the registry
        yield spec, key
    finally:
        store.specs.change(spec.name, lambda _: None)
        with contextlib.suppress(NotFound):  # not registered if it failed before
            store.principals.delete_app(app, audit("bench", "app.delete", app, owner=ADMIN))
        delete_topics(settings, stream_topics(spec))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=15, help="seconds per load run")
    args = parse_arguments(parser)
    duration = 1 if args.smoke else args.duration
    settings = Settings()
    # Before anything is provisioned: nothing is left behind if it is interrupted.
    seconds = 1.0 if args.smoke else 10.0
    with console.status(f"CPU steadiness, idle, for {seconds:.0f} s…"):
        cpu = cpu_steadiness(seconds)
    console.print(f"CPU steadiness: {cpu}")
    with bench_stream(settings) as (spec, key):
        results = measure(settings, spec, key, duration, args.smoke)

    table = terminal.table(
        "run",
        "events/s",
        "req/s",
        "p50 ms",
        "p99 ms",
        "server p99 ≤ ms",
        "of raw",
        CPU_COLUMN,
        "errors",
    )
    for r in results:
        table.add_row(
            r.name,
            f"{r.events_per_second:,.0f}",
            "" if r.requests_per_second is None else f"{r.requests_per_second:,.0f}",
            "" if r.p50_ms is None else f"{r.p50_ms:.1f}",
            "" if r.p99_ms is None else f"{r.p99_ms:.1f}",
            "" if r.server_p99_ms is None else f"{r.server_p99_ms:.0f}",
            f"{r.events_per_second / results[0].events_per_second:.2f}",
            _cpu_cell(r),
            str(r.errors),
        )
    console.print(table)
    console.print(f"{CPU_COLUMN}: {CPU_COUNTS}.")
    figures = {
        "smoke": args.smoke,
        "cpu": asdict(cpu),
        "cpu_counts": CPU_COUNTS,
        "topics": stream_topics(spec),  # made, and deleted
        "results": [asdict(r) for r in results],
    }
    save_figures(settings, "proxy", figures)
    if args.write_docs:
        write_section(
            "proxy-bench",
            "Ingest proxy",
            markdown(results, COMMAND, settings.proxy_workers, cpu),
        )
        console.print(f"wrote {DOCS}")


if __name__ == "__main__":
    main()
