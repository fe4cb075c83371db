"""`python -m keystone.router.jobs --stream NAME --id ID`: runs one recovery job (a backfill, a
redrive: its kind by its id) as a Spark application until it is done, or SIGTERM or SIGINT.
Control's fleet runs it, and runs it again where it stopped if it ends unfinished."""

from __future__ import annotations

import argparse
import logging
import sys

from keystone.contracts.errors import KeystoneError
from keystone.contracts.recovery import OPERATIONS, Job
from keystone.contracts.registry import RegistryReader
from keystone.contracts.settings import Settings
from keystone.router.jobs import JobRunner
from keystone.router.jobs.backfill import Backfiller
from keystone.router.jobs.redrive import Redriver
from keystone.router.spark import application_logging, end_session, spark_session, stop_on_signals

log = logging.getLogger("keystone.router.jobs")

# Each kind of job's runner.
RUNNERS: dict[type[Job], type[JobRunner]] = {r.kind: r for r in (Backfiller, Redriver)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m keystone.router.jobs", description=__doc__)
    parser.add_argument("--stream", required=True)
    parser.add_argument("--id", required=True, help="the job's id (bf-..., rd-...)")
    args = parser.parse_args(argv)
    application_logging()
    kinds = [k for k in OPERATIONS.values() if k in RUNNERS and args.id.startswith(f"{k.prefix}-")]
    if not kinds:
        log.error("%s is no job's id: %s", args.id, ", ".join(f"{k.prefix}-..." for k in RUNNERS))
        return 2
    kind = kinds[0]
    settings = Settings()
    registry = RegistryReader.connect(settings)
    try:
        spec = registry.get_stream(args.stream)
        job = next(
            (j for j in registry.operations(kind, args.stream).values() if j.id == args.id), None
        )
        key = registry.hashing_key(args.stream)
    except KeystoneError as e:
        log.error("%s", e.message)
        return 2
    finally:
        registry.close()
    output = getattr(job, "output", None)
    if job is None or (output is not None and spec.output(output) is None):
        log.error("%s %s of %s is no longer asked for", kind.noun(), args.id, args.stream)
        return 2

    stop = stop_on_signals()
    runner = RUNNERS[kind]
    where = f"{spec.name}-{output}" if output is not None else spec.name
    spark = spark_session(settings, f"keystone-{kind.noun()}-{where}")
    log.info("%s %s of %s at %d events/s", kind.noun(), job.id, where, job.rate)
    try:
        finished = runner(spark, settings, spec, job, key).run(stop)
    finally:
        end_session(spark)
    log.info("%s %s %s", kind.noun(), job.id, "finished" if finished else "stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
