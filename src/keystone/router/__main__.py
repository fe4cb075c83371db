"""`python -m keystone.router --stream NAME`: runs one stream's router until SIGTERM or SIGINT.

The spec comes from Redis (where control keeps it); the Spark application is launched by
pyspark through spark-submit with the master from settings and the Kafka connector jars. The
driver serves its metrics on loopback, on the port the fleet chose and registered with
Prometheus (any free port when run by hand). Control's fleet runs it for every stream.
"""

from __future__ import annotations

import argparse
import logging
import sys

from keystone.contracts.errors import KeystoneError
from keystone.contracts.registry import RegistryReader
from keystone.contracts.settings import Settings
from keystone.router.job import Router
from keystone.router.metrics import RouterMetrics
from keystone.router.plan import resizes_in_place, started_slots
from keystone.router.spark import (
    application_logging,
    end_session,
    spark_session,
    stop_on_signals,
)

log = logging.getLogger("keystone.router")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m keystone.router", description=__doc__)
    parser.add_argument("--stream", required=True, help="the stream whose outputs to run")
    parser.add_argument(
        "--metrics-port", type=int, default=0, help="where to serve /metrics (default: any)"
    )
    parser.add_argument(
        "--sized-for",
        type=int,
        default=None,
        help="the events per second the fleet sized it for (default: the spec's smallest)",
    )
    args = parser.parse_args(argv)
    application_logging()
    settings = Settings()
    # The spec now, the outputs' rewinds and the router's size every second: a Redis that does
    # not answer must not hold the router's supervision for long.
    registry = RegistryReader.connect(settings, timeout=1, retries=0)
    try:
        spec = registry.get_stream(args.stream)
    except KeystoneError as e:
        log.error("%s", e.message)
        return 2

    stop = stop_on_signals()

    slots = started_slots(spec, args.sized_for, settings.spark_master)
    spark = spark_session(settings, f"keystone-router-{spec.name}", slots=slots)
    metrics = RouterMetrics(spec.name, home=settings.fronting_clusters[0])
    port = metrics.serve(settings, args.metrics_port)
    master = spark.sparkContext.master
    log.info(
        "router for %s on %s, sized for %s events/s (%d slots); metrics on port %d",
        spec.name,
        master,
        args.sized_for or "the least",
        slots,
        port,
    )
    try:
        resizes = resizes_in_place(settings.spark_master)
        Router(spark, settings, spec, metrics, registry, args.sized_for, resizes).run(stop)
    finally:
        registry.close()
        metrics.close()
        end_session(spark)
    log.info("router for %s stopped", spec.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
