"""Recovery jobs (`contracts.recovery.Job`), each a Spark application of its own beside the
live router, started and watched by control's fleet: `python -m keystone.router.jobs --stream
<s> --id <id>` (`__main__`) runs the job's runner, of the class its kind names in `RUNNERS`.

A runner (`JobRunner`) takes the same reading, filter, projection and sink code as the live
output through a slice of another source — the archive (`backfill`), the dead-letter topic
(`redrive`) — slice by slice at the job's rate, and records how far it has come after each in
the job's progress file, so that an application started again goes on from there.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from typing import ClassVar, Generic, TypeVar

from pyspark.sql import SparkSession

from keystone.contracts.recovery import Job, JobProgress
from keystone.contracts.schema import parse_schema
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec

log = logging.getLogger(__name__)

SLICE_SECONDS = 10  # a slice holds at most this many seconds' worth of the job's rate
J = TypeVar("J", bound=Job)
P = TypeVar("P", bound=JobProgress)


class JobRunner(ABC, Generic[J, P]):
    """One job's application: what it reads, and where it is."""

    kind: ClassVar[type[Job]]  # the kind of job it runs

    def __init__(
        self,
        spark: SparkSession,
        settings: Settings,
        spec: StreamSpec,
        job: J,
        key: bytes | None,
    ) -> None:
        """`key`: the stream's, for `hash` (`RegistryReader.hashing_key`)."""
        self.spark = spark
        self.settings = settings
        self.spec = spec
        self.job = job
        self.key = key
        self.path = job.progress.path(settings.state_dir, spec.name, job.id)
        self.progress: P = job.progress.load(self.path)  # type: ignore[assignment]
        schema = spec.avro_schema
        self.schema = parse_schema(schema) if schema is not None else None

    @abstractmethod
    def run(self, stop: threading.Event) -> bool:
        """Goes on from where the progress file says until the job is done (True) or `stop` is
        set (False)."""

    def done(self, summary: str) -> bool:
        """Marks the job done in its progress file, saying what it did; True."""
        self.progress.done = True
        self.progress.save(self.path)
        log.info("%s %s done: %s", self.kind.noun(), self.job.id, summary)
        return True

    def paced(self, stop: threading.Event, read: int, began: float) -> None:
        """Waits out the rest of a slice of `read` events begun at `began` (monotonic): it takes
        at least read / rate seconds."""
        stop.wait(max(0.0, read / self.job.rate - (time.monotonic() - began)))
