"""Fetching JVM artifacts: a failed download says so and leaves no half bundle behind."""

import shutil
from pathlib import Path

import pytest

from keystone.contracts.errors import StackError
from keystone.contracts.settings import Settings
from keystone.router import jvm
from keystone.stack import jars


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
