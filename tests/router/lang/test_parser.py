import pytest

from contracts.errors import ExpressionError
from router.lang.ast import And, Column, Compare, Const, Field, IsNull, Like, Meta, Not, Or, Truth
from router.lang.parser import parse_filter, parse_projection


def test_precedence_not_binds_tighter_than_and_than_or() -> None:
    assert parse_filter("not a = 1 or b = 2 and c") == Or(
        Not(Compare("=", Field(("a",)), Const(1))),
        And(Compare("=", Field(("b",)), Const(2)), Truth(Field(("c",)))),
    )


def test_sugar_is_spelled_out_in_the_tree() -> None:
    assert parse_filter("x not in ('a', 2)") == Not(
        Or(Compare("=", Field(("x",)), Const("a")), Compare("=", Field(("x",)), Const(2)))
    )
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
        (["*", "guid"], "cannot be combined"),
        (["a.id", "b.id"], "two projected fields are named 'id'"),
        (["a as"], "a name after 'as'"),
        (["a b"], "'as' or the end"),
    ):
        with pytest.raises(ExpressionError, match=message):
            parse_projection(items)
