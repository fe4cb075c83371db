"""Text to AST. Errors say where (column) and what was expected:

filter:     or ;  or: and ("or" and)* ;  and: not ("and" not)* ;  not: "not" not | test
test:       "(" or ")" | operand [ cmp operand | "is" ["not"] "null"
            | ["not"] "in" "(" literal ("," literal)* ")" | ["not"] "like" string ]
operand:    path | literal ;  path: name ("." name)* ;  literal: string | number | true
            | false | null ;  strings in single quotes, '' for a quote
projection: "*" | path ["as" name]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from contracts.errors import ExpressionError
from router.lang.ast import (
    METADATA,
    And,
    Column,
    Compare,
    Const,
    Expr,
    Field,
    IsNull,
    Like,
    Meta,
    Not,
    Operand,
    Or,
    Projection,
    Truth,
)

KEYWORDS = {"and", "or", "not", "in", "is", "null", "like", "true", "false", "as"}
_TOKEN = re.compile(
    r"""(?P<space>\s+)
      | (?P<number>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)
      | (?P<string>'(?:[^']|'')*')
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<op><=|>=|!=|<>|=|<|>)
      | (?P<punct>[(),.*])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    kind: str  # number, string, name, keyword, op, punct, end
    text: str
    column: int  # 1-based, for messages

    def describe(self) -> str:
        return "the end" if self.kind == "end" else repr(self.text)


def _tokens(text: str) -> list[Token]:
    tokens, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            if text[pos] == "'":
                raise ExpressionError("a string is not closed", text, pos + 1, "a closing quote")
            raise ExpressionError(
                f"unexpected character {text[pos]!r}",
                text,
                pos + 1,
                "a name, a value or an operator",
            )
        kind = match.lastgroup
        if kind != "space":
            word = match.group()
            if kind == "name" and word.lower() in KEYWORDS:
                kind, word = "keyword", word.lower()
            tokens.append(Token(kind, word, pos + 1))
        pos = match.end()
    tokens.append(Token("end", "", len(text) + 1))
    return tokens


# Every '\\' in a like pattern escapes the next character, which must be %, _ or \\ (as in Spark).
_PATTERN = re.compile(r"(?:[^\\]|\\[%_\\])*", re.DOTALL)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.at = 0

    @property
    def token(self) -> Token:
        return self.tokens[self.at]

    def accept(self, kind: str, text: str | None = None) -> Token | None:
        token = self.token
        if token.kind == kind and (text is None or token.text == text):
            self.at += 1
            return token
        return None

    def expect(self, kind: str, text: str | None, what: str) -> Token:
        token = self.accept(kind, text)
        if token is None:
            self.fail(what)
        return token

    def fail(self, expected: str) -> None:
        raise ExpressionError(
            f"expected {expected}, found {self.token.describe()}",
            self.text,
            self.token.column,
            expected,
        )

    # filter

    def filter(self) -> Expr:
        expr = self.disjunction()
        if self.token.kind != "end":
            self.fail("'and', 'or' or the end")
        return expr

    def disjunction(self) -> Expr:
        expr = self.conjunction()
        while self.accept("keyword", "or"):
            expr = Or(expr, self.conjunction())
        return expr

    def conjunction(self) -> Expr:
        expr = self.negation()
        while self.accept("keyword", "and"):
            expr = And(expr, self.negation())
        return expr

    def negation(self) -> Expr:
        if self.accept("keyword", "not"):
            return Not(self.negation())
        return self.test()

    def test(self) -> Expr:
        if self.accept("punct", "("):
            expr = self.disjunction()
            self.expect("punct", ")", "')'")
            return expr
        left = self.operand()
        if op := self.accept("op"):
            return Compare("!=" if op.text == "<>" else op.text, left, self.operand())
        if self.accept("keyword", "is"):
            negated = self.accept("keyword", "not") is not None
            self.expect("keyword", "null", "'null' after 'is'")
            return Not(IsNull(left)) if negated else IsNull(left)
        negated = self.accept("keyword", "not") is not None
        if self.accept("keyword", "in"):
            expr = self.membership(left)
        elif self.accept("keyword", "like"):
            expr = Like(left, self.pattern())
        elif negated:
            self.fail("'in' or 'like' after 'not'")
        else:
            return Truth(left)
        return Not(expr) if negated else expr

    def membership(self, left: Operand) -> Expr:
        self.expect("punct", "(", "'(' after 'in'")
        values = [self.literal()]
        while self.accept("punct", ","):
            values.append(self.literal())
        self.expect("punct", ")", "',' or ')'")
        expr: Expr = Compare("=", left, values[0])
        for value in values[1:]:
            expr = Or(expr, Compare("=", left, value))
        return expr

    def pattern(self) -> str:
        token = self.token
        literal = self.literal()
        if not isinstance(literal.value, str):
            raise ExpressionError("a like pattern is a string", self.text, token.column, "a string")
        if not _PATTERN.fullmatch(literal.value):
            raise ExpressionError(
                "in a like pattern, '\\' escapes only %, _ or \\",
                self.text,
                token.column,
                "a valid pattern",
            )
        return literal.value

    def operand(self) -> Operand:
        if self.token.kind == "name":
            return self.path()
        return self.literal()

    def literal(self) -> Const:
        token = self.token
        if self.accept("string"):
            return Const(token.text[1:-1].replace("''", "'"))
        if self.accept("number"):
            is_int = re.fullmatch(r"-?[0-9]+", token.text)
            return Const(int(token.text) if is_int else float(token.text))
        for word, value in (("true", True), ("false", False), ("null", None)):
            if self.accept("keyword", word):
                return Const(value)
        self.fail("a value (a field, 'text', a number, true, false or null)")
        raise AssertionError  # fail() raised

    def path(self) -> Field | Meta:
        names = [self.expect("name", None, "a field name").text]
        while self.accept("punct", "."):
            names.append(self.expect("name", None, "a field name after '.'").text)
        if len(names) == 1 and names[0] in METADATA:
            return Meta(names[0])
        return Field(tuple(names))

    # projection

    def column(self) -> Column | None:
        if self.accept("punct", "*"):
            if self.token.kind != "end":
                self.fail("the end after '*'")
            return None
        source = self.path()
        name = source.name if isinstance(source, Meta) else source.path[-1]
        if self.accept("keyword", "as"):
            name = self.expect("name", None, "a name after 'as'").text
        if self.token.kind != "end":
            self.fail("'as' or the end")
        return Column(source, name)


def parse_filter(text: str) -> Expr:
    return _Parser(text).filter()


def parse_projection(items: list[str]) -> Projection:
    columns = [_Parser(item).column() for item in items]
    if None in columns:
        if len(columns) > 1:
            raise ExpressionError(
                "'*' keeps the whole payload; it cannot be combined with other fields",
                ", ".join(items),
                1,
                "'*' alone",
            )
        return Projection(whole=True)
    names = [c.name for c in columns]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ExpressionError(
            f"two projected fields are named {duplicates[0]!r}: rename one with 'as'",
            ", ".join(items),
            1,
            "distinct names",
        )
    return Projection(whole=False, columns=tuple(columns))
