"""The `keystone` command and the control service start without Spark: only the commands that
run Spark (`sql`, `loadtest`, `demo`) import it, when they run. Pure: no stack, no Spark."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["keystone.cli", "keystone.control.app"])
def test_importing_loads_no_pyspark(module: str) -> None:
    # A fresh interpreter: this test session may have imported pyspark already.
    code = (
        f"import sys, {module}\n"
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"{module} loads {result.stdout.strip()}"
