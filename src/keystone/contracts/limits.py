"""Every limit of the shared service, in one place: what one tenant may ask of it.

Keystone serves many teams from one proxy, one control service and one router per stream; a
limit is what keeps one team's mistake or malice from stalling, crashing or starving another's.
Each is a setting (`KEYSTONE_<NAME>`, as `Settings` inherits this model), with a default fit
for one machine, and each refusal is a 4xx naming the limit (`LimitExceeded`).

Limits are checked where a request enters (the proxy, control's API). What is already stored
is read back without them, so lowering a limit never makes a stored spec unreadable: the
readers rely only on structural bounds (`HARD_MAX_EXPRESSION_DEPTH`), which no setting can
raise.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from keystone.contracts.errors import LimitExceeded

# Python recurses once per level of a filter's tree (parser, evaluator, Spark compiler) and
# Spark's optimizer recurses over the compiled expression: kept far below either's stack.
HARD_MAX_EXPRESSION_DEPTH = 200
# An objective becomes a number in a Prometheus rule: promtool refuses one beyond a double's
# exact integers.
MAX_OBJECTIVE_LAG_RECORDS = 2**53


class Limits(BaseModel):
    # The proxy.
    max_event_bytes: int = Field(
        1024 * 1024, ge=1, description="One event's bytes (the proxy answers 413)."
    )
    max_request_bytes: int = Field(
        10 * 1024 * 1024, ge=1, description="One post of events, in bytes (413)."
    )
    max_events_per_request: int = Field(
        10_000, ge=1, description="Events in one post (413): each is one Kafka record."
    )

    # Control.
    max_control_body_bytes: int = Field(
        1024 * 1024,
        ge=1024,
        description="Any request body to control, checked before it is read or parsed (413).",
    )
    max_streams_per_owner: int = Field(50, ge=1, description="Live streams of one owner (422).")
    max_outputs_per_stream: int = Field(20, ge=1, description="Outputs of one stream (422).")
    max_apps_per_owner: int = Field(50, ge=1, description="Apps one owner registers (422).")
    max_receivers_per_owner: int = Field(
        10, ge=1, description="Alert receivers one owner registers (422)."
    )
    max_silence_hours: int = Field(
        168, ge=1, description="How long an owner's silence of a stream's alerts lasts at most."
    )
    max_silences_per_stream: int = Field(
        20, ge=1, description="An owner's silences of one stream not yet expired (422)."
    )
    max_producers_per_stream: int = Field(
        100,
        ge=1,
        description="Apps one stream lets post (422); each is a series of the proxy's metrics.",
    )
    max_partitions: int = Field(
        64,
        ge=1,
        le=1024,
        description="Partitions of one stream's fronting topic (422); a router runs about two "
        "busy tasks per partition of a realtime output.",
    )
    max_app_rate: int = Field(
        100_000,
        ge=1,
        description="The highest quota (events per second) an owner may give an app; only the "
        "admin may give none (rate 0).",
    )

    # Recovery.
    max_recovery_keep_hours: int = Field(
        7 * 24,
        ge=1,
        description="The longest a stream may keep its outputs' restore points (recovery.keep, "
        "422); the fronting topic's retention bounds a rewind anyway.",
    )
    max_replay_events_per_second: int = Field(
        100_000,
        ge=1,
        description="The fastest a rewind may replay (recovery.max_events_per_second, 422).",
    )

    max_archive_keep_days: int = Field(
        400,
        ge=1,
        description="The longest a stream may keep its raw events in its archive "
        "(archive.keep_days, 422).",
    )

    max_dead_letters_scanned: int = Field(
        1_000_000,
        ge=1,
        description="Dead letters control reads to list a stream's, or to plan a redrive (the "
        "rest are said to be left out; a redrive itself reads them all).",
    )

    # Shadows (`contracts.shadows`): each counts as one of its stream's outputs
    # (max_outputs_per_stream) while it runs.
    shadow_hours: int = Field(
        24, ge=1, description="How long a shadow runs unless its owner says (expires_in)."
    )
    max_shadow_hours: int = Field(
        7 * 24, ge=1, description="The longest an owner may ask a shadow to run (422)."
    )
    shadow_comparison_minutes: int = Field(
        1440, ge=1, description="A shadow's comparison's per-minute counts kept, the newest."
    )
    shadow_comparison_fields: int = Field(
        50,
        ge=1,
        description="Fields a shadow's comparison counts differences of by name; the rest are "
        "counted together as '(other)' (each is a series of the router's metrics too).",
    )
    shadow_comparison_samples: int = Field(
        20, ge=0, description="Differing records a shadow's comparison keeps, the newest."
    )

    # The routing language.
    max_filter_chars: int = Field(
        4096, ge=16, description="One filter's text, or one projected item's (422)."
    )
    max_projection_fields: int = Field(256, ge=1, description="Fields one projection lists.")
    max_expression_depth: int = Field(
        64,
        ge=4,
        le=HARD_MAX_EXPRESSION_DEPTH,
        description="Nesting of parentheses, 'not's, function calls and arithmetic operators "
        "in a filter or projected item (422).",
    )
    max_in_values: int = Field(1000, ge=1, description="Values in one 'in (...)' list (422).")
    max_function_arguments: int = Field(
        64, ge=3, description="Arguments to one function call (concat, coalesce) (422)."
    )
    max_like_wildcards: int = Field(
        16, ge=1, description="'%' and '_' in one 'like' pattern (422)."
    )

    # Avro schemas of streams.
    max_schema_bytes: int = Field(
        64 * 1024, ge=256, description="A stream's Avro schema, as JSON text (422)."
    )
    max_schema_depth: int = Field(
        16, ge=1, le=64, description="Nesting of records, arrays, maps and unions (422)."
    )
    max_schema_types: int = Field(
        5000,
        ge=1,
        description="Types in a stream's schema, each named type counted whole where it is used: "
        "the router's compiled check writes every use out (422).",
    )


def check_limit(limits: Limits, setting: str, value: int, what: str, field: str = "") -> None:
    """Refuses `value` (of `what`, say "values in this 'in' list") when it is over the limit
    `setting` (a field of Limits): 422 naming the setting, the limit and the field."""
    limit = getattr(limits, setting)
    if value > limit:
        raise LimitExceeded(
            f"{value} {what}; the limit is {limit} ({setting})",
            setting=setting,
            limit=limit,
            field=field,
        )


def check_replay_rate(limits: Limits, rate: int | None) -> None:
    """A rewind's, backfill's or redrive's rate asked for (None: the stream's), against
    `max_replay_events_per_second` (422)."""
    if rate is not None:
        check_limit(
            limits,
            "max_replay_events_per_second",
            rate,
            "events per second",
            "max_events_per_second",
        )
