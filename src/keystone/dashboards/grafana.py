"""A stream's Grafana dashboard model, importable as is: its panels query a data source chosen
through the dashboard's `datasource` variable (any Prometheus that scrapes the stack)."""

from __future__ import annotations

import hashlib
from typing import Any

from keystone.contracts.spec import StreamSpec
from keystone.dashboards.panels import Panel, stream_panels

SCHEMA_VERSION = 39  # Grafana 10/11's dashboard schema
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
HEIGHT = 8


def dashboard(spec: StreamSpec) -> dict[str, Any]:
    panels, x, y = [], 0, 0
    for number, panel in enumerate(stream_panels(spec), start=1):
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
        "annotations": {"list": []},
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
