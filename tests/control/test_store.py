"""What the registry stores is exactly what was validated, and whatever Redis holds reads back
as a spec or as `Unreadable` naming the stream: never another error (issue 28)."""

from __future__ import annotations

import json

import pytest

from keystone.contracts.errors import InvalidSpec
from keystone.contracts.registry import RouterState, Unreadable, read_spec
from keystone.contracts.spec import StreamSpec
from keystone.control.store import stored_form

NAN_DEFAULT = {
    "type": "record",
    "name": "E",
    "fields": [{"name": "x", "type": "double", "default": float("nan")}],
}


def test_a_spec_is_stored_only_as_it_reads_back() -> None:
    spec = StreamSpec(name="fine", owner="team-a")
    assert read_spec("fine", stored_form(spec).encode()) == spec
    # Valid as given, but its JSON writes NaN as null, which is no double's default.
    drifting = StreamSpec(name="drift", owner="team-a", schema=NAN_DEFAULT)
    with pytest.raises(InvalidSpec, match="does not read back"):
        stored_form(drifting)


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"\xff\xfe",
        json.dumps({"name": "evil", "owner": 5}).encode(),
        json.dumps({"name": "other", "owner": "team-a"}).encode(),  # names another stream
        b"[" * 100_000,
    ],
)
def test_whatever_redis_holds_reads_as_a_spec_or_unreadable(raw: bytes) -> None:
    with pytest.raises(Unreadable) as caught:
        read_spec("evil", raw)
    assert caught.value.stream == "evil" and caught.value.status == 409


def test_a_router_record_is_type_checked() -> None:
    assert RouterState.from_hash({b"state": b'"running"', b"pid": b"7"}).pid == 7
    for raw in ({b"pid": b'"1; rm -rf /"'}, {b"state": b'"hacked"'}, {b"extra": b"[1]"}):
        with pytest.raises(ValueError):
            RouterState.from_hash(raw)


def test_a_router_record_is_never_of_a_stream_without_a_router() -> None:
    # `none` is what the API says of a stream without outputs; no router record holds it.
    with pytest.raises(ValueError, match="never a router's record"):
        RouterState.from_hash({b"state": b'"none"'})
