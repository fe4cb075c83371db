"""The project's Spark sessions (router.spark) on a local master: Hadoop's local file system
works as Hadoop's does, without a `chmod` or `readlink` process per file, and the driver starts
from its class archive."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.stack import Stack, run_module

SHIMMED = ("chmod", "readlink")


def shims(folder: Path, log: Path) -> Path:
    """`chmod` and `readlink` that log each call, then run the real ones."""
    folder.mkdir()
    for name in SHIMMED:
        shim = folder / name
        shim.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\nexec {shutil.which(name)} "$@"\n')
        shim.chmod(0o755)
    return folder


@pytest.fixture(scope="module")
def local_job(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, Path]:
    """One run of the local-files job: what it reports, its log of shimmed calls, its folder."""
    base = tmp_path_factory.mktemp("local-files")
    log, work = base / "calls.log", base / "work"
    env = dict(stack.env, PATH=f"{shims(base / 'shims', log)}:{stack.env['PATH']}")
    job = run_module("tests.stack.spark_jobs", "local-files", str(work), env=env, timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    return json.loads(job.stdout.splitlines()[-1]), log, work


def test_local_files_are_made_and_checkpointed_without_a_process_per_file(
    local_job: tuple[dict, Path, Path],
) -> None:
    result, log, work = local_job
    assert result["file_system"] == "ForklessLocalFileSystem"
    assert result["file_context"] == "ForklessLocalFileSystem$Fs"
    # The query's checkpoint, written through FileContext, as Hadoop's LocalFs writes it.
    assert sorted(result["committed"]) == [".0.crc", "0"]
    assert result["modes"] == {"folder": "0o750", "file": "0o640", "changed": "0o600"}
    assert result["symlink"] == {"link": True, "made/file": False}
    # Hadoop's own local file system forks for the one file it made; the project's only to
    # read an actual symlink (Hadoop's own code, kept for that rare case).
    calls = [line for line in log.read_text().splitlines() if str(work) in line]
    assert any("by-hadoop" in line for line in calls), calls
    assert all("by-hadoop" in line or line.endswith("/link") for line in calls), calls


def test_the_driver_maps_the_class_archive_built_for_its_classpath(
    local_job: tuple[dict, Path, Path],
) -> None:
    """`stack fetch` builds it; a JVM that refused it (another classpath, a changed jar) would
    start slower and not have it mapped."""
    result, _, _ = local_job
    assert [a for a in result["archives"] if "/cds/spark-driver-" in a], result["archives"]


def test_the_drivers_class_archive_stays_the_files_pages_shared_by_every_driver(
    local_job: tuple[dict, Path, Path],
) -> None:
    """Mapped at the address it was dumped for (router.spark): mapped anywhere else, the JVM
    rewrites its pointers, and nearly every page read becomes the driver's own memory (147 of
    182 MB in an idle router), paid again by each driver of the machine."""
    result, _, _ = local_job
    [pages] = [p for a, p in result["archive_pages"].items() if "/cds/spark-driver-" in a]
    assert pages["Rss"] > 10_000, pages  # it is in use: 10 MB and more of its classes read
    assert pages["Anonymous"] < pages["Rss"] / 2, pages


def test_a_quiet_session_leaves_the_commands_output_its_own(stack: Stack) -> None:
    """The demo's, the load test's and `keystone sql`'s sessions: Spark's and the JVM's lines
    go to the application's log, not between the command's own."""
    job = run_module("tests.stack.spark_jobs", "quiet", env=stack.env, timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    assert job.stderr == ""
    [line] = job.stdout.splitlines()
    said = json.loads(line)
    assert said["count"] == 5
    log = Path(said["log"]).read_text()
    assert "WARN" in log or "Setting default log level" in log, log[-2000:]
