"""The router plan benchmark of `make bench` in its smoke mode. It needs no stack (its plans read
a cached batch into Spark's noop sink, and it makes no topic), so it runs beside the cluster's
tests, not in a turn with the suite's stack (tests/support/parallel.py): a Spark application
of its own, in its own process as `make bench` runs it, with a state folder of the test's."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.stack import checked, run_module


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_the_router_plan_benchmark_smoke(tmp_path: Path) -> None:
    # Every plan in one run (a smoke's), the event's objects given more fields: each smoke is
    # a Spark application's start.
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTONE_")}
    env["KEYSTONE_STATE_DIR"] = str(tmp_path)
    module = "keystone.loadtest.router_plan_bench"
    checked(run_module(module, "--smoke", "--object-fields", "20", env=env, timeout=300))
    figures = json.loads((tmp_path / "bench" / "router_plan_object_fields.json").read_text())
    assert figures["smoke"] is True
    rows = figures["results"]
    assert [r["name"] for r in rows] == ["router", "hand-written", "router, hygiene"]
    for row in rows:
        assert row["events"] > 0 and row["events_per_second"] > 0, row
        assert row["cpu_s_per_m_events"] > 0, row
    assert figures["object_fields"] == 20
    assert figures["topics"] == []
