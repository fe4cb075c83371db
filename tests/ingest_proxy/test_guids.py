import uuid

from keystone.ingest_proxy.app import new_guids


def test_new_guids_are_distinct_canonical_version_4_uuids() -> None:
    guids = new_guids(5000)
    assert len(set(guids)) == 5000
    for guid in guids:
        parsed = uuid.UUID(guid)
        assert str(parsed) == guid
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
