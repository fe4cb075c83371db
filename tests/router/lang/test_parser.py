import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keystone.contracts.errors import ExpressionError
from keystone.contracts.limits import HARD_MAX_EXPRESSION_DEPTH, Limits
from keystone.router.lang.ast import (
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
    Or,
    Projection,
    Truth,
)
from keystone.router.lang.evaluate import matches
from keystone.router.lang.parser import parse_filter, parse_projection


def test_precedence_not_binds_tighter_than_and_than_or() -> None:
    assert parse_filter("not a = 1 or b = 2 and c") == Or(
        Not(Compare("=", Field(("a",)), Const(1))),
        And(Compare("=", Field(("b",)), Const(2)), Truth(Field(("c",)))),
    )


def test_sugar_is_spelled_out_in_the_tree() -> None:
    assert parse_filter("x not in ('a', 2)") == Not(In(Field(("x",)), (Const("a"), Const(2))))
    assert parse_filter("x is not null") == Not(IsNull(Field(("x",))))
    assert parse_filter("x <> 1") == Compare("!=", Field(("x",)), Const(1))
    assert parse_filter("x not like 'a%'") == Not(Like(Field(("x",)), "a%"))


def test_literals_and_metadata() -> None:
    assert parse_filter("app = 'it''s'") == Compare("=", Meta("app"), Const("it's"))
    assert parse_filter("user.guid = -1.5e3") == Compare(
        "=", Field(("user", "guid")), Const(-1500.0)
    )
    assert parse_filter("TRUE = Null") == Compare("=", Const(True), Const(None))


@pytest.mark.parametrize(
    ("text", "column", "expected"),
    [
        ("country = ", 11, "a value (a field, 'text', a number, true, false or null)"),
        ("country in 'US'", 12, "'(' after 'in'"),
        ("(a = 1", 7, "')'"),
        ("a = 1 b = 2", 7, "'and', 'or' or the end"),
        ("a = 'open", 5, "a closing quote"),
        ("a ~ 1", 3, "a name, a value or an operator"),
        ("a is nul", 6, "'null' after 'is'"),
        ("a not = 1", 7, "'in' or 'like' after 'not'"),
        ("a like 5", 8, "a string"),
        ("a like '\\x'", 8, "a valid pattern"),
        ("a. = 1", 4, "a field name after '.'"),
        ("a in (1, b)", 10, "a value (a field, 'text', a number, true, false or null)"),
    ],
)
def test_errors_point_at_the_column_and_say_what_was_expected(
    text: str, column: int, expected: str
) -> None:
    with pytest.raises(ExpressionError) as caught:
        parse_filter(text)
    assert caught.value.details == {"expression": text, "column": column, "expected": expected}
    assert caught.value.status == 422
    assert caught.value.message.splitlines()[-1] == "  " + " " * (column - 1) + "^"


def test_projections() -> None:
    assert parse_projection(["*"]).whole
    projection = parse_projection(["guid", "user.id as user_id", "title"])
    assert projection.columns == (
        Column(Meta("guid"), "guid"),
        Column(Field(("user", "id")), "user_id"),
        Column(Field(("title",)), "title"),
    )
    for items, message in (
        (["*", "* except a"], "'\\*' is given twice"),
        (["a.id", "b.id"], "two projected fields are named 'id'"),
        (["a as"], "a name after 'as'"),
        (["a b"], "an operator, 'as' or the end"),
        (["lower(a)"], "a computed field needs a name"),
        (["'v1'"], "a computed field needs a name"),
        (["* except guid"], "'guid' is the event's metadata"),
        (["* a"], "'except' or the end after"),
        (["* except a b"], "',' or the end"),
        (["1e400 as x"], "beyond a double's range"),
    ):
        with pytest.raises(ExpressionError, match=message):
            parse_projection(items)


def test_star_keeps_the_payload_less_its_except_paths_with_the_other_items() -> None:
    assert parse_projection(["* except user.email, user.phone, user.email", "guid"]) == (
        Projection(
            whole=True,
            columns=(Column(Meta("guid"), "guid"),),
            dropped=(("user", "email"), ("user", "phone")),
        )
    )
    assert parse_projection(["hash(user.email) as email", "*"]) == Projection(
        whole=True, columns=(Column(Call("hash", (Field(("user", "email")),)), "email"),)
    )


def test_functions_and_arithmetic() -> None:
    a, b, c = Field(("a",)), Field(("b",)), Field(("c",))
    # '*' and '/' before '+' and '-', each left to right.
    assert parse_filter("a + b * c - 2 / a > 0") == Compare(
        ">",
        Call("-", (Call("+", (a, Call("*", (b, c)))), Call("/", (Const(2), a)))),
        Const(0),
    )
    # A test's '(' may hold a value, which the test then goes on with.
    assert parse_filter("(a + b) * 2 >= c") == Compare(
        ">=", Call("*", (Call("+", (a, b)), Const(2))), c
    )
    assert parse_filter("not (a) in (1)") == Not(In(a, (Const(1),)))
    assert parse_filter("(a) and b") == And(Truth(a), Truth(b))
    # Names in any case; a negative number is a literal, a '-' after a value an operator.
    assert parse_filter("LOWER(Trim(a)) = 'x'") == Compare(
        "=", Call("lower", (Call("trim", (a,)),)), Const("x")
    )
    assert parse_filter("a-1 = -1") == Compare("=", Call("-", (a, Const(1))), Const(-1))
    assert parse_projection(["mask(card, 4) as card", "to_timestamp(t, 'epoch_s') as at"]) == (
        Projection(
            whole=False,
            columns=(
                Column(Call("mask", (Field(("card",)), Const(4))), "card"),
                Column(Call("to_timestamp", (Field(("t",)), Const("epoch_s"))), "at"),
            ),
        )
    )
    # A field may have a function's name: a call is a name followed by '('.
    assert parse_filter("hash = lower") == Compare("=", Field(("hash",)), Field(("lower",)))


@pytest.mark.parametrize(
    ("text", "message", "column", "expected"),
    [
        ("hsh(a)", "unknown function 'hsh': the functions are coalesce, concat", 1, "one of "),
        ("hash(a, b)", "hash takes 1 argument, not 2: hash(value)", 1, "hash(value)"),
        ("coalesce(a)", "takes at least 2 arguments, not 1", 1, "coalesce(value, value, ...)"),
        ("lower() = 'a'", "lower takes 1 argument, not 0", 1, "lower(string)"),
        ("mask(a, b) = 'x'", "how many characters it keeps", 9, "an integer, 0 or more"),
        ("mask(a, 1.5) = 'x'", "how many characters it keeps", 9, "an integer, 0 or more"),
        ("mask(a, -1) = 'x'", "keeps 0 to 2,147,483,647 characters", 9, "0 to 2147483647"),
        ("mask(a, 2147483648) = 'x'", "keeps 0 to 2,147,483,647", 9, "0 to 2147483647"),
        ("to_timestamp(a, 'unix') > 0", "'unix' is not a time format", 17, "one of 'iso8601'"),
        ("a - = 1", "expected a value", 5, "a value (a field, 'text', a number, true"),
        ("- a = 1", "expected a number after '-'", 3, "a number after '-'"),
        ("lower(a = 1", "expected ',' or ')'", 9, "',' or ')'"),
        ("a + 1e400 > 1", "beyond a double's range", 5, "a number within a double's range"),
    ],
)
def test_function_errors_say_what_is_known(
    text: str, message: str, column: int, expected: str
) -> None:
    with pytest.raises(ExpressionError, match=re.escape(message)) as caught:
        parse_filter(text)
    assert caught.value.details["column"] == column
    assert caught.value.details["expected"].startswith(expected)


def test_function_arguments_and_arithmetic_chains_are_bounded() -> None:
    many = "concat(" + ", ".join(["a"] * 65) + ") = 'x'"
    parse_filter(many)  # stored specs are read without limits
    with pytest.raises(ExpressionError) as caught:
        parse_filter(many, limits=Limits())
    assert caught.value.details["setting"] == "max_function_arguments"
    # Each operator of a chain is a level (a double's arithmetic cannot be rebalanced).
    with pytest.raises(ExpressionError, match="the limit is 200"):
        parse_filter(" + ".join(["a"] * 5000) + " > 1")
    with pytest.raises(ExpressionError) as caught:
        parse_filter(" * ".join(["a"] * 70) + " > 1", limits=Limits())
    assert caught.value.details["setting"] == "max_expression_depth"
    with pytest.raises(ExpressionError, match="the limit is 200"):
        parse_projection(["lower(" * 300 + "a" + ")" * 300 + " as x"])


# Robustness: any text is a tree or an ExpressionError, and what a new spec asks is bounded.

# Pieces of filters, so that generated text gets deep into the grammar (and past its bounds);
# every one a whole token or more.
TOKENS = st.sampled_from(
    [
        "(", ")", "not ", " and ", " or ", "a", "b.c", "guid", " = ", " <> ", " < ", " in ",
        " like ", " is ", "null", "true", "'x'", "'%_\\%'", "''", ", ", "1", "-1.5e3",
        "9" * 4400, "1e400", "*", " as ", ".", "hash(", "mask(", "coalesce(", "lower(",
        "to_timestamp(", "'iso8601'", "nope(", " + ", " - ", "-", " / ", " except ",
    ]
)  # fmt: skip
TEXTS = st.text() | st.lists(TOKENS | st.sampled_from(["'", "~"]), max_size=40).map("".join)
# Units that each open one or more levels and leave the parser inside them, repeated past
# any limit: nested parentheses, 'not's, and both within real conditions.
# Conditions nest in conditions, values in values: each list's units go together.
NESTING_UNITS = st.just(
    st.sampled_from(["(", "not ", "not(", "(a or ", "not (b = 1 and ", "(c like 'x' or "])
) | st.just(
    st.sampled_from(["lower(", "concat(a, ", "a + ", "(1 * ", "coalesce(null, ", "b / -2 - "])
)
PROPERTIES = settings(max_examples=300, deadline=None, database=None)


def depth(expr: Expr) -> int:
    """The tree's depth, without recursing (a tree too deep is what this is to catch)."""
    deepest, stack = 0, [(expr, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        if isinstance(node, Not):
            stack.append((node.expr, level + 1))
        elif isinstance(node, And | Or):
            stack += [(node.left, level + 1), (node.right, level + 1)]
    return deepest


@PROPERTIES
@given(text=TEXTS, limited=st.booleans())
def test_any_text_is_a_tree_or_an_expression_error(text: str, limited: bool) -> None:
    limits = Limits() if limited else None
    for parse in (lambda: parse_filter(text, limits=limits), lambda: parse_projection([text])):
        try:
            parse()
        except ExpressionError as e:
            assert e.message and e.details["column"] >= 1


@settings(max_examples=60, deadline=None, database=None)
@given(
    units=NESTING_UNITS.flatmap(lambda unit: st.lists(unit, min_size=1, max_size=4)),
    times=st.integers(HARD_MAX_EXPRESSION_DEPTH + 1, 3000),
    tail=st.lists(TOKENS, max_size=40).map("".join),
    limited=st.booleans(),
)
def test_deeply_nested_text_is_refused_at_the_depth_limit(
    units: list[str], times: int, tail: str, limited: bool
) -> None:
    text = "".join(units) * times + tail
    with pytest.raises(ExpressionError) as caught:
        parse_filter(text, limits=Limits(max_filter_chars=10**6) if limited else None)
    details = caught.value.details
    if limited:
        assert (details["setting"], details["limit"]) == ("max_expression_depth", 64)
    else:
        assert "setting" not in details and details["limit"] == HARD_MAX_EXPRESSION_DEPTH


@pytest.mark.parametrize(
    ("text", "column"),
    [
        ("not " * 1500 + "a", 1 + 4 * HARD_MAX_EXPRESSION_DEPTH),
        ("(" * 400 + "a" + ")" * 400, 1 + HARD_MAX_EXPRESSION_DEPTH),
        ("not (" * 150 + "a" + ")" * 150, 1 + 5 * (HARD_MAX_EXPRESSION_DEPTH // 2)),
    ],
)
def test_nesting_is_bounded_without_limits_at_the_token_over(text: str, column: int) -> None:
    with pytest.raises(ExpressionError, match="the limit is 200") as caught:
        parse_filter(text)
    assert caught.value.details["column"] == column
    assert caught.value.details["limit"] == HARD_MAX_EXPRESSION_DEPTH


def test_nesting_up_to_the_limit_parses() -> None:
    deepest = HARD_MAX_EXPRESSION_DEPTH
    assert parse_filter("(" * deepest + "a" + ")" * deepest) == Truth(Field(("a",)))
    assert depth(parse_filter("not " * deepest + "a")) == deepest + 1
    limits = Limits()
    # Siblings do not add up: each of these is 64 deep.
    twice = " and ".join(["(" * 64 + "a" + ")" * 64] * 2)
    assert parse_filter(twice, limits=limits) == And(Truth(Field(("a",))), Truth(Field(("a",))))
    with pytest.raises(ExpressionError) as caught:
        parse_filter("not (" * 32 + "not a" + ")" * 32, limits=limits)
    assert caught.value.details["column"] == 32 * 5 + 1  # the 65th level: that last 'not'
    assert caught.value.details["setting"] == "max_expression_depth"


@pytest.mark.parametrize(
    ("limits", "text", "setting", "limit", "column"),
    [
        (Limits(max_filter_chars=16), "a = 'abcdefghijklm'", "max_filter_chars", 16, 17),
        (Limits(max_in_values=3), "x in (1, 2, 3, 4)", "max_in_values", 3, 16),
        (Limits(max_like_wildcards=2), "x like 'a%b_c%'", "max_like_wildcards", 2, 8),
    ],
)
def test_a_filter_over_a_limit_names_the_setting(
    limits: Limits, text: str, setting: str, limit: int, column: int
) -> None:
    parse_filter(text)  # stored specs are read without limits
    with pytest.raises(ExpressionError, match=rf"the limit is {limit} \({setting}\)") as caught:
        parse_filter(text, limits=limits)
    assert caught.value.details["setting"] == setting
    assert caught.value.details["limit"] == limit
    assert caught.value.details["column"] == column


def test_escaped_wildcards_do_not_count() -> None:
    text = "x like '\\%\\_\\\\%_'"  # two wildcards: the last two characters
    assert parse_filter(text, limits=Limits(max_like_wildcards=2)) == Like(
        Field(("x",)), "\\%\\_\\\\%_"
    )


def test_a_projection_over_its_limit_names_the_setting() -> None:
    items = ["a", "b", "c"]
    assert len(parse_projection(items).columns) == 3
    with pytest.raises(ExpressionError, match=r"the limit is 2 \(max_projection_fields\)") as e:
        parse_projection(items, limits=Limits(max_projection_fields=2))
    assert e.value.details["setting"] == "max_projection_fields"
    assert e.value.details["limit"] == 2
    assert e.value.details["column"] == 7  # at "c"


def test_a_long_in_list_is_one_node_and_bounded_with_limits() -> None:
    values = ", ".join(str(i) for i in range(5000))
    expr = parse_filter(f"x in ({values})")
    assert expr == In(Field(("x",)), tuple(Const(i) for i in range(5000)))
    assert matches(expr, {"x": 4999.0}, {}) is True
    with pytest.raises(ExpressionError) as caught:
        parse_filter(f"x in ({values})", limits=Limits(max_filter_chars=10**6))
    assert caught.value.details["setting"] == "max_in_values"
    assert caught.value.details["limit"] == 1000
    assert caught.value.details["column"] == f"x in ({values})".index(" 1000,") + 2


def test_a_long_chain_of_and_or_or_is_a_shallow_tree() -> None:
    chain = " or ".join(f"a = {i}" for i in range(5000))
    expr = parse_filter(chain)
    assert depth(expr) == 14  # 5000 leaves, balanced: ceil(log2(5000)) + 1
    assert matches(expr, {"a": 4999}, {}) is True
    assert matches(parse_filter(" and ".join(["a"] * 5000)), {"a": True}, {}) is True


def test_an_integer_python_cannot_read_is_an_expression_error() -> None:
    with pytest.raises(ExpressionError, match="too many digits") as caught:
        parse_filter("a = " + "1" * 5000)
    assert caught.value.details["column"] == 5
