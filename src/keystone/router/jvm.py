"""The JVM pieces a Spark application of the project runs with, where `keystone stack fetch`
puts them in the cache: Spark's Kafka connector (a Maven bundle) and the project's own classes
(the router's are in router/java: its meter, payload reader, header reader, like matcher,
transactional Kafka writer, and Spark's local file system without forks).

    <cache>/jars/<bundle>/*.jar         a bundle's jars, fetched from Maven Central
    <cache>/classes/<Class>/, .jar      a class (and the base class it extends, if it is one of
                                        the project's) compiled against the jars it runs with
"""

from __future__ import annotations

import hashlib
import os
import shutil
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path

from keystone.contracts.errors import StackError
from keystone.contracts.settings import Settings

JAVA_DIR = Path(__file__).parent / "java"
# Found, not imported: what only needs the path should not load Spark.
PYSPARK_JARS = Path(find_spec("pyspark").origin).parent / "jars"  # type: ignore[union-attr, arg-type]
# The router's classes, compiled against Spark's jars.
CLASSES = (
    "ForklessLocalFileSystem",
    "RouterMeter",
    "JsonPaths",
    "LikeMatcher",
    "LangFunction",
    "JsonExcept",
    "FirstHeaders",
)
# The router's classes compiled against Spark's Kafka connector too (its Kafka client).
KAFKA_CLASSES = ("TransactionalKafkaWriter",)
# The abstract classes of router/java that a class extends, directly or through another:
# compiled with it, into its own jar, so that each jar still runs alone (none of them has a jar
# of its own).
BASES = {
    "JsonPaths": ("TextArgumentExpression", "CalledExpression"),
    "LikeMatcher": ("TextArgumentExpression", "CalledExpression"),
    "JsonExcept": ("TextArgumentExpression", "CalledExpression"),
    "FirstHeaders": ("TextArgumentExpression", "CalledExpression"),
    "LangFunction": ("CalledExpression",),
}
# Classes that Spark ships to its executors (by `spark.jars`).
SHIPPED = (
    "RouterMeter",
    "JsonPaths",
    "LikeMatcher",
    "LangFunction",
    "JsonExcept",
    "FirstHeaders",
    "TransactionalKafkaWriter",
)


def bundle_dir(settings: Settings, bundle: str) -> Path:
    return settings.cache_dir / "jars" / bundle


def bundle_jars(settings: Settings, bundle: str) -> list[Path]:
    jars = sorted(bundle_dir(settings, bundle).glob("*.jar"))
    if not jars:
        raise StackError(f"the {bundle} jars are not fetched yet: run `keystone stack fetch`")
    return jars


def classes_dir(settings: Settings, name: str) -> Path:
    return settings.cache_dir / "classes" / name


def compiled(settings: Settings, name: str) -> Path:
    """The folder of a compiled class of the project's Java sources, which must be there."""
    folder = classes_dir(settings, name)
    if not folder.exists():
        raise StackError(f"{name} is not compiled yet: run `keystone stack fetch`")
    return folder


def class_jar(settings: Settings, name: str) -> Path:
    """The jar of a compiled class (a JVM's class archive takes jars, not folders), which
    must be there."""
    jar = classes_dir(settings, name).with_suffix(".jar")
    if not jar.exists():
        raise StackError(f"{name} is not compiled yet: run `keystone stack fetch`")
    return jar


def classpath(*entries: Path) -> str:
    """A Java classpath where each folder of jars counts as all its jars."""
    return ":".join(f"{e}/*" if e.is_dir() and any(e.glob("*.jar")) else str(e) for e in entries)


def spark_jars(settings: Settings) -> list[Path]:
    """Spark's Kafka connector and what it needs beside pyspark, and the project's own classes
    that run on executors, as local paths."""
    return [*bundle_jars(settings, "spark-kafka"), *(class_jar(settings, n) for n in SHIPPED)]


def local_driver(settings: Settings) -> dict[str, str]:
    """Where the driver's JVM is also the executor (a local master):

    - Hadoop's local file system without a forked `chmod` or `readlink` per file: each
      checkpoint then takes milliseconds, not a quarter of a second (see router/java). A
      cluster's executors do not have the class.
    - The jars Spark ships (`spark.jars`) on the driver's own class path too, where the JVM's
      class archive can hold their classes (it holds none that Spark's own class loader for
      `spark.jars` loads): the Kafka client and connector alone are some 1,400 classes a
      router loads as it starts.
    """
    jars = [class_jar(settings, "ForklessLocalFileSystem"), *spark_jars(settings)]
    return {
        "spark.driver.extraClassPath": ":".join(str(j) for j in jars),
        "spark.hadoop.fs.file.impl": "ForklessLocalFileSystem",
        "spark.hadoop.fs.AbstractFileSystem.file.impl": "ForklessLocalFileSystem$Fs",
    }


def class_archive(settings: Settings, extra_classpath: str) -> Path:
    """The class-data sharing archive (`keystone.stack.cds` builds it) for drivers with this
    extra classpath, this Spark (its jars where they are now) and this Java. The JVM refuses an
    archive whose jars have changed since, so their sizes and times are in its name: a
    virtualenv made again at the same path, with the same pyspark, has new jars."""
    java = os.path.realpath(shutil.which("java") or "java")
    entries = [p for p in extra_classpath.split(":") if p]
    jars = [(p, os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in entries]
    spark = max((j.stat().st_mtime_ns for j in PYSPARK_JARS.glob("*.jar")), default=0)
    key = hashlib.sha256(
        f"{version('pyspark')}:{PYSPARK_JARS}:{spark}:{java}:{jars}".encode()
    ).hexdigest()
    return settings.cache_dir / "cds" / f"spark-driver-{key[:16]}.jsa"
