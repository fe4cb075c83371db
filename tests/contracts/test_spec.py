import pytest

from keystone.contracts.errors import InvalidName, InvalidSpec
from keystone.contracts.names import check_name, dead_letter_topic, fronting_topic
from keystone.contracts.schema import parse_schema, schema_problems
from keystone.contracts.spec import load_spec

SPEC = """
name: playback
owner: team-playback
producers: [player-app]
outputs:
  - name: warehouse
    sink: {type: hive}
  - name: search
    filter: "country = 'US'"
    projection: [guid, title]
    sink: {type: elasticsearch}
  - name: alerts
    sink: {type: keystone, stream: errors}
"""


def test_a_spec_loads_with_defaults_by_sink() -> None:
    spec = load_spec(SPEC)
    assert spec.partitions == 6
    assert spec.output("warehouse").delivery.mode == "microbatch"
    assert spec.output("search").delivery.mode == "realtime"
    assert spec.output("warehouse").projection == ["*"]
    assert load_spec(spec.to_json()) == spec  # the stored form loads back identical


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"name": "Bad-Name"}, "name", "is not valid"),
        ({"name": "keystone.x"}, "name", "is not valid"),
        ({"name": "keystone"}, "name", "reserved"),  # its output x's topic: keystone.x
        ({"name": "keystone_a"}, "name", "reserved"),  # output b: keystone_a.b ~ keystone.a_b
        ({"name": "a__b"}, "name", "single '_'s"),  # a__b + c, a + b__c: one Hive table
        ({"outputs": [{"name": "b__c", "sink": {"type": "hive"}}]}, "outputs.0.name", "'_'s"),
        ({"owner": "Team A"}, "owner", "should match pattern"),
        ({"partitions": 0}, "partitions", "greater than or equal to 1"),
        (
            {
                "outputs": [
                    {"name": "o1", "sink": {"type": "hive"}, "delivery": {"mode": "realtime"}}
                ]
            },
            "outputs.0",
            "Hive outputs deliver in micro-batches",
        ),
        (
            {
                "outputs": [
                    {
                        "name": "o1",
                        "sink": {"type": "keystone", "stream": "other"},
                        "delivery": {"guarantee": "exactly_once"},  # realtime, by default
                    }
                ]
            },
            "outputs.0.delivery",
            "exactly_once needs delivery.mode 'microbatch': a Kafka transaction commits",
        ),
        (
            {"outputs": [{"name": "o1", "sink": {"type": "kafka", "topic": "keystone.x"}}]},
            "outputs.0.sink.kafka.topic",
            "may not start with 'keystone.'",
        ),
        (
            {"outputs": [{"name": "o1", "sink": {"type": "kafka", "topic": "keystone_x"}}]},
            "outputs.0.sink.kafka.topic",
            "or 'keystone-shadow'",
        ),
        ({"outputs": [{"name": "o1", "sink": {"type": "s3"}}]}, "outputs.0.sink", "does not match"),
        ({"outputs": [{"name": "o1", "sink": {"type": "hive"}}] * 2}, "outputs", "unique: o1"),
        ({"schema": {"type": "string"}}, "schema", "an Avro record"),
        ({"surprise": 1}, "surprise", "Extra inputs are not permitted"),
        (
            {"objectives": {"router_down_for": "soon"}},
            "objectives.router_down_for",
            "a duration like '30 seconds'",
        ),
    ],
)
def test_invalid_specs_say_which_field_and_why(change: dict, field: str, message: str) -> None:
    data = {"name": "playback", "owner": "team-a", **change}
    with pytest.raises(InvalidSpec) as caught:
        load_spec(data)
    problems = caught.value.details["problems"]
    assert any(p["field"].startswith(field) and message in p["message"] for p in problems), problems
    assert caught.value.status == 422


def test_each_output_says_the_guarantee_it_runs_under() -> None:
    """Elasticsearch and Hive hold each event once whatever is replayed into them; Kafka and
    Keystone outputs are exactly once when their delivery asks for it, in micro-batches (an
    Elasticsearch output in realtime mode may ask too: it runs micro-batches back to back)."""
    once = {"guarantee": "exactly_once"}
    batches = {"mode": "microbatch", **once}
    outputs = [
        {"name": "loose", "sink": {"type": "kafka"}},
        {"name": "strict", "sink": {"type": "kafka"}, "delivery": batches},
        {"name": "onward", "sink": {"type": "keystone", "stream": "other"}, "delivery": batches},
        {"name": "search", "sink": {"type": "elasticsearch"}},
        {"name": "indexed", "sink": {"type": "elasticsearch"}, "delivery": once},
        {"name": "warehouse", "sink": {"type": "hive"}},
    ]
    spec = load_spec({"name": "playback", "owner": "team-a", "outputs": outputs})
    assert [(o.name, o.guarantee, o.transactional) for o in spec.outputs] == [
        ("loose", "at_least_once", False),
        ("strict", "exactly_once", True),
        ("onward", "exactly_once", True),
        ("search", "exactly_once", False),
        ("indexed", "exactly_once", False),
        ("warehouse", "exactly_once", False),
    ]
    assert load_spec(spec.to_json()) == spec


def test_names_become_topics_only_when_valid() -> None:
    assert fronting_topic("playback") == "keystone.playback"
    assert dead_letter_topic("playback") == "keystone.playback.dlq"
    for bad in ("a", "A_b", "1abc", "a-b", "a.b", "x" * 64, "a b", "../etc"):
        with pytest.raises(InvalidName):
            check_name(bad)


def test_schema_problems_name_field_paths() -> None:
    schema = parse_schema(
        {
            "type": "record",
            "name": "play",
            "fields": [
                {"name": "title", "type": "string"},
                {
                    "name": "user",
                    "type": {
                        "type": "record",
                        "name": "user",
                        "fields": [{"name": "id", "type": "long"}],
                    },
                },
                {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
            ],
        }
    )
    assert schema_problems({"title": "t", "user": {"id": 1}}, schema) == []
    assert schema_problems({"title": 5, "user": {"id": "x"}, "tags": [1]}, schema) == [
        {"path": "title", "message": "expected string, got an integer"},
        {"path": "user.id", "message": "expected long, got a string"},
        {"path": "tags", "message": "expected an array of string, got an array"},
    ]
    assert schema_problems({"user": 3}, schema)[1] == {
        "path": "user",
        "message": "expected an object, got an integer",
    }


def test_named_types_are_found_however_deep_and_recursion_is_refused() -> None:
    user = {"type": "record", "name": "User", "fields": [{"name": "id", "type": "long"}]}
    schema = {
        "type": "record",
        "name": "Event",
        "fields": [
            {"name": "owner", "type": user},
            {"name": "friends", "type": {"type": "array", "items": "User"}},
        ],
    }
    parsed = parse_schema(schema)
    assert schema_problems({"owner": {"id": 1}, "friends": [{"id": 2}]}, parsed) == []
    assert (
        schema_problems({"owner": {"id": 1}, "friends": [{"id": "x"}]}, parsed)[0]["path"]
        == "friends"
    )
    node = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "next", "type": ["null", "Node"]}],
    }
    with pytest.raises(ValueError, match="recursive"):
        parse_schema(node)
