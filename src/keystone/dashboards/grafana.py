"""A stream's Grafana dashboard model, importable as is: its panels query a data source chosen
through the dashboard's `datasource` variable (any Prometheus that scrapes the stack). Rewinds
of its outputs are marked on every chart (an annotation) and their replays have a panel."""

from __future__ import annotations

import hashlib
from typing import Any

from keystone.contracts import metrics as m
from keystone.contracts.spec import StreamSpec
from keystone.dashboards.panels import Panel, Query, stream_panels

SCHEMA_VERSION = 39  # Grafana 10/11's dashboard schema
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
HEIGHT = 8


def dashboard(spec: StreamSpec) -> dict[str, Any]:
    panels, x, y = [], 0, 0
    for number, panel in enumerate([*stream_panels(spec), rewind_panel(spec)], start=1):
        if x + panel.width > 24:
            x, y = 0, y + HEIGHT
        panels.append(_panel(number, panel, {"x": x, "y": y, "w": panel.width, "h": HEIGHT}))
        x += panel.width
    return {
        "uid": uid(spec.name),
        "title": f"Keystone stream {spec.name}",
        "description": f"Ingest, routing and delivery of stream {spec.name} (owner {spec.owner}).",
        "tags": ["keystone", f"stream:{spec.name}"],
        "timezone": "utc",
        "editable": True,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "annotations": {"list": [rewind_annotation(spec), FRONTING_ANNOTATION]},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                    "refresh": 1,
                    "options": [],
                    "regex": "",
                }
            ]
        },
        "panels": panels,
    }


# A mark when the fronting cluster taking the writes last changed (control's gauge holds the
# moment), as the rewinds' marks: every stream's writes move together, unless switched alone.
FRONTING_ANNOTATION: dict[str, Any] = {
    "name": "Fronting switches",
    "datasource": DATASOURCE,
    "enable": True,
    "hide": False,
    "iconColor": "purple",
    "expr": f"max by (cluster) ({m.CONTROL_FRONTING_SINCE}) * 1000",
    "step": "1m",
    "useValueForTime": True,
    "titleFormat": "Writes moved to fronting cluster {{cluster}}",
    "textFormat": "producers write to {{cluster}} from here (keystone fronting status)",
    "tagKeys": "cluster",
}


def rewind_annotation(spec: StreamSpec) -> dict[str, Any]:
    """A mark at the moment each rewind of an output was asked: the gauge's value is that
    moment, which Grafana takes as the mark's time (in ms). Unlike `changes()` over the gauge,
    this marks an output's first rewind too (its series only begins then) at its exact time."""
    selector = f'{{stream="{spec.name}"}}'  # a validated name: safe inside PromQL
    return {
        "name": "Rewinds",
        "datasource": DATASOURCE,
        "enable": True,
        "hide": False,
        "iconColor": "orange",
        "expr": f"max by (output) ({m.REWIND_STARTED}{selector}) * 1000",
        "step": "1m",
        "useValueForTime": True,
        "titleFormat": "Rewind of output {{output}}",
        "textFormat": f"{spec.name}.{{{{output}}}} taken back: it replays from there",
        "tagKeys": "output",
    }


def rewind_panel(spec: StreamSpec) -> Panel:
    """Each output's replay: the events its latest rewind still has to read. An output never
    rewound has no such series: it shows 0 (from its lag's series) rather than nothing."""
    selector = f'{{stream="{spec.name}"}}'
    return Panel(
        "rewind-remaining",
        "Rewind: events still to replay",
        "short",
        (
            Query(
                f"max by (output) ({m.REWIND_REMAINING}{selector}) "
                f"or max by (output) (0 * {m.ROUTER_LAG}{selector})",
                "{{output}}",
            ),
        ),
        "Per output, the events of the fronting topic its latest rewind has yet to replay, "
        "at the stream's recovery rate; 0 once it has caught up (and for outputs never rewound).",
    )


def uid(stream: str) -> str:
    """Grafana's uids are at most 40 characters; a long stream name keeps a readable prefix."""
    whole = f"keystone-{stream}"
    if len(whole) <= 40:
        return whole
    return f"keystone-{stream[:22]}-{hashlib.sha256(stream.encode()).hexdigest()[:8]}"


def _panel(number: int, panel: Panel, grid: dict[str, int]) -> dict[str, Any]:
    return {
        "id": number,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": grid,
        "fieldConfig": {
            "defaults": {
                "unit": panel.unit,
                "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10},
            },
            "overrides": [],
        },
        "options": {
            "legend": {
                "displayMode": "table",
                "placement": "bottom",
                "showLegend": True,
                "calcs": ["mean", "max", "lastNotNull"],
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": DATASOURCE,
                "expr": query.expr,
                "legendFormat": query.legend,
                "range": True,
            }
            for i, query in enumerate(panel.queries)
        ],
    }
