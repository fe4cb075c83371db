"""A redrive's selection and count on their own, over dead letters given as plain values (read
from the real dead-letter topic and sent again: tests/router/test_redrive.py): which a selection
takes, and what a redrive of them sends where, each event once per place it failed."""

from __future__ import annotations

from keystone.contracts.names import STREAM_LEVEL
from keystone.contracts.recovery import Selection
from keystone.control.deadletters import Count, Letter, matches

T = 1_800_000_000.0


def letter(offset: int, output: str, guid: str | None, reason: str = "not JSON") -> Letter:
    return Letter(0, offset, T + offset, output, reason, guid, "{}")


def test_a_selection_takes_what_matches_every_field_it_gives() -> None:
    one = letter(10, "search", "a", reason="mapping conflict")
    assert matches(one, Selection())
    assert matches(one, Selection(reason="mapping conflict", output="search"))
    assert not matches(one, Selection(reason="not JSON"))
    assert not matches(one, Selection(output=STREAM_LEVEL))
    at_ms = int((T + 10) * 1000)
    assert matches(one, Selection(start=at_ms, end=at_ms + 1))  # from included
    assert not matches(one, Selection(end=at_ms))  # to excluded
    assert not matches(one, Selection(start=at_ms + 1))


def test_each_event_is_sent_once_to_each_place_it_failed_and_the_streams_covers_its_outputs() -> (
    None
):
    letters = [
        letter(0, STREAM_LEVEL, "a"),  # every output
        letter(1, "search", "a"),  # search refused it too: the stream's covers it
        letter(2, STREAM_LEVEL, "a"),  # a copy
        letter(3, "search", "b"),
        letter(4, "search", "b"),  # a copy
        letter(5, "warehouse", "b"),  # another place: sent too
        letter(6, "gone", "c"),  # an output the stream no longer has
        letter(7, "search", None),  # no guid to tell copies by: sent
        letter(8, "search", None),
    ]
    count = Count.of(letters, ["search", "warehouse"])
    assert (count.events, count.copies, count.skipped) == (6, 3, 1)
    assert count.outputs == {"search": 4, "warehouse": 2}
    # Selected without the stream's: the output's own is sent.
    alone = Count.of(letters[1:2], ["search", "warehouse"])
    assert (alone.events, alone.copies, alone.outputs["search"]) == (1, 0, 1)
