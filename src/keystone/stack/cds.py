"""A class-data sharing archive for Spark drivers: the JVM maps the classes a driver loads at
start from one file instead of reading and verifying them from Spark's jars: a router's,
`keystone sql`'s or a test job's session and first query take 6 s instead of 9-10 s on the
reference machine.

Built once per classpath by `keystone stack fetch` (so by `make bootstrap`): a small local job
runs with `-XX:ArchiveClassesAtExit`. A driver uses the archive only when it exists for its own
classpath; without it, Spark starts as before.
"""

from __future__ import annotations

import subprocess
import sys

from keystone.contracts.errors import StackError
from keystone.contracts.settings import Settings
from keystone.router.jvm import class_archive, local_file_system


def build(settings: Settings) -> bool:
    """Builds the archive of local-mode drivers; False when it is there already."""
    target = class_archive(settings, local_file_system(settings)["spark.driver.extraClassPath"])
    if target.exists():
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_suffix(".partial")
    staging.unlink(missing_ok=True)
    result = subprocess.run(
        [sys.executable, "-m", "keystone.stack.cds", str(staging)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0 or not staging.exists():
        raise StackError(f"building the Spark class archive failed:\n{result.stderr[-3000:]}")
    staging.rename(target)  # whole or not at all: a driver never maps half an archive
    return True


def _train(path: str) -> None:
    """Starts a local driver as a router would, runs a small query, and exits so that the JVM
    writes the classes it loaded to `path`."""
    from pyspark import SparkContext  # Spark only in the job that trains the archive

    from keystone.router.spark import session_builder, spark_conf

    settings = Settings()
    conf = spark_conf(settings, "keystone-class-archive", "local[1]")
    # No metastore at fetch time; the Hive client's classes load lazily either way.
    conf["spark.sql.catalogImplementation"] = "in-memory"
    conf["spark.driver.extraJavaOptions"] = f"-XX:ArchiveClassesAtExit={path} -Xlog:cds=off"
    spark = session_builder(settings, conf).getOrCreate()
    spark.range(1000).selectExpr("id % 7 AS k", "to_json(named_struct('id', id)) AS v").groupBy(
        "k"
    ).count().collect()
    jvm = SparkContext._gateway.proc
    spark.stop()
    jvm.stdin.close()  # the gateway exits on end of input, writing the archive as it goes
    jvm.wait(timeout=300)


if __name__ == "__main__":
    _train(sys.argv[1])
