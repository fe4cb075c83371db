"""Control's OpenAPI schema shows this deployment's limits on the fields they bound, so a client
(and schemathesis, tests/control/test_api.py) sees them before it is refused."""

from __future__ import annotations

from keystone.contracts.settings import Settings
from keystone.control.app import create_app


def test_the_limits_are_in_the_openapi_schema(tmp_path) -> None:
    settings = Settings(state_dir=tmp_path, max_partitions=12, max_filter_chars=99)
    models = create_app(settings).openapi()["components"]["schemas"]
    assert models["StreamSpec"]["properties"]["partitions"]["maximum"] == 12
    assert models["StreamSpec"]["properties"]["outputs"]["maxItems"] == 20
    [text, _] = models["OutputSpec"]["properties"]["filter"]["anyOf"]
    assert text == {"type": "string", "maxLength": 99}
    [rate, _] = models["AppCreate"]["properties"]["rate"]["anyOf"]
    assert rate["maximum"] == settings.max_app_rate
