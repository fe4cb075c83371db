"""The two backends agree: for generated events and generated expressions, Spark's compiled
filter keeps exactly the events the Python evaluator keeps, and projections produce the same
records. Expressions are generated as trees and rendered to text, so the same examples also
prove the parser reads back what was meant."""

from __future__ import annotations

import json
from functools import reduce

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from keystone.router.lang.ast import (
    ARITHMETIC,
    METADATA,
    TIME_FORMATS,
    And,
    Call,
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
from keystone.router.lang.parser import parse_filter, parse_projection
from keystone.router.lang.spark import compile_filter, compile_projection
from tests.support.frames import KEY, frame, scope

# Few names, so that paths often exist (and often do not); "A" is not "a".
NAMES = ["a", "b", "A"]
# An astral character among them: one code point, two UTF-16 units.
TEXT = st.text(alphabet="ab%_\\\né 'x😀ΣİßA", max_size=4)
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
LEAVES: st.SearchStrategy[Operand] = (
    PATHS | st.sampled_from(sorted(METADATA)).map(Meta) | SCALARS.map(Const)
)
# Times in ISO-8601 among the strings, valid and not, for to_timestamp.
TIMES = st.sampled_from(
    ["2026-11-26T10:00:00Z", "2024-02-29T23:59:59.999999+05:30", "2026-02-30T00:00:00Z", "x"]
).map(Const)


def calls(inner: st.SearchStrategy[Operand]) -> st.SearchStrategy[Operand]:
    """Every function and operator over `inner` values, options as literals."""
    one = st.sampled_from(
        [
            *("hash", "redact", "lower", "upper", "trim", "to_number", "to_string", "to_bool"),
            *("length", "date_of"),
        ]
    )
    return (
        st.builds(lambda name, arg: Call(name, (arg,)), one, inner)
        | st.builds(lambda arg, keep: Call("mask", (arg, Const(keep))), inner, st.integers(0, 5))
        | st.builds(
            lambda arg, form: Call("to_timestamp", (arg, Const(form))),
            inner | TIMES,
            st.sampled_from(TIME_FORMATS),
        )
        | st.builds(
            lambda name, args: Call(name, tuple(args)),
            st.sampled_from(["coalesce", "concat"]),
            st.lists(inner, min_size=2, max_size=3),
        )
        | st.builds(lambda a, b, c: Call("substring", (a, b, c)), inner, inner, inner)
        | st.builds(lambda op, a, b: Call(op, (a, b)), st.sampled_from(ARITHMETIC), inner, inner)
    )


OPERANDS: st.SearchStrategy[Operand] = st.recursive(LEAVES, calls, max_leaves=4)
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
        case Call(name=name, args=(left, right)) if name in ARITHMETIC:
            return f"({render(left)} {name} {render(right)})"
        case Call(name=name, args=args):
            return f"{name}({', '.join(render(a) for a in args)})"
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


# Each example is a batch of cases that Spark evaluates in one job (a union of the cases'
# frames): a job per case cost about a second each, 170 s for the two properties; in batches,
# the same 80 cases each. A failing batch shrinks each of its cases, the failing one to its
# smallest, as a case would.
BATCH = 8
EXAMPLES = settings(
    max_examples=80 // BATCH,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
ROWS = st.lists(st.tuples(EVENTS, METADATA_VALUES), min_size=1, max_size=8)


def batch(case: st.SearchStrategy) -> st.SearchStrategy[list]:
    """Exactly `BATCH` cases: 80 in all, as when each was an example of its own."""
    return st.lists(case, min_size=BATCH, max_size=BATCH)


def collect_cases(frames: list[DataFrame]) -> list[list[Row]]:
    """Each case's rows, in their order, from one Spark job over all of them."""
    union = reduce(
        DataFrame.unionAll, (f.withColumn("case", F.lit(i)) for i, f in enumerate(frames))
    )
    rows = union.collect()
    return [[r for r in rows if r["case"] == i] for i in range(len(frames))]


@EXAMPLES
@given(cases=batch(st.tuples(ROWS, st.lists(EXPRS, min_size=1, max_size=8))))
def test_spark_keeps_exactly_what_python_keeps(spark: SparkSession, cases) -> None:
    frames = []
    for rows, exprs in cases:
        parsed = [parse_filter(render(e)) for e in exprs]
        assert parsed == exprs  # the parser reads back exactly the generated tree
        kept = F.array(*(compile_filter(e, scope()) for e in parsed)).alias("kept")
        frames.append(frame(spark, rows, *parsed).select(kept))
    for (rows, exprs), results in zip(cases, collect_cases(frames), strict=True):
        for (event, metadata), result in zip(rows, results, strict=True):
            for expr, kept in zip(exprs, result["kept"], strict=True):
                assert kept == matches(expr, event, metadata, KEY), (
                    render(expr),
                    event,
                    metadata,
                )


# Named as the event's fields may be ("a"), so that a chosen name replaces one of '*'.
COLUMN_NAMES = st.sampled_from(["c0", "c1", "a", "b"])
PROJECTIONS = st.builds(
    lambda whole, sources, names, dropped: Projection(
        whole=whole or not sources,
        columns=tuple(Column(s, n) for s, n in zip(sources, names, strict=False)),
        dropped=tuple(d.path for d in dropped) if whole else (),
    ),
    st.booleans(),
    st.lists(OPERANDS, max_size=4),
    st.lists(COLUMN_NAMES, min_size=4, max_size=4, unique=True),
    st.lists(PATHS, max_size=3, unique=True),
)


def items(projection: Projection) -> list[str]:
    """Text for a projection: parsing it must give the very same projection."""
    star = ["* except " + ", ".join(".".join(p) for p in projection.dropped)]
    star = (star if projection.dropped else ["*"]) if projection.whole else []
    return star + [f"{render(c.source)} as {c.name}" for c in projection.columns]


@EXAMPLES
@given(cases=batch(st.tuples(ROWS, PROJECTIONS)))
def test_spark_projects_what_python_projects(spark: SparkSession, cases) -> None:
    frames = []
    for rows, projection in cases:
        assert parse_projection(items(projection)) == projection  # read back as generated
        column = compile_projection(projection, F.col("value"), scope())
        frames.append(frame(spark, rows, projection).select(column.alias("out")))
    for (rows, projection), results in zip(cases, collect_cases(frames), strict=True):
        for (event, metadata), result in zip(rows, results, strict=True):
            expected = project(projection, event, metadata, KEY)
            assert json.loads(result["out"]) == expected, (items(projection), event, metadata)
