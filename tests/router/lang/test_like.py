"""`like` without backtracking: the matcher agrees with a regular expression's reading of the
pattern, and its cost is bounded by the text's length times the pattern's, by construction
(counted in character comparisons, never timed), in Python and in the JVM alike."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from keystone.router.lang import like
from keystone.router.lang.parser import parse_filter
from keystone.router.lang.spark import Scope, compile_filter

# Astral characters (one code point, two UTF-16 units) among them: `_` matches one.
PIECES = ["a", "b", "%", "_", "\\%", "\\_", "\\\\", "é", "😀", "\n"]
PATTERNS = st.lists(st.sampled_from(PIECES), max_size=6).map("".join)
TEXTS = st.text(alphabet="ab%_\\é😀\n", max_size=8)


def reference(pattern: str) -> re.Pattern[str]:
    """The pattern as a regular expression: right, and backtracking on the wrong input."""
    parts, chars = [], iter(pattern)
    for ch in chars:
        if ch == "\\":
            parts.append(re.escape(next(chars)))
        else:
            parts.append({"%": ".*", "_": "."}.get(ch) or re.escape(ch))
    return re.compile("".join(parts), re.DOTALL)


@settings(max_examples=2000, deadline=None, database=None)
@given(pattern=PATTERNS, text=TEXTS)
def test_the_matcher_agrees_with_a_regular_expression(pattern: str, text: str) -> None:
    assert like.matches(pattern, text) is (reference(pattern).fullmatch(text) is not None)


@settings(max_examples=300, deadline=None, database=None)
@given(pattern=PATTERNS, fill=TEXTS)
def test_a_pattern_matches_itself_filled_in(pattern: str, fill: str) -> None:
    # Each `%` filled with generated text, each `_` with an astral character: matches that
    # random pairs of pattern and text rarely hit.
    text, chars = [], iter(pattern)
    for ch in chars:
        text.append(next(chars) if ch == "\\" else {"%": fill, "_": "😀"}.get(ch, ch))
    assert like.matches(pattern, "".join(text))
    assert reference(pattern).fullmatch("".join(text))


# Patterns and texts (a run of `fill`, then `end`) that make a matcher work: the regular
# expression's exponential case, middle segments that fail at every place, long segments.
ADVERSARIAL = [
    ("%a%a%a%a%b", "a", ""),
    ("%a%a%a%a%b", "a", "b"),
    ("%a%a%a%a%c%b", "a", "b"),
    ("%" + "a" * 20 + "b%c", "a", "c"),
    ("%a_a_a_b%", "a", ""),
    ("%" + "_" * 20 + "b", "a", "b"),
    ("a%" * 10 + "b", "a", ""),
    ("%😀_%😀b", "😀", "b"),
]
SIZES = (10, 100, 1000, 10_000)


@pytest.mark.parametrize(("pattern", "fill", "end"), ADVERSARIAL)
def test_python_compares_at_most_text_times_pattern_characters(
    pattern: str, fill: str, end: str
) -> None:
    small = fill * 10 + end
    assert like.matches(pattern, small) is (reference(pattern).fullmatch(small) is not None)
    for n in SIZES:
        steps = like.comparisons(pattern, fill * n + end)
        assert steps <= 3 * (n + 2) * len(pattern), (n, steps)


@pytest.mark.parametrize(("pattern", "fill", "end"), ADVERSARIAL)
def test_the_jvm_compares_at_most_text_times_pattern_characters(
    spark: SparkSession, pattern: str, fill: str, end: str
) -> None:
    matcher = spark.sparkContext._jvm.LikeMatcher
    for n in SIZES:
        steps = matcher.comparisons(pattern, fill * n + end)
        assert steps == like.comparisons(pattern, fill * n + end)  # the very same algorithm
        assert steps <= 3 * (n + 2) * len(pattern), (n, steps)


def test_the_router_does_not_use_sparks_backtracking_like(spark: SparkSession) -> None:
    condition = compile_filter(
        parse_filter("host like '%a%b'"), Scope(F.col("payload"), {"host": F.lit("x")})
    )
    plan = str(condition)
    assert "likematcher" in plan.lower() and " LIKE " not in plan.upper(), plan


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        ("_", "😀", True),  # one code point, though two UTF-16 units
        ("__", "😀", False),
        ("a_b", "a😀b", True),
        ("%😀", "x😀", True),
        ("%_😀_%", "😀😀😀", True),
    ],
)
def test_underscore_is_one_code_point_in_both_backends(
    spark: SparkSession, pattern: str, text: str, expected: bool
) -> None:
    assert like.matches(pattern, text) is expected
    condition = compile_filter(
        parse_filter(f"host like '{pattern}'"), Scope(F.col("payload"), {"host": F.lit(text)})
    )
    [row] = spark.range(1).select(condition.alias("keep")).collect()
    assert row["keep"] is expected
