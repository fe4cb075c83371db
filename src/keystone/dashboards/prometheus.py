"""Prometheus' HTTP query API, as control's status and the live dashboards read it."""

from __future__ import annotations

import time
from typing import Any

import httpx

from keystone.contracts import http
from keystone.contracts.settings import Settings


class PrometheusError(Exception):
    """Prometheus did not answer, or refused the query."""


def _get(settings: Settings, path: str, **params: Any) -> Any:
    try:
        answer = http.client().get(f"{settings.prometheus_url}{path}", params=params, timeout=10)
        body = answer.json()
    except (httpx.HTTPError, ValueError) as e:
        raise PrometheusError(f"Prometheus at {settings.prometheus_url} did not answer: {e}") from e
    if body.get("status") != "success":
        raise PrometheusError(f"Prometheus refused a query: {body.get('error')}")
    return body["data"]


def instant(settings: Settings, promql: str, at: float | None = None) -> list[dict[str, Any]]:
    """An instant query's result vector (now, or `at`): [{metric: {...}, value: [t, "v"]}]."""
    params = {"query": promql} if at is None else {"query": promql, "time": at}
    return _get(settings, "/api/v1/query", **params)["result"]


def window(minutes: int, scrape_seconds: int) -> tuple[float, float, int]:
    """Start, end and step of a range of the last `minutes`: about 180 points, never finer
    than the scrape interval, aligned to the step so refreshes line up."""
    step = max(scrape_seconds, minutes * 60 // 180)
    end = time.time() // step * step
    return end - minutes * 60, end, step


def range_query(
    settings: Settings, promql: str, start: float, end: float, step: int
) -> list[dict[str, Any]]:
    """A range query's result matrix: [{metric: {...}, values: [[t, "v"], ...]}]."""
    return _get(settings, "/api/v1/query_range", query=promql, start=start, end=end, step=step)[
        "result"
    ]


def alert_rules(settings: Settings) -> list[dict[str, Any]]:
    """Every rule group's alerting rules, with their state and active alerts."""
    return _get(settings, "/api/v1/rules", type="alert")["groups"]
