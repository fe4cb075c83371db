"""How every Spark application of the project meets its services: master, connector jars, the
shared Hive metastore and warehouse, loopback addresses, and the drivers' class archive. The
router, `keystone sql`, the load test's readers and tests all build their sessions here."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from keystone.contracts import kafka_clients, metastore
from keystone.contracts.settings import Settings
from keystone.router import jvm

DEFAULT_SLOTS = 2  # task slots of an application that does not say how many it needs


def master_with_slots(master: str, slots: int) -> str:
    """A local master with at least `slots` task threads (`local[*]`: the machine's cores);
    any other master as it is (its applications ask for `spark.cores.max`)."""
    local = re.fullmatch(r"local(?:\[(\*|\d+)\])?", master)
    if local is None:
        return master
    whole = local.group(1) in (None, "*")
    threads = (os.cpu_count() or 1) if whole else int(local.group(1))
    return f"local[{max(threads, slots)}]"


def spark_conf(
    settings: Settings, app_name: str, master: str | None = None, slots: int | None = None
) -> dict[str, str]:
    """`slots`: the task slots the application needs at once (a router's Real-time Mode tasks
    each hold one for as long as they run): a local master gets that many threads, a cluster
    application asks for that many cores (`spark.cores.max`, spread over the workers)."""
    host = settings.bind_host
    master = master_with_slots(master or settings.spark_master, slots or DEFAULT_SLOTS)
    cluster = (
        {
            "spark.cores.max": str(slots or DEFAULT_SLOTS),
            "spark.executor.memory": settings.spark_executor_memory,
        }
        if master.startswith("spark://")
        else {}
    )
    conf = {
        "spark.app.name": app_name,
        "spark.master": master,
        # Connector jars by local path: nothing is resolved from a repository at run time.
        "spark.jars": ",".join(str(p) for p in jvm.spark_jars(settings)),
        "spark.driver.bindAddress": host,
        "spark.driver.host": host,
        # Python workers run this same interpreter (the project's virtualenv), not `python3`.
        "spark.pyspark.python": sys.executable,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.catalogImplementation": "hive",
        **metastore.spark_conf(settings),
        "spark.sql.warehouse.dir": settings.warehouse_dir,
        "spark.hadoop.hive.exec.dynamic.partition.mode": "nonstrict",
        "spark.sql.session.timeZone": "UTC",
        "spark.local.dir": str(settings.state_dir / "spark" / "tmp"),
        "spark.sql.shuffle.partitions": "4",
        # A query stopped (a rewind restarts one) whose batch is stuck in a sink's retries must
        # not hold the router's supervision for ever: the stop gives up after a minute.
        "spark.sql.streaming.stopTimeout": "60s",
        # A query run back to back (an Elasticsearch output) asks Kafka for new records this
        # often while there are none: Spark's 10 ms made an idle router ask 100 times a second
        # (a third of its idle CPU, and the broker's).
        "spark.sql.streaming.pollingDelay": "250ms",
        # Running tasks' accumulators reach the driver with each executor heartbeat: the
        # router's live counts (router.meter) are as fresh as this (Spark's default is 10 s).
        "spark.executor.heartbeatInterval": "1s",
        # PySpark otherwise tells the JVM each Column function's Python call site, for error
        # messages: four more py4j calls per function, half of compiling a filter (the
        # language's trees are made of hundreds), for a call site that is always the compiler.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # The proxy accepts a repeated key and Python reads the last; Spark then reads the same.
        "spark.sql.variant.allowDuplicateKeys": "true",
        # Kafka's secrets (a SASL login, a key) are its source's and sinks' options: redacted
        # wherever Spark shows options (plans, the UI, event logs), beside its default (URLs).
        "spark.sql.redaction.options.regex": f"(?i)url|{kafka_clients.SECRET_KEYS}",
        **(jvm.local_driver(settings) if master.startswith("local") else {}),
        **cluster,
    }
    options = settings.spark_driver_java_options.split()
    shared = jvm.class_archive(settings, conf.get("spark.driver.extraClassPath", ""))
    if shared.exists():
        # Off, the JVM's word on an archive it cannot use: it goes to stdout, which a driver's
        # caller may read (the archive is then simply not used; tests/stack/test_spark.py
        # checks that it is).
        options += [f"-XX:SharedArchiveFile={shared}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
        # Mapped where it was dumped: the JDK otherwise maps it at a random address and
        # rewrites every pointer in it (a JDK 17 update made that the default), which turns its
        # 180 MB of classes into each driver's private memory; at its own address its pages
        # stay the file's, shared by every driver of the machine (decision 0005). The cost:
        # the archive's classes are at the same address in every driver, not randomized.
        options += ["-XX:+UnlockDiagnosticVMOptions", "-XX:ArchiveRelocationMode=0"]
    if options:
        conf["spark.driver.extraJavaOptions"] = " ".join(options)
    return conf


def session_builder(settings: Settings, conf: dict[str, str]) -> SparkSession.Builder:
    """A session builder with `conf`, in this process's environment for the stack."""
    # Spark otherwise binds its block manager and driver to the first non-loopback interface.
    os.environ.setdefault("SPARK_LOCAL_IP", settings.bind_host)
    # pyspark starts local Python workers with $PYSPARK_PYTHON (default `python3`), not the conf.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder


def spark_session(
    settings: Settings,
    app_name: str,
    master: str | None = None,
    slots: int | None = None,
    *,
    quiet: bool = False,
) -> SparkSession:
    """A Spark application of this process. `quiet`: its JVM's own output (Spark's and log4j's
    lines, the JVM's warnings) goes to `jvm_log(settings, app_name)`, not to this process'
    terminal, so that a command (the demo, the load test, `keystone sql`) prints its own lines
    only; an application the fleet runs writes everything to its own log already."""
    builder = session_builder(settings, spark_conf(settings, app_name, master, slots))
    if not quiet:
        session = builder.enableHiveSupport().getOrCreate()
    else:
        log = jvm_log(settings, app_name)
        try:
            with output_to(log):  # the JVM inherits the file as its output, for good
                session = builder.enableHiveSupport().getOrCreate()
        except Exception as e:
            raise RuntimeError(f"Spark did not start: its log is {log}") from e
    session.sparkContext.setLogLevel("WARN")
    return session


def jvm_log(settings: Settings, app_name: str) -> Path:
    return settings.logs_dir / "spark" / f"{app_name}.log"


@contextmanager
def output_to(log: Path) -> Iterator[None]:
    """This process' standard output and error go to `log` (appended) until the block ends:
    what a child process starts meanwhile keeps writing there."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with log.open("ab") as into:
            os.dup2(into.fileno(), 1)
            os.dup2(into.fileno(), 2)
            yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


def end_session(spark: SparkSession, timeout: float = 30) -> None:
    """Stop the session and wait for its JVM to exit. `spark.stop()` alone leaves the gateway
    JVM running until this Python process ends, its cleanup threads still logging: a router's
    "stopped" line is only its last once the JVM is gone. The JVM exits when its stdin closes."""
    gateway = spark.sparkContext._gateway
    spark.stop()
    proc = getattr(gateway, "proc", None)
    if proc is None:  # a gateway this process did not launch (PYSPARK_GATEWAY_PORT)
        return
    gateway.shutdown()
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def application_logging() -> None:
    """The log format of the project's Spark applications (a router, a backfill, a redrive),
    without py4j's line per callback."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for chatty in ("py4j", "py4j.clientserver", "py4j.java_gateway"):
        logging.getLogger(chatty).setLevel(logging.WARNING)


def stop_on_signals() -> threading.Event:
    """Set by SIGTERM (the fleet's stop) or SIGINT: the application ends its work and stops."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop
