"""An output's query runs as one stage of Spark's generated code, the event's JSON paths and
headers read inside it: an expression Spark cannot generate code for (a `CodegenFallback`)
splits the plan, and the projection that reads the event then copies every event's bytes and
headers into a row of its own first (a fifth of the router's CPU per event in
`loadtest.router_plan_bench`)."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from keystone.contracts.settings import Settings
from keystone.contracts.spec import load_spec
from keystone.router.job import dead_letter_paths, paths_read_by, routed
from keystone.router.meter import Meter
from keystone.router.sinks.base import writer_for
from keystone.router.sinks.route import Route
from keystone.router.source import envelope
from tests.router.test_dead_letters import _records, _stamped

SPEC = {
    "name": "s1",
    "owner": "team",
    "outputs": [
        {
            "name": "kk",
            "sink": {"type": "kafka"},
            "filter": "note LIKE 'ke%' AND other > 0",
            "projection": ["note", "user.id"],
        },
        {"name": "other", "sink": {"type": "kafka"}, "projection": ["other"]},
    ],
}


def outside_generated_code(node: Any, inside: bool = False) -> list[str]:
    """The operators of a physical plan (a JVM `SparkPlan`) that run outside a stage of
    generated code: a stage's operators are those under its `WholeStageCodegen` node, down to
    where an `InputAdapter` feeds it from outside."""
    name = node.nodeName()
    found = [] if inside or name.startswith("WholeStageCodegen") else [name]
    inside = (inside or name.startswith("WholeStageCodegen")) and name != "InputAdapter"
    children = node.children()
    for i in range(children.size()):
        found += outside_generated_code(children.apply(i), inside)
    return found


@pytest.mark.parametrize("hosts", [False, True], ids=["output", "hosting the dead letters"])
def test_an_outputs_query_is_one_stage_of_generated_code(spark: SparkSession, hosts: bool) -> None:
    records = _records(spark, [('{"note": "kept", "other": 1}', None, _stamped("a"))])
    spec = load_spec(SPEC)
    output = spec.outputs[0]
    own, every = paths_read_by([output]), dead_letter_paths(spec.outputs)
    meter = Meter(spark, "s1.kk.plan")
    frame = routed(
        envelope(records, None, own, every if hosts else None),
        output,
        meter,
        key=None,
        dead_letters=F.col("stream_problem").isNotNull() if hosts else None,
        both=hosts,
    )
    written = writer_for(Route(Settings(), spec, output), meter).frame(frame)
    plan = written._jdf.queryExecution().executedPlan()
    assert outside_generated_code(plan) == [], plan.toString()
    assert written.count() == 1
