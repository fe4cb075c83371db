"""Producers at a set rate: N concurrent producers post realistic events through the proxy (or
write them straight to Kafka) on an open-loop schedule, and every guid that was acknowledged is
recorded. What was not acknowledged is sent again, honouring Retry-After, until it is or the
run's grace period ends; it is never counted as sent.

An open loop: each producer's batches are due at fixed times whatever the answers; a producer
held up by retries sends what it owes as soon as it can, so a stall cannot hide by delaying the
load behind it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from keystone.ingest_proxy.client import DirectProducer
from keystone.loadtest.events import EventMaker

GRACE_SECONDS = 120.0  # after the run, how long unacknowledged events are still retried
MAX_REQUEST = 500  # events a request carries at most, when a producer catches up
PARTITION_KEY = "user.id"  # events of one user stay in order on one partition


@dataclass
class Second:
    """What the producers saw in one second of the run (by when the request was sent)."""

    acked: int = 0
    failed: int = 0  # events in requests refused or not acknowledged (sent again later)
    latencies: list[float] = field(default_factory=list)  # request seconds
    statuses: Counter[int] = field(default_factory=Counter)


@dataclass
class Load:
    started: float = 0.0  # wall clock (epoch s)
    guids: list[str] = field(default_factory=list)  # acknowledged, in order of acknowledgement
    attempted: int = 0  # events generated
    abandoned: int = 0  # never acknowledged within the grace period
    rejected: int = 0  # refused for good (4xx but 429): a bug in the load or the proxy
    without_retry_after: int = 0  # 503s that did not say when to come back (Retry-After)
    seconds: dict[int, Second] = field(default_factory=lambda: defaultdict(Second))

    def second(self, at: float) -> Second:
        return self.seconds[int(at - self.started)]


Tick = Callable[[Load], None]


@dataclass(frozen=True)
class Plan:
    stream: str
    rate: float  # events per second, all producers together
    duration: float  # seconds
    event_size: int = 1024
    producers: int = 4
    seed: int = 7

    @property
    def batch(self) -> int:
        """Events per request: about 20 requests a second per producer, at most 100 events."""
        return max(1, min(100, math.ceil(self.rate / (self.producers * 20))))


async def drive_proxy(plan: Plan, url: str, key: str, tick: Tick) -> Load:
    load = Load(started=time.time())
    limits = httpx.Limits(max_connections=plan.producers * 2)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/x-ndjson"}
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=30) as http:
        path = f"/v1/streams/{plan.stream}/events"

        async def post(bodies: list[bytes]) -> list[bytes]:
            """Posts the events; returns those still to be acknowledged."""
            sent = time.time()
            second = load.second(sent)
            try:
                answer = await http.post(
                    path, content=b"\n".join(bodies), params={"key": PARTITION_KEY}
                )
            except httpx.TransportError:
                second.failed += len(bodies)
                second.statuses[0] += 1
                await asyncio.sleep(1)
                return bodies
            second.latencies.append(time.time() - sent)
            second.statuses[answer.status_code] += 1
            body = answer.json() if answer.content else {}
            if answer.status_code == 202:
                second.acked += len(bodies)
                load.guids.extend(body["guids"])
                return []
            if answer.status_code not in (429, 503):
                load.rejected += len(bodies)
                return []
            if answer.status_code == 503 and "Retry-After" not in answer.headers:
                load.without_retry_after += 1
            accepted = {a["index"]: a["guid"] for a in body.get("accepted", [])}
            load.guids.extend(accepted.values())
            second.acked += len(accepted)
            second.failed += len(bodies) - len(accepted)
            await asyncio.sleep(float(answer.headers.get("Retry-After", 1)))
            return [b for i, b in enumerate(bodies) if i not in accepted]

        async def producer(index: int) -> None:
            make = EventMaker(seed=plan.seed * 1000 + index, size=plan.event_size)
            interval = plan.batch * plan.producers / plan.rate
            due = time.monotonic() + index * interval / plan.producers  # staggered
            end = due + plan.duration
            seq, backlog = 0, []
            while True:
                now = time.monotonic()
                while due < end and due <= now:  # every batch due by now joins the backlog
                    backlog += [orjson.dumps(make(seq + i)) for i in range(plan.batch)]
                    seq += plan.batch
                    load.attempted += plan.batch
                    due += interval
                if backlog:
                    if due >= end and now > end + GRACE_SECONDS:
                        break
                    chunk, backlog = backlog[:MAX_REQUEST], backlog[MAX_REQUEST:]
                    backlog = await post(chunk) + backlog
                elif due >= end:
                    break
                else:
                    await asyncio.sleep(due - now)
            load.abandoned += len(backlog)

        async def ticker() -> None:
            while True:
                tick(load)
                await asyncio.sleep(0.5)

        ticking = asyncio.create_task(ticker())
        try:
            await asyncio.gather(*(producer(i) for i in range(plan.producers)))
        finally:
            ticking.cancel()
            tick(load)
    return load


def drive_direct(plan: Plan, kafka: dict[str, Any], app: str, tick: Tick) -> Load:
    """The same load written straight to Kafka by the producer wrapper (one producer a thread),
    for producers that bypass HTTP; a batch is acknowledged when Kafka has every event of it."""
    load = Load(started=time.time())

    def producer(index: int) -> None:
        make = EventMaker(seed=plan.seed * 1000 + index, size=plan.event_size)
        kafka_producer = DirectProducer(kafka, app)
        interval = plan.batch * plan.producers / plan.rate
        due = time.monotonic() + index * interval / plan.producers
        deadline = due + plan.duration
        seq = 0
        while due < deadline:
            time.sleep(max(0.0, due - time.monotonic()))
            events = [make(seq + i) for i in range(plan.batch)]
            seq += plan.batch
            load.attempted += len(events)
            sent = time.time()
            guids = kafka_producer.send(plan.stream, events).guids
            second = load.second(sent)
            second.latencies.append(time.time() - sent)
            second.acked += len(guids)
            load.guids.extend(guids)
            due += interval

    async def run() -> None:
        loop = asyncio.get_running_loop()
        workers = [loop.run_in_executor(None, producer, i) for i in range(plan.producers)]
        while not all(w.done() for w in workers):
            tick(load)
            await asyncio.sleep(0.5)
        await asyncio.gather(*workers)
        tick(load)

    asyncio.run(run())
    return load
