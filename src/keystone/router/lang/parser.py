"""Text to AST. Errors say where (column) and what was expected:

filter:     or ;  or: and ("or" and)* ;  and: not ("and" not)* ;  not: "not" not | test
test:       "(" or ")" | operand [ cmp operand | "is" ["not"] "null"
            | ["not"] "in" "(" literal ("," literal)* ")" | ["not"] "like" string ]
operand:    path | literal ;  path: name ("." name)* ;  literal: string | number | true
            | false | null ;  strings in single quotes, '' for a quote
projection: "*" | path ["as" name]

Any text gives a tree or an ExpressionError, never anything else: the parser recurses only
into '(', whose nesting with the 'not's is bounded (always by `HARD_MAX_EXPRESSION_DEPTH`, with
limits by `max_expression_depth`), and a chain of 'and's or 'or's becomes a balanced tree, so
that no tree is deeper than its nesting plus the logarithms of its chains (the backends recurse
once per level). With `limits`, what a spec may ask of the router is bounded too (text, 'in'
lists, like wildcards, projected fields); without, a stored spec reads as it was accepted.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

from keystone.contracts.errors import ExpressionError
from keystone.contracts.limits import HARD_MAX_EXPRESSION_DEPTH, Limits
from keystone.router.lang import like
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


def _balanced(node: type[And] | type[Or], terms: list[Expr]) -> Expr:
    """`a op b op c ...` as a tree of logarithmic depth: and and or are associative (in
    three-valued logic too), and a long chain must not become a deep tree. Pairs are joined
    from the left, so a chain of two or three keeps its left-deep shape."""
    while len(terms) > 1:
        pairs = [node(terms[i], terms[i + 1]) for i in range(0, len(terms) - 1, 2)]
        terms = pairs + terms[len(terms) - len(terms) % 2 :]
    return terms[0]


def _refuse_over(
    limit: int, setting: str | None, count: int, what: str, text: str, column: int
) -> None:
    """Refuses `count` of `what` when over `limit`, naming the setting that holds it (None: the
    structural limit, which no setting raises)."""
    if count > limit:
        named = {"setting": setting} if setting else {}
        raise ExpressionError(
            f"{count} {what}; the limit is {limit} ({setting or 'structural'})",
            text,
            column,
            f"at most {limit} {what}",
            limit=limit,
            **named,
        )


class _Parser:
    def __init__(self, text: str, limits: Limits | None) -> None:
        self.text = text
        self.limits = limits
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

    def over(self, setting: str, count: int, what: str, column: int) -> None:
        """Refuses `count` of `what` over the limit `setting`, if limits apply."""
        if self.limits is not None:
            limit = getattr(self.limits, setting)
            _refuse_over(limit, setting, count, what, self.text, column)

    # filter

    def filter(self) -> Expr:
        expr = self.disjunction(0)
        if self.token.kind != "end":
            self.fail("'and', 'or' or the end")
        return expr

    def disjunction(self, depth: int) -> Expr:
        """`depth`: how many '(' and 'not' this is nested in."""
        alternatives = []
        while True:
            factors = [self.negation(depth)]
            while self.accept("keyword", "and"):
                factors.append(self.negation(depth))
            alternatives.append(_balanced(And, factors))
            if not self.accept("keyword", "or"):
                return _balanced(Or, alternatives)

    def negation(self, depth: int) -> Expr:
        """A test under any number of 'not's: a loop, they need no recursion."""
        nots = 0
        while token := self.accept("keyword", "not"):
            nots += 1
            self.nest(depth + nots, token)
        if token := self.accept("punct", "("):
            self.nest(depth + nots + 1, token)
            expr = self.disjunction(depth + nots + 1)
            self.expect("punct", ")", "')'")
        else:
            expr = self.test()
        for _ in range(nots):
            expr = Not(expr)
        return expr

    def nest(self, depth: int, token: Token) -> None:
        """Refuses the '(' or 'not' at `depth` when it is over the limit: the configured one,
        or without limits the structural one (so the parser and both backends, which recurse
        once per level, stay far from any stack's end)."""
        what = "levels of '(' and 'not' nested"
        if self.limits is None:
            _refuse_over(HARD_MAX_EXPRESSION_DEPTH, None, depth, what, self.text, token.column)
        else:
            self.over("max_expression_depth", depth, what, token.column)

    def test(self) -> Expr:
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
            self.over("max_in_values", len(values) + 1, "values in an 'in' list", self.token.column)
            values.append(self.literal())
        self.expect("punct", ")", "',' or ')'")
        return In(left, tuple(values))

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
        parts = like.segments(literal.value)  # the '%' between them, and '_' (None) in them
        wildcards = len(parts) - 1 + sum(part.count(None) for part in parts)
        self.over("max_like_wildcards", wildcards, "'%' and '_' in a like pattern", token.column)
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
            if not re.fullmatch(r"-?[0-9]+", token.text):
                return Const(float(token.text))
            try:
                return Const(int(token.text))
            except ValueError:  # over sys.get_int_max_str_digits(); as a double, infinite anyway
                raise ExpressionError(
                    "an integer of too many digits",
                    self.text,
                    token.column,
                    f"at most {sys.get_int_max_str_digits()} digits",
                ) from None
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


def parse_filter(text: str, *, limits: Limits | None = None) -> Expr:
    """`limits`: what a new spec may ask (control's checks); None reads a stored one."""
    if limits is not None:  # before any other work on the text
        limit = limits.max_filter_chars
        _refuse_over(
            limit, "max_filter_chars", len(text), "characters in a filter", text, limit + 1
        )
    return _Parser(text, limits).filter()


def parse_projection(items: list[str], *, limits: Limits | None = None) -> Projection:
    """`limits`: what a new spec may ask (control's checks); None reads a stored one."""
    if limits is not None:
        limit = limits.max_projection_fields
        first_over = len(", ".join(items[:limit])) + 3  # the column of the first item over
        _refuse_over(
            limit,
            "max_projection_fields",
            len(items),
            "projected fields",
            ", ".join(items),
            first_over,
        )
    columns = [_Parser(item, limits).column() for item in items]
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
