"""Routers sized from their traffic: the fleet samples each stream's input (the end offsets of
its fronting topic) every `SAMPLE_SECONDS`, keeps an hour of samples in Redis, and sizes the
router for the events per second its traffic calls for (`decide`); the router's task slots and
its micro-batches' size follow from that figure (`router.plan.router_slots`,
`router.plan.batch_limit`).

The rule, with hysteresis so a router is not resized back and forth:
- a size is a step of `LADDER` (1,000 events/s, doubling), within the spec's `sizing` bounds;
- the size a rate calls for is the smallest step at or above it times `HEADROOM` (1.5);
- up when a rise has held (`risen`): each of the last `HELD` intervals (some 30 s) calls for
  more, and the size is what their median calls for; or, for traffic in bursts, the mean of
  those intervals and that of the `HELD` before both call for more. Not a single interval's
  rate: the one a rise begins in measures part old rate, part new, and a size taken from it
  would stand for the next 10 minutes; nor does a lone spike size a router;
- down only when the peak of the last hour calls for less;
- at most one change per `CHANGE_EVERY_SECONDS` (10 minutes) per stream.

A router on a local master takes a change as it runs (it reads its record every second:
`router.job.RouterWatch`; its micro-batch queries start again with batches of the new size,
its Real-time Mode outputs run on). On a cluster a change redeploys it
(`router.plan.resizes_in_place`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import pairwise
from typing import Protocol

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from keystone.contracts import kafka_clients
from keystone.contracts.errors import Unavailable
from keystone.contracts.names import fronting_topic
from keystone.contracts.registry import RouterState
from keystone.contracts.settings import Settings
from keystone.contracts.spec import Sizing, StreamSpec

log = logging.getLogger(__name__)

LADDER = tuple(1_000 * 2**n for n in range(12))  # 1,000 to 2,048,000 events/s
HEADROOM = 1.5
SAMPLE_SECONDS = 10.0
HELD = 3  # intervals (some 30 s) a rise holds before it sizes a router up
RECENT_SECONDS = 120.0  # the intervals a rise is read from ended within this
WINDOW_SECONDS = 3600.0
CHANGE_EVERY_SECONDS = 600.0
ASK_SECONDS = 3.0  # Kafka's answer for the samples, at most

Sample = tuple[float, int]  # (epoch seconds, records in the fronting topic so far)


def rates(samples: list[Sample]) -> list[tuple[float, float]]:
    """Events per second between consecutive samples, at the later one's time (an interval
    whose count went down, a topic made again, is left out, and so is one too short to tell
    a rate from a burst)."""
    found = []
    for (t0, n0), (t1, n1) in pairwise(samples):
        if t1 - t0 >= SAMPLE_SECONDS / 2 and n1 >= n0:
            found.append((t1, (n1 - n0) / (t1 - t0)))
    return found


def peak(samples: list[Sample], since: float) -> float:
    """The highest rate of the intervals that ended after `since` (0 without any)."""
    return max((r for t, r in rates(samples) if t > since), default=0.0)


def size_for(rate: float, bounds: Sizing) -> int:
    """The smallest step of the ladder at or above `rate` with headroom, within the bounds."""
    wanted = next((s for s in LADDER if s >= rate * HEADROOM), LADDER[-1])
    return max(bounds.min_events_per_second, min(bounds.max_events_per_second, wanted))


def bounded(size: int, bounds: Sizing) -> int:
    return max(bounds.min_events_per_second, min(bounds.max_events_per_second, size))


def risen(samples: list[Sample], bounds: Sizing, current: int, now: float) -> int:
    """The size a rise of the traffic calls for (`current` without one), from the intervals
    that ended in the last `RECENT_SECONDS`, by count, so that samples a little more than
    `SAMPLE_SECONDS` apart, or one missed, do not leave a window short:
    - steady: each of the last `HELD` intervals calls for more; the size is their median's
      (the interval the rise began in, part old rate and part new, is the least of them);
    - in bursts further apart than a sample, which leave intervals empty between them: the mean
      of the last `HELD` intervals and that of the `HELD` before both call for more (two
      windows, so that one burst sizes nothing); the size is the lesser mean's."""
    found = [r for t, r in rates(samples) if t > now - RECENT_SECONDS]
    last, before = found[-HELD:], found[-2 * HELD : -HELD]
    size = current
    if len(last) == HELD:
        ordered = sorted(last)
        if size_for(ordered[0], bounds) > current:
            size = size_for(ordered[HELD // 2], bounds)
    if len(before) == HELD:
        size = max(size, size_for(min(sum(last), sum(before)) / HELD, bounds))
    return size


def decide(state: RouterState, samples: list[Sample], bounds: Sizing, now: float) -> int:
    """The size the router should run with now (its current one unless the rule says)."""
    hour = peak(samples, now - WINDOW_SECONDS)
    if not state.sized_for:
        return size_for(hour, bounds)
    current = bounded(state.sized_for, bounds)
    if current != state.sized_for:  # the owner moved the bounds: a resize anyway
        return current
    if now - state.resized_at < CHANGE_EVERY_SECONDS:
        return current
    up = risen(samples, bounds, current, now)
    if up > current:
        return up
    return min(current, size_for(hour, bounds))


@dataclass
class Traffic:
    """What the fleet keeps of a stream's input: its samples, an hour of them."""

    samples: list[Sample]

    def add(self, sample: Sample) -> None:
        self.samples.append(sample)
        cut = sample[0] - WINDOW_SECONDS - SAMPLE_SECONDS
        self.samples = [s for s in self.samples if s[0] >= cut]


class TrafficStore(Protocol):
    """Where the samples live (`control.store.Store`'s methods)."""

    def traffic(self, stream: str) -> list[Sample]: ...

    def put_traffic(self, stream: str, samples: list[Sample]) -> None: ...


def topic_sizes(settings: Settings, topics: Iterable[str]) -> dict[str, int]:
    """Records each topic holds so far (its partitions' end offsets, summed), in one request,
    soon or not at all: the fleet's pass waits for it, within its lease."""
    admin = AdminClient(kafka_clients.librdkafka(settings))
    try:
        metadata = admin.list_topics(timeout=ASK_SECONDS).topics
        wanted = {
            TopicPartition(t, p): OffsetSpec.latest()
            for t in topics
            if t in metadata
            for p in metadata[t].partitions
        }
        if not wanted:
            return {}
        asked = admin.list_offsets(wanted, request_timeout=ASK_SECONDS)
        ends = {tp: f.result() for tp, f in asked.items()}
    except KafkaException as e:
        raise Unavailable(f"Kafka did not answer for the streams' sizes: {e}", 5) from e
    sizes: dict[str, int] = {}
    for tp, end in ends.items():
        sizes[tp.topic] = sizes.get(tp.topic, 0) + end.offset
    return sizes


class Sizer:
    """The fleet's side: `observe` every pass (it samples every `SAMPLE_SECONDS`), then
    `size` per stream, which also keeps the router's record's figures current."""

    def __init__(
        self,
        settings: Settings,
        store: TrafficStore,
        clock: Callable[[], float] = time.time,
        sizes: Callable[[list[str]], dict[str, int]] | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.sizes = sizes or (lambda topics: topic_sizes(settings, topics))
        self._sampled = 0.0

    def observe(self, specs: list[StreamSpec]) -> None:
        now = self.clock()
        if now - self._sampled < SAMPLE_SECONDS:
            return
        self._sampled = now
        topics = {fronting_topic(s.name): s.name for s in specs if s.outputs}
        for topic, count in self.sizes(list(topics)).items():
            stream = topics[topic]
            traffic = Traffic(self.store.fleet.traffic(stream))
            if traffic.samples and now - traffic.samples[-1][0] < SAMPLE_SECONDS / 2:
                continue  # another control process sampled it a moment ago (a failover)
            traffic.add((now, count))
            self.store.fleet.put_traffic(stream, traffic.samples)

    def size(self, spec: StreamSpec, state: RouterState) -> int:
        """The size the stream's router should run with; `state` records it, with the input's
        rate now and its peak of the last hour."""
        now = self.clock()
        samples = self.store.fleet.traffic(spec.name)
        wanted = decide(state, samples, spec.sizing, now)
        found = rates(samples)
        state.rate_per_second = round(found[-1][1], 1) if found else 0.0
        state.peak_per_second = round(peak(samples, now - WINDOW_SECONDS), 1)
        # Traffic's changes count (and wait out the rule's interval); a first size, or one the
        # owner's bounds moved, does not.
        by_traffic = state.sized_for and bounded(state.sized_for, spec.sizing) == state.sized_for
        if wanted != state.sized_for and by_traffic:
            state.resizes += 1
            state.resized_at = now
            log.info(
                "router %s resized from %d to %d events/s (peak of the last hour %.0f)",
                spec.name,
                state.sized_for,
                wanted,
                state.peak_per_second,
            )
        state.sized_for = wanted
        return wanted
