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
@pytest.mark.parametrize(
    ("extra", "result", "plans", "fields"),
    [
        ([], "router_plan.json", ["router", "hand-written"], 0),
        # Both options in one run: each smoke is a Spark application's start.
        (
            ["--object-fields", "20", "--hygiene"],
            "router_plan_hygiene.json",
            ["router", "router, hygiene"],
            20,
        ),
    ],
    ids=["plain", "object-fields-and-hygiene"],
)
def test_the_router_plan_benchmark_smoke(
    tmp_path: Path, extra: list[str], result: str, plans: list[str], fields: int
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTONE_")}
    env["KEYSTONE_STATE_DIR"] = str(tmp_path)
    module = "keystone.loadtest.router_plan_bench"
    checked(run_module(module, "--smoke", *extra, env=env, timeout=300))
    figures = json.loads((tmp_path / "bench" / result).read_text())
    assert figures["smoke"] is True
    rows = figures["results"]
    assert [r["name"] for r in rows] == plans
    for row in rows:
        assert row["events"] > 0 and row["events_per_second"] > 0, row
        assert row["cpu_s_per_m_events"] > 0, row
    assert figures["object_fields"] == fields
    assert figures["topics"] == []
