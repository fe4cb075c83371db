"""The benchmarks' shared pieces."""

from __future__ import annotations

from keystone.loadtest.bench import Steadiness, cpu_steadiness


def test_steadiness_counts_the_samples_near_the_fastest_as_full_speed() -> None:
    # A host that runs the unit at full speed (250-280 µs) 40% of the time and at 410 µs otherwise.
    cpu = Steadiness.of([410.0] * 60 + [250.0] * 30 + [280.0] * 10)
    assert (cpu.p10_us, cpu.p50_us, cpu.p90_us) == (250.0, 410.0, 410.0)
    assert cpu.full_speed == 0.4  # 250 and 280 are within 15% of 250; 410 is not
    assert str(cpu) == (
        "a fixed unit of work took 250 / 410 / 410 µs of CPU (p10 / p50 / p90), "
        "at full speed 40% of the time"
    )


def test_steadiness_is_sampled_from_this_machine() -> None:
    cpu = cpu_steadiness(0.5)
    assert 0 < cpu.p10_us <= cpu.p50_us <= cpu.p90_us
    assert 0 < cpu.full_speed <= 1
