"""Every limit is explicit: a setting, listed with its default in the site's settings reference
(generated from the code by docs/gen_reference.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from keystone.contracts.errors import LimitExceeded
from keystone.contracts.limits import Limits, check_limit
from keystone.contracts.settings import Settings

GENERATOR = Path(__file__).resolve().parents[2] / "docs" / "gen_reference.py"


def reference_generator() -> ModuleType:
    """docs/gen_reference.py, the MkDocs hook that writes the reference pages (docs/ is not a
    package, so it is loaded by path)."""
    spec = importlib.util.spec_from_file_location("gen_reference", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_limit_is_a_setting_listed_with_its_default_in_the_settings_reference() -> None:
    page = reference_generator().settings_reference()
    limits_section = page.split("\n## Limits\n", 1)[1].split("\n## ", 1)[0]
    rows = {
        line.split(" | ", 1)[0].removeprefix("| "): line
        for line in limits_section.splitlines()
        if line.startswith("| `KEYSTONE_")
    }
    for name, field in Limits.model_fields.items():
        row = rows.get(f"`KEYSTONE_{name.upper()}`")
        assert row is not None, f"{name} is not in the settings reference's limits"
        assert f"| `{field.default}`" in row, f"{name}'s default {field.default} is not in {row}"


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
