"""Rewinds on a stream's dashboards, without the stack: the Grafana model marks each rewind of
an output (an annotation at the moment it was asked) and charts the replays' remaining events,
with PromQL that promtool parses; the live page marks the rewinds asked in its window, and the
switches of fronting cluster that moved the stream's writes."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from keystone.contracts import metrics as names
from keystone.contracts.fronting import Switch
from keystone.contracts.settings import Settings
from keystone.dashboards import live
from keystone.dashboards.grafana import dashboard
from tests.dashboards.test_generated import LONG, importable, spec


@pytest.mark.parametrize("name", ["playback", LONG])
def test_the_model_marks_rewinds_and_charts_their_replay(name: str) -> None:
    model = json.loads(json.dumps(dashboard(spec(name))))
    assert importable(model) == []
    mark, switches = model["annotations"]["list"]
    assert mark["enable"] and not mark["hide"]
    # And where the fronting cluster taking the writes changed: when its gauge says.
    assert switches["expr"] == f"max by (cluster) ({names.CONTROL_FRONTING_SINCE}) * 1000"
    assert switches["useValueForTime"] is True and "{{cluster}}" in switches["titleFormat"]
    assert mark["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    # The gauge's value is when the rewind was asked: Grafana places the mark there (in ms).
    assert mark["expr"] == f'max by (output) ({names.REWIND_STARTED}{{stream="{name}"}}) * 1000'
    assert mark["useValueForTime"] is True
    assert "{{output}}" in mark["titleFormat"] and mark["tagKeys"] == "output"

    panel = next(p for p in model["panels"] if p["title"] == "Rewind: events still to replay")
    [target] = panel["targets"]
    assert target["expr"].startswith(
        f'max by (output) ({names.REWIND_REMAINING}{{stream="{name}"}})'
    )
    assert f'{names.ROUTER_LAG}{{stream="{name}"}}' in target["expr"]  # 0 for outputs never rewound
    assert target["legendFormat"] == "{{output}}"
    assert panel["id"] == len(model["panels"])  # after the stream's other panels


def test_the_rewind_expressions_parse(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "the bootstrap installs Prometheus, and promtool with it"
    model = dashboard(spec())
    panel = next(p for p in model["panels"] if p["title"].startswith("Rewind"))
    exprs = [model["annotations"]["list"][0]["expr"], panel["targets"][0]["expr"]]
    rules = {
        "groups": [
            {
                "name": "rewind-expressions",
                "rules": [{"record": f"check:rewind{i}", "expr": e} for i, e in enumerate(exprs)],
            }
        ]
    }
    path = tmp_path / "rewinds.yml"
    path.write_text(yaml.safe_dump(rules))
    checked = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_live_page_marks_each_rewind_asked_in_its_window(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    now = time.time()
    asked: list[str] = []

    def range_query(
        settings: Settings, promql: str, start: float, end: float, step: int
    ) -> list[dict[str, Any]]:
        asked.append(promql)
        # Each output's gauge over the window: its latest rewind's request time, per step.
        return [
            {"metric": {"output": "search"}, "values": [[now - 300, str(now - 320)]] * 3},
            {
                "metric": {"output": "clicks"},
                "values": [
                    [now - 900, str(now - 7200)],  # asked long before the window: not marked
                    [now - 600, str(now - 610)],
                    [now - 30, str(now - 45)],
                ],
            },
        ]

    monkeypatch.setattr(live, "range_query", range_query)
    marks = live.rewind_marks(Settings(state_dir=tmp_path), "playback", 15)
    assert asked == [f'max by (output) ({names.REWIND_STARTED}{{stream="playback"}})']
    assert marks == [
        {"time": now - 610, "output": "clicks"},
        {"time": now - 320, "output": "search"},  # one mark, however many steps held it
        {"time": now - 45, "output": "clicks"},
    ]


def test_the_live_page_marks_the_switches_that_moved_its_streams_writes() -> None:
    now = time.time()

    def switch(ago: float, stream: str | None, to: str) -> Switch:
        return Switch(at=now - ago, stream=stream, was="east", to=to, reason="command")

    log = [
        switch(3600, None, "west"),  # before the window
        switch(600, None, "west"),
        switch(500, "playback", "east"),
        switch(400, "other", "west"),  # another stream's alone
        switch(300, None, "east"),
    ]
    start, _, _ = live.window(15, 5)
    assert live.switch_marks(log, "playback", start) == [
        {"time": now - 600, "to": "west"},
        {"time": now - 500, "to": "east"},
        {"time": now - 300, "to": "east"},
    ]
    # The fleet's page: the switches of every stream's writes.
    assert [m["time"] for m in live.switch_marks(log, None, start)] == [now - 600, now - 300]
