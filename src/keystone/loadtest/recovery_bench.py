"""The recovery benchmark: how fast a rewind replays, and a backfill routes from the archive,
into each sink type, and what each costs the same stream's live output meanwhile.

    python -m keystone.loadtest.recovery_bench [--events 1000000] [--live-rate 200] [--smoke]

The stream `rewind_bench` (4 partitions) is loaded with N events of 1 KB straight to Kafka,
stamped with ingest times spread over the previous hour; then its outputs are made: a Kafka, an
Elasticsearch, a Keystone (into the stream `rewind_bench_copy`, which has no outputs of its own)
and a Kafka `live` output at the topic's end, a Hive output from its start (a Hive output
replays from a restore point, so it routes the N events once first, to have one there). While a
steady live load of the `live` rate goes through the stream, each of the first four is rewound
in turn to the topic's start (Hive: to its restore point there) at the highest rate allowed
(`max_replay_events_per_second`): the sink's own pace, the worst case for the live output; then
the Kafka one again at the stream's default replay rate (`recovery.max_events_per_second`), what
a rewind does unless told. Per sink: the replay's events/s (its events over the time from the
request until the fleet saw it caught up, the query's restart included), the router's CPU
seconds per million replayed events (its process group), and the live output's p99 latency
during the replay beside the same before any replay (its records' Kafka timestamps minus their
ingest time). Then each of the four is backfilled in turn from the stream's archive over that
hour, at the same rate: its events/s (from the request until the fleet saw it done, its
application's start included), its application's CPU, and the live p99 meanwhile. The streams
are deleted when the run ends, with their topics and indices (the Hive tables stay). `--smoke`
does the same with 3,000 events and only the Kafka and the Hive outputs (the two ways a rewind
is asked: offsets, a restore point) beside the live one, backfilling the Kafka one.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from keystone.contracts import envelope, kafka_clients
from keystone.contracts.elasticsearch import Connection
from keystone.contracts.names import index_prefix
from keystone.contracts.processes import PidFile
from keystone.contracts.recovery import Backfill
from keystone.contracts.settings import Settings
from keystone.contracts.sinks import SINK_TYPES, Replay
from keystone.control.client import ControlClient, ControlError
from keystone.control.launcher import Deployment
from keystone.ingest_proxy.client import DirectProducer
from keystone.loadtest.bench import (
    CPU_COLUMN,
    CpuMeter,
    delete_streams,
    machine,
    make_event,
    parse_arguments,
    per_million,
    process_tree,
    save_figures,
    stream_topics,
    write_section,
)
from keystone.loadtest.run import await_routers
from keystone.router.topics import delete_topics, iter_topic
from keystone.terminal import console

STREAM, TARGET, APP = "rewind_bench", "rewind_bench_copy", "rewind-bench"
PARTITIONS = 4
REPLAYED = ("kafka", "elasticsearch", "hive", "keystone")  # each rewound in turn, in this order
SMOKE_REPLAYED = ("kafka", "hive")
BASELINE_SECONDS = 30.0
SMOKE_EVENTS = 3000
LOAD_BATCH = 2000
CATCH_UP_SECONDS = 1800.0  # a replay's longest wait before the run gives up
HOUR_MS = 3_600_000


def spec(replayed: tuple[str, ...] = REPLAYED, every: str = "10 seconds") -> dict:
    """The stream, with the outputs `replayed` and the `live` one (a smoke's router runs only
    what it rewinds: a lighter start); its Hive output and archive written `every` so often (a
    smoke's more often: it waits for them)."""
    realtime = {"mode": "realtime", "trigger": "60 seconds"}
    outputs = [
        {"name": "kafka", "sink": {"type": "kafka"}, "delivery": realtime},
        {"name": "elasticsearch", "sink": {"type": "elasticsearch"}},
        {
            "name": "hive",
            "sink": {"type": "hive"},
            "delivery": {"mode": "microbatch", "trigger": every},
            "start": "earliest",
        },
        {"name": "keystone", "sink": {"type": "keystone", "stream": TARGET}},
        {"name": "live", "sink": {"type": "kafka"}, "delivery": realtime},
    ]
    return {
        "name": STREAM,
        "owner": "bench",
        "partitions": PARTITIONS,
        "archive": {"trigger": every},
        "outputs": [o for o in outputs if o["name"] in (*replayed, "live")],
    }


def target_spec() -> dict:
    """The Keystone output's stream: with no outputs and no archive, it runs no router."""
    return {
        "name": TARGET,
        "owner": "bench",
        "partitions": PARTITIONS,
        "archive": {"enabled": False},
    }


def load(settings: Settings, events: int, hour_ms: int) -> float:
    """The events, straight to the fronting topic, their ingest times spread over the hour
    from `hour_ms`; events/s it took."""
    producer = DirectProducer(kafka_clients.librdkafka(settings), APP)
    started = time.monotonic()
    for first in range(0, events, LOAD_BATCH):
        batch = [make_event(n) for n in range(first, min(events, first + LOAD_BATCH))]
        at = hour_ms + first * (HOUR_MS - 1) // events
        producer.send(STREAM, batch, at=at)  # raises unless Kafka has every event
    return events / (time.monotonic() - started)


class LiveLoad:
    """A steady trickle of events through the stream while the rewinds run."""

    def __init__(self, settings: Settings, rate: float) -> None:
        self.producer = DirectProducer(kafka_clients.librdkafka(settings), APP)
        self.rate = rate
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-load", daemon=True)

    def _run(self) -> None:
        tick, n = 0.1, 0
        per_tick = max(1, round(self.rate * tick))
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.producer.send(STREAM, [make_event(n + i) for i in range(per_tick)])
            n += per_tick
            next_at += tick
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def __enter__(self) -> LiveLoad:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def live_p99_ms(settings: Settings, since: float, until: float) -> tuple[float | None, int]:
    """The live output's p99 delivery latency (record's Kafka timestamp minus its ingest time)
    of the records it wrote between `since` and `until` (epoch seconds), and their count."""
    latencies = []
    for message in iter_topic(kafka_clients.librdkafka(settings), f"{STREAM}.live", timeout=30):
        written = message.timestamp()[1] / 1000
        if not since <= written <= until:
            continue
        headers = dict(message.headers() or [])
        ingested = headers.get(envelope.TIMESTAMP)
        if ingested is not None:
            latencies.append(written * 1000 - int(ingested))
    if not latencies:
        return None, 0
    latencies.sort()
    return round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 1), len(latencies)


def router_processes(settings: Settings) -> Callable[[], list[int]]:
    def pids() -> list[int]:
        deployed = Deployment.load(settings, STREAM)
        return process_tree(deployed.pid) if deployed is not None and deployed.alive() else []

    return pids


def replay(
    control: ControlClient,
    settings: Settings,
    output: str,
    target: dict[str, Any],
    fastest: bool = True,
) -> dict[str, Any]:
    """Rewinds one output at the highest rate allowed (else at the stream's default) and waits
    until it has caught up; its figures."""
    rate = settings.max_replay_events_per_second if fastest else None
    request = {**target, "max_events_per_second": rate}
    with CpuMeter(router_processes(settings), every=5.0) as cpu:
        asked = time.time()
        started = control.rewind(STREAM, output, request)
        with console.status(f"replaying {started.events:,} events into {output}…"):
            while (now := control.rewind_progress(STREAM, output)).state == "replaying":
                if time.time() - asked > CATCH_UP_SECONDS:
                    raise RuntimeError(f"{output} had not caught up after {CATCH_UP_SECONDS} s")
                time.sleep(1)
        done = time.time()
    p99, records = live_p99_ms(settings, asked, done)
    seconds = done - asked
    console.print(
        f"{output}: {now.events:,} events in {seconds:.1f} s "
        f"({now.events / seconds:,.0f}/s); live p99 {p99} ms over {records} records"
    )
    return {
        "name": output if fastest else f"{output} at {now.rate:,}/s",
        "events": now.events,
        "seconds": round(seconds, 1),
        "events_per_second": round(now.events / seconds),
        "cpu_s_per_m_events": per_million(cpu.seconds, now.events),
        "live_p99_ms": p99,
        "live_records": records,
    }


def backfill(control: ControlClient, settings: Settings, output: str, hour_ms: int) -> dict:
    """Backfills one output over the loaded hour from the archive and waits until it is done;
    its figures."""
    request = {
        "from": _iso(hour_ms),
        "to": _iso(hour_ms + HOUR_MS),
        "max_events_per_second": settings.max_replay_events_per_second,
    }
    record = settings.job_run_dir(Backfill.kind) / f"{STREAM}.{output}.json"

    def pids() -> list[int]:
        pid = PidFile(record).running_pid()
        return process_tree(pid) if pid is not None else []

    with CpuMeter(pids, every=1.0) as cpu:
        asked = time.time()
        started = control.backfill(STREAM, output, request)
        with console.status(f"backfilling {output} from the archive…"):
            while (now := control.backfill_progress(STREAM, output)).state == "running":
                if time.time() - asked > CATCH_UP_SECONDS:
                    raise RuntimeError(f"{output} was not backfilled in {CATCH_UP_SECONDS} s")
                time.sleep(1)
        done = time.time()
    if now.id != started.id or now.state != "done":
        raise RuntimeError(f"backfill of {output} ended {now.state}: {now.error}")
    p99, records = live_p99_ms(settings, asked, done)
    seconds = done - asked
    console.print(
        f"backfill {output}: {now.read:,} events in {seconds:.1f} s "
        f"({now.read / seconds:,.0f}/s); live p99 {p99} ms over {records} records"
    )
    return {
        "name": output,
        "events": now.read,
        "seconds": round(seconds, 1),
        "events_per_second": round(now.read / seconds),
        "cpu_s_per_m_events": per_million(cpu.seconds, now.read),
        "live_p99_ms": p99,
        "live_records": records,
    }


def archived(control: ControlClient, hour_ms: int) -> bool:
    """Whether the archive holds the loaded hour (a backfill's plan of it is accepted)."""
    request = {"from": _iso(hour_ms), "to": _iso(hour_ms + HOUR_MS), "dry_run": True}
    try:
        control.backfill(STREAM, "kafka", request)
    except ControlError as e:
        if e.status == 422:
            return False
        raise
    return True


def _iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat()


def cleanup(settings: Settings, control: ControlClient) -> list[str]:
    """Deletes the streams, then (once their routers stopped) their topics and indices."""
    deleted = delete_streams(settings, control, (STREAM, TARGET))  # the one fed first
    topics = [topic for made in deleted for topic in stream_topics(made)]
    if not topics:
        return []
    delete_topics(settings, topics)
    prefix = index_prefix(STREAM, "elasticsearch")
    with Connection.of(settings).client() as es:
        es.delete(f"/{prefix}*")
    return topics


def _table(rows: list[dict], what: str) -> list[str]:
    return [
        f"| sink | events {what} | seconds | events/s | {CPU_COLUMN} | live p99 ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        *(
            f"| {r['name']} | {r['events']:,} | {r['seconds']:.0f} | {r['events_per_second']:,} | "
            f"{(r['cpu_s_per_m_events'] or 0):.0f} | {r['live_p99_ms']} |"
            for r in rows
        ),
    ]


def markdown(figures: dict, command: str) -> str:
    return "\n".join(
        [
            f"Command: `{command}`: {figures['events']:,} events of 1 KB in the fronting topic "
            f"({PARTITIONS} partitions), each output rewound to its start in turn at the highest "
            "rate allowed, then the Kafka one at the stream's default replay rate, a live load "
            f"of {figures['live_rate']:.0f} events/s meanwhile; the stack, the router and the "
            "load on the same machine.  ",
            f"Machine: {figures['machine']}.",
            "",
            *_table(figures["results"], "replayed"),
            "",
            f"The live output's p99 before any replay: {figures['baseline_p99_ms']} ms "
            f"({figures['baseline_records']} records over {BASELINE_SECONDS:.0f} s). Seconds run "
            "from the request until the fleet saw the output caught up, the query's restart "
            f"included. {CPU_COLUMN}: the router's process group (the router and its JVM) "
            "over the replay, the live output's share included.",
            "",
        ]
    )


def backfill_markdown(figures: dict, command: str) -> str:
    return "\n".join(
        [
            f"Command: `{command}`: the same run's {figures['events']:,} events of 1 KB, their "
            "ingest times spread over one hour, backfilled from the stream's archive into each "
            "output in turn at the highest rate allowed, the live load going on; the stack, the "
            "router, the backfill's application and the load on the same machine.  ",
            f"Machine: {figures['machine']}.",
            "",
            *_table(figures["backfills"], "backfilled"),
            "",
            "Seconds run from the request until the fleet saw the backfill done, its "
            f"application's start included. {CPU_COLUMN}: the backfill's application (its "
            "Python driver and JVM), without the router's.",
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--live-rate", type=float, default=200.0, help="live events per second")
    args = parse_arguments(parser)
    settings = Settings()
    events = SMOKE_EVENTS if args.smoke else args.events
    baseline_seconds = 5.0 if args.smoke else BASELINE_SECONDS
    command = "python -m keystone.loadtest.recovery_bench " + " ".join(sys.argv[1:])
    with ControlClient.from_settings(settings) as control:
        cleanup(settings, control)  # a run that died before its end
        topics: list[str] = []
        try:
            replayed = SMOKE_REPLAYED if args.smoke else REPLAYED
            if "keystone" in replayed:
                control.create_stream(target_spec())
            control.create_stream({**spec(), "outputs": []})  # the topic first, then the load
            hour_ms = (int(time.time() * 1000) // HOUR_MS - 1) * HOUR_MS
            rate = load(settings, events, hour_ms)
            console.print(f"loaded {events:,} events ({rate:,.0f}/s)")
            control.put_stream(spec(replayed, "2 seconds" if args.smoke else "10 seconds"))
            await_routers(control, [STREAM], console)
            with console.status("the Hive output routes the events once…"):
                while not _hive_point_at_start(control, events):
                    time.sleep(2)
            results = []
            with LiveLoad(settings, args.live_rate):
                time.sleep(5)  # the live output under way
                since = time.time()
                time.sleep(baseline_seconds)
                baseline, records = live_p99_ms(settings, since, time.time())
                offsets = {str(p): 0 for p in range(PARTITIONS)}
                for output in replayed:
                    target: dict[str, Any] = {"offsets": offsets}
                    # Named after their sink types; a resettable one replays from a restore
                    # point.
                    if SINK_TYPES[output].replay is Replay.RESETTABLE:
                        target = {"restore_point": "0-start"}
                    results.append(replay(control, settings, output, target))
                if not args.smoke:  # what a rewind does unless told: the default rate
                    results.append(replay(control, settings, "kafka", {"offsets": offsets}, False))
                with console.status("the archive takes the loaded hour…"):
                    while not archived(control, hour_ms):
                        time.sleep(2)
                backfilled = REPLAYED[:1] if args.smoke else REPLAYED
                backfills = [backfill(control, settings, o, hour_ms) for o in backfilled]
        finally:
            topics = cleanup(settings, control)
    figures = {
        "smoke": args.smoke,
        "machine": machine(),
        "events": events,
        "live_rate": args.live_rate,
        "baseline_p99_ms": baseline,
        "baseline_records": records,
        "topics": topics,
        "results": results,
        "backfills": backfills,
    }
    save_figures(settings, "recovery", figures)
    if args.write_docs:
        write_section("rewind-bench", "Rewind", markdown(figures, command))
        write_section("backfill-bench", "Backfill", backfill_markdown(figures, command))
        console.print("wrote docs/benchmarks.md")


def _hive_point_at_start(control: ControlClient, events: int) -> bool:
    """The Hive output has routed the loaded events (its restore points reach their end), so
    its rewind to where it started replays all of them."""
    points = control.restore_points(STREAM, "hive")
    return any(sum(p.offsets.values()) >= events for p in points)


if __name__ == "__main__":
    main()
