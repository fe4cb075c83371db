"""A router's queries on a standby fronting cluster run while it takes the stream's writes or
holds records they have not read, and are held otherwise (`router.standby`). The clusters'
contents and the registry are given here; the real ones: tests/control/test_fronting.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from keystone.contracts import fronting
from keystone.contracts.fronting import Active
from keystone.contracts.settings import Settings
from keystone.router import standby
from keystone.router.standby import Standby, drained


def test_drained_when_every_query_has_read_to_each_partitions_end() -> None:
    ends = {0: (0, 10), 1: (5, 5)}
    assert drained(ends, [{0: 10, 1: 5}, {0: 12}])
    assert not drained(ends, [{0: 10, 1: 5}, {0: 9, 1: 5}])
    assert not drained(ends, [None])  # never ran: partition 0 holds records
    assert drained({0: (7, 7)}, [None])  # never ran, and the topic holds none (any more)


class Registry:
    def __init__(self, active: str) -> None:
        self.active = active

    def fronting(self, settings: Settings) -> Active:
        return Active(cluster=self.active)


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    settings = Settings(state_dir=tmp_path, fronting_clusters="east,west")
    ends: dict[str, dict[int, tuple[int, int]] | Exception] = {"west": {0: (0, 0)}}

    def read_watermarks(reader: Settings, topic: str, timeout: float) -> dict:
        assert topic == "keystone.plays" and reader.kafka_port == settings.kafka_port + 100
        found = ends["west"]
        if isinstance(found, Exception):
            raise found
        return found

    resumes: dict[str, dict[int, int] | None] = {"search@west": None, "_stream@west": None}
    monkeypatch.setattr(standby, "watermark_reader", lambda connection: connection)
    monkeypatch.setattr(standby, "read_watermarks", read_watermarks)
    registry = Registry("east")
    _, west = fronting.clusters(settings)
    watch = Standby(
        settings,
        "plays",
        [west],
        lambda cluster: dict(resumes),
        registry,  # type: ignore[arg-type]
    )
    return watch, ends, resumes, registry


def test_held_until_the_standby_takes_writes_or_holds_unread_records(watched) -> None:
    watch, ends, resumes, registry = watched
    both = {"search@west", "_stream@west"}
    assert watch.idle == both  # held until looked at
    watch.look()
    assert watch.idle == both  # empty, and not taking writes
    registry.active = "west"  # a failover: they run, whatever west holds
    watch.look()
    assert watch.idle == set()
    registry.active = "east"  # a failback: they run on while west holds what they have not read
    ends["west"] = {0: (0, 40)}
    resumes.update({"search@west": {0: 40}, "_stream@west": {0: 31}})
    watch.look()
    assert watch.idle == set()
    resumes["_stream@west"] = {0: 40}  # drained: held
    watch.look()
    assert watch.idle == both
    ends["west"] = ConnectionError("west is lost")  # not looked at: left as they were
    watch.look()
    assert watch.idle == both
    ends["west"] = {0: (0, 41)}  # a ghost write found once west is back: read, then held
    watch.look()
    assert watch.idle == set()
