"""JVM artifacts from Maven Central, pinned in stack/maven/*.xml, fetched once into the cache.

Each bundle is a small pom whose dependencies are copied into `<cache>/jars/<bundle>`; a stamp
holding the pom's hash makes a second fetch free and a changed pin refetch. The Java classes in
stack/java (two service launchers, Spark's local file system, and the router's meter, payload
reader and like matcher) are compiled with the machine's javac against the jars they run with.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path

import pyspark

from keystone.contracts.errors import StackError
from keystone.contracts.settings import Settings

MAVEN_DIR = Path(__file__).parent / "maven"
JAVA_DIR = Path(__file__).parent / "java"
BUNDLES = ("kafka", "spark-kafka", "elasticsearch", "metastore")
PYSPARK_JARS = Path(pyspark.__file__).parent / "jars"

# Each class compiles against the jars it runs with.
JAVA_CLASSES = {
    "LoopbackMetastore": lambda s: [PYSPARK_JARS],
    "LoopbackElasticsearch": lambda s: [bundle_dir(s, "elasticsearch")],
    "ForklessLocalFileSystem": lambda s: [PYSPARK_JARS],
    "RouterMeter": lambda s: [PYSPARK_JARS],
    "JsonPaths": lambda s: [PYSPARK_JARS],
    "LikeMatcher": lambda s: [PYSPARK_JARS],
}
# Classes that Spark ships to its executors (by `spark.jars`).
SHIPPED = ("RouterMeter", "JsonPaths", "LikeMatcher")


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
    """The folder of a compiled class of stack/java, which must be there."""
    folder = classes_dir(settings, name)
    if not folder.exists():
        raise StackError(f"{name} is not compiled yet: run `keystone stack fetch`")
    return folder


def class_jar(settings: Settings, name: str) -> Path:
    """The jar of a compiled class of stack/java (a JVM's class archive takes jars, not
    folders), which must be there."""
    jar = classes_dir(settings, name).with_suffix(".jar")
    if not jar.exists():
        raise StackError(f"{name} is not compiled yet: run `keystone stack fetch`")
    return jar


def classpath(*entries: Path) -> str:
    """A Java classpath where each folder of jars counts as all its jars."""
    return ":".join(f"{e}/*" if e.is_dir() and any(e.glob("*.jar")) else str(e) for e in entries)


def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes())
    return h.hexdigest()


def _fresh(stamp: Path, digest: str) -> bool:
    return stamp.exists() and stamp.read_text() == digest


def fetch_bundle(settings: Settings, bundle: str) -> bool:
    """Copies a bundle's jars into the cache; False when they were there already."""
    pom = MAVEN_DIR / f"{bundle}.xml"
    target = bundle_dir(settings, bundle)
    stamp = target / ".stamp"
    digest = _digest(pom)
    if _fresh(stamp, digest):
        return False
    if shutil.which("mvn") is None:
        raise StackError("Maven (mvn) is missing: run `make bootstrap`, or install Debian's maven")
    staging = target.with_name(f"{bundle}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    log = settings.cache_dir / "logs" / f"maven-{bundle}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [
        "mvn",
        "-B",
        "-q",
        "-gs",
        str(MAVEN_DIR / "settings.xml"),
        "-f",
        str(pom),
        f"-Dmaven.repo.local={settings.cache_dir / 'm2'}",
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
    ]
    with log.open("w") as out:
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        raise StackError(f"downloading the {bundle} jars from Maven Central failed; see {log}")
    # Swap in whole, so a failed or interrupted fetch never leaves a half bundle in use.
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    stamp.write_text(digest)
    return True


def compile_class(settings: Settings, name: str) -> bool:
    """Compiles stack/java/<name>.java; False when the classes are current."""
    source = JAVA_DIR / f"{name}.java"
    deps = JAVA_CLASSES[name](settings)
    target = classes_dir(settings, name)
    stamp = target / ".stamp"
    digest = _digest(source) + ":" + classpath(*deps)
    jar = target.with_suffix(".jar")
    if _fresh(stamp, digest) and jar.exists():
        return False
    if shutil.which("javac") is None:
        raise StackError("javac is missing: install a JDK 17 (Debian's openjdk-17-jdk-headless)")
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    result = subprocess.run(
        ["javac", "-nowarn", "-cp", classpath(*deps), "-d", str(target), str(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise StackError(f"compiling {source.name} failed:\n{result.stderr}")
    with zipfile.ZipFile(jar, "w") as packed:
        for path in sorted(target.glob("*.class")):
            packed.write(path, path.name)
    stamp.write_text(digest)
    return True


def fetch_all(settings: Settings, report: Callable[[str, bool], None]) -> None:
    """Fetches every bundle and compiles every class, reporting (what, did_work) as it goes."""
    for bundle in BUNDLES:
        report(f"jars {bundle}", fetch_bundle(settings, bundle))
    for name in JAVA_CLASSES:
        report(f"class {name}", compile_class(settings, name))


def spark_jars(settings: Settings) -> list[Path]:
    """Spark's Kafka connector and what it needs beside pyspark, and the project's own classes
    that run on executors, as local paths."""
    return [*bundle_jars(settings, "spark-kafka"), *(class_jar(settings, n) for n in SHIPPED)]
