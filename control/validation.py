"""Checks of a stream spec beyond its model, without I/O: that every output's filter and
projection parse, and that each sink accepts its config. (Control runs these before it stores
or deploys anything.)"""

from __future__ import annotations

from contracts.errors import ExpressionError, InvalidSpec
from contracts.names import topic_key
from contracts.spec import StreamSpec
from router.lang.parser import parse_filter, parse_projection
from router.sinks.registry import validate_sinks


def check_spec(spec: StreamSpec) -> None:
    problems = language_problems(spec) + validate_sinks(spec)
    if problems:
        raise InvalidSpec("the stream spec is not valid", problems=problems)


def language_problems(spec: StreamSpec) -> list[dict]:
    problems = []
    for index, output in enumerate(spec.outputs):
        checks = [("projection", lambda o=output: parse_projection(o.projection))]
        if output.filter is not None:
            checks.append(("filter", lambda o=output: parse_filter(o.filter)))
        for field, check in checks:
            try:
                check()
            except ExpressionError as e:
                problems.append(
                    {
                        "field": f"outputs.{index}.{field}",
                        "message": e.message,
                        "column": e.details["column"],
                    }
                )
    return problems


def route_problems(spec: StreamSpec, streams: dict[str, StreamSpec], admin: bool) -> list[dict]:
    """Keystone sinks against the other streams: each target must exist and belong to the same
    owner (the admin may join owners), and no chain of them may lead back to where it began.
    `streams` is every stream as stored; `spec` replaces its own entry."""
    graph = {name: _targets(s) for name, s in streams.items()}
    graph[spec.name] = _targets(spec)
    problems = []
    for index, output in enumerate(spec.outputs):
        if output.sink.type != "keystone":
            continue
        field = f"outputs.{index}.sink.stream"
        target = streams.get(output.sink.stream)
        if target is None or not (admin or target.owner == spec.owner):
            problems.append(
                {
                    "field": field,
                    "message": f"no stream {output.sink.stream!r} of owner "
                    f"{spec.owner!r} to deliver to: create it first",
                }
            )
            continue
        cycle = _path(graph, output.sink.stream, spec.name)
        if cycle is not None:
            loop = " -> ".join([spec.name, *cycle])
            problems.append({"field": field, "message": f"this would make a cycle: {loop}"})
    return problems


def topic_problems(
    spec: StreamSpec, topic_owners: dict[str, str], stream_owners: dict[str, str]
) -> list[dict]:
    """Kafka outputs' topics against other owners'. A topic is the owner's whose output first
    wrote to it, for good, since it keeps their records (`topic_owners`, in Kafka's collision
    form). A topic an output names must also stay out of another owner's streams' default
    topics, `<stream>.<output>`, live or deleted (`stream_owners`), or it could take one of
    theirs before they add that output (a topic already the owner's stays theirs)."""
    topics = spec.kafka_topics()
    problems = []
    for index, output in enumerate(spec.outputs):
        if output.name not in topics:
            continue
        topic, named = topics[output.name], output.sink.topic is not None
        key = topic_key(topic)
        field = f"outputs.{index}.{'sink.topic' if named else 'name'}"
        holder = topic_owners.get(key)
        theirs = sorted(
            s for s, o in stream_owners.items() if o != spec.owner and key.startswith(f"{s}_")
        )
        if holder not in (None, spec.owner):
            message = f"topic {topic!r} (or one Kafka counts as the same) is another owner's"
        elif named and holder is None and theirs:
            message = (
                f"topic {topic!r} could be another owner's: stream {theirs[0]!r}'s outputs "
                f"write to '{theirs[0]}.<output>'"
            )
        else:
            continue
        problems.append({"field": field, "message": f"{message}: choose another"})
    return problems


def _targets(spec: StreamSpec) -> set[str]:
    return {o.sink.stream for o in spec.outputs if o.sink.type == "keystone"}


def _path(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """A path of keystone sinks from `start` to `goal`, if there is one (depth first)."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        if node == goal:
            return path
        if node in seen:
            continue
        seen.add(node)
        stack.extend((nxt, [*path, nxt]) for nxt in sorted(graph.get(node, ())))
    return None
