"""The stream spec: one validated model, owned by control, executed by the router, read by the
proxy and dashboards. Stored in Redis as JSON; accepted as JSON (REST) or YAML (CLI).

Filters and projections are kept as text here; the router's language module compiles them, and
control checks that they compile before it stores a spec.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from keystone.contracts.errors import InvalidSpec
from keystone.contracts.limits import MAX_OBJECTIVE_LAG_RECORDS
from keystone.contracts.names import ARCHIVE, HIVE_DATABASE, archive_table, check_name
from keystone.contracts.schema import parse_schema
from keystone.contracts.sinks import SinkConfig, StreamName

Name = Annotated[str, AfterValidator(check_name)]
# Apps and owners are labels and headers, never topic names: dashes are fine.
PRINCIPAL_MAX = 63
Principal = Annotated[str, Field(pattern=rf"^[a-z][a-z0-9_-]{{1,{PRINCIPAL_MAX - 1}}}$")]
_TRIGGER = re.compile(r"^[1-9][0-9]* (second|seconds|minute|minutes)$")
_DURATION = re.compile(r"^([1-9][0-9]*) (second|minute|hour|day)s?$")
_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
# Spark's spark.sql.streaming.realTimeMode.minBatchDuration.
REALTIME_MIN_SECONDS = 5


def _check_duration(text: str) -> str:
    if not _DURATION.fullmatch(text):
        raise ValueError("a duration like '30 seconds', '90 minutes', '24 hours' or '7 days'")
    return text


Duration = Annotated[str, AfterValidator(_check_duration)]


def duration_seconds(duration: str) -> int:
    match = _DURATION.fullmatch(duration)
    assert match is not None, "checked when the spec was read"
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]


DEFAULT_TRIGGERS = {"realtime": "60 seconds", "microbatch": "10 seconds"}
_MODE_WORDS = {"realtime": "real time", "microbatch": "micro-batches"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Delivery(_Strict):
    """The user's trade-off: `realtime` (lowest latency) or `microbatch` (fewer duplicates on
    a crash). The trigger is the micro-batch interval, or Real-time Mode's checkpoint interval:
    a crash replays what the sink had since the last checkpoint, and each checkpoint pauses the
    output for a moment (the latency's tail), so Real-time Mode checkpoints once a minute by
    default. A Kafka or Keystone output in micro-batches may be exactly once (`guarantee`):
    none then repeats."""

    mode: Literal["realtime", "microbatch"] = "realtime"
    trigger: str | None = Field(
        None, description="Default: '60 seconds' for realtime, '10 seconds' for microbatch."
    )
    guarantee: Literal["at_least_once", "exactly_once"] = Field(
        "at_least_once",
        description="Kafka and Keystone outputs: 'exactly_once' writes each micro-batch in "
        "Kafka transactions that commit the input's positions with it, so a batch run again "
        "after a crash writes nothing twice (readers read with isolation.level=read_committed); "
        "micro-batches only. Elasticsearch and Hive outputs are exactly once either way.",
    )

    @field_validator("trigger")
    @classmethod
    def _interval(cls, trigger: str | None) -> str | None:
        if trigger is not None and not _TRIGGER.fullmatch(trigger):
            raise ValueError("an interval like '10 seconds' or '1 minute'")
        return trigger

    @model_validator(mode="after")
    def _resolved(self) -> Delivery:
        if self.trigger is None:
            object.__setattr__(self, "trigger", DEFAULT_TRIGGERS[self.mode])
        if self.mode == "realtime" and self.seconds < REALTIME_MIN_SECONDS:
            raise ValueError(
                f"Real-time Mode checkpoints at most every {REALTIME_MIN_SECONDS} seconds: "
                f"trigger '{REALTIME_MIN_SECONDS} seconds' or more"
            )
        return self

    @property
    def seconds(self) -> int:
        count, unit = (self.trigger or DEFAULT_TRIGGERS[self.mode]).split()
        return int(count) * (60 if unit.startswith("minute") else 1)


class OutputSpec(_Strict):
    name: Name
    filter: str | None = Field(None, description="Which events to deliver; all when absent.")
    projection: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    sink: SinkConfig
    delivery: Delivery | None = Field(
        None, description="Default: the sink's first mode (realtime; microbatch for Hive)."
    )
    start: Literal["latest", "earliest"] = Field(
        "latest", description="Where a new output starts reading the fronting topic."
    )

    @model_validator(mode="after")
    def _delivery_for_sink(self) -> OutputSpec:
        kind = self.sink.kind
        if self.delivery is None:
            object.__setattr__(self, "delivery", Delivery(mode=kind.modes[0]))
        elif self.delivery.mode not in kind.modes:
            raise ValueError(
                f"{kind.label} outputs deliver in {' or '.join(_MODE_WORDS[m] for m in kind.modes)}"
                f": delivery.mode {' or '.join(repr(m) for m in kind.modes)}"
            )
        return self

    @field_validator("delivery")
    @classmethod
    def _exactly_once_in_batches(cls, delivery: Delivery | None, info: ValidationInfo) -> Any:
        sink = info.data.get("sink")  # absent when it did not validate
        if (
            delivery is not None
            and sink is not None
            and delivery.guarantee == "exactly_once"
            and not sink.kind.exact
            and delivery.mode == "realtime"
        ):
            raise ValueError(
                "exactly_once needs delivery.mode 'microbatch': a Kafka transaction commits "
                "with a micro-batch's input positions, and Real-time Mode writes records as "
                "they come, with no batch to commit"
            )
        return delivery

    @property
    def guarantee(self) -> Literal["at_least_once", "exactly_once"]:
        """What the output runs under: its sink's own, or what its delivery asks for."""
        assert self.delivery is not None, "set when the spec is read"
        return "exactly_once" if self.sink.kind.exact else self.delivery.guarantee

    @property
    def transactional(self) -> bool:
        """Written in Kafka transactions (an exactly-once Kafka or Keystone output)."""
        assert self.delivery is not None, "set when the spec is read"
        return not self.sink.kind.exact and self.delivery.guarantee == "exactly_once"


class Objectives(_Strict):
    """What the stream's alerts hold its outputs to."""

    delivery_rate: float = Field(
        0.999,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="Delivered over matched per output, over 5 minutes.",
    )
    lag_records: int = Field(
        100_000,
        ge=1,
        le=MAX_OBJECTIVE_LAG_RECORDS,
        description="An output this far behind the fronting topic and growing.",
    )
    router_down_for: Duration = Field(
        "1 minute",
        description="How long the router may be unreachable, or a query of it stopped, before "
        "KeystoneRouterDown fires: '30 seconds', '5 minutes' (a restart takes some seconds).",
    )

    @property
    def router_down_seconds(self) -> int:
        return duration_seconds(self.router_down_for)


class Recovery(_Strict):
    """How far back the stream's outputs can be rewound, and how fast a rewind replays."""

    keep: Duration = Field(
        "24 hours",
        description="How long each output's restore points are kept: '24 hours', '3 days'. "
        "The fronting topic's retention bounds a rewind too.",
    )
    max_events_per_second: int = Field(
        5000,
        ge=1,
        description="A rewind's replay rate, so that it cannot starve the router's live outputs "
        "(a rewind may ask for another).",
    )

    @property
    def keep_seconds(self) -> int:
        return duration_seconds(self.keep)


class Archive(_Strict):
    """The stream's raw events kept in the warehouse (`keystone.<stream>__archive`), so that an
    output can be backfilled from months back rather than from Kafka's days."""

    enabled: bool = Field(True, description="Off: no archive is written (nor can be backfilled).")
    keep_days: int = Field(
        30, ge=1, description="Days of ingest time kept; older hours are dropped whole."
    )
    trigger: str = Field(
        "1 minute",
        description="How often the router writes what arrived since: a backfill reaches up to "
        "what the archive holds.",
    )

    @field_validator("trigger")
    @classmethod
    def _interval(cls, trigger: str) -> str:
        if not _TRIGGER.fullmatch(trigger):
            raise ValueError("an interval like '10 seconds' or '1 minute'")
        return trigger


class Sizing(_Strict):
    """Bounds of the router's size, which the fleet sets from the stream's traffic: the events
    per second it is sized for (its task slots and its micro-batches' size follow)."""

    min_events_per_second: int = Field(
        1_000, ge=1, description="The smallest size, however quiet the stream."
    )
    max_events_per_second: int = Field(
        64_000, ge=1, description="The largest size, however busy the stream."
    )

    @model_validator(mode="after")
    def _ordered(self) -> Sizing:
        if self.min_events_per_second > self.max_events_per_second:
            raise ValueError("min_events_per_second is above max_events_per_second")
        return self


class StreamSpec(_Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: StreamName
    owner: Principal
    partitions: int = Field(6, ge=1, le=1024)
    producers: list[Principal] = Field(default_factory=list)
    avro_schema: dict[str, Any] | None = Field(
        None, alias="schema", description="Optional Avro record schema the proxy enforces."
    )
    outputs: list[OutputSpec] = Field(default_factory=list)
    objectives: Objectives = Field(default_factory=Objectives)
    recovery: Recovery = Field(default_factory=Recovery)
    archive: Archive = Field(default_factory=Archive)
    sizing: Sizing = Field(default_factory=Sizing)

    @field_validator("avro_schema")
    @classmethod
    def _valid_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is not None:
            parse_schema(schema)
        return schema

    @field_validator("outputs")
    @classmethod
    def _unique_outputs(cls, outputs: list[OutputSpec]) -> list[OutputSpec]:
        names = [o.name for o in outputs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"output names must be unique: {', '.join(duplicates)}")
        return outputs

    @model_validator(mode="after")
    def _archive_table_free(self) -> StreamSpec:
        taken = self.output(ARCHIVE)
        table = archive_table(self.name)
        if (
            self.archive.enabled
            and taken is not None
            and taken.sink.table(self.name, ARCHIVE) == table
        ):
            raise ValueError(
                f"a Hive output named {ARCHIVE!r} would write the stream's archive table "
                f"({HIVE_DATABASE}.{table}): name it otherwise, or "
                "turn the archive off (archive.enabled: false)"
            )
        return self

    def output(self, name: str) -> OutputSpec | None:
        return next((o for o in self.outputs if o.name == name), None)

    def kafka_topics(self) -> dict[str, str]:
        """Each Kafka output's topic, by output name."""
        topics = {o.name: o.sink.owned_topic(self.name, o.name) for o in self.outputs}
        return {name: topic for name, topic in topics.items() if topic is not None}

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=False)


def load_spec(data: dict[str, Any] | str | bytes) -> StreamSpec:
    """Validates a spec from a mapping or from YAML/JSON text; errors say which field and why."""
    if isinstance(data, str | bytes):
        try:
            data = yaml.safe_load(data)
        except yaml.YAMLError as e:
            raise InvalidSpec(f"not YAML or JSON: {e}") from e
    if not isinstance(data, dict):
        raise InvalidSpec("a stream spec is a mapping with name, owner, outputs...")
    try:
        return StreamSpec.model_validate(data)
    except ValidationError as e:
        raise InvalidSpec("the stream spec is not valid", problems=field_errors(e)) from e


def field_errors(error: ValidationError) -> list[dict[str, str]]:
    """Pydantic's errors as [{field: 'outputs.0.sink.topic', message: ...}]."""
    return [
        {
            "field": ".".join(str(p) for p in e["loc"]) or "(spec)",
            "message": e["msg"].removeprefix("Value error, "),
        }
        for e in error.errors()
    ]


def sink_problems(spec: StreamSpec) -> list[dict[str, str]]:
    """Each output's sink checked by its own config (`Sink.problems`): [{field, message}]."""
    return [
        {"field": f"outputs.{index}.sink", "message": message}
        for index, output in enumerate(spec.outputs)
        for message in output.sink.problems(spec.name)
    ]
