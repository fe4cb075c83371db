"""Checks of a stream spec beyond its model, without I/O: that every output's filter and
projection parse, and that each sink accepts its config. (Control runs these before it stores
or deploys anything.)"""

from __future__ import annotations

from contracts.errors import ExpressionError, InvalidSpec
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
