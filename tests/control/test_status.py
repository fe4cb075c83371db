"""A stream's status composed from its facts (`control.status.compose`), pure: what Prometheus
answered placed on each output and the archive, what it did not answer said once; the fetching
of them is the stack tests' (tests/control/test_api.py, tests/router/test_router.py)."""

from __future__ import annotations

from typing import Any

from keystone.contracts.names import ARCHIVE_QUERY
from keystone.contracts.registry import RouterPhase, RouterState
from keystone.contracts.spec import load_spec
from keystone.control.status import Facts, compose, queries

SPEC = load_spec(
    {
        "name": "plays",
        "owner": "team-a",
        "outputs": [
            {"name": "clicks", "sink": {"type": "kafka"}},
            {"name": "warehouse", "sink": {"type": "hive"}},
        ],
    }
)


def sample(value: str, **labels: str) -> dict[str, Any]:
    return {"metric": labels, "value": [0, value]}


def test_each_figure_lands_on_its_output_and_the_archive() -> None:
    figures = {
        "rates": [
            sample("10.5", output="clicks", stage="in"),
            sample("2", output=ARCHIVE_QUERY, stage="delivered"),
            sample("9", output="gone", stage="in"),  # an output the spec no longer has
        ],
        "totals": [sample("1000", output="clicks", stage="delivered")],
        "lag": [sample("42", output="warehouse"), sample("NaN", output="clicks")],
        "p99": [sample("0.1234567", output="clicks")],
    }
    state = RouterState(state=RouterPhase.RUNNING, pid=7)
    status = compose(Facts(SPEC, state, figures=figures))
    outputs = {o.name: o for o in status.outputs}
    assert status.router.state == "running" and status.metrics_error is None
    assert outputs["clicks"].rates == {"in": 10.5} and outputs["clicks"].totals == {
        "delivered": 1000.0
    }
    assert outputs["clicks"].latency_p99 == 0.123457  # rounded to the microsecond
    assert outputs["clicks"].lag is None  # NaN: no events in the window, not a figure
    assert outputs["warehouse"].lag == 42.0 and outputs["warehouse"].guarantee == "exactly_once"
    assert status.archive is not None and status.archive.rates == {"delivered": 2.0}
    assert [o.sink for o in status.outputs] == ["kafka", "hive"]


def test_without_figures_each_output_is_listed_and_why_is_said() -> None:
    plain = SPEC.model_copy(update={"archive": SPEC.archive.model_copy(update={"enabled": False})})
    status = compose(Facts(plain, None, metrics_error="Prometheus is unreachable"))
    assert status.router.state == "pending"  # outputs, and no router yet
    assert status.archive is None and status.redrive is None
    assert status.metrics_error == "Prometheus is unreachable"
    assert all(o.rates == {} and o.lag is None for o in status.outputs)


def test_the_queries_select_the_stream_alone() -> None:
    asked = queries("plays")
    assert set(asked) == {"rates", "totals", "lag", "p99"}
    assert all('stream="plays"' in q for q in asked.values())


def test_alerts_are_listed_firing_silenced_or_inhibited_with_whom_they_reach() -> None:
    def held(name: str, state: str, silenced: list[str], inhibited: list[str]) -> dict:
        return {
            "labels": {"alertname": name, "stream": "plays", "owner": "team-a", "output": "x"},
            "annotations": {"summary": f"{name} of plays"},
            "startsAt": "2026-11-29T10:00:00Z",
            "receivers": [{"name": "keystone-admin"}, {"name": "owner-team-a"}],
            "status": {"state": state, "silencedBy": silenced, "inhibitedBy": inhibited},
        }

    alerts = [
        held("KeystoneRouterDown", "active", [], []),
        held("KeystoneDeadLetters", "suppressed", ["s1"], []),
        held("KeystoneLagGrowing", "suppressed", [], ["f1"]),
    ]
    status = compose(Facts(SPEC, None, alerts=alerts))
    assert [(a.alert, a.state) for a in status.alerts] == [
        ("KeystoneRouterDown", "firing"),
        ("KeystoneDeadLetters", "silenced"),
        ("KeystoneLagGrowing", "inhibited"),
    ]
    first = status.alerts[0]
    assert first.receivers == ["keystone-admin", "owner-team-a"] and first.output == "x"
    assert status.alerts[1].silenced_by == ["s1"]
    away = compose(Facts(SPEC, None, alerts_error="Alertmanager did not answer"))
    assert away.alerts == [] and away.alerts_error == "Alertmanager did not answer"
