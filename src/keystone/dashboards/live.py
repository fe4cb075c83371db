"""What the live dashboard pages draw: each panel's series over a window, on one time grid, the
streams' alerts with their state, and the rewinds to mark, from Prometheus' query API; and the
switches of fronting cluster to mark, from the registry's log of them."""

from __future__ import annotations

import math
import re
from typing import Any

from keystone.contracts import metrics as m
from keystone.contracts.fronting import Switch
from keystone.contracts.settings import Settings
from keystone.dashboards.panels import UNITS, Panel
from keystone.dashboards.prometheus import alert_rules, range_query, window
from keystone.dashboards.rules import GROUP_PREFIX

_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def panel_layout(panels: list[Panel]) -> list[dict[str, Any]]:
    """What the page needs to lay the charts out before any data comes."""
    return [
        {"key": p.key, "title": p.title, "unit": UNITS[p.unit], "description": p.description}
        for p in panels
    ]


def panel_data(settings: Settings, panels: list[Panel], minutes: int) -> dict[str, Any]:
    """{times: [epoch s...], step, panels: [{key, unit, series: [{name, values}]}]}: every
    series on the same grid of times, null where Prometheus has no value, from the first time
    any panel has one."""
    start, end, step = window(minutes, settings.scrape_interval_seconds)
    times = list(range(int(start), int(end) + 1, step))
    at = {t: i for i, t in enumerate(times)}
    drawn = []
    for panel in panels:
        series = []
        for query in panel.queries:
            for result in range_query(settings, query.expr, start, end, step):
                values: list[float | None] = [None] * len(times)
                for t, v in result["values"]:
                    i = at.get(int(float(t)))
                    number = float(v)
                    if i is not None and math.isfinite(number):
                        values[i] = number
                name = _LEGEND.sub(lambda m, r=result: r["metric"].get(m[1], ""), query.legend)
                series.append({"name": name.strip() or query.legend, "values": values})
        drawn.append({"key": panel.key, "unit": UNITS[panel.unit], "series": series})
    # Where nothing was measured yet (a new stream, a new stack), the charts start at the first
    # value instead of drawing a sliver at the right of an empty window.
    first = min(
        (i for p in drawn for s in p["series"] for i, v in enumerate(s["values"]) if v is not None),
        default=0,
    )
    cut = max(0, first - 1)
    for p in drawn:
        for s in p["series"]:
            s["values"] = s["values"][cut:]
    return {"times": times[cut:], "step": step, "panels": drawn}


def rewind_marks(settings: Settings, stream: str, minutes: int) -> list[dict[str, Any]]:
    """The rewinds of the stream's outputs asked within the window, oldest first:
    [{time: epoch s, output}]. Each output's gauge holds when its latest rewind was asked, so
    every value it took in the window is one rewind (as the Grafana model's annotation)."""
    start, end, step = window(minutes, settings.scrape_interval_seconds)
    promql = f'max by (output) ({m.REWIND_STARTED}{{stream="{stream}"}})'  # a validated name
    marks = set()
    for result in range_query(settings, promql, start, end, step):
        output = result["metric"].get("output", "")
        for _, value in result["values"]:
            asked = float(value)
            if asked >= start:  # a rewind asked before the window is not drawn
                marks.add((asked, output))
    return [{"time": asked, "output": output} for asked, output in sorted(marks)]


def switch_marks(switches: list[Switch], stream: str | None, start: float) -> list[dict[str, Any]]:
    """The switches of fronting cluster from `start` (the window's, epoch s) that concerned
    `stream` (its own, and every stream's; with None, the fleet's page: every stream's alone),
    oldest first: [{time: epoch s, to}]."""
    return [
        {"time": s.at, "to": s.to}
        for s in switches
        if s.at >= start and (s.concerns(stream) if stream is not None else s.stream is None)
    ]


def stream_alerts(settings: Settings, streams: set[str] | None) -> list[dict[str, Any]]:
    """The alerting rules of these streams (every stream's: None), each with its state
    (inactive, pending, firing) and its active alerts' rendered summaries."""
    found = []
    for group in alert_rules(settings):
        stream = group["name"].removeprefix(GROUP_PREFIX)
        if stream == group["name"] or (streams is not None and stream not in streams):
            continue
        for rule in group["rules"]:
            found.append(
                {
                    "stream": stream,
                    "alert": rule["name"],
                    "state": rule["state"],
                    "severity": rule.get("labels", {}).get("severity", ""),
                    "active": [
                        {
                            "state": a["state"],
                            "since": a.get("activeAt"),
                            "summary": a.get("annotations", {}).get("summary", ""),
                            "description": a.get("annotations", {}).get("description", ""),
                        }
                        for a in rule.get("alerts", [])
                    ],
                }
            )
    order = {"firing": 0, "pending": 1, "inactive": 2}
    return sorted(found, key=lambda r: (order.get(r["state"], 3), r["stream"], r["alert"]))
