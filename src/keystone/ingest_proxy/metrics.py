"""The proxy's Prometheus metrics. With several server processes behind one port
(PROMETHEUS_MULTIPROC_DIR set), each process writes its own files and /metrics sums them."""

from __future__ import annotations

import os
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from keystone.contracts import metrics as names

UNKNOWN = "(unknown)"  # label for requests whose stream or app is not known: bounded cardinality


class IngestMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.events = Counter(
            names.INGEST_EVENTS.removesuffix("_total"),
            "Events posted to the proxy, by result: accepted (in Kafka), rejected, failed",
            ["stream", "app", "result"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            names.INGEST_REQUEST_SECONDS,
            "Time to answer a post of events",
            ["stream"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )

        self.registry_failures = Counter(
            names.INGEST_REGISTRY_FAILURES.removesuffix("_total"),
            "Reloads of the registry (streams, app keys) that failed; the last one loaded "
            "is served meanwhile",
            registry=self.registry,
        )
        # The oldest among the live server processes: each reloads on its own, so a change
        # (a new key, a new stream) is served on every connection once this has reached the
        # store's version.
        self.registry_version = Gauge(
            names.INGEST_REGISTRY_VERSION,
            "The registry version loaded, by the server process that is furthest behind",
            multiprocess_mode="livemin",
            registry=self.registry,
        )

    def announce(self, grants: Iterable[tuple[str, str]]) -> None:
        """Series at zero for every (stream, app) that may post: a series born at its first
        value has no earlier point, so an app's first burst would not show as a rate."""
        for stream, app in grants:
            for result in names.INGEST_RESULTS:
                self.events.labels(stream, app, result)

    def exposition(self) -> bytes:
        if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
            merged = CollectorRegistry()
            MultiProcessCollector(merged)
            return generate_latest(merged)
        return generate_latest(self.registry)
