"""A well-behaved tenant beside the hostile one: a stream with a router delivering to Kafka, an
app posting to it, its alert rules in Prometheus. Every hostile test ends by checking that this
tenant was not hurt: its events still delivered, its rules still loaded, its key still honoured.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.api import Api, owner
from tests.support.good_tenant import GOOD_APP, GOOD_OUTPUT, GOOD_OWNER, GOOD_STREAM, Good
from tests.support.stack import Stack


@pytest.fixture(scope="session")
def good(stack: Stack, admin: Api) -> Iterator[Good]:
    team = owner(admin, GOOD_OWNER)
    key = team.ok("POST", "/v1/apps", {"name": GOOD_APP})["key"]
    spec = {
        "name": GOOD_STREAM,
        "owner": GOOD_OWNER,
        "partitions": 1,
        "producers": [GOOD_APP],
        "outputs": [GOOD_OUTPUT],
        "archive": {"enabled": False},  # its output is what the hostile tests watch
    }
    team.ok("POST", "/v1/streams", spec)
    tenant = Good(stack, team, key)
    tenant.works()  # its router is up and delivering before any hostile test begins
    yield tenant
    team.call("DELETE", f"/v1/streams/{GOOD_STREAM}")
