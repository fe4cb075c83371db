"""JVM artifacts from Maven Central, pinned in stack/maven/*.xml, fetched once into the cache.

Each bundle is a small pom whose dependencies are copied into `<cache>/jars/<bundle>`; a stamp
holding the pom's hash makes a second fetch free and a changed pin refetch. The Java classes of
stack/java (the metastore's and Elasticsearch's launchers, Kafka's storage formatting) and
router/java (the router's, see `keystone.router.jvm`, which also says where all of them are in
the cache) are compiled with the machine's javac against the jars they run with, one run for
the classes that share their jars. On a fresh machine the bundles download side by side, every
file checked against the checksum Maven Central publishes beside it.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
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
    "KafkaStorageFormat": (JAVA_DIR, lambda s: [bundle_dir(s, "kafka")]),
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
        "--strict-checksums",  # a jar whose checksum is not Maven Central's fails the fetch
        "-gs",
        str(MAVEN_DIR / "settings.xml"),
        "-f",
        str(pom),
        f"-Dmaven.repo.local={settings.cache_dir / 'm2' / bundle}",
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


def _digest_of_class(settings: Settings, name: str) -> str:
    folder, needs = JAVA_CLASSES[name]
    sources = [folder / f"{n}.java" for n in (name, *jvm.BASES.get(name, ()))]
    return _digest(*sources) + ":" + classpath(*needs(settings))


def _class_files(folder: Path, name: str) -> list[Path]:
    """The class files of `name` and of the bases it extends, nested classes with them."""
    return sorted(
        path
        for n in (name, *jvm.BASES.get(name, ()))
        for path in (*folder.glob(f"{n}.class"), *folder.glob(f"{n}$*.class"))
    )


def _compile_together(settings: Settings, names: list[str]) -> None:
    """One javac run for classes that compile against the same jars; each class then gets its
    own folder and jar, with the bases it extends (Spark ships each jar on its own)."""
    deps = JAVA_CLASSES[names[0]][1](settings)
    digests = {name: _digest_of_class(settings, name) for name in names}  # of what is compiled
    sources = sorted(
        {JAVA_CLASSES[n][0] / f"{m}.java" for n in names for m in (n, *jvm.BASES.get(n, ()))}
    )
    with tempfile.TemporaryDirectory(prefix="keystone-javac-") as out:
        result = subprocess.run(
            ["javac", "-nowarn", "-cp", classpath(*deps), "-d", out, *map(str, sources)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise StackError(f"compiling {', '.join(names)} failed:\n{result.stderr}")
        owned = {path for name in names for path in _class_files(Path(out), name)}
        stray = sorted(p.name for p in Path(out).rglob("*.class") if p not in owned)
        if stray:  # another top-level class, or a package: it would be missing from every jar
            raise StackError(f"compiling {', '.join(names)} made classes of none: {stray}")
        for name in names:
            target = classes_dir(settings, name)
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            with zipfile.ZipFile(target.with_suffix(".jar"), "w") as packed:
                for path in _class_files(Path(out), name):
                    shutil.copy(path, target)
                    packed.write(path, path.name)
            (target / ".stamp").write_text(digests[name])


def compile_classes(settings: Settings, names: Iterable[str]) -> set[str]:
    """Compiles those of `names` whose sources or jars changed since (one javac run per set of
    jars, the runs side by side); returns the names compiled."""
    stale: dict[str, list[str]] = {}
    for name in names:
        target = classes_dir(settings, name)
        stamp = target / ".stamp"
        if not (
            _fresh(stamp, _digest_of_class(settings, name)) and target.with_suffix(".jar").exists()
        ):
            stale.setdefault(classpath(*JAVA_CLASSES[name][1](settings)), []).append(name)
    if stale and shutil.which("javac") is None:
        raise StackError("javac is missing: install a JDK 17 (Debian's openjdk-17-jdk-headless)")
    with ThreadPoolExecutor(max(len(stale), 1)) as pool:
        for done in [pool.submit(_compile_together, settings, group) for group in stale.values()]:
            done.result()
    return {name for group in stale.values() for name in group}


def fetch_all(settings: Settings, report: Callable[[str, bool], None]) -> None:
    """Fetches every bundle and compiles every class, reporting (what, did_work) as it goes. The
    bundles download side by side, each into a Maven repository of its own (one Maven's local
    repository is not safe for two processes at once)."""
    with ThreadPoolExecutor(len(BUNDLES)) as pool:
        fetching = {pool.submit(fetch_bundle, settings, b): b for b in BUNDLES}
        for done in as_completed(fetching):
            report(f"jars {fetching[done]}", done.result())
    compiled = compile_classes(settings, JAVA_CLASSES)
    for name in JAVA_CLASSES:
        report(f"class {name}", name in compiled)
