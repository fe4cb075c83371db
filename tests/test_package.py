"""The package outside the checkout: a wheel built from this checkout and installed, with its
declared dependencies alone, into a new virtual environment gives, in any other directory, a
working `keystone` command that keeps its state where it runs; every module imports (so no
dependency is missing from pyproject.toml), but those of the optional extras, whose commands say
which extra to install; and it carries what it needs at run time (the Java sources the stack
compiles, the Maven poms, the web UI's templates and assets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.stack import CHECKOUT

# What only an optional extra brings, and the modules that need it (and those importing them).
EXTRAS = {
    "playwright": ("keystone.dashboards.render",),
    "matplotlib": ("keystone.loadtest.",),  # the load test's reports
}
IMPORTS = """
import importlib, json, pkgutil, sys
import keystone
failed = {}
for module in pkgutil.walk_packages(keystone.__path__, "keystone."):
    try:
        importlib.import_module(module.name)
    except ImportError as e:
        failed[module.name] = e.name
print(json.dumps({"file": keystone.__file__, "failed": failed}))
"""


def _run(
    argv: list[str], cwd: Path, env: dict[str, str], codes: tuple[int, ...] = (0,)
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode in codes, f"{argv} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.mark.wheel
def test_the_wheel_works_outside_the_checkout(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEYSTONE_", "PYTHON"))}
    dist, venv, elsewhere = tmp_path / "dist", tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    pip = ["-m", "pip", "--disable-pip-version-check", "-q"]
    _run(
        [sys.executable, *pip, "wheel", "--no-deps", "-w", str(dist), str(CHECKOUT)], tmp_path, env
    )
    [wheel] = dist.glob("keystone_router-*.whl")
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    python = str(venv / "bin" / "python")
    # Its dependencies from PyPI, their modules compiled as they are imported (pip compiling
    # every one of pyspark's files took a third of the install).
    _run([python, *pip, "install", "--no-compile", str(wheel)], tmp_path, env)

    keystone = str(venv / "bin" / "keystone")
    assert "Keystone" in _run([keystone, "--help"], elsewhere, env).stdout
    # No stack runs there: every service is stopped (exit 1), and said to be in its state.
    answer = _run([keystone, "stack", "status", "--json"], elsewhere, env, codes=(0, 1))
    assert json.loads(answer.stdout)["state_dir"] == str(elsewhere / ".keystone")

    found = json.loads(_run([python, "-c", IMPORTS], elsewhere, env).stdout)
    package = Path(found["file"]).parent
    assert package.is_relative_to(venv), f"keystone imported from {package}, not the wheel"
    failed: dict[str, str] = found["failed"]
    assert {"keystone.dashboards.render", "keystone.loadtest.report"} <= set(failed)
    for module, library in failed.items():
        assert library in EXTRAS and module.startswith(EXTRAS[library]), (module, library)
    demo = _run([keystone, "demo"], elsewhere, env, codes=(1,))
    assert "pip install 'keystone-router[loadtest]'" in demo.stderr + demo.stdout

    for needed in (
        "router/java/RouterMeter.java",
        "stack/java/LoopbackMetastore.java",
        "stack/maven/spark-kafka.xml",
        "control/web/templates/dashboard.html",
        "control/web/static/style.css",
        "control/web/vendor/uplot/uPlot.iife.min.js",
    ):
        assert (package / needed).is_file(), f"{needed} is not in the wheel"
