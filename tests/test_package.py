"""The package outside the checkout: a wheel built from this checkout and installed into a new
virtual environment gives, in any other directory, a working `keystone` command that keeps its
state where it runs, and carries what it needs at run time (the Java sources the stack compiles,
the Maven poms, the web UI's templates and assets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.support.stack import CHECKOUT


def _run(
    argv: list[str], cwd: Path, env: dict[str, str], codes: tuple[int, ...] = (0,)
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode in codes, f"{argv} failed:\n{result.stdout}\n{result.stderr}"
    return result


def test_the_wheel_works_outside_the_checkout(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEYSTONE_", "PYTHON"))}
    dist, venv, elsewhere = tmp_path / "dist", tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    _run([*pip, "wheel", "--no-deps", "-w", str(dist), str(CHECKOUT)], tmp_path, env)
    [wheel] = dist.glob("keystone_router-*.whl")
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    site = Path(
        _run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            tmp_path,
            env,
        ).stdout.strip()
    )
    # The dependencies from this environment rather than PyPI: a path file, which (unlike a
    # site directory) does not bring along this environment's editable install of the checkout.
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        tmp_path,
        env,
    )

    keystone = str(venv / "bin" / "keystone")
    assert "Keystone" in _run([keystone, "--help"], elsewhere, env).stdout
    # No stack runs there: every service is stopped (exit 1), and said to be in its state.
    answer = _run([keystone, "stack", "status", "--json"], elsewhere, env, codes=(0, 1))
    status = json.loads(answer.stdout)
    assert status["state_dir"] == str(elsewhere / ".keystone")

    package = Path(
        _run(
            [str(venv / "bin" / "python"), "-c", "import keystone; print(keystone.__file__)"],
            elsewhere,
            env,
        ).stdout.strip()
    ).parent
    assert package.is_relative_to(site), f"keystone imported from {package}, not the wheel"
    for needed in (
        "router/java/RouterMeter.java",
        "stack/java/LoopbackMetastore.java",
        "stack/maven/spark-kafka.xml",
        "control/web/templates/dashboard.html",
        "control/web/static/style.css",
        "control/web/vendor/uplot/uPlot.iife.min.js",
    ):
        assert (package / needed).is_file(), f"{needed} is not in the wheel"
