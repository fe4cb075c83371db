"""Every sink type is one unit: its config in the spec's union with a descriptor, whose runtime
parts (a provisioner, a Spark writer, a reader) resolve to what they should; and nothing outside
the sinks' packages switches on the type."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import get_args

import pytest

from keystone.contracts.sinks import SINK_TYPES, SINKS, Replay, SinkConfig, SinkKind
from keystone.router.sinks.base import (
    RecordWriter,
    ReplacesRanges,
    Replays,
    TakesOut,
    Writer,
    writer_class,
)
from keystone.router.sinks.provision import Provisioner
from keystone.router.sinks.readback import SinkReader

CONFIGS = get_args(get_args(SinkConfig)[0])  # the union inside Annotated[..., Field(...)]
TYPES = sorted(config.model_fields["type"].default for config in CONFIGS)
SRC = Path(__file__).parents[3] / "src" / "keystone"
# Where a type is defined: its config and descriptor, and its runtime parts.
OWN = (SRC / "contracts" / "sinks", SRC / "router" / "sinks")


def test_the_registry_has_exactly_the_spec_s_sink_types() -> None:
    assert sorted(SINK_TYPES) == TYPES
    assert CONFIGS == SINKS


@pytest.mark.parametrize("sink_type", TYPES)
def test_each_type_has_a_provisioner_and_a_writer(sink_type: str) -> None:
    kind = SINK_TYPES[sink_type]
    assert issubclass(kind.load(kind.provisioner), Provisioner)
    assert issubclass(writer_class(kind), Writer)
    assert issubclass(kind.load(kind.reader), SinkReader)


@pytest.mark.parametrize("sink_type", TYPES)
def test_each_descriptor_agrees_with_its_writer(sink_type: str) -> None:
    """Real-time Mode runs only what Spark writes itself (a record writer); a writer takes
    records out or replaces ranges only as its replay semantics say."""
    kind: SinkKind = SINK_TYPES[sink_type]
    writer = writer_class(kind)
    assert kind.realtime == issubclass(writer, RecordWriter)
    assert issubclass(writer, Replays)
    assert issubclass(writer, ReplacesRanges) == (kind.replay is Replay.RESETTABLE)
    assert issubclass(writer, TakesOut) == (kind.replay is Replay.IDEMPOTENT)
    assert kind.modes and set(kind.modes) <= {"realtime", "microbatch"}
    assert bool(kind.exact_note) == kind.exact


def _switches(text: str, where: str) -> list[str]:
    """Where a module asks a sink its type: `x.sink.type == ...`, `sink.type in ...`, an
    `isinstance` of a sink config class, or a sink type's name compared with a sink or a type
    (a form's `sink == "kafka"`)."""
    configs = {c.__name__ for c in SINKS}
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            typed = any(
                isinstance(s, ast.Attribute)
                and s.attr == "type"
                and "sink" in ast.unparse(s.value).lower()
                for s in sides
            )
            texts = [ast.unparse(s).lower() for s in sides]
            named = any(
                isinstance(s, ast.Constant) and s.value in SINK_TYPES for s in sides
            ) and any("sink" in t or "type" in t for t in texts)
            if typed or named:
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and set(re.findall(r"\w+", ast.unparse(node.args[1]))) & configs
        ):
            found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_nothing_outside_the_sinks_switches_on_the_type() -> None:
    modules = [p for p in SRC.rglob("*.py") if not any(p.is_relative_to(o) for o in OWN)]
    assert len(modules) > 100, "the walk found the source"
    assert [s for p in modules for s in _switches(p.read_text(), str(p.relative_to(SRC)))] == []
    web = SRC / "control" / "web"
    asked = re.compile(r"sink\.type\s*(==|!=|in\b)")
    pages = [*web.rglob("*.html"), *web.rglob("*.js")]
    assert pages, "the walk found the pages"
    assert [str(p) for p in pages if asked.search(p.read_text())] == []


def test_the_walk_finds_each_kind_of_switch() -> None:
    """The walk above sees each (it must be able to fail)."""
    text = (
        "a = o.sink.type == 'hive'\n"
        "b = sink.type in ('kafka', 'keystone')\n"
        "c = isinstance(o.sink, (KafkaSink, HiveSink))\n"
        "d = form.sink != 'elasticsearch'\n"
        "e = o.sink.kind.replay is Replay.RESETTABLE\n"  # a descriptor's answer: no switch
    )
    assert [line.split(":")[1] for line in _switches(text, "probe")] == ["1", "2", "3", "4"]
