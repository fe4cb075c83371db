"""Checks of a stream spec beyond its model, without I/O: that every output's filter and
projection parse, and that each sink accepts its config. (Control runs these before it stores
or deploys anything.)"""

from __future__ import annotations

from keystone.contracts.errors import ExpressionError, InvalidSpec
from keystone.contracts.limits import Limits
from keystone.contracts.names import dead_letter_topic, fronting_topic, topic_key
from keystone.contracts.spec import StreamSpec, sink_problems
from keystone.router.lang.parser import parse_filter, parse_projection


def check_spec(spec: StreamSpec, limits: Limits, old: StreamSpec | None = None) -> None:
    """`limits`: what a spec may ask of the router (`Settings` are `Limits`); `old`, the spec
    as stored, if it is."""
    problems = language_problems(spec, limits, old) + sink_problems(spec)
    problems += recovery_problems(spec, limits)
    if problems:
        raise InvalidSpec("the stream spec is not valid", problems=problems)


def language_problems(
    spec: StreamSpec, limits: Limits, old: StreamSpec | None = None
) -> list[dict]:
    """Each output's projection and filter parsed with the limits, but for one the stored spec
    (`old`) already has: lowering a limit never makes a stream's other changes refused."""
    stored = {o.name: o for o in old.outputs} if old is not None else {}
    problems = []
    for index, output in enumerate(spec.outputs):
        kept = stored.get(output.name)
        for field, parse in (("projection", parse_projection), ("filter", parse_filter)):
            text = getattr(output, field)
            if text is None:
                continue
            unchanged = kept is not None and getattr(kept, field) == text
            try:
                parse(text, limits=None if unchanged else limits)
            except ExpressionError as e:
                problems.append(expression_problem(f"outputs.{index}.{field}", e))
    return problems


def recovery_problems(spec: StreamSpec, limits: Limits) -> list[dict]:
    """The recovery section against the limits, naming the setting and the limit."""
    problems = []
    keep_hours = spec.recovery.keep_seconds / 3600
    if keep_hours > limits.max_recovery_keep_hours:
        problems.append(
            {
                "field": "recovery.keep",
                "message": f"{spec.recovery.keep} is over the limit of "
                f"{limits.max_recovery_keep_hours} hours (max_recovery_keep_hours)",
                "setting": "max_recovery_keep_hours",
                "limit": limits.max_recovery_keep_hours,
            }
        )
    if spec.archive.keep_days > limits.max_archive_keep_days:
        problems.append(
            {
                "field": "archive.keep_days",
                "message": f"over the limit of {limits.max_archive_keep_days} days "
                "(max_archive_keep_days)",
                "setting": "max_archive_keep_days",
                "limit": limits.max_archive_keep_days,
            }
        )
    if spec.recovery.max_events_per_second > limits.max_replay_events_per_second:
        problems.append(
            {
                "field": "recovery.max_events_per_second",
                "message": f"over the limit of {limits.max_replay_events_per_second} "
                "(max_replay_events_per_second)",
                "setting": "max_replay_events_per_second",
                "limit": limits.max_replay_events_per_second,
            }
        )
    return problems


def expression_problem(field: str, error: ExpressionError) -> dict:
    """The problem of a filter or projection that does not parse: where, and the limit it is
    over when that is why."""
    problem = {"field": field, "message": error.message, "column": error.details["column"]}
    problem.update({k: error.details[k] for k in ("setting", "limit") if k in error.details})
    return problem


def route_problems(spec: StreamSpec, streams: dict[str, StreamSpec], admin: bool) -> list[dict]:
    """Keystone sinks against the other streams: each target must exist and belong to the same
    owner (the admin may join owners), and no chain of them may lead back to where it began.
    `streams` is every stream as stored; `spec` replaces its own entry."""
    graph = {name: _targets(s) for name, s in streams.items()}
    graph[spec.name] = _targets(spec)
    problems = []
    for index, output in enumerate(spec.outputs):
        into = output.sink.into_stream
        if into is None:
            continue
        field = f"outputs.{index}.sink.stream"
        target = streams.get(into)
        if target is None or not (admin or target.owner == spec.owner):
            problems.append(
                {
                    "field": field,
                    "message": f"no stream {into!r} of owner "
                    f"{spec.owner!r} to deliver to: create it first",
                }
            )
            continue
        cycle = _path(graph, into, spec.name)
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
    return {o.sink.into_stream for o in spec.outputs if o.sink.into_stream is not None}


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


def route_twice_problems(spec: StreamSpec, streams: dict[str, StreamSpec]) -> list[dict]:
    """Keystone sinks that would bring one event into one stream by a second route (two
    outputs into one target, or A -> C beside A -> B -> C). Each copy keeps the event's guid, its
    identity from ingest to every sink: a sink keyed by guid would keep one and count both
    delivered. So an event has one route into any stream. Only routes this spec adds are
    refused (`streams` is every stream as stored, this one's old spec included): a graph stored
    before the rule does not block unrelated changes. Cycles are `route_problems`'."""
    before = _route_counts({name: _edges(s) for name, s in streams.items()})
    graph = {name: _edges(s) for name, s in streams.items()}
    graph[spec.name] = _edges(spec)
    after = _route_counts(graph)
    added = [
        (source, target, count)
        for (source, target), count in sorted(after.items())
        if count > 1 and count > before.get((source, target), 0)
    ]
    if not added:
        return []
    old = streams.get(spec.name)
    new_edges = set(_edges(spec)) - set(_edges(old) if old is not None else [])
    index = max(i for i, o in enumerate(spec.outputs) if (o.name, o.sink.into_stream) in new_edges)
    source, target, count = added[0]
    return [
        {
            "field": f"outputs.{index}.sink.stream",
            "message": f"events of stream {source!r} would reach stream {target!r} by {count} "
            "routes, each copy with the event's guid: one route into a stream per event",
        }
    ]


def _edges(spec: StreamSpec) -> list[tuple[str, str]]:
    """(output, target stream) of each keystone sink."""
    return [(o.name, o.sink.into_stream) for o in spec.outputs if o.sink.into_stream is not None]


def _route_counts(graph: dict[str, list[tuple[str, str]]]) -> dict[tuple[str, str], int]:
    """How many routes of keystone sinks lead from each stream to each other, counted (not
    listed: stacked diamonds have exponentially many). An edge that closes a cycle counts for
    nothing beyond itself: a cycle is `route_problems`' to refuse, and one stored elsewhere must
    not blind this rule to the rest of the graph."""
    reach: dict[str, dict[str, int]] = {}
    visiting: set[str] = set()

    def routes_from(node: str) -> dict[str, int]:
        if node in reach:
            return reach[node]
        if node in visiting:
            return {}
        visiting.add(node)
        counts: dict[str, int] = {}
        for _, target in graph.get(node, []):
            further = routes_from(target)
            counts[target] = counts.get(target, 0) + 1
            for end, n in further.items():
                counts[end] = counts.get(end, 0) + n
        visiting.discard(node)
        reach[node] = counts
        return counts

    found: dict[tuple[str, str], int] = {}
    for source in graph:
        found.update({(source, target): n for target, n in routes_from(source).items()})
    return found


def _first_per_field(problems: list[dict]) -> list[dict]:
    seen: dict[str, dict] = {}
    for problem in problems:
        seen.setdefault(problem["field"], problem)
    return list(seen.values())


def kafka_name_problems(spec: StreamSpec, existing: dict[str, str]) -> list[dict]:
    """The spec's topics (fronting, dead-letter, Kafka outputs) against every topic the
    registry knows (`existing`: Kafka's collision form -> the topic's name) and each other.
    Kafka refuses a topic whose name differs from another's only in '.' against '_' (stream
    `x_dlq`'s fronting topic against stream `x`'s dead letters, say), which would otherwise be
    a 503 "retry" that never succeeds: a 422 naming the field, decided before anything is
    provisioned."""
    mine = [
        ("name", fronting_topic(spec.name)),
        ("name", dead_letter_topic(spec.name)),
    ]
    topics = spec.kafka_topics()
    for index, output in enumerate(spec.outputs):
        if output.name in topics:
            field = "sink.topic" if output.sink.topic is not None else "name"
            mine.append((f"outputs.{index}.{field}", topics[output.name]))
    claimed = dict(existing)
    problems = []
    for field, topic in mine:
        other = claimed.setdefault(topic_key(topic), topic)
        if other != topic:
            problems.append(
                {
                    "field": field,
                    "message": f"topic {topic!r} collides with topic {other!r}: Kafka counts "
                    "'.' and '_' as the same, so choose another name",
                }
            )
    return _first_per_field(problems)
