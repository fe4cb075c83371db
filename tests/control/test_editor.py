"""The output editor's projection box (no stack): how its text becomes items. The browser test
(test_ui.py) runs the page's own copy of the rule (static/stream.js) through a preview."""

from __future__ import annotations

import pytest

from keystone.control.ui import _projection


@pytest.mark.parametrize(
    ("text", "items"),
    [
        ("guid\nn as number", ["guid", "n as number"]),
        ("guid, n,  title ", ["guid", "n", "title"]),
        # Commas inside a call or a string do not separate items.
        (
            "mask(card, 4) as card, concat(a, ', ', b) as ab",
            ["mask(card, 4) as card", "concat(a, ', ', b) as ab"],
        ),
        ("concat(a, 'it''s, x') as c, n", ["concat(a, 'it''s, x') as c", "n"]),
        # A line of '*' is one item: its commas list the paths it leaves out.
        (
            "* except user.email, user.phone\nhash(user.email) as h",
            ["* except user.email, user.phone", "hash(user.email) as h"],
        ),
        ("", ["*"]),
        ("\n , \n", ["*"]),
    ],
)
def test_the_projection_box_splits_items_outside_calls_and_strings(
    text: str, items: list[str]
) -> None:
    assert _projection(text) == items
