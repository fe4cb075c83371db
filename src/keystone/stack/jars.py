"""JVM artifacts from Maven Central, pinned in stack/maven/*.xml, fetched once into the cache.

Each bundle is a small pom whose dependencies are copied into `<cache>/jars/<bundle>`; a stamp
holding the pom's hash makes a second fetch free and a changed pin refetch. The Java classes of
stack/java (the metastore's and Elasticsearch's launchers) and router/java (the router's, see
`keystone.router.jvm`, which also says where all of them are in the cache) are compiled with
the machine's javac against the jars they run with.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path

from keystone.contracts.errors import StackError
from keystone.contracts.settings import Settings
from keystone.router import jvm
from keystone.router.jvm import PYSPARK_JARS, bundle_dir, classes_dir, classpath

MAVEN_DIR = Path(__file__).parent / "maven"
JAVA_DIR = Path(__file__).parent / "java"
BUNDLES = ("kafka", "spark-kafka", "elasticsearch", "metastore")

# Each class: its source folder, and the jars it compiles against (those it runs with).
JAVA_CLASSES: dict[str, tuple[Path, Callable[[Settings], list[Path]]]] = {
    "LoopbackMetastore": (JAVA_DIR, lambda s: [PYSPARK_JARS]),
    "LoopbackElasticsearch": (JAVA_DIR, lambda s: [bundle_dir(s, "elasticsearch")]),
    **{name: (jvm.JAVA_DIR, lambda s: [PYSPARK_JARS]) for name in jvm.CLASSES},
    **{
        name: (jvm.JAVA_DIR, lambda s: [PYSPARK_JARS, bundle_dir(s, "spark-kafka")])
        for name in jvm.KAFKA_CLASSES
    },
}


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
    """Compiles <name>.java with the bases it extends; False when the classes are current."""
    folder, needs = JAVA_CLASSES[name]
    sources = [folder / f"{n}.java" for n in (name, *jvm.BASES.get(name, ()))]
    deps = needs(settings)
    target = classes_dir(settings, name)
    stamp = target / ".stamp"
    digest = _digest(*sources) + ":" + classpath(*deps)
    jar = target.with_suffix(".jar")
    if _fresh(stamp, digest) and jar.exists():
        return False
    if shutil.which("javac") is None:
        raise StackError("javac is missing: install a JDK 17 (Debian's openjdk-17-jdk-headless)")
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    result = subprocess.run(
        ["javac", "-nowarn", "-cp", classpath(*deps), "-d", str(target), *map(str, sources)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise StackError(f"compiling {name}.java failed:\n{result.stderr}")
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
