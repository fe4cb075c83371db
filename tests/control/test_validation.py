import pytest
from pydantic import ValidationError

from keystone.contracts.errors import InvalidSpec
from keystone.contracts.limits import Limits
from keystone.contracts.spec import StreamSpec, load_spec
from keystone.control.models import RewindRequest
from keystone.control.validation import (
    check_spec,
    kafka_name_problems,
    route_problems,
    route_twice_problems,
    topic_problems,
)


def spec(**output: object) -> dict:
    return {
        "name": "playback",
        "owner": "team-a",
        "outputs": [
            {"name": "ok", "sink": {"type": "hive"}},
            {"name": "search", "sink": {"type": "elasticsearch"}, **output},
        ],
    }


def test_valid_filters_and_projections_pass() -> None:
    check_spec(load_spec(spec(filter="country = 'US'", projection=["guid", "a.b as c"])), Limits())


def test_broken_ones_name_the_output_field_and_column() -> None:
    with pytest.raises(InvalidSpec) as caught:
        check_spec(load_spec(spec(filter="country = ", projection=["*", "*"])), Limits())
    problems = caught.value.details["problems"]
    assert [(p["field"], p["column"]) for p in problems] == [
        ("outputs.1.projection", 1),
        ("outputs.1.filter", 11),
    ]
    assert "expected a value" in problems[1]["message"]


def test_a_sink_checks_its_own_config() -> None:
    loop = {
        "name": "playback",
        "owner": "team-a",
        "outputs": [{"name": "again", "sink": {"type": "keystone", "stream": "playback"}}],
    }
    with pytest.raises(InvalidSpec) as caught:
        check_spec(load_spec(loop), Limits())
    [problem] = caught.value.details["problems"]
    assert problem["field"] == "outputs.0.sink"
    assert "its own stream" in problem["message"]


def stream(name: str, owner: str = "team-a", *targets: str) -> StreamSpec:
    outputs = [{"name": f"to_{t}", "sink": {"type": "keystone", "stream": t}} for t in targets]
    return load_spec({"name": name, "owner": owner, "outputs": outputs})


def test_keystone_routes_must_reach_an_existing_stream_of_the_same_owner() -> None:
    stored = {s.name: s for s in (stream("aa"), stream("bb", "team-b"))}
    assert route_problems(stream("cc", "team-a", "aa"), stored, admin=False) == []
    missing, foreign = route_problems(stream("cc", "team-a", "zz", "bb"), stored, admin=False)
    assert missing["field"] == "outputs.0.sink.stream" and "'zz'" in missing["message"]
    assert foreign["field"] == "outputs.1.sink.stream" and "'bb'" in foreign["message"]
    assert route_problems(stream("cc", "team-a", "bb"), stored, admin=True) == []


def test_a_route_that_closes_a_cycle_is_refused_with_the_loop() -> None:
    stored = {s.name: s for s in (stream("aa", "team-a", "bb"), stream("bb", "team-a", "cc"))}
    stored["cc"] = stream("cc")
    [problem] = route_problems(stream("cc", "team-a", "aa"), stored, admin=False)
    assert problem["message"] == "this would make a cycle: cc -> aa -> bb -> cc"
    # Replacing a stream's spec drops its old routes from the graph.
    assert route_problems(stream("bb"), stored, admin=False) == []
    assert route_problems(stream("cc", "team-a", "bb"), {**stored, "bb": stream("bb")}, False) == []


def kafka_stream(name: str, owner: str, **topics: str | None) -> StreamSpec:
    """A stream whose outputs write to Kafka: output name -> its named topic (None: default)."""
    outputs = [{"name": o, "sink": {"type": "kafka", "topic": t}} for o, t in topics.items()]
    return load_spec({"name": name, "owner": owner, "outputs": outputs})


# Alice's: stream `orders` (output `search`, default topic) and her named topic `audit.log`;
# Bob's deleted stream `billing`.
CLAIMS = {"orders_search": "alice", "audit_log": "alice"}
STREAMS = {"orders": "alice", "billing": "bob"}


@pytest.mark.parametrize(
    ("owner", "output", "topic", "field", "words"),
    [
        # Another owner's topic, as named or as Kafka counts it the same ('.' is '_').
        ("bob", "copy", "orders.search", "sink.topic", "'orders.search' (or one Kafka"),
        ("bob", "copy", "orders_search", "sink.topic", "is another owner's"),
        ("bob", "copy", "audit.log", "sink.topic", "is another owner's"),
        # A default topic that collides: stream `audit` + output `log` is `audit.log`.
        ("bob", "log", None, "name", "'audit.log' (or one Kafka counts as the same)"),
        # Where another owner's stream may add outputs, live or deleted.
        ("bob", "copy", "orders.refunds", "sink.topic", "stream 'orders''s outputs"),
        ("bob", "copy", "orders_refunds_eu", "sink.topic", "'orders.<output>'"),
        ("alice", "copy", "billing.x", "sink.topic", "stream 'billing'"),
    ],
)
def test_a_kafka_topic_of_another_owner_is_refused(
    owner: str, output: str, topic: str | None, field: str, words: str
) -> None:
    spec = kafka_stream("audit", owner, **{output: topic})
    [problem] = topic_problems(spec, CLAIMS, {**STREAMS, "audit": owner})
    assert problem["field"] == f"outputs.0.{field}" and words in problem["message"], problem


def test_an_owner_may_write_to_their_own_topics_and_to_free_ones() -> None:
    mine = kafka_stream(
        "audit", "alice", log=None, aa="orders.search", bb="audit_log", cc="orders.x"
    )
    assert topic_problems(mine, CLAIMS, {**STREAMS, "audit": "alice"}) == []
    # Bob: free topics, and his own stream's outputs (a name that merely starts like
    # `orders_...` is not the stream `orders`'s).
    free = kafka_stream("ordersx", "bob", aa="orders", bb="ordersx.y", cc="billing.x", dd=None)
    assert topic_problems(free, CLAIMS, {**STREAMS, "ordersx": "bob"}) == []
    # A topic already hers stays hers when another owner's stream (Bob's `billing`) comes later.
    claimed = kafka_stream("audit", "alice", aa="billing.x")
    assert topic_problems(claimed, {"billing_x": "alice"}, {**STREAMS, "audit": "alice"}) == []


def test_one_route_into_a_stream_per_event() -> None:
    stored = {s.name: s for s in (stream("cc"), stream("bb", "team-a", "cc"))}
    # aa -> bb -> cc is one route: fine.
    assert route_twice_problems(stream("aa", "team-a", "bb"), stored) == []
    # aa -> cc beside aa -> bb -> cc: the second route into cc.
    [diamond] = route_twice_problems(stream("aa", "team-a", "bb", "cc"), stored)
    assert diamond["field"] == "outputs.1.sink.stream"
    assert "'aa' would reach stream 'cc' by 2 routes" in diamond["message"]
    # Two outputs into one stream.
    twice = load_spec(
        {
            "name": "aa",
            "owner": "team-a",
            "outputs": [
                {"name": "one", "sink": {"type": "keystone", "stream": "cc"}},
                {"name": "two", "sink": {"type": "keystone", "stream": "cc"}},
            ],
        }
    )
    assert [p["field"] for p in route_twice_problems(twice, stored)] == ["outputs.1.sink.stream"]
    # A second route made by a stream upstream of this one's target counts too.
    upstream = {**stored, "aa": stream("aa", "team-a", "bb", "dd")}
    [problem] = route_twice_problems(stream("dd", "team-a", "cc"), upstream)
    assert "by 2 routes" in problem["message"]


def test_routes_stored_before_the_rule_block_no_other_change() -> None:
    stored = {
        s.name: s
        for s in (
            stream("aa", "team-a", "bb", "cc"),
            stream("bb", "team-a", "dd"),
            stream("cc", "team-a", "dd"),
            stream("dd"),
        )
    }
    changed = load_spec(
        {
            **stored["bb"].model_dump(by_alias=True),
            "outputs": [
                *stored["bb"].model_dump(by_alias=True)["outputs"],
                {"name": "copy", "sink": {"type": "kafka"}},
            ],
        }
    )
    assert route_twice_problems(changed, stored) == []
    # A route this change adds is still refused: aa -> cc -> bb beside aa -> bb.
    [problem] = route_twice_problems(stream("cc", "team-a", "dd", "bb"), stored)
    assert "'aa' would reach stream 'bb' by 2 routes" in problem["message"]
    assert problem["field"] == "outputs.1.sink.stream"


@pytest.mark.parametrize(
    ("name", "outputs", "existing", "field"),
    [
        # A stream named like another's dead letters, and the other way round.
        ("xx_dlq", [], {"keystone_xx_dlq": "keystone.xx.dlq"}, "name"),
        ("xx", [], {"keystone_xx_dlq": "keystone.xx_dlq"}, "name"),
        # An output topic against a topic made already, and two of the spec's own.
        ("yy", [{"topic": "a_b.c"}], {"a_b_c": "a.b_c"}, "outputs.0.sink.topic"),
        ("yy", [{"topic": "a.b"}, {"topic": "a_b"}], {}, "outputs.1.sink.topic"),
    ],
)
def test_topics_that_kafka_counts_as_one_are_refused(
    name: str, outputs: list[dict], existing: dict[str, str], field: str
) -> None:
    new = load_spec(
        {
            "name": name,
            "owner": "team-a",
            "outputs": [
                {"name": f"o{i}", "sink": {"type": "kafka", **o}} for i, o in enumerate(outputs)
            ],
        }
    )
    [problem] = kafka_name_problems(new, existing)
    assert problem["field"] == field and "collides with topic" in problem["message"]
    if existing:  # the collision is with what exists, not within the spec
        assert kafka_name_problems(new, {}) == []


def test_controls_checks_report_the_setting_a_filter_is_over() -> None:
    output = {"name": "search", "sink": {"type": "hive"}, "filter": "x in (1, 2, 3)"}
    spec = load_spec({"name": "playback", "owner": "team-a", "outputs": [output]})
    check_spec(spec, Limits())
    with pytest.raises(InvalidSpec) as caught:
        check_spec(spec, Limits(max_in_values=2))
    [problem] = caught.value.details["problems"]
    assert problem["field"] == "outputs.0.filter"
    assert (problem["setting"], problem["limit"], problem["column"]) == ("max_in_values", 2, 13)
    # Stored so, under a looser limit: the stream stays changeable while its filter is kept.
    check_spec(spec, Limits(max_in_values=2), old=spec)
    changed = load_spec({**spec.model_dump(), "outputs": [{**output, "filter": "x in (1, 2, 4)"}]})
    with pytest.raises(InvalidSpec):
        check_spec(changed, Limits(max_in_values=2), old=spec)


def test_a_cycle_stored_elsewhere_does_not_blind_the_one_route_rule() -> None:
    stored = {
        s.name: s
        for s in (
            stream("xx", "team-b", "yy"),
            stream("yy", "team-b", "xx"),
            stream("bb", "team-a", "dd"),
            stream("dd"),
        )
    }
    [problem] = route_twice_problems(stream("aa", "team-a", "bb", "dd"), stored)
    assert "'aa' would reach stream 'dd' by 2 routes" in problem["message"]


def test_recovery_over_its_limits_names_the_setting_and_the_limit() -> None:
    data = spec() | {"recovery": {"keep": "8 days", "max_events_per_second": 200_000}}
    with pytest.raises(InvalidSpec) as refused:
        check_spec(load_spec(data), Limits())
    problems = {p["field"]: p for p in refused.value.details["problems"]}
    assert problems["recovery.keep"]["setting"] == "max_recovery_keep_hours"
    assert problems["recovery.keep"]["limit"] == 168
    assert problems["recovery.max_events_per_second"]["setting"] == "max_replay_events_per_second"
    check_spec(load_spec(spec() | {"recovery": {"keep": "7 days"}}), Limits())  # at the limit


def test_a_rewind_asks_for_exactly_one_target() -> None:
    assert RewindRequest(restore_point="0-3").target().restore_point == "0-3"
    assert RewindRequest.model_validate({"offsets": {"0": 5}}).offsets == {0: 5}
    for bad in (
        {},
        {"restore_point": "0-3", "offsets": {"0": 1}},
        {"to": "2026-11-25T10:00:00"},  # no zone
        {"offsets": {"0": -1}},
        {"restore_point": "0-3", "max_events_per_second": 0},
        {"restore_point": "0-3", "by": "someone"},
    ):
        with pytest.raises(ValidationError):
            RewindRequest.model_validate(bad)
