"""Every sink type has its three parts: a config in the spec's union, a provisioner, and a Spark
writer that the registry names and that resolves to a `Writer`."""

from __future__ import annotations

from typing import get_args

import pytest

from keystone.contracts.sinks import SinkConfig
from keystone.router.sinks.base import Writer, writer_class
from keystone.router.sinks.provision import Provisioner
from keystone.router.sinks.registry import SINKS

CONFIGS = get_args(get_args(SinkConfig)[0])  # the union inside Annotated[..., Field(...)]
TYPES = sorted(config.model_fields["type"].default for config in CONFIGS)


def test_the_registry_has_exactly_the_spec_s_sink_types() -> None:
    assert sorted(SINKS) == TYPES


@pytest.mark.parametrize("sink_type", TYPES)
def test_each_type_has_a_provisioner_and_a_writer(sink_type: str) -> None:
    parts = SINKS[sink_type]
    assert issubclass(parts.provisioner, Provisioner)
    assert issubclass(writer_class(sink_type), Writer)
