"""The sizing rule on its own: rates from samples, the size a rate calls for, and when the size
changes (up once a rise has held for three samples, or bursts for six; down on the last hour's
peak; at most once in ten minutes; within the spec's bounds)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from keystone.contracts.registry import RouterState
from keystone.contracts.spec import Sizing
from keystone.control.sizing import (
    CHANGE_EVERY_SECONDS,
    WINDOW_SECONDS,
    Traffic,
    decide,
    peak,
    rates,
    size_for,
)

T0 = 1_000_000.0
BOUNDS = Sizing()


def steady(per_second: float, start: float, seconds: int, count: int = 0) -> list:
    return [(start + t, count + int(per_second * t)) for t in range(0, seconds + 1, 10)]


def test_rates_leave_out_an_interval_whose_count_went_down() -> None:
    assert rates([(0, 0), (10, 100), (20, 50), (30, 150)]) == [(10, 10.0), (30, 10.0)]
    assert peak([(0, 0), (10, 100), (20, 400)], since=15) == 30.0
    assert peak([], since=0) == 0.0


@pytest.mark.parametrize(
    ("rate", "size"),
    [(0, 1_000), (600, 1_000), (700, 2_000), (5_000, 8_000), (1e9, 64_000)],
)
def test_a_rate_calls_for_the_smallest_step_with_headroom_within_the_bounds(
    rate: float, size: int
) -> None:
    assert size_for(rate, BOUNDS) == size


def test_a_rise_is_sized_for_where_it_went_not_for_the_sample_it_began_in() -> None:
    """500 events/s, then 5,000 from two seconds before a sample: that sample reads 1,400/s
    (4,000 with headroom), a size that would stand for ten minutes. Once each of the last three
    intervals calls for more, the size is what their median calls for: 8,000."""
    state = RouterState(sized_for=1_000)
    quiet = steady(500, T0, 600)
    rise = [*quiet, (T0 + 610, quiet[-1][1] + 8 * 500 + 2 * 5_000)]
    assert rates(rise)[-1] == (T0 + 610, 1_400.0)
    assert decide(state, rise, BOUNDS, T0 + 610) == 1_000
    held = rise + steady(5_000, T0 + 610, 20, rise[-1][1])[1:]
    assert decide(state, held[:-1], BOUNDS, T0 + 620) == 1_000  # 500/s among the last three
    assert decide(state, held, BOUNDS, T0 + 630) == 8_000


def samples_of(events_at: Callable[[float], float], times: list[float]) -> list:
    return [(t, int(events_at(t))) for t in times]


@pytest.mark.parametrize("spacing", [10.0, 10.5, 11.3, 13.0])
@pytest.mark.parametrize("rise_at", [600.0, 602.0, 606.0, 609.9])
def test_a_rise_is_never_sized_halfway_whatever_the_samples_spacing(
    spacing: float, rise_at: float
) -> None:
    """Samples a little more than 10 s apart (the fleet's pass comes after the 10 s), a rise
    anywhere between two, a decision at every pass: never 2,000 or 4,000, and 8,000 within
    five samples of the rise."""

    def events_at(t: float) -> float:
        return 500 * t + 4_500 * max(0.0, t - rise_at)

    times = [i * spacing for i in range(int(700 / spacing))]
    state = RouterState(sized_for=1_000)
    sizes = []
    for now in [t + d for t in times for d in (0.0, spacing - 0.4)]:
        sizes.append(
            decide(state, samples_of(events_at, [t for t in times if t <= now]), BOUNDS, now)
        )
    assert set(sizes) <= {1_000, 8_000}, sorted(set(sizes))
    first = next(
        now
        for now, size in zip(
            [t + d for t in times for d in (0.0, spacing - 0.4)], sizes, strict=True
        )
        if size == 8_000
    )
    assert rise_at < first <= rise_at + 5 * spacing


def test_a_lone_spike_sizes_nothing() -> None:
    state = RouterState(sized_for=1_000)
    quiet = steady(500, T0, 600)
    spike = [*quiet, (T0 + 610, quiet[-1][1] + 50_000)]
    calm = spike + steady(500, T0 + 610, 60, spike[-1][1])[1:]
    assert all(decide(state, calm[: 62 + n], BOUNDS, T0 + 610 + 10 * n) == 1_000 for n in range(7))


def test_traffic_in_bursts_is_sized_for_its_mean_once_two_windows_carry_it() -> None:
    """100,000 events every 30 s: one interval in three reads 10,000/s, the others nothing.
    No interval of 0 calls for more, but 3,333 a second on average does (8,000), once the last
    three intervals and the three before both carry it."""
    state = RouterState(sized_for=1_000)

    def events_at(t: float) -> float:
        return 100_000 * (1 + (t - T0) // 30)

    times = [T0 + 10 * i for i in range(1, 10)]
    assert decide(state, samples_of(events_at, times[:4]), BOUNDS, times[3]) == 1_000  # 3 intervals
    assert decide(state, samples_of(events_at, times[:7]), BOUNDS, times[6]) == 8_000


def test_up_at_once_down_after_the_hour_never_twice_in_ten_minutes() -> None:
    state = RouterState(sized_for=1_000)
    quiet = steady(500, T0, 600)
    assert decide(state, quiet, BOUNDS, T0 + 600) == 1_000
    busy = quiet + steady(5_000, T0 + 610, 60, quiet[-1][1])[1:]
    assert decide(state, busy, BOUNDS, T0 + 670) == 8_000  # the recent peak
    state = RouterState(sized_for=8_000, resized_at=T0 + 670)
    busier = busy + steady(40_000, T0 + 680, 60, busy[-1][1])[1:]
    assert decide(state, busier, BOUNDS, T0 + 740) == 8_000  # within ten minutes of a change
    later = T0 + 670 + CHANGE_EVERY_SECONDS + 10
    assert decide(state, busier, BOUNDS, later) == 8_000  # nothing recent; the hour: no less
    calm = busy + steady(100, T0 + 680, int(WINDOW_SECONDS) + 60, busy[-1][1])[1:]
    assert decide(state, calm, BOUNDS, T0 + 680 + WINDOW_SECONDS + 60) == 1_000


def test_bounds_the_owner_moves_apply_at_once() -> None:
    state = RouterState(sized_for=8_000, resized_at=T0)
    assert decide(state, [], Sizing(max_events_per_second=4_000), T0 + 1) == 4_000
    assert decide(RouterState(), [], Sizing(min_events_per_second=2_000), T0) == 2_000


def test_an_hour_of_samples_is_kept() -> None:
    traffic = Traffic([])
    for t in range(0, 7200, 10):
        traffic.add((T0 + t, t))
    assert traffic.samples[0][0] >= T0 + 7190 - WINDOW_SECONDS - 10
    assert traffic.samples[-1] == (T0 + 7190, 7190)
