"""The two backends agree: for generated events and generated expressions, Spark's compiled
filter keeps exactly the events the Python evaluator keeps, and projections produce the same
records. Expressions are generated as trees and rendered to text, so the same examples also
prove the parser reads back what was meant."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from keystone.router.lang.ast import (
    METADATA,
    And,
    Column,
    Compare,
    Const,
    Expr,
    Field,
    In,
    IsNull,
    Like,
    Meta,
    Not,
    Operand,
    Or,
    Projection,
    Truth,
)
from keystone.router.lang.evaluate import matches, project
from keystone.router.lang.parser import parse_filter
from keystone.router.lang.spark import compile_filter, compile_projection
from tests.support.frames import frame

# Few names, so that paths often exist (and often do not); "A" is not "a".
NAMES = ["a", "b", "A"]
# An astral character among them: one code point, two UTF-16 units.
TEXT = st.text(alphabet="ab%_\\\né 'x😀", max_size=4)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.integers(-3, 3)
    | st.floats(allow_nan=False, allow_infinity=False, width=64)
    | st.sampled_from([0.5, 1.5, 2.0])
    | TEXT
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(NAMES), inner, max_size=3)
    ),
    max_leaves=6,
)
EVENTS = st.dictionaries(st.sampled_from(NAMES), VALUES, max_size=3)
METADATA_VALUES = st.fixed_dictionaries(
    {},
    optional={
        "guid": st.sampled_from(["g1", "g2"]),
        "timestamp": st.integers(0, 3),
        "host": TEXT,
        "app": st.sampled_from(["a", "player"]),
    },
)
# Up to three names: a value not an object is then met both at the top and inside an object.
PATHS = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map(lambda p: Field(tuple(p)))
OPERANDS: st.SearchStrategy[Operand] = (
    PATHS | st.sampled_from(sorted(METADATA)).map(Meta) | SCALARS.map(Const)
)
PATTERNS = st.lists(
    st.sampled_from(["a", "b", "%", "_", "\\%", "\\_", "\\\\", "é", "😀", "\n"]), max_size=6
).map("".join)
TESTS = (
    st.builds(Compare, st.sampled_from(["=", "!=", "<", "<=", ">", ">="]), OPERANDS, OPERANDS)
    | st.builds(In, OPERANDS, st.lists(SCALARS.map(Const), min_size=1, max_size=4).map(tuple))
    | st.builds(IsNull, OPERANDS)
    | st.builds(Like, OPERANDS, PATTERNS)
    | st.builds(Truth, OPERANDS)
)
EXPRS: st.SearchStrategy[Expr] = st.recursive(
    TESTS,
    lambda inner: (
        st.builds(Not, inner) | st.builds(And, inner, inner) | st.builds(Or, inner, inner)
    ),
    max_leaves=5,
)


def render(node: Expr | Operand) -> str:
    """Text for a tree, fully parenthesised, so parsing must give the very same tree."""
    match node:
        case Const(value=None):
            return "null"
        case Const(value=bool() as value):
            return "true" if value else "false"
        case Const(value=str() as value):
            return "'" + value.replace("'", "''") + "'"
        case Const(value=value):
            return repr(value)
        case Field(path=path):
            return ".".join(path)
        case Meta(name=name):
            return name
        case Compare(op=op, left=left, right=right):
            return f"{render(left)} {op} {render(right)}"
        case In(operand=operand, values=values):
            return f"{render(operand)} in ({', '.join(render(v) for v in values)})"
        case IsNull(operand=operand):
            return f"{render(operand)} is null"
        case Like(operand=operand, pattern=pattern):
            return f"{render(operand)} like {render(Const(pattern))}"
        case Truth(operand=operand):
            return render(operand)
        case Not(expr=expr):
            return f"not ({render(expr)})"
        case And(left=left, right=right):
            return f"({render(left)}) and ({render(right)})"
        case Or(left=left, right=right):
            return f"({render(left)}) or ({render(right)})"
    raise TypeError(node)


def metadata_columns() -> dict:
    return {name: F.col(name) for name in METADATA}  # needs the session: built in each test


EXAMPLES = settings(
    max_examples=80, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)


@EXAMPLES
@given(
    rows=st.lists(st.tuples(EVENTS, METADATA_VALUES), min_size=1, max_size=8),
    exprs=st.lists(EXPRS, min_size=1, max_size=8),
)
def test_spark_keeps_exactly_what_python_keeps(spark: SparkSession, rows, exprs) -> None:
    parsed = [parse_filter(render(e)) for e in exprs]
    assert parsed == exprs  # the parser reads back exactly the generated tree
    columns = [
        compile_filter(e, F.col("payload"), metadata_columns()).alias(f"f{i}")
        for i, e in enumerate(parsed)
    ]
    results = frame(spark, rows, *parsed).select(*columns).collect()
    for (event, metadata), result in zip(rows, results, strict=True):
        for i, expr in enumerate(parsed):
            assert result[f"f{i}"] == matches(expr, event, metadata), (
                render(expr),
                event,
                metadata,
            )


PROJECTIONS = st.one_of(
    st.just(Projection(whole=True)),
    st.lists(PATHS | st.sampled_from(sorted(METADATA)).map(Meta), min_size=1, max_size=4).map(
        lambda sources: Projection(
            whole=False, columns=tuple(Column(source, f"c{i}") for i, source in enumerate(sources))
        )
    ),
)


@EXAMPLES
@given(
    rows=st.lists(st.tuples(EVENTS, METADATA_VALUES), min_size=1, max_size=8),
    projection=PROJECTIONS,
)
def test_spark_projects_what_python_projects(spark: SparkSession, rows, projection) -> None:
    column = compile_projection(projection, F.col("payload"), F.col("value"), metadata_columns())
    results = frame(spark, rows, projection).select(column.alias("out")).collect()
    for (event, metadata), result in zip(rows, results, strict=True):
        assert json.loads(result["out"]) == project(projection, event, metadata)
