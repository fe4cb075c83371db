"""Fetching JVM artifacts: a failed download says so and leaves no half bundle behind; a class
that extends one of the project's is compiled with it, into its own jar."""

import os
import re
import shutil
import time
import zipfile
from pathlib import Path

import pytest

from keystone.contracts.errors import StackError
from keystone.contracts.settings import Settings
from keystone.router import jvm
from keystone.stack import jars
from keystone.stack.cds import prune


def test_a_failed_download_names_the_bundle_and_its_log(tmp_path: Path, monkeypatch) -> None:
    maven = tmp_path / "maven"
    maven.mkdir()
    shutil.copy(jars.MAVEN_DIR / "settings.xml", maven)
    (maven / "missing.xml").write_text(
        (jars.MAVEN_DIR / "metastore.xml")
        .read_text()
        .replace("<groupId>org.postgresql</groupId>", "<groupId>org.keystone.nonexistent</groupId>")
    )
    monkeypatch.setattr(jars, "MAVEN_DIR", maven)
    settings = Settings(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache")

    with pytest.raises(
        StackError, match=r"downloading the missing jars .* failed; see .*maven-missing\.log"
    ):
        jars.fetch_bundle(settings, "missing")

    assert "org.keystone.nonexistent" in (tmp_path / "cache/logs/maven-missing.log").read_text()
    assert not jvm.bundle_dir(settings, "missing").exists()
    with pytest.raises(StackError, match="not fetched yet"):
        jvm.bundle_jars(settings, "missing")


def test_fetching_again_is_free_once_the_stamp_matches() -> None:
    settings = Settings()
    jars.fetch_all(settings, lambda what, did: None)  # whatever the state, now everything is there
    done = []
    jars.fetch_all(settings, lambda what, did: done.append(did))
    assert done == [False] * (len(jars.BUNDLES) + len(jars.JAVA_CLASSES))


def test_a_class_is_compiled_with_its_base_and_again_when_only_the_base_changes(
    tmp_path: Path, monkeypatch
) -> None:
    name = "LikeMatcher"
    bases = jvm.BASES[name]
    base = bases[-1]  # the furthest: LikeMatcher extends one that extends it
    sources = tmp_path / "java"
    sources.mkdir()
    for n in (name, *bases):
        shutil.copy(jvm.JAVA_DIR / f"{n}.java", sources)
    monkeypatch.setitem(jars.JAVA_CLASSES, name, (sources, jars.JAVA_CLASSES[name][1]))
    settings = Settings(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache")

    assert jars.compile_classes(settings, [name]) == {name}
    # Spark ships each jar on its own: one without the base fails only on the executors.
    with zipfile.ZipFile(jvm.class_jar(settings, name)) as packed:
        assert {f"{n}.class" for n in (name, *bases)} <= set(packed.namelist())
    assert not jars.compile_classes(settings, [name])
    with (sources / f"{base}.java").open("a") as source:
        source.write("// changed\n")
    assert jars.compile_classes(settings, [name]) == {name}


def test_every_class_of_router_java_that_extends_another_is_compiled_with_it() -> None:
    own = {p.stem for p in jvm.JAVA_DIR.glob("*.java")}

    def extended(name: str) -> set[str]:
        """The classes of router/java `name` extends, directly or through another."""
        text = (jvm.JAVA_DIR / f"{name}.java").read_text()
        direct = set(re.findall(r"\bextends (\w+)", text)) & own
        return direct.union(*(extended(d) for d in direct))

    for name in (*jvm.CLASSES, *jvm.KAFKA_CLASSES):
        assert extended(name) == set(jvm.BASES.get(name, ())), name


def test_classes_compiled_together_each_get_a_jar_of_their_own(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache")
    names = [
        n for n in jars.JAVA_CLASSES if jars.JAVA_CLASSES[n][1](settings) == [jvm.PYSPARK_JARS]
    ]
    assert len(names) > 1 and "ForklessLocalFileSystem" in names  # one javac run for all these

    assert jars.compile_classes(settings, names) == set(names)

    for name in names:
        with zipfile.ZipFile(jvm.class_jar(settings, name)) as packed:
            owners = {entry.removesuffix(".class").split("$")[0] for entry in packed.namelist()}
        assert owners == {name, *jvm.BASES.get(name, ())}, name
    with zipfile.ZipFile(jvm.class_jar(settings, "ForklessLocalFileSystem")) as packed:
        assert "ForklessLocalFileSystem$Fs.class" in packed.namelist()  # nested classes go along
    assert not jars.compile_classes(settings, names)


def test_building_a_class_archive_removes_only_others_unopened_for_long(tmp_path: Path) -> None:
    now = time.time()
    kept, recent, old = (tmp_path / f"spark-driver-{n}.jsa" for n in ("kept", "recent", "old"))
    days = 86_400
    for archive, opened in ((kept, now - 90 * days), (recent, now - days), (old, now - 30 * days)):
        archive.write_bytes(b"x")
        os.utime(archive, (opened, opened))
    other = tmp_path / "notes.txt"  # not an archive: never touched
    other.write_text("mine")
    os.utime(other, (now - 90 * days, now - 90 * days))
    assert prune(tmp_path, keep=kept, before=now - 14 * days) == [old]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [kept.name, recent.name, other.name]
    )
