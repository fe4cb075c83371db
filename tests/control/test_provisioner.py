"""What control provisions for a stream: its archive's Hive database too, when no output is Hive
(else, on a fresh metastore, the archive's query fails with SCHEMA_NOT_FOUND)."""

from __future__ import annotations

import pytest

from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.control import provisioner

KAFKA_ONLY = {
    "name": "orders",
    "owner": "team",
    "outputs": [{"name": "all", "sink": {"type": "kafka"}}],
}


@pytest.mark.parametrize("archived", [True, False])
def test_the_archive_gets_its_database_whatever_the_outputs_sinks(
    monkeypatch: pytest.MonkeyPatch, archived: bool
) -> None:
    made: list[str] = []
    monkeypatch.setattr(provisioner, "create_topics", lambda settings, topics: [])
    monkeypatch.setattr(
        provisioner, "ensure_database", lambda settings: made.append("db") or ["Hive database"]
    )
    monkeypatch.setattr(provisioner, "provisioner_for", lambda route: _Nothing())
    spec = StreamSpec.model_validate({**KAFKA_ONLY, "archive": {"enabled": archived}})
    created = provisioner.provision(Settings(), spec)
    assert made == (["db"] if archived else [])
    assert created == (["Hive database"] if archived else [])


class _Nothing:
    def provision(self) -> list[str]:
        return []
