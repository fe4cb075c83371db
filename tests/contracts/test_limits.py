"""Every limit is explicit: a setting, documented in the README's limits table."""

from __future__ import annotations

import pytest

from keystone.contracts.errors import LimitExceeded
from keystone.contracts.limits import Limits, check_limit
from keystone.contracts.settings import CHECKOUT, Settings


def test_every_limit_is_a_setting_listed_in_the_readme() -> None:
    readme = (CHECKOUT / "README.md").read_text()
    for name in Limits.model_fields:
        assert f"`KEYSTONE_{name.upper()}`" in readme, name


def test_a_refusal_names_the_setting_the_limit_and_the_field() -> None:
    limits = Limits(max_in_values=3)
    check_limit(limits, "max_in_values", 3, "values")
    with pytest.raises(LimitExceeded) as caught:
        check_limit(limits, "max_in_values", 4, "values in this list", "outputs.0.filter")
    assert caught.value.status == 422
    assert caught.value.body() == {
        "error": "LimitExceeded",
        "message": "4 values in this list; the limit is 3 (max_in_values)",
        "setting": "max_in_values",
        "limit": 3,
        "field": "outputs.0.filter",
    }


def test_limits_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYSTONE_MAX_EVENTS_PER_REQUEST", "7")
    assert Settings().max_events_per_request == 7
    assert Settings().to_env()["KEYSTONE_MAX_EVENTS_PER_REQUEST"] == "7"  # routers get it too
