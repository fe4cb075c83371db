"""What is generated from a spec, without the stack: a Grafana dashboard model that meets what
Grafana's importer requires, Prometheus rules that `promtool check rules` accepts, and the
publisher's files, rewritten only when they change and removed with their stream."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from keystone.contracts.errors import Unavailable
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec, load_spec
from keystone.dashboards.grafana import dashboard
from keystone.dashboards.publish import Publisher
from keystone.dashboards.rules import rules_yaml

LONG = "s" + "x" * 62  # the longest stream name there may be


def spec(name: str = "playback", **extra: object) -> StreamSpec:
    outputs = [
        {"name": "clicks", "filter": "kind = 'click'", "sink": {"type": "kafka"}},
        {"name": "search", "sink": {"type": "elasticsearch"}},
        {"name": "warehouse", "sink": {"type": "hive"}},
    ]
    return load_spec({"name": name, "owner": "team-a", "outputs": outputs, **extra})


def importable(model: dict) -> list[str]:
    """What Grafana's dashboard importer requires of a model (and what would break its grid)."""
    wrong = []
    if not isinstance(model.get("title"), str) or not model["title"]:
        wrong.append("a title")
    if not isinstance(model.get("uid"), str) or not 0 < len(model["uid"]) <= 40:
        wrong.append("a uid of at most 40 characters")
    if not isinstance(model.get("schemaVersion"), int):
        wrong.append("an integer schemaVersion")
    variables = model.get("templating", {}).get("list", [])
    if not any(v.get("type") == "datasource" and v.get("query") == "prometheus" for v in variables):
        wrong.append("a Prometheus datasource variable")
    names = {v["name"] for v in variables}
    cells: set[tuple[int, int]] = set()
    ids = [p.get("id") for p in model.get("panels", [])]
    if not ids or len(set(ids)) != len(ids) or not all(isinstance(i, int) for i in ids):
        wrong.append("panels with unique integer ids")
    for panel in model.get("panels", []):
        where = f"panel {panel.get('title')!r}"
        if panel.get("type") not in ("timeseries", "stat", "gauge", "table"):
            wrong.append(f"{where}: a known type")
        grid = panel.get("gridPos", {})
        if not all(isinstance(grid.get(k), int) for k in "xywh") or grid["x"] + grid["w"] > 24:
            wrong.append(f"{where}: a gridPos within 24 columns")
            continue
        taken = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        if taken & cells:
            wrong.append(f"{where}: a place of its own")
        cells |= taken
        source = panel.get("datasource", {}).get("uid", "")
        if source.removeprefix("${").removesuffix("}") not in names:
            wrong.append(f"{where}: the datasource variable")
        targets = panel.get("targets", [])
        refs = [t.get("refId") for t in targets]
        if not targets or len(set(refs)) != len(refs) or not all(t.get("expr") for t in targets):
            wrong.append(f"{where}: targets with unique refIds and expressions")
    return wrong


@pytest.mark.parametrize("name", ["playback", LONG])
def test_the_dashboard_is_importable_and_has_every_panel_asked_for(name: str) -> None:
    model = json.loads(json.dumps(dashboard(spec(name))))  # plain JSON, as written to disk
    assert importable(model) == []
    titles = [p["title"] for p in model["panels"]]
    assert titles[:2] == ["Ingest rate by app", "Accepted vs rejected"]
    assert {
        "Output clicks (kafka, at least once)",
        "Output search (elasticsearch, exactly once)",
        "Output warehouse (hive, exactly once)",
    } <= set(titles)
    assert {
        "Consumer lag",
        "Delivery latency p50 and p99",
        "Delivery rate (delivered / matched)",
        "Router up",
    } <= set(titles)
    assert "Transactions of the exactly-once outputs" not in titles  # it has none
    exprs = [t["expr"] for p in model["panels"] for t in p["targets"]]
    assert all(f'stream="{name}"' in e for e in exprs)
    latency = next(p for p in model["panels"] if p["title"].startswith("Delivery latency"))
    assert [t["legendFormat"] for t in latency["targets"]] == ["{{output}} p50", "{{output}} p99"]
    assert latency["fieldConfig"]["defaults"]["unit"] == "s"


def exactly_once(name: str = "playback") -> StreamSpec:
    delivery = {"mode": "microbatch", "guarantee": "exactly_once"}
    outputs = [{"name": "clicks", "sink": {"type": "kafka"}, "delivery": delivery}]
    return load_spec({"name": name, "owner": "team-a", "outputs": outputs})


def test_exactly_once_outputs_get_a_transactions_panel() -> None:
    model = json.loads(json.dumps(dashboard(exactly_once())))
    assert importable(model) == []
    [panel] = [p for p in model["panels"] if p["title"].startswith("Transactions")]
    [target] = panel["targets"]
    assert "keystone_router_transactions_total" in target["expr"]
    assert target["legendFormat"] == "{{output}} {{outcome}}"
    assert "Output clicks (kafka, exactly once)" in [p["title"] for p in model["panels"]]


def test_a_long_name_keeps_a_unique_uid() -> None:
    other = "s" + "x" * 61 + "y"
    assert dashboard(spec(LONG))["uid"] != dashboard(spec(other))["uid"]


def test_the_rules_pass_promtool_and_carry_the_objectives(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "the bootstrap installs Prometheus, and promtool with it"
    owned = spec(objectives={"delivery_rate": 0.95, "router_down_for": "2 minutes"})
    # An exactly-once output adds its alert: transactions aborting again and again.
    counts = [(spec(), 9), (spec(LONG), 9), (owned, 9), (exactly_once(LONG), 10)]
    for index, (stream, count) in enumerate(counts):
        path = tmp_path / f"{index}.yml"
        path.write_text(rules_yaml(stream, "http://127.0.0.1:18081/ui"))
        checked = subprocess.run(
            [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert f"SUCCESS: {count} rules found" in checked.stdout
    assert "KeystoneTransactionsAborting" in rules_yaml(exactly_once(), "x")
    assert "KeystoneTransactionsAborting" not in rules_yaml(spec(), "x")
    text = rules_yaml(owned, "x")
    assert "< 0.95" in text and "KeystoneRouterDown" in text
    down = {
        spec_.objectives.router_down_for: next(
            r["for"]
            for g in yaml.safe_load(rules_yaml(spec_, "x"))["groups"]
            for r in g["rules"]
            if r.get("alert") == "KeystoneRouterDown"
        )
        for spec_ in (spec(), owned)
    }
    assert down == {"1 minute": "60s", "2 minutes": "120s"}


def test_the_publisher_rewrites_only_what_changed_and_removes_what_is_gone(
    tmp_path: Path,
) -> None:
    # A Prometheus nobody listens on: the reload fails, and is asked again on the next pass.
    settings = Settings(state_dir=tmp_path, prometheus_url="http://127.0.0.1:9")
    publisher = Publisher(settings)
    with pytest.raises(Unavailable):
        publisher.sync([spec("first"), spec("second")])
    board = settings.dashboards_dir / "first.json"
    rules = settings.prometheus_rules_dir / "first.yml"
    assert json.loads(board.read_text())["title"] == "Keystone stream first"
    written = board.stat().st_mtime_ns, rules.stat().st_mtime_ns
    with pytest.raises(Unavailable):  # nothing new to write, but the reload is still owed
        publisher.sync([spec("first"), spec("second")])
    assert (board.stat().st_mtime_ns, rules.stat().st_mtime_ns) == written

    changed = spec("first", objectives={"lag_records": 5})
    with pytest.raises(Unavailable):
        publisher.sync([changed])
    assert "> 5 and" in rules.read_text()
    assert not (settings.dashboards_dir / "second.json").exists()
    assert not (settings.prometheus_rules_dir / "second.yml").exists()
