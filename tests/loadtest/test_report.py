"""The load test's report without a stack: the replays the audit counted appear per output in
figures.json, in report.md's delivery table and in the terminal's summary, apart from the
duplicates; a rewind-output fault names its output and says what it did."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from keystone.contracts.settings import Settings
from keystone.loadtest import report
from keystone.loadtest.audit import Audit, OutputAudit
from keystone.loadtest.driver import Load, Plan
from keystone.loadtest.faults import Fault
from keystone.loadtest.report import Run, delivery_table, summary, write


def output(name: str, sink: str, duplicates: int, replays: int) -> OutputAudit:
    return OutputAudit(
        output=name,
        sink=sink,
        guarantee="at_least_once" if sink in ("kafka", "keystone") else "exactly_once",
        where=f"where {name} is",
        expected=1000,
        delivered=1000,
        lost=0,
        duplicates=duplicates,
        replays=replays,
        unexpected=0,
        lost_sample=[],
        duplicate_sample=[],
    )


@pytest.fixture
def run() -> Run:
    load = Load(started=1_000.0, guids=[f"g{i}" for i in range(1000)], attempted=1000)
    for s in range(10):
        load.seconds[s].acked = 100
        load.seconds[s].latencies = [0.01, 0.02]
    rewound = Fault.parse("rewind-output:clicks@3+30", 10)
    rewound.began, rewound.ended = 3.2, 7.9
    rewound.notes += ["clicks rewound to ... rewind rw-1, 300 events", "caught_up after 4.7 s"]
    refused = Fault.parse("rewind-output:search@4", 10)
    refused.notes.append("control refused to rewind search to ...: before its retention")
    audit = Audit(
        acknowledged=1000,
        missing_at_ingest=0,
        outputs=[
            output("lt.clicks", "kafka", duplicates=7, replays=293),
            output("lt.search", "elasticsearch", duplicates=0, replays=0),
            output("lt.archive", "hive", duplicates=0, replays=0),
        ],
        drained=True,
        waited_seconds=12.0,
    )
    return Run(
        plan=Plan("lt", 100, 10, producers=1),
        mode="proxy",
        command="keystone loadtest --stream lt --fault rewind-output:clicks@3+30",
        machine="a test",
        load=load,
        faults=[rewound, refused],
        audit=audit,
        ended=1_030.0,
    )


def test_the_report_counts_replays_apart_from_duplicates(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    series = {"delivered_per_s": [(0.0, 100.0), (5.0, 160.0)], "latency_p50_s": [(0.0, 0.5)]}
    sinks = {"times": [], "outputs": {"lt.clicks": series}}
    monkeypatch.setattr(report, "sink_series", lambda _settings, _run: sinks)
    figures = write(Settings(), run, tmp_path)
    stored = json.loads((tmp_path / "figures.json").read_text())
    by_output = {o["output"]: o for o in stored["audit"]["outputs"]}
    assert (by_output["lt.clicks"]["duplicates"], by_output["lt.clicks"]["replays"]) == (7, 293)
    assert by_output["lt.search"]["replays"] == by_output["lt.archive"]["replays"] == 0
    rewound, refused = stored["faults"]
    assert rewound["fault"] == "rewind-output" and rewound["output"] == "clicks"
    assert rewound["what"] == "output clicks rewound 30 s back, until caught up"
    assert (rewound["began_s"], rewound["ended_s"]) == (3.2, 7.9)
    assert refused == {
        "fault": "rewind-output",
        "output": "search",
        "notes": ["control refused to rewind search to ...: before its retention"],
    }
    markdown = (tmp_path / "report.md").read_text()
    assert (
        "| lt.clicks | kafka | at least once | where lt.clicks is | 1,000 | 1,000 | 0 | 7 | 293 "
        "| 0 |" in markdown
    )
    assert "Replays are the events a rewind wrote again" in markdown
    assert "| rewind-output | 3.2 | 7.9 |" in markdown
    assert figures["audit"] == stored["audit"]


def test_the_delivery_table_has_a_cell_per_heading(run: Run) -> None:
    figures: dict[str, Any] = {
        "audit": {
            "waited_seconds": 1.0,
            "drained": True,
            "outputs": [o.to_dict() for o in run.audit.outputs],
        },
        "sinks": {"outputs": {}},
    }
    rows = [line for line in delivery_table(figures) if line.startswith("|")]
    heading, rule, *outputs = rows
    cells = heading.count("|")
    assert "| duplicates | replays |" in heading
    assert rule.count("|") == cells and all(row.count("|") == cells for row in outputs)


def test_the_summary_shows_the_replays(run: Run) -> None:
    figures = {
        "ingest": {
            "acknowledged": 1000,
            "attempted": 1000,
            "achieved_per_s": 100.0,
            "abandoned": 0,
            "rejected": 0,
            "request_p99_ms": 5.0,
        },
        "audit": {
            "missing_at_ingest": 0,
            "drained": True,
            "waited_seconds": 1.0,
            "outputs": [o.to_dict() for o in run.audit.outputs],
        },
        "faults": [{"fault": "rewind-output", "notes": ["caught_up after 4.7 s"]}],
    }
    console = Console(record=True, width=200)
    summary(figures, console)
    text = console.export_text()
    heading = next(line for line in text.splitlines() if "output" in line and "dups" in line)
    assert heading.index("dups") < heading.index("replays") < heading.index("unexpected")
    clicks = next(line for line in text.splitlines() if "lt.clicks" in line)
    assert [c.strip() for c in clicks.split("│")[7:9]] == ["7", "293"]  # dups, replays
    assert "fault rewind-output: caught_up after 4.7 s" in text


def test_a_p99_is_back_once_it_stays_under_its_bound_for_the_rest_of_the_run() -> None:
    series = [(0.0, 1.0), (5.0, 9.0), (10.0, 30.0), (15.0, 2.0), (20.0, 12.0), (25.0, 1.5)]
    assert report.back_under(series, 4.0, 2.0) == 21.0  # over at 20, under from 25 on
    assert report.back_under(series, 4.0, 40.0) == 0.0  # never over
    assert report.back_under([*series, (30.0, 3.0)], 4.0, 2.0) is None  # still over at the end
    assert report.back_under(series, 22.0, 2.0) == 0.0  # only what came after the switch
    assert report.back_under(series, 30.0, 2.0) is None  # nothing after it: no figure


def test_a_fronting_switch_reports_when_each_outputs_p99_is_back(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lost = Fault.parse("kill-fronting-cluster@10+5", 30)
    lost.began, lost.switched, lost.ended = 10.0, 14.0, 20.0
    steady = [(float(t), 0.5) for t in range(0, 10, 5)]
    slow = [(10.0, 0.8), (15.0, 9.0), (20.0, 4.0), (25.0, 0.9)]
    sinks = {"times": [], "outputs": {"lt.clicks": {"latency_p99_s": steady + slow}}}
    monkeypatch.setattr(report, "sink_series", lambda _settings, _run: sinks)
    figures = write(Settings(), replace(run, faults=[lost]), tmp_path)
    [effect] = figures["faults"]
    assert effect["outputs"]["lt.clicks"]["latency_p99_back_s"] == 11.0  # 25 s, 14 s in
    assert "lt.clicks: " in (markdown := (tmp_path / "report.md").read_text())
    assert "p99 back 11 s after the switch" in markdown
