"""The one backoff policy: how long to wait after failures in a row."""

from __future__ import annotations

import dataclasses

import pytest

from keystone.contracts.backoff import Backoff


def test_the_wait_doubles_from_the_first_up_to_the_most() -> None:
    backoff = Backoff(first=1.0, factor=2.0, most=60.0)
    assert [backoff.delay(n) for n in range(1, 10)] == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert backoff.delay(0) == 0.0  # no failure: no wait
    assert Backoff() == backoff  # the router's, by default


def test_it_takes_control_fleets_and_jobs_shapes() -> None:
    # What control.fleet and control.jobs used before they took it (RESTARTS in each): the
    # fleet's `min(300.0, 2.0 ** (failures - 1))`, the jobs' `min(300.0, 2.0**attempts)`.
    control = Backoff(first=1.0, factor=2.0, most=300.0)
    for n in range(1, 40):
        assert control.delay(n) == min(300.0, 2.0 ** (n - 1))  # n failures
        assert control.delay(n + 1) == min(300.0, 2.0**n)  # n attempts made before


def test_a_long_run_of_failures_waits_the_most_and_never_overflows() -> None:
    assert Backoff(1.0, 2.0, 60.0).delay(5_000) == 60.0
    assert Backoff(0.5, 1.0, 60.0).delay(5_000) == 0.5  # a factor of 1: always the first


@pytest.mark.parametrize(
    "fields",
    [
        {"first": 0.0},  # would retry at once, as fast as it fails
        {"first": -1.0},
        {"factor": 0.5},  # would shrink
        {"first": 10.0, "most": 5.0},
    ],
)
def test_a_backoff_that_would_not_hold_back_is_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="not a backoff"):
        Backoff(**fields)


def test_a_backoff_is_a_value() -> None:
    backoff = Backoff()
    with pytest.raises(dataclasses.FrozenInstanceError):
        backoff.most = 1.0  # type: ignore[misc]
    assert hash(backoff) == hash(Backoff(1.0, 2.0, 60.0))
